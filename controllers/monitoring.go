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

// The builders of what spec.monitoring and spec.autoscaling ask for: a
// PodMonitor and a PrometheusRule (prometheus-operator's kinds, which a
// cluster may not serve) and a HorizontalPodAutoscaler on the Cache's /scale
// subresource. Like builders.go they are pure functions of the Cache; whether
// the cluster serves those kinds and metrics APIs is the reconciler's
// business (apis.go), and the conditions it reports are in status.go.

package controllers

import (
	"fmt"
	"maps"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/inf.v0"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

const (
	// CacheLabel is the label the PodMonitor gives every series of a Cache's
	// pods: the Cache's name. Rules and the dashboard select by it.
	CacheLabel = "cache"
	// YoungEvictionsMetric and MissRatioMetric are the per-pod custom metrics
	// the HPA asks the custom metrics API for; the chart's prometheus-adapter
	// rules define them from the engine's counters.
	YoungEvictionsMetric = "cachet_evictions_young_per_second"
	MissRatioMetric      = "cachet_get_miss_ratio"
)

func PodMonitorName(c *cachev1alpha1.Cache) string     { return c.Name }
func PrometheusRuleName(c *cachev1alpha1.Cache) string { return c.Name }
func HPAName(c *cachev1alpha1.Cache) string            { return c.Name }

// monitoringMeta is objectMeta plus the user's labels for Prometheus'
// selectors; the operator's own labels win.
func monitoringMeta(c *cachev1alpha1.Cache, name string) metav1.ObjectMeta {
	m := objectMeta(c, name)
	l := maps.Clone(c.Spec.Monitoring.Labels)
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, m.Labels)
	m.Labels = l
	return m
}

// PodMonitor has Prometheus scrape every pod's engine /metrics, labelling the
// series with the Cache's name. Nil when monitoring is off, or when the
// engines serve no metrics port (there is nothing to scrape; the Monitoring
// condition says so).
func PodMonitor(c *cachev1alpha1.Cache, o BuildOptions) *monitoringv1.PodMonitor {
	if !c.Spec.Monitoring.IsEnabled() || o.Engine.MetricsPort == 0 {
		return nil
	}
	interval := c.Spec.Monitoring.Interval
	if interval == "" {
		interval = "30s"
	}
	scheme, tlsConfig := "http", (*monitoringv1.SafeTLSConfig)(nil)
	if MetricsTLS(c, o) {
		// the pods' certificate: its CA from the serving Secret, and a
		// name it carries (Prometheus dials the pod's IP, which it does not)
		scheme = "https"
		tlsConfig = &monitoringv1.SafeTLSConfig{
			CA: monitoringv1.SecretOrConfigMap{Secret: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: TLSSecretName(c)}, Key: TLSCAKey}},
			ServerName: ptr.To(MetricsServerName(c)),
		}
	}
	return &monitoringv1.PodMonitor{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PodMonitorsKind},
		ObjectMeta: monitoringMeta(c, PodMonitorName(c)),
		Spec: monitoringv1.PodMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			PodMetricsEndpoints: []monitoringv1.PodMetricsEndpoint{{
				// The engine asks no credentials (nor, over HTTPS, a client
				// certificate): who may scrape is
				// spec.networkPolicy.metricsScrapers' business.
				Port:      ptr.To(MetricsPortName),
				Path:      "/metrics",
				Scheme:    scheme,
				TLSConfig: tlsConfig,
				Interval:  monitoringv1.Duration(interval),
				RelabelConfigs: []monitoringv1.RelabelConfig{{
					SourceLabels: []monitoringv1.LabelName{"__meta_kubernetes_pod_label_app_kubernetes_io_instance"},
					TargetLabel:  CacheLabel,
				}},
			}},
		},
	}
}

// Alert is one alert of a Cache's PrometheusRule. Signal is the query whose
// value is compared (it returns data whenever the pods are scraped, which is
// what the PromQL tests check); Expr is the alert's expression.
type Alert struct {
	Name, Signal, Compare, For, Severity, Summary, Description string
}

