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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// installPrometheusOperatorCRDs installs the PodMonitor and PrometheusRule
// CRDs from prometheus-operator's own module (PROMETHEUS_OPERATOR_CRDS, set
// by 'make test'), as installing prometheus-operator in a running cluster
// would.
func installPrometheusOperatorCRDs(t *testing.T) {
	installCRDsFrom(t, "PROMETHEUS_OPERATOR_CRDS", "monitoring.coreos.com_podmonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")
}

// installCRDsFrom installs CRD files of another project from the directory
// an environment variable of 'make test' names (its module in the module
// cache), and removes them when the test ends: the suite's API server lives
// as long as the test binary, so a test that finds them absent (the
// Monitoring lifecycle) would otherwise see another test's CRDs whenever
// it runs after it (go test -count=N, -shuffle, -run).
func installCRDsFrom(t *testing.T, dirVar string, files ...string) {
	t.Helper()
	dir := os.Getenv(dirVar)
	if dir == "" {
		t.Fatal(dirVar + " is not set; run 'make test'")
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f)
	}
	crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	if err != nil {
		t.Fatalf("installing %s from %s: %v", files, dir, err)
	}
	t.Cleanup(func() { uninstallCRDs(t, crds) })
}

// uninstallCRDs deletes the CRDs and waits until the API server has removed
// them (their objects go first), so that the next test starts without them.
func uninstallCRDs(t *testing.T, crds []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	ctx := context.Background()
	for _, crd := range crds {
		if err := k8sClient.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CRD %s: %v", crd.Name, err)
		}
	}
	eventually(t, "the CRDs the test installed gone", func() (bool, string) {
		for _, crd := range crds {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("CRD %s: %v", crd.Name, err)
			}
		}
		return true, ""
	})
}

