/*
Copyright 2026 The Cachet Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Which optional APIs the cluster serves: prometheus-operator's kinds (CRDs
// that come and go with that operator) and the metrics APIs an HPA reads
// (aggregated APIs that are only as available as their adapter). The
// reconciler asks before it applies an optional kind or promises that an
// autoscaler can work, and a Cache says in its conditions what is missing
// instead of failing. Answers are kept for a short while: every reconcile of
// every Cache asking the API server's discovery would cost more than the
// objects it guards.

package controllers

import (
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

const (
	// MonitoringAPI is prometheus-operator's group/version.
	MonitoringAPI = "monitoring.coreos.com/v1"
	// CustomMetricsAPI serves per-pod custom metrics (prometheus-adapter).
	CustomMetricsAPI = "custom.metrics.k8s.io/v1beta2"
	// ResourceMetricsAPI serves pod CPU and memory (metrics-server, or
	// prometheus-adapter's resource rules).
	ResourceMetricsAPI = "metrics.k8s.io/v1beta1"
)

// APIChecker answers whether the cluster serves a resource of a
// group/version now (empty resource: any resource of it).
type APIChecker interface {
	Serves(groupVersion, resource string) bool
}

// DiscoveryChecker asks the API server's discovery, and remembers each
// answer for TTL.
type DiscoveryChecker struct {
	Discovery discovery.DiscoveryInterface
	TTL       time.Duration

	mu   sync.Mutex
	seen map[string]discoveryAnswer
}

type discoveryAnswer struct {
	resources map[string]bool // nil: the group/version is not served
	at        time.Time
}

// Serves implements APIChecker. An aggregated API whose backend is down
// answers discovery with an error, and so counts as not served, which is
// what an HPA reading it would find. The lock is not held across the request
// (a hanging adapter must not stall every reconcile behind it), and an
// answer is timed from when it arrived. A transient failure (a timeout, a
// refused connection) keeps the last answer instead of flipping conditions.
func (d *DiscoveryChecker) Serves(groupVersion, resource string) bool {
	d.mu.Lock()
	a, ok := d.seen[groupVersion]
	d.mu.Unlock()
	if !ok || time.Since(a.at) > d.TTL {
		list, err := d.Discovery.ServerResourcesForGroupVersion(groupVersion)
		fresh := discoveryAnswer{at: time.Now()}
		switch {
		case err == nil && list != nil:
			fresh.resources = map[string]bool{}
			for _, r := range list.APIResources {
				fresh.resources[r.Name] = true
			}
		case err != nil && ok && !apierrors.IsNotFound(err) && !apierrors.IsServiceUnavailable(err):
			fresh.resources = a.resources
		}
		a = fresh
		d.mu.Lock()
		if d.seen == nil {
			d.seen = map[string]discoveryAnswer{}
		}
		d.seen[groupVersion] = a
		d.mu.Unlock()
	}
	if a.resources == nil {
		return false
	}
	return resource == "" || a.resources[resource]
}