// Expr is the alerting expression.
func (a Alert) Expr() string { return a.Signal + " " + a.Compare }

// cacheSelector is the label matcher of a Cache's series.
func cacheSelector(c *cachev1alpha1.Cache) string {
	return fmt.Sprintf(`namespace=%q,%s=%q`, c.Namespace, CacheLabel, c.Name)
}

// hpaTolerance is the HorizontalPodAutoscaler's default tolerance: it acts
// only when a metric is more than 10% off its target. An alert derived from
// an autoscaling target allows the same, so that it fires when the
// autoscaler could not hold its target (at maxReplicas, or failing), not
// while it is doing its job.
var hpaTolerance = inf.NewDec(11, 1)

// hitRatioAlertBelow is spec.monitoring.hitRatioAlertBelow, else what the
// autoscaler's hit-ratio target allows (1 - 1.1 x (1 - target)), else nil:
// no hit-ratio alert, as a cache's natural hit ratio depends on its clients.
func hitRatioAlertBelow(c *cachev1alpha1.Cache) *inf.Dec {
	if m := c.Spec.Monitoring; m != nil && m.HitRatioAlertBelow != nil {
		return m.HitRatioAlertBelow.AsDec()
	}
	if a := c.Spec.Autoscaling; a != nil && a.Targets.HitRatio != nil {
		miss := new(inf.Dec).Sub(inf.NewDec(1, 0), a.Targets.HitRatio.AsDec())
		allowed := new(inf.Dec).Mul(miss, hpaTolerance)
		return new(inf.Dec).Sub(inf.NewDec(1, 0), allowed)
	}
	return nil
}

// youngEvictionsAlertAbove is 0 (any sustained young eviction means the
// working set does not fit), or, when the autoscaler holds young evictions at
// a target, that target with the autoscaler's tolerance.
func youngEvictionsAlertAbove(c *cachev1alpha1.Cache) *inf.Dec {
	if a := c.Spec.Autoscaling; a != nil && a.Targets.YoungEvictionsPerSecond != nil {
		return new(inf.Dec).Mul(a.Targets.YoungEvictionsPerSecond.AsDec(), hpaTolerance)
	}
	return inf.NewDec(0, 0)
}