// The whole life of spec.monitoring and spec.autoscaling on a real API
// server: asked for before prometheus-operator exists (a condition and a
// Warning, nothing else changes), picked up once its CRDs are installed
// (without an operator restart or a watch), and removed when turned off.
func TestMonitoringAndAutoscalingLifecycle(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "watched", func(c *cachev1alpha1.Cache) {
		c.Spec.Monitoring = &cachev1alpha1.MonitoringSpec{Interval: "10s", Labels: map[string]string{"release": "kps"}}
		c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MaxReplicas: 5, Targets: cachev1alpha1.AutoscalingTargets{
			YoungEvictionsPerSecond: ptr.To(resource.MustParse("2")), HitRatio: ptr.To(resource.MustParse("0.9"))}}
	})
	key := types.NamespacedName{Namespace: ns, Name: "watched"}

	eventually(t, "the Monitoring condition says prometheus-operator is missing", func() (bool, string) {
		c = getCache(t, ns, "watched")
		m, a := condOf(c, cachev1alpha1.ConditionMonitoring), condOf(c, cachev1alpha1.ConditionAutoscaling)
		return m.Reason == ReasonNoPrometheusOp && m.Status == metav1.ConditionFalse && a.Reason == ReasonMetricsAPIMissing,
			fmt.Sprintf("%+v / %+v", m, a)
	})
	eventually(t, "a Warning about the missing CRDs", func() (bool, string) {
		return hasEvent(t, ns, ReasonNoPrometheusOp, "Warning", "prometheus-operator")
	})
	// Everything else is applied as usual.
	if err := k8sClient.Get(ctx, key, &cachev1alpha1.Cache{}); err != nil {
		t.Fatal(err)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	eventually(t, "HPA on the Cache's /scale", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, hpa); err != nil {
			return false, err.Error()
		}
		return hpa.Spec.ScaleTargetRef.Kind == "Cache" && hpa.Spec.MaxReplicas == 5 && len(hpa.Spec.Metrics) == 2, fmt.Sprintf("%+v", hpa.Spec)
	})
	if !controlledBy(hpa, c) {
		t.Error("the HPA is not controlled by the Cache")
	}
	// No PodMonitor while its CRD is absent: a client that never saw the kind
	// has no mapping for it, one that saw it in an earlier test's CRD gets
	// the API server's NotFound.
	if err := k8sClient.Get(ctx, key, &monitoringv1.PodMonitor{}); !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		t.Fatalf("PodMonitor before its CRD exists: %v", err)
	}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: "podmonitors.monitoring.coreos.com"}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the PodMonitor CRD is installed before the test installs it: %v", err)
	}

	installPrometheusOperatorCRDs(t)
	pm, rule := &monitoringv1.PodMonitor{}, &monitoringv1.PrometheusRule{}
	eventually(t, "PodMonitor and PrometheusRule once the CRDs exist", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, pm); err != nil {
			return false, err.Error()
		}
		if err := k8sClient.Get(ctx, key, rule); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if !controlledBy(pm, c) || !controlledBy(rule, c) || pm.Labels["release"] != "kps" || pm.Spec.PodMetricsEndpoints[0].Interval != "10s" {
		t.Errorf("PodMonitor %+v", pm.ObjectMeta)
	}
	if a := findAlert(CacheAlerts(c), "CachetHitRatioLow"); a == nil || rule.Spec.Groups[0].Rules[len(rule.Spec.Groups[0].Rules)-1].Expr.String() != a.Expr() {
		t.Errorf("the rule lacks the hit-ratio alert derived from the autoscaling target")
	}
	eventually(t, "Monitoring True", func() (bool, string) {
		m := condOf(getCache(t, ns, "watched"), cachev1alpha1.ConditionMonitoring)
		return m.Status == metav1.ConditionTrue && m.Reason == ReasonMonitored, fmt.Sprintf("%+v", m)
	})

	// Someone edits the PodMonitor; with no informer on the kind, the
	// periodic recheck puts it back.
	pm.Spec.PodMetricsEndpoints[0].Interval = "1h"
	if err := k8sClient.Update(ctx, pm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the edited PodMonitor is restored", func() (bool, string) {
		got := &monitoringv1.PodMonitor{}
		if err := k8sClient.Get(ctx, key, got); err != nil {
			return false, err.Error()
		}
		return got.Spec.PodMetricsEndpoints[0].Interval == "10s", string(got.Spec.PodMetricsEndpoints[0].Interval)
	})

	if _, err := updateCache(ns, "watched", func(c *cachev1alpha1.Cache) {
		c.Spec.Monitoring.Enabled = ptr.To(false)
		c.Spec.Autoscaling = nil
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PodMonitor, PrometheusRule and HPA removed, their conditions too", func() (bool, string) {
		for _, obj := range []client.Object{&monitoringv1.PodMonitor{}, &monitoringv1.PrometheusRule{}, &autoscalingv2.HorizontalPodAutoscaler{}} {
			if err := k8sClient.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%T still there (%v)", obj, err)
			}
		}
		c := getCache(t, ns, "watched")
		m, a := condOf(c, cachev1alpha1.ConditionMonitoring), condOf(c, cachev1alpha1.ConditionAutoscaling)
		return m.Type == "" && a.Type == "", fmt.Sprintf("%+v / %+v", m, a)
	})
}

// An HPA the API server refuses (the CRD cannot check every bound of an
// embedded HPA behavior) is reported in Autoscaling, and the cache itself is
// created, Ready-able and not Degraded.
func TestRefusedHPAIsReportedAndDoesNotHoldTheCacheBack(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "refused", func(c *cachev1alpha1.Cache) {
		c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MaxReplicas: 3,
			Targets: cachev1alpha1.AutoscalingTargets{CPUUtilization: ptr.To[int32](70)},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 3600}}}}}
	})
	eventually(t, "Autoscaling False with the API server's words, StatefulSet applied, not Degraded", func() (bool, string) {
		c := getCache(t, ns, "refused")
		a, d := condOf(c, cachev1alpha1.ConditionAutoscaling), condOf(c, cachev1alpha1.ConditionDegraded)
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "refused"}, &appsv1.StatefulSet{})
		return err == nil && a.Reason == ReasonAuxApplyFailed && strings.Contains(a.Message, "periodSeconds") && d.Status == metav1.ConditionFalse,
			fmt.Sprintf("sts: %v; %+v; %+v", err, a, d)
	})
	eventually(t, "a Warning", func() (bool, string) { return hasEvent(t, ns, ReasonAuxApplyFailed, "Warning", "periodSeconds") })
}

