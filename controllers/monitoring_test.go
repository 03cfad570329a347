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

package controllers

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

var metricsOpts = BuildOptions{Image: "localhost/cachetd:test", Engine: engine.Options{MetricsPort: 9150}}

func monitored(c *cachev1alpha1.Cache) {
	c.Spec.Monitoring = &cachev1alpha1.MonitoringSpec{Labels: map[string]string{"release": "kps", cachev1alpha1.LabelInstance: "spoofed"}}
}

func TestPodMonitorScrapesTheMetricsPortAndLabelsTheCache(t *testing.T) {
	c := newCache(monitored)
	pm := PodMonitor(c, metricsOpts)
	if pm == nil {
		t.Fatal("no PodMonitor for an enabled spec.monitoring")
	}
	if pm.Labels["release"] != "kps" || pm.Labels[cachev1alpha1.LabelInstance] != "web" || pm.Labels[cachev1alpha1.LabelManagedBy] != managerName {
		t.Errorf("labels %v: want the user's plus the operator's, the operator's winning", pm.Labels)
	}
	if got := pm.Spec.Selector.MatchLabels; len(got) != len(SelectorLabels(c)) || got[cachev1alpha1.LabelInstance] != "web" {
		t.Errorf("selector %v", got)
	}
	ep := pm.Spec.PodMetricsEndpoints
	if len(ep) != 1 || ptr.Deref(ep[0].Port, "") != MetricsPortName || ep[0].Path != "/metrics" || ep[0].Interval != "30s" {
		t.Fatalf("endpoints %+v", ep)
	}
	if rl := ep[0].RelabelConfigs; len(rl) != 1 || rl[0].TargetLabel != CacheLabel || string(rl[0].SourceLabels[0]) != "__meta_kubernetes_pod_label_app_kubernetes_io_instance" {
		t.Errorf("relabelings %+v: every series needs the cache label", rl)
	}

	c.Spec.Monitoring.Interval = "5s"
	if PodMonitor(c, metricsOpts).Spec.PodMetricsEndpoints[0].Interval != "5s" {
		t.Error("interval not taken from the spec")
	}
	if PodMonitor(c, testOpts) != nil || PrometheusRule(c, testOpts) != nil {
		t.Error("a PodMonitor without a metrics port scrapes nothing")
	}
	c.Spec.Monitoring.Enabled = ptr.To(false)
	if PodMonitor(c, metricsOpts) != nil || PrometheusRule(c, metricsOpts) != nil {
		t.Error("monitoring disabled but objects built")
	}
	if PodMonitor(newCache(), metricsOpts) != nil {
		t.Error("no spec.monitoring but a PodMonitor")
	}
}

func TestPrometheusRuleAlertsAreScopedToTheCache(t *testing.T) {
	c := newCache(monitored)
	rule := PrometheusRule(c, metricsOpts)
	names := map[string]int{}
	for _, r := range rule.Spec.Groups[0].Rules {
		names[r.Alert]++
		expr := r.Expr.String()
		if !strings.Contains(expr, `namespace="prod",cache="web"`) {
			t.Errorf("%s: %q is not scoped to the Cache", r.Alert, expr)
		}
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.For == nil {
			t.Errorf("%s lacks severity, summary or for", r.Alert)
		}
	}
	for _, want := range []string{"MemcachedDown", "MemcachedOutOfMemoryErrors", "CachetYoungEvictions"} {
		if names[want] != 1 {
			t.Errorf("alert %s: %d rules", want, names[want])
		}
	}
	if names["MemcachedConnectionLimitApproaching"] != 2 {
		t.Error("want the mixin's warning (80%) and critical (95%) connection alerts")
	}
	if names["CachetHitRatioLow"] != 0 {
		t.Error("a hit-ratio alert without any target")
	}

	c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MaxReplicas: 4, Targets: cachev1alpha1.AutoscalingTargets{HitRatio: ptr.To(resource.MustParse("0.95"))}}
	// The autoscaler acts only 10% off target: the alert allows the same.
	if a := findAlert(CacheAlerts(c), "CachetHitRatioLow"); a == nil || !strings.HasSuffix(a.Expr(), "< 0.945") {
		t.Errorf("hit-ratio alert from the autoscaling target: %+v", a)
	}
	if a := findAlert(CacheAlerts(c), "CachetYoungEvictions"); !strings.HasSuffix(a.Expr(), "> 0") {
		t.Errorf("without a young-evictions target any young eviction alerts: %q", a.Expr())
	}
	c.Spec.Autoscaling.Targets.YoungEvictionsPerSecond = ptr.To(resource.MustParse("2"))
	if a := findAlert(CacheAlerts(c), "CachetYoungEvictions"); !strings.HasSuffix(a.Expr(), "> 2.2") {
		t.Errorf("with a target of 2/s the alert waits for the autoscaler to fail: %q", a.Expr())
	}
	c.Spec.Monitoring.HitRatioAlertBelow = ptr.To(resource.MustParse("0.8"))
	if a := findAlert(CacheAlerts(c), "CachetHitRatioLow"); a == nil || !strings.HasSuffix(a.Expr(), "< 0.8") {
		t.Errorf("monitoring.hitRatioAlertBelow must win: %+v", a)
	}
}