// CacheAlerts are the alerts on a Cache's engine metrics: memcached-mixin's
// (MemcachedDown, MemcachedConnectionLimitApproaching, MemcachedOutOfMemoryErrors,
// same names and thresholds) and Cachet's cache-pressure ones. Alerts on
// what the operator sees (a shard not Ready, an engine restarted or
// OOM-killed, shared cores) come from the operator's own metrics and live in
// the chart's PrometheusRule, where those series are scraped.
func CacheAlerts(c *cachev1alpha1.Cache) []Alert {
	sel := cacheSelector(c)
	who := fmt.Sprintf("Cache %s/%s", c.Namespace, c.Name)
	alerts := []Alert{
		{
			Name: "MemcachedDown", Signal: fmt.Sprintf(`min by (namespace, cache, pod) (up{%s})`, sel), Compare: "== 0", For: "5m", Severity: "critical",
			Summary:     who + " pod {{ $labels.pod }} does not answer",
			Description: "Prometheus cannot scrape the engine of {{ $labels.pod }}: the shard is down, and every key hashed to it misses.",
		},
		{
			Name: "MemcachedConnectionLimitApproaching", Signal: fmt.Sprintf(`max by (namespace, cache, pod) (memcached_current_connections{%[1]s} / memcached_max_connections{%[1]s} * 100)`, sel),
			Compare: "> 80", For: "15m", Severity: "warning",
			Summary:     who + " pod {{ $labels.pod }} uses {{ $value | humanize }}% of its connections",
			Description: "More than 80% of spec.engine.maxConnections are in use; past the limit new clients are refused.",
		},
		{
			Name: "MemcachedConnectionLimitApproaching", Signal: fmt.Sprintf(`max by (namespace, cache, pod) (memcached_current_connections{%[1]s} / memcached_max_connections{%[1]s} * 100)`, sel),
			Compare: "> 95", For: "15m", Severity: "critical",
			Summary:     who + " pod {{ $labels.pod }} uses {{ $value | humanize }}% of its connections",
			Description: "More than 95% of spec.engine.maxConnections are in use; past the limit new clients are refused.",
		},
		{
			Name: "MemcachedOutOfMemoryErrors", Signal: fmt.Sprintf(`sum by (namespace, cache, pod) (rate(memcached_slab_items_outofmemory_total{%s}[5m]))`, sel),
			Compare: "> 0", For: "15m", Severity: "warning",
			Summary:     who + " pod {{ $labels.pod }} refuses stores: out of memory",
			Description: "Stores fail with SERVER_ERROR out of memory: nothing can be evicted (-M, or every item is in use).",
		},
		{
			Name: "CachetYoungEvictions", Signal: fmt.Sprintf(`sum by (namespace, cache, pod) (rate(cachet_evictions_young_total{%s}[5m]))`, sel),
			Compare: "> " + youngEvictionsAlertAbove(c).String(), For: "15m", Severity: "warning",
			Summary:     who + " pod {{ $labels.pod }} evicts items its clients still read",
			Description: "{{ $value | humanize }} evictions per second of items read within the engine's young window: the working set does not fit. Add memory or replicas (spec.autoscaling.targets.youngEvictionsPerSecond scales on this; with it, this alert fires only when the autoscaler cannot hold its target).",
		},
	}
	if t := hitRatioAlertBelow(c); t != nil {
		alerts = append(alerts, Alert{
			Name: "CachetHitRatioLow",
			// No clamp: a Cache without GETs has no hit ratio (NaN), and
			// must not alert as if it had a low one.
			Signal:  fmt.Sprintf(`sum by (namespace, cache) (rate(memcached_commands_total{%[1]s,command="get",status="hit"}[10m])) / sum by (namespace, cache) (rate(memcached_commands_total{%[1]s,command="get"}[10m]))`, sel),
			Compare: "< " + t.String(), For: "30m", Severity: "warning",
			Summary:     who + " hits {{ $value | humanizePercentage }} of GETs",
			Description: fmt.Sprintf("The GET hit ratio stayed below %s for 30 minutes (spec.monitoring.hitRatioAlertBelow, or what the autoscaler's hit-ratio target allows: then the autoscaler could not hold it).", t.String()),
		})
	}
	return alerts
}

// PrometheusRule holds CacheAlerts. Nil when monitoring is off or there is
// no metrics port.
func PrometheusRule(c *cachev1alpha1.Cache, o BuildOptions) *monitoringv1.PrometheusRule {
	if !c.Spec.Monitoring.IsEnabled() || o.Engine.MetricsPort == 0 {
		return nil
	}
	var rules []monitoringv1.Rule
	for _, a := range CacheAlerts(c) {
		rules = append(rules, monitoringv1.Rule{
			Alert:  a.Name,
			Expr:   intstr.FromString(a.Expr()),
			For:    ptr.To(monitoringv1.Duration(a.For)),
			Labels: map[string]string{"severity": a.Severity},
			Annotations: map[string]string{
				"summary":     a.Summary,
				"description": a.Description,
			},
		})
	}
	return &monitoringv1.PrometheusRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind},
		ObjectMeta: monitoringMeta(c, PrometheusRuleName(c)),
		Spec: monitoringv1.PrometheusRuleSpec{Groups: []monitoringv1.RuleGroup{{
			Name:  "cachet-" + c.Namespace + "-" + c.Name,
			Rules: rules,
		}}},
	}
}

// defaultScaleDown removes one pod per 5 minutes after 10 minutes of lower
// demand: each pod removed takes its shard with it, so the cluster pays a
// refill for every step, and a brief lull must not cost that.
func defaultScaleDown() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To[int32](600),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 300}},
	}
}

