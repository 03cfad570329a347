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

// The specs a user trial wrote by hand, sent as the user wrote them (not
// through the Go types, which cannot even hold "cpu: 500m") to the real
// kube-apiserver with the CRD's schema and the operator's webhooks.

package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// rawCache is a Cache as a user's manifest holds it.
func rawCache(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(cachev1alpha1.GroupVersion.WithKind("Cache"))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// buckets is a value-size histogram of n ascending buckets.
func buckets(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"bytes": 64 * (i + 1), "weight": 1}
	}
	return out
}

func TestAdmissionNamesTheFieldAndRuleInTheUsersUnits(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	cases := []struct {
		name string
		spec map[string]any
		want []string // the field, the value as written, and the rule
	}{
		{"cpu-in-millicores", map[string]any{"memory": "64Mi", "cpu": "500m"},
			[]string{"spec.cpu", `"500m"`, "must be a whole number"}},
		{"memory-not-a-quantity", map[string]any{"memory": "lots"},
			[]string{"spec.memory", `"lots"`, "must be a quantity such as 64Mi"}},
		{"node-loss-timeout-in-words", map[string]any{"memory": "64Mi", "extstore": map[string]any{"size": "1Gi", "nodeLossTimeout": "5 minutes"}},
			[]string{"spec.extstore.nodeLossTimeout", `"5 minutes"`, "must be a duration such as 90s, 5m or 1h30m"}},
		{"node-loss-timeout-fractional", map[string]any{"memory": "64Mi", "extstore": map[string]any{"size": "1Gi", "nodeLossTimeout": "1.5h"}},
			[]string{"spec.extstore.nodeLossTimeout", "not 1.5h", "whole hours, minutes and seconds"}},
		{"memory-missing", map[string]any{"cpu": 1},
			[]string{"spec.memory", "Required value"}},
		{"memory-fractional-mib", map[string]any{"memory": "64.5Mi"},
			[]string{"spec.memory", "not 64.5Mi", "whole number of MiB"}},
		{"pdb-over-100-percent", map[string]any{"memory": "64Mi", "podDisruptionBudget": map[string]any{"maxUnavailable": "150%"}},
			[]string{"spec.podDisruptionBudget.maxUnavailable", "not 150%", "percentage from 0% to 100%"}},
		{"pdb-negative", map[string]any{"memory": "64Mi", "podDisruptionBudget": map[string]any{"maxUnavailable": -1}},
			[]string{"spec.podDisruptionBudget.maxUnavailable", "not -1", "0 or more"}},
		{"extstore-fractional-bytes", map[string]any{"memory": "64Mi", "extstore": map[string]any{"size": "0.3Gi"}},
			[]string{"spec.extstore.size", "not 0.3Gi", "whole number of bytes"}},
		{"interval-in-words", map[string]any{"memory": "64Mi", "monitoring": map[string]any{"interval": "30 seconds"}},
			[]string{"spec.monitoring.interval", "not 30 seconds", "Prometheus duration"}},
		{"growth-factor-in-words", map[string]any{"memory": "64Mi", "engine": map[string]any{"growthFactor": "fast"}},
			[]string{"spec.engine.growthFactor", "not fast", "decimal number"}},
		{"profile-preset-and-sizes", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"preset": "sessions", "valueSizes": []any{map[string]any{"bytes": 100, "weight": 1}}}},
			[]string{"spec.workloadProfile", "exactly one of preset"}},
		{"profile-neither", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"expectedItems": 1000}},
			[]string{"spec.workloadProfile", "exactly one of preset"}},
		{"profile-unknown-preset", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"preset": "tiny"}},
			[]string{"spec.workloadProfile.preset", `"tiny"`, "small-objects"}},
		{"profile-weight-zero", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"valueSizes": []any{map[string]any{"bytes": 100, "weight": 0}}}},
			[]string{"spec.workloadProfile.valueSizes[0].weight", "greater than or equal to 1"}},
		{"profile-descending", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"valueSizes": []any{map[string]any{"bytes": 900, "weight": 1}, map[string]any{"bytes": 100, "weight": 1}}}},
			[]string{"spec.workloadProfile.valueSizes", "ascending order of bytes"}},
		{"profile-too-many-buckets", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"valueSizes": buckets(65)}},
			[]string{"spec.workloadProfile.valueSizes", "must have at most 64 items"}},
		{"profile-value-over-item-size", map[string]any{"memory": "64Mi", "engine": map[string]any{"maxItemSize": "1Ki"}, "workloadProfile": map[string]any{"valueSizes": []any{map[string]any{"bytes": 2048, "weight": 1}}}},
			[]string{"spec.workloadProfile.valueSizes[0].bytes", "over spec.engine.maxItemSize (1024 bytes)", "at most 961 value bytes fit"}},
		{"profile-auto-with-chunk-sizes", map[string]any{"memory": "64Mi", "engine": map[string]any{"chunkSizes": []any{48, 96}}, "workloadProfile": map[string]any{"preset": "sessions", "apply": "Auto"}},
			[]string{"spec.workloadProfile.apply", "leave spec.engine.chunkSizes, growthFactor, minChunk and hashPower unset"}},
		{"placement-without-dedicated-cpus", map[string]any{"memory": "64Mi", "dedicatedCPUs": false, "cpu": 0, "engine": map[string]any{"connectionPlacement": "CPU"}},
			[]string{"spec.engine.connectionPlacement CPU needs spec.dedicatedCPUs"}},
		{"profile-observed-with-preset", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"preset": "sessions", "source": "Observed"}},
			[]string{"spec.workloadProfile", "source Observed reads the sizes from the pods: preset and valueSizes must be unset"}},
		{"profile-unknown-source", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"source": "Guessed"}},
			[]string{"spec.workloadProfile.source", `"Guessed"`, "Declared", "Observed"}},
		{"profile-interval-when-declared", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"preset": "sessions", "observeIntervalSeconds": 10}},
			[]string{"spec.workloadProfile", "observeIntervalSeconds is for source Observed only"}},
		{"profile-observed-auto-with-growth-factor", map[string]any{"memory": "64Mi", "engine": map[string]any{"growthFactor": "1.1"}, "workloadProfile": map[string]any{"source": "Observed", "apply": "Auto"}},
			[]string{"spec.workloadProfile.apply", "leave spec.engine.chunkSizes, growthFactor, minChunk and hashPower unset"}},
		{"profile-hit-ratio-over-1", map[string]any{"memory": "64Mi", "workloadProfile": map[string]any{"preset": "sessions", "targetHitRatio": "1.5"}},
			[]string{"spec.workloadProfile.targetHitRatio", "not 1.5", "decimal from 0 to 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sClient.Create(context.Background(), rawCache(ns, tc.name, tc.spec))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			// What the trial saw instead: Go's decoder, a regular expression,
			// a canonical form the user never wrote.
			for _, bad := range []string{"json:", "Go struct", "time:", "regular expression", "should match", "66048Ki", "322122547200m"} {
				if strings.Contains(msg, bad) {
					t.Errorf("error %q shows %q", msg, bad)
				}
			}
		})
	}

	t.Run("values-stored-as-written", func(t *testing.T) {
		ctx := context.Background()
		c := rawCache(ns, "as-written", map[string]any{"memory": "0.5Gi", "extstore": map[string]any{"size": "1.5Gi"}})
		if err := k8sClient.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		got := rawCache(ns, "as-written", nil)
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
			t.Fatal(err)
		}
		memory, _, _ := unstructured.NestedString(got.Object, "spec", "memory")
		size, _, _ := unstructured.NestedString(got.Object, "spec", "extstore", "size")
		image, _, _ := unstructured.NestedString(got.Object, "spec", "image")
		if memory != "0.5Gi" || size != "1.5Gi" || image != testEngineImage {
			t.Fatalf("stored memory %q, extstore.size %q, image %q; want 0.5Gi, 1.5Gi and the defaulted image", memory, size, image)
		}
	})
}
