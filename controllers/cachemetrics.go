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

// What the operator sees of each Cache, as metrics on its own /metrics: the
// facts only the Kubernetes API knows (a shard not Ready, an engine that
// restarted or was OOM-killed, cores that are not exclusive). The engines'
// own /metrics cannot say them: a dead engine serves nothing. The chart's
// PrometheusRule alerts on these; the series carry the Cache's namespace as a
// label, so the operator's ServiceMonitor keeps it (honorLabels).

package controllers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

var (
	// coresExclusive is 1 while a dedicated Cache's cores are exclusive, 0
	// when some are not; absent when unchecked.
	coresExclusive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cachet_cache_cores_exclusive",
		Help: "1 when every pod of a dedicated-CPU Cache runs on a node with the static CPU manager (exclusive cores), 0 when one does not.",
	}, []string{"namespace", "cache"})
	replicasDesired = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cachet_cache_replicas_desired",
		Help: "spec.replicas of a Cache: the shards it should have.",
	}, []string{"namespace", "cache"})
	replicasReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cachet_cache_replicas_ready",
		Help: "Pods of a Cache that are Ready (status.readyReplicas).",
	}, []string{"namespace", "cache"})
	engineRestarts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cachet_cache_engine_restarts",
		Help: "Restarts of a cache pod's engine since the pod was created; each emptied that shard.",
	}, []string{"namespace", "cache", "pod"})
	engineOOMKilled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cachet_cache_engine_oom_killed",
		Help: "1 when a cache pod's engine last ended OOMKilled (over its memory limit), else 0.",
	}, []string{"namespace", "cache", "pod"})
)

// podSeries remembers, by Cache, the pods that have per-pod series.
var (
	podSeriesMu sync.Mutex
	podSeries   = map[string]map[string]bool{}
)

func init() {
	metrics.Registry.MustRegister(coresExclusive, replicasDesired, replicasReady, engineRestarts, engineOOMKilled)
}

// RecordCacheMetrics sets a Cache's series from the status just computed.
// Pods that are gone lose their series.
func RecordCacheMetrics(c *cachev1alpha1.Cache, st cachev1alpha1.CacheStatus) {
	replicasDesired.WithLabelValues(c.Namespace, c.Name).Set(float64(c.Spec.DesiredReplicas()))
	replicasReady.WithLabelValues(c.Namespace, c.Name).Set(float64(st.ReadyReplicas))
	// Only the series of pods that are gone are deleted: deleting all and
	// setting them again would let a scrape in between see them vanish (and
	// an alert resolve and fire again).
	now := map[string]bool{}
	for _, ep := range st.Endpoints {
		now[ep.Pod] = true
	}
	key := c.Namespace + "/" + c.Name
	podSeriesMu.Lock()
	for pod := range podSeries[key] {
		if !now[pod] {
			engineRestarts.DeleteLabelValues(c.Namespace, c.Name, pod)
			engineOOMKilled.DeleteLabelValues(c.Namespace, c.Name, pod)
		}
	}
	podSeries[key] = now
	podSeriesMu.Unlock()
	for _, ep := range st.Endpoints {
		engineRestarts.WithLabelValues(c.Namespace, c.Name, ep.Pod).Set(float64(ep.Restarts))
		oom := 0.0
		if ep.LastTermination != nil && ep.LastTermination.Reason == "OOMKilled" {
			oom = 1
		}
		engineOOMKilled.WithLabelValues(c.Namespace, c.Name, ep.Pod).Set(oom)
	}
	for _, cond := range st.Conditions {
		if cond.Type != cachev1alpha1.ConditionCoresExclusive {
			continue
		}
		switch {
		case cond.Status == "True":
			coresExclusive.WithLabelValues(c.Namespace, c.Name).Set(1)
		case cond.Status == "False" && cond.Reason == ReasonSharedCores:
			coresExclusive.WithLabelValues(c.Namespace, c.Name).Set(0)
		default:
			coresExclusive.DeleteLabelValues(c.Namespace, c.Name)
		}
	}
}

// forgetCacheMetrics drops every series of a deleted Cache.
func forgetCacheMetrics(namespace, name string) {
	podSeriesMu.Lock()
	delete(podSeries, namespace+"/"+name)
	podSeriesMu.Unlock()
	l := prometheus.Labels{"namespace": namespace, "cache": name}
	for _, v := range []*prometheus.GaugeVec{coresExclusive, replicasDesired, replicasReady, engineRestarts, engineOOMKilled} {
		v.DeletePartialMatch(l)
	}
}