// HorizontalPodAutoscaler scales the Cache through its /scale subresource,
// so spec.replicas stays the one place the size lives and nothing fights
// the StatefulSet's replicas. Nil without spec.autoscaling.
func HorizontalPodAutoscaler(c *cachev1alpha1.Cache) *autoscalingv2.HorizontalPodAutoscaler {
	a := c.Spec.Autoscaling
	if a == nil {
		return nil
	}
	var metrics []autoscalingv2.MetricSpec
	podsMetric := func(name string, target resource.Quantity) {
		metrics = append(metrics, autoscalingv2.MetricSpec{
			Type: autoscalingv2.PodsMetricSourceType,
			Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: name},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &target},
			},
		})
	}
	resourceMetric := func(name corev1.ResourceName, pct int32) {
		metrics = append(metrics, autoscalingv2.MetricSpec{
			Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{
				Name:   name,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(pct)},
			},
		})
	}
	t := a.Targets
	if t.YoungEvictionsPerSecond != nil {
		podsMetric(YoungEvictionsMetric, t.YoungEvictionsPerSecond.DeepCopy())
	}
	if t.HitRatio != nil {
		// The HPA grows a metric's pods when it is above target; a hit ratio
		// is too low when the miss ratio is too high.
		miss := new(inf.Dec).Sub(inf.NewDec(1, 0), t.HitRatio.AsDec())
		podsMetric(MissRatioMetric, *resource.NewDecimalQuantity(*miss, resource.DecimalSI))
	}
	if t.MemoryUtilization != nil {
		resourceMetric(corev1.ResourceMemory, *t.MemoryUtilization)
	}
	if t.CPUUtilization != nil {
		resourceMetric(corev1.ResourceCPU, *t.CPUUtilization)
	}
	behavior := a.Behavior.DeepCopy()
	if behavior == nil {
		behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
	}
	if behavior.ScaleDown == nil {
		behavior.ScaleDown = defaultScaleDown()
	}
	minReplicas := a.MinReplicas
	if minReplicas == nil {
		minReplicas = ptr.To[int32](1)
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: autoscalingv2.SchemeGroupVersion.String(), Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: objectMeta(c, HPAName(c)),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
				APIVersion: cachev1alpha1.GroupVersion.String(), Kind: "Cache", Name: c.Name,
			},
			MinReplicas: minReplicas,
			MaxReplicas: a.MaxReplicas,
			Metrics:     metrics,
			Behavior:    behavior,
		},
	}
}

// metricsAPIsNeeded names the metrics APIs the Cache's HPA reads, as
// group/version, in a stable order.
func metricsAPIsNeeded(c *cachev1alpha1.Cache) []string {
	a := c.Spec.Autoscaling
	if a == nil {
		return nil
	}
	var need []string
	if a.Targets.YoungEvictionsPerSecond != nil || a.Targets.HitRatio != nil {
		need = append(need, CustomMetricsAPI)
	}
	if a.Targets.MemoryUtilization != nil || a.Targets.CPUUtilization != nil {
		need = append(need, ResourceMetricsAPI)
	}
	return need
}

// hpaTargetsText describes the HPA's targets for a condition message.
func hpaTargetsText(c *cachev1alpha1.Cache) string {
	t := c.Spec.Autoscaling.Targets
	var parts []string
	if t.YoungEvictionsPerSecond != nil {
		parts = append(parts, "young evictions "+t.YoungEvictionsPerSecond.String()+"/s per pod")
	}
	if t.HitRatio != nil {
		parts = append(parts, "hit ratio "+t.HitRatio.AsDec().String())
	}
	if t.MemoryUtilization != nil {
		parts = append(parts, fmt.Sprintf("memory %d%%", *t.MemoryUtilization))
	}
	if t.CPUUtilization != nil {
		parts = append(parts, fmt.Sprintf("CPU %d%%", *t.CPUUtilization))
	}
	return strings.Join(parts, ", ")
}
