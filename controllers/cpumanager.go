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

// Whether a node's kubelet really gives Guaranteed pods exclusive cores is
// written nowhere in the API but in the kubelet's own configuration, which
// the kubelet serves at /configz and the API server proxies. Reading it needs
// the nodes/proxy permission, which also reaches the rest of the kubelet's
// API, so the check is opt-in (--check-cpu-manager; chart value
// operator.checkCPUManager) and documented as such.

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// NodeCPUPolicy is one node's CPU manager policy, or why it is unknown.
type NodeCPUPolicy struct {
	Policy string
	Err    string
}

// CPUManagerChecker tells a node's CPU manager policy.
type CPUManagerChecker interface {
	Policy(ctx context.Context, node string) NodeCPUPolicy
}

// KubeletConfigz reads cpuManagerPolicy from each kubelet's /configz through
// the API server's node proxy, remembering each answer for TTL.
type KubeletConfigz struct {
	REST rest.Interface // a core/v1 REST client
	TTL  time.Duration

	mu   sync.Mutex
	seen map[string]configzAnswer
}

type configzAnswer struct {
	at  time.Time
	pol NodeCPUPolicy
}

// Policy implements CPUManagerChecker.
func (k *KubeletConfigz) Policy(ctx context.Context, node string) NodeCPUPolicy {
	k.mu.Lock()
	if a, ok := k.seen[node]; ok && time.Since(a.at) < k.TTL {
		k.mu.Unlock()
		return a.pol
	}
	k.mu.Unlock()
	pol := k.read(ctx, node)
	k.mu.Lock()
	if k.seen == nil {
		k.seen = map[string]configzAnswer{}
	}
	k.seen[node] = configzAnswer{at: time.Now(), pol: pol}
	k.mu.Unlock()
	return pol
}

func (k *KubeletConfigz) read(ctx context.Context, node string) NodeCPUPolicy {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := k.REST.Get().AbsPath("/api/v1/nodes", node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		return NodeCPUPolicy{Err: fmt.Sprintf("kubelet /configz: %v", err)}
	}
	var cz struct {
		KubeletConfig struct {
			CPUManagerPolicy string `json:"cpuManagerPolicy"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil {
		return NodeCPUPolicy{Err: fmt.Sprintf("kubelet /configz: %v", err)}
	}
	if cz.KubeletConfig.CPUManagerPolicy == "" {
		cz.KubeletConfig.CPUManagerPolicy = "none" // the kubelet's default
	}
	return NodeCPUPolicy{Policy: cz.KubeletConfig.CPUManagerPolicy}
}

// coresExclusive is 1 while a dedicated Cache's cores are exclusive, 0 when
// some are not (the alert in the chart's PrometheusRule fires on 0); absent
// when unchecked.
var coresExclusive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cachet_cache_cores_exclusive",
	Help: "1 when every pod of a dedicated-CPU Cache runs on a node with the static CPU manager (exclusive cores), 0 when one does not.",
}, []string{"namespace", "cache"})

func init() { metrics.Registry.MustRegister(coresExclusive) }

func recordCoresMetric(c *cachev1alpha1.Cache, st cachev1alpha1.CacheStatus) {
	for _, cond := range st.Conditions {
		if cond.Type != cachev1alpha1.ConditionCoresExclusive {
			continue
		}
		switch cond.Status {
		case "True":
			coresExclusive.WithLabelValues(c.Namespace, c.Name).Set(1)
		case "False":
			if cond.Reason == ReasonSharedCores {
				coresExclusive.WithLabelValues(c.Namespace, c.Name).Set(0)
				return
			}
			coresExclusive.DeleteLabelValues(c.Namespace, c.Name)
		default:
			coresExclusive.DeleteLabelValues(c.Namespace, c.Name)
		}
	}
}