func findAlert(as []Alert, name string) *Alert {
	for i := range as {
		if as[i].Name == name {
			return &as[i]
		}
	}
	return nil
}

func TestHPATargetsTheCacheScaleSubresource(t *testing.T) {
	if HorizontalPodAutoscaler(newCache()) != nil {
		t.Fatal("an HPA without spec.autoscaling")
	}
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{
			MinReplicas: ptr.To[int32](2), MaxReplicas: 8,
			Targets: cachev1alpha1.AutoscalingTargets{
				YoungEvictionsPerSecond: ptr.To(resource.MustParse("10")),
				HitRatio:                ptr.To(resource.MustParse("0.9995")),
				MemoryUtilization:       ptr.To[int32](90),
				CPUUtilization:          ptr.To[int32](70),
			},
		}
	})
	hpa := HorizontalPodAutoscaler(c)
	ref := hpa.Spec.ScaleTargetRef
	if ref.APIVersion != "cache.cachet.dev/v1alpha1" || ref.Kind != "Cache" || ref.Name != "web" {
		t.Fatalf("scaleTargetRef %+v: the HPA must scale the Cache, never its StatefulSet", ref)
	}
	if *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 8 || len(hpa.Spec.Metrics) != 4 {
		t.Fatalf("spec %+v", hpa.Spec)
	}
	young, miss := hpa.Spec.Metrics[0].Pods, hpa.Spec.Metrics[1].Pods
	if young.Metric.Name != YoungEvictionsMetric || young.Target.AverageValue.String() != "10" {
		t.Errorf("young evictions metric %+v", young)
	}
	// 1 - 0.9995 must stay 0.0005: rounding to milli-units would make the
	// target 0 and the HPA scale out for ever.
	if miss.Metric.Name != MissRatioMetric || miss.Target.AverageValue.AsDec().String() != "0.0005" {
		t.Errorf("miss ratio metric %s target %s", miss.Metric.Name, miss.Target.AverageValue.AsDec())
	}
	if m := hpa.Spec.Metrics[2].Resource; m.Name != corev1.ResourceMemory || *m.Target.AverageUtilization != 90 {
		t.Errorf("memory %+v", m)
	}
	if m := hpa.Spec.Metrics[3].Resource; m.Name != corev1.ResourceCPU || *m.Target.AverageUtilization != 70 {
		t.Errorf("cpu %+v", m)
	}
	sd := hpa.Spec.Behavior.ScaleDown
	if sd == nil || *sd.StabilizationWindowSeconds != 600 || sd.Policies[0].Value != 1 || hpa.Spec.Behavior.ScaleUp != nil {
		t.Errorf("default behavior %+v: slow scale-in, the HPA's own scale-up", hpa.Spec.Behavior)
	}

	c.Spec.Autoscaling.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)}}
	if got := HorizontalPodAutoscaler(c).Spec.Behavior.ScaleDown; *got.StabilizationWindowSeconds != 0 || got.Policies != nil {
		t.Errorf("the spec's behavior must be kept as given: %+v", got)
	}
	if c.Spec.Autoscaling.Behavior.ScaleUp != nil {
		t.Error("the builder wrote into the Cache")
	}
}