func TestAdmissionRejectsInvalidMonitoringAndAutoscaling(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	scaling := func(min *int32, max int32, tg cachev1alpha1.AutoscalingTargets) func(*cachev1alpha1.Cache) {
		return func(c *cachev1alpha1.Cache) {
			c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MinReplicas: min, MaxReplicas: max, Targets: tg}
		}
	}
	young := cachev1alpha1.AutoscalingTargets{YoungEvictionsPerSecond: ptr.To(resource.MustParse("1"))}
	cases := []struct {
		name   string
		mutate func(*cachev1alpha1.Cache)
		want   string
	}{
		{"no-targets", scaling(nil, 3, cachev1alpha1.AutoscalingTargets{}), "needs at least one of youngEvictionsPerSecond"},
		{"min-above-max", scaling(ptr.To[int32](4), 3, young), "minReplicas must be at most maxReplicas"},
		{"hit-ratio-one", scaling(nil, 3, cachev1alpha1.AutoscalingTargets{HitRatio: ptr.To(resource.MustParse("1"))}), "hitRatio must be between 0 and 1"},
		{"young-zero", scaling(nil, 3, cachev1alpha1.AutoscalingTargets{YoungEvictionsPerSecond: ptr.To(resource.MustParse("0"))}), "youngEvictionsPerSecond must be greater than 0"},
		{"cpu-over-100", scaling(nil, 3, cachev1alpha1.AutoscalingTargets{CPUUtilization: ptr.To[int32](150)}), "cpuUtilization"},
		{"cpu-target-without-request", func(c *cachev1alpha1.Cache) {
			c.Spec.CPU, c.Spec.DedicatedCPUs = ptr.To[int32](0), ptr.To(false)
			scaling(nil, 3, cachev1alpha1.AutoscalingTargets{CPUUtilization: ptr.To[int32](70)})(c)
		}, "cpuUtilization needs spec.cpu of at least 1"},
		{"bad-interval", func(c *cachev1alpha1.Cache) {
			c.Spec.Monitoring = &cachev1alpha1.MonitoringSpec{Interval: "ten seconds"}
		}, "spec.monitoring.interval"},
		{"alert-ratio-2", func(c *cachev1alpha1.Cache) {
			c.Spec.Monitoring = &cachev1alpha1.MonitoringSpec{HitRatioAlertBelow: ptr.To(resource.MustParse("2"))}
		}, "hitRatioAlertBelow must be between 0 and 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { mustRefuse(t, ns, tc.name, tc.mutate, tc.want) })
	}
}

// Every sample in config/samples is a Cache the API accepts as written.
func TestSamplesAreAccepted(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "cache_*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("samples: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := &cachev1alpha1.Cache{}
		if err := yaml.UnmarshalStrict(b, c); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		c.Namespace = ns
		if err := k8sClient.Create(context.Background(), c, client.DryRunAll); err != nil {
			t.Errorf("%s refused: %v", f, err)
		}
	}
	// and every StorageClass sample (the classes Caches' extstore names)
	classes, err := filepath.Glob(filepath.Join("..", "config", "samples", "storageclass_*.yaml"))
	if err != nil || len(classes) == 0 {
		t.Fatalf("StorageClass samples: %v %v", classes, err)
	}
	for _, f := range classes {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := &storagev1.StorageClass{}
		if err := yaml.UnmarshalStrict(b, sc); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := k8sClient.Create(context.Background(), sc, client.DryRunAll); err != nil {
			t.Errorf("%s refused: %v", f, err)
		}
	}
}