func TestMonitoringAndAutoscalingConditions(t *testing.T) {
	c := newCache(monitored, func(c *cachev1alpha1.Cache) {
		c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MaxReplicas: 4, Targets: cachev1alpha1.AutoscalingTargets{
			YoungEvictionsPerSecond: ptr.To(resource.MustParse("1")), CPUUtilization: ptr.To[int32](80)}}
	})
	cond := func(obs Observed, typ string) *metav1.Condition {
		obs.Options = metricsOpts
		return meta.FindStatusCondition(ComputeStatus(c, obs, "cluster.local").Conditions, typ)
	}

	none := Observed{APIs: map[string]bool{}, MissingMonitoringKinds: []string{"podmonitors", "prometheusrules"}}
	if m := cond(none, cachev1alpha1.ConditionMonitoring); m == nil || m.Status != metav1.ConditionFalse || m.Reason != ReasonNoPrometheusOp {
		t.Errorf("no prometheus-operator: %+v", m)
	}
	a := cond(none, cachev1alpha1.ConditionAutoscaling)
	if a == nil || a.Status != metav1.ConditionFalse || a.Reason != ReasonMetricsAPIMissing ||
		!strings.Contains(a.Message, CustomMetricsAPI) || !strings.Contains(a.Message, ResourceMetricsAPI) {
		t.Errorf("no metrics APIs: %+v", a)
	}

	// A cluster with ServiceMonitors only (e.g. another project's CRD).
	if m := cond(Observed{MissingMonitoringKinds: []string{"podmonitors", "prometheusrules"}}, cachev1alpha1.ConditionMonitoring); m.Status != metav1.ConditionFalse ||
		!strings.Contains(m.Message, "podmonitors and prometheusrules") {
		t.Errorf("missing kinds must be named: %+v", m)
	}
	all := Observed{APIs: map[string]bool{CustomMetricsAPI: true, ResourceMetricsAPI: true},
		HPA: &autoscalingv2.HorizontalPodAutoscaler{Status: autoscalingv2.HorizontalPodAutoscalerStatus{DesiredReplicas: 3}}}
	if m := cond(all, cachev1alpha1.ConditionMonitoring); m.Status != metav1.ConditionTrue {
		t.Errorf("monitoring %+v", m)
	}
	if a := cond(all, cachev1alpha1.ConditionAutoscaling); a.Status != metav1.ConditionUnknown || a.Reason != ReasonAutoscalerPending {
		t.Errorf("an HPA not yet evaluated is not yet working: %+v", a)
	}
	all.HPA.Status.Conditions = []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionTrue, Reason: "ValidMetricFound"}}
	if a := cond(all, cachev1alpha1.ConditionAutoscaling); a.Status != metav1.ConditionTrue || !strings.Contains(a.Message, "wants 3") {
		t.Errorf("autoscaling %+v", a)
	}
	all.HPA.Status.Conditions = []autoscalingv2.HorizontalPodAutoscalerCondition{{
		Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, Reason: "FailedGetPodsMetric", Message: "no metrics returned"}}
	failed := all
	failed.AuxFailures = map[string]string{"horizontalpodautoscalers": "the API server refused HorizontalPodAutoscaler web: periodSeconds too big"}
	if a := cond(failed, cachev1alpha1.ConditionAutoscaling); a.Status != metav1.ConditionFalse || a.Reason != ReasonAuxApplyFailed || !strings.Contains(a.Message, "periodSeconds") {
		t.Errorf("a refused HPA must show in Autoscaling: %+v", a)
	}
	if d := cond(failed, cachev1alpha1.ConditionDegraded); d.Status == metav1.ConditionTrue {
		t.Errorf("a refused HPA must not make the cache Degraded: %+v", d)
	}
	if a := cond(all, cachev1alpha1.ConditionAutoscaling); a.Status != metav1.ConditionFalse || a.Reason != "FailedGetPodsMetric" || !strings.Contains(a.Message, "no metrics returned") {
		t.Errorf("the HPA's own complaint must show: %+v", a)
	}

	// Turning both off removes their conditions rather than leaving stale ones.
	c.Status.Conditions = ComputeStatus(c, Observed{Options: metricsOpts, APIs: map[string]bool{}}, "cluster.local").Conditions
	c.Spec.Monitoring, c.Spec.Autoscaling = nil, nil
	st := ComputeStatus(c, Observed{Options: metricsOpts}, "cluster.local")
	if meta.FindStatusCondition(st.Conditions, cachev1alpha1.ConditionMonitoring) != nil || meta.FindStatusCondition(st.Conditions, cachev1alpha1.ConditionAutoscaling) != nil {
		t.Errorf("stale conditions %+v", st.Conditions)
	}
}

func TestOperatorMetricsFollowTheStatus(t *testing.T) {
	c := newCache()
	c.Namespace, c.Name = "metrics-ns", "metrics-cache"
	st := cachev1alpha1.CacheStatus{ReadyReplicas: 2, Endpoints: []cachev1alpha1.CacheEndpoint{
		{Pod: "metrics-cache-0", Restarts: 2, LastTermination: &cachev1alpha1.CacheTermination{Reason: "OOMKilled", ExitCode: 137}},
		{Pod: "metrics-cache-1"},
	}}
	RecordCacheMetrics(c, st)
	if v := testutil.ToFloat64(replicasDesired.WithLabelValues(c.Namespace, c.Name)); v != 3 {
		t.Errorf("desired %v", v)
	}
	if v := testutil.ToFloat64(replicasReady.WithLabelValues(c.Namespace, c.Name)); v != 2 {
		t.Errorf("ready %v", v)
	}
	if v := testutil.ToFloat64(engineRestarts.WithLabelValues(c.Namespace, c.Name, "metrics-cache-0")); v != 2 {
		t.Errorf("restarts %v", v)
	}
	if v := testutil.ToFloat64(engineOOMKilled.WithLabelValues(c.Namespace, c.Name, "metrics-cache-0")); v != 1 {
		t.Errorf("oom %v", v)
	}
	// Scaled in to one pod: the gone pod's series go too.
	st.Endpoints = st.Endpoints[:1]
	RecordCacheMetrics(c, st)
	if n := seriesOf(t, engineRestarts, c.Namespace); n != 1 {
		t.Errorf("%d restart series after scale-in, want 1", n)
	}
	forgetCacheMetrics(c.Namespace, c.Name)
	if n := seriesOf(t, replicasDesired, c.Namespace) + seriesOf(t, engineRestarts, c.Namespace); n != 0 {
		t.Errorf("%d series left after the Cache was deleted", n)
	}
}

// seriesOf counts v's series in one namespace: the envtest Caches of other
// tests share the registry.
func seriesOf(t *testing.T, v *prometheus.GaugeVec, namespace string) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 1000)
	v.Collect(ch)
	close(ch)
	n := 0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "namespace" && l.GetValue() == namespace {
				n++
			}
		}
	}
	return n
}

// spec.tls.metrics: the engine serves its metrics port over HTTPS, so the
// readiness probe, the PodMonitor and the engine's flag all switch together,
// and only when there is a metrics port and spec.tls asks for it.
func TestTLSMetricsSwitchesProbesScrapesAndTheEngineTogether(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tls   *cachev1alpha1.TLSSpec
		o     BuildOptions
		https bool
	}{
		{"no tls", nil, metricsOpts, false},
		{"tls, metrics plain", &cachev1alpha1.TLSSpec{SecretName: "certs"}, metricsOpts, false},
		{"tls from a Secret, metrics https", &cachev1alpha1.TLSSpec{SecretName: "certs", Metrics: true}, metricsOpts, true},
		{"tls from an issuer, mTLS, metrics https", &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "ca"},
			ClientAuth: "Require", Metrics: true}, metricsOpts, true},
		{"metrics https asked, no metrics port", &cachev1alpha1.TLSSpec{SecretName: "certs", Metrics: true}, testOpts, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(monitored)
			c.Spec.TLS = tc.tls
			if got := MetricsTLS(c, tc.o); got != tc.https {
				t.Fatalf("MetricsTLS %v, want %v", got, tc.https)
			}
			if got := strings.Contains(strings.Join(EngineArgs(c, tc.o), " "), "metrics_tls"); got != tc.https {
				t.Errorf("engine args have metrics_tls %v, want %v: %v", got, tc.https, EngineArgs(c, tc.o))
			}
			ctr := StatefulSet(c, tc.o).Spec.Template.Spec.Containers[0]
			pm := PodMonitor(c, tc.o)
			if tc.o.Engine.MetricsPort == 0 {
				if ctr.ReadinessProbe.HTTPGet != nil || pm != nil {
					t.Errorf("no metrics port, yet an HTTP probe %+v or a PodMonitor", ctr.ReadinessProbe.ProbeHandler)
				}
				return
			}
			wantScheme := map[bool]corev1.URIScheme{false: "", true: corev1.URISchemeHTTPS}[tc.https]
			if get := ctr.ReadinessProbe.HTTPGet; get == nil || get.Scheme != wantScheme || get.Path != "/healthz" {
				t.Errorf("readiness probe %+v: want scheme %q", ctr.ReadinessProbe.ProbeHandler, wantScheme)
			}
			ep := pm.Spec.PodMetricsEndpoints[0]
			if !tc.https {
				if ep.Scheme != "http" || ep.TLSConfig != nil {
					t.Errorf("plain metrics scraped with scheme %q, tlsConfig %+v", ep.Scheme, ep.TLSConfig)
				}
				return
			}
			tlsc := ep.TLSConfig
			if ep.Scheme != "https" || tlsc == nil || tlsc.CA.Secret == nil || tlsc.CA.Secret.Name != TLSSecretName(c) ||
				tlsc.CA.Secret.Key != "ca.crt" || ptr.Deref(tlsc.ServerName, "") != "web.prod.svc" ||
				ptr.Deref(tlsc.InsecureSkipVerify, false) || tlsc.Cert != (monitoringv1.SecretOrConfigMap{}) {
				t.Errorf("scheme %q, tlsConfig %+v: want https verifying %s/ca.crt for web.prod.svc, no client certificate",
					ep.Scheme, tlsc, TLSSecretName(c))
			}
			if !slices.Contains(TLSDNSNames(c, ""), ptr.Deref(tlsc.ServerName, "")) {
				t.Errorf("serverName %q is not a SAN of the Cache's certificate %v", ptr.Deref(tlsc.ServerName, ""), TLSDNSNames(c, ""))
			}
		})
	}
}
