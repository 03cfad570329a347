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
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

// A Declared workload profile with apply: Manual fills status.recommendation
// and leaves the pods' arguments alone; switching it to Auto rolls the pods
// (a new revision) to the derived slab classes and hash power.
func TestWorkloadProfileRecommendsThenApplies(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "prof", func(c *cachev1alpha1.Cache) {
		c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{
			ValueSizes:    []cachev1alpha1.ValueSizeBucket{{Bytes: 100, Weight: 3}, {Bytes: 5000, Weight: 1}},
			KeyBytes:      ptr.To(int32(20)),
			ExpectedItems: ptr.To(int64(1_000_000)),
		}
	})
	sts := &appsv1.StatefulSet{}
	key := types.NamespacedName{Namespace: ns, Name: "prof"}
	var c *cachev1alpha1.Cache
	eventually(t, "recommendation in status", func() (bool, string) {
		c = getCache(t, ns, "prof")
		r := c.Status.Recommendation
		if r == nil {
			return false, "none"
		}
		// 100 + 20 + 31 item bytes -> 152; 5000 + 55 -> 5056; 1e6 items -> 2^20 buckets
		ok := slices.Equal(r.ChunkSizes, []int32{152, 5056}) && r.HashPower != nil && *r.HashPower == 20 &&
			r.Memory != nil && r.PredictedWastePercent == "0.0" && r.CurrentWastePercent != "0.0" && !r.Applied
		return ok, fmt.Sprintf("%+v", *r)
	})
	if a := strings.Join(c.Status.EngineArgs, " "); strings.Contains(a, "slab_sizes") || !strings.Contains(a, "-f 1.25") {
		t.Errorf("apply: Manual changed the engine's arguments: %s", a)
	}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, sts)
		return err == nil, fmt.Sprint(err)
	})
	manualHash := sts.Spec.Template.Annotations[ConfigHashAnnotation]

	c, err := updateCache(ns, "prof", func(c *cachev1alpha1.Cache) { c.Spec.WorkloadProfile.Apply = cachev1alpha1.ProfileApplyAuto })
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := engine.ArgsFile(EngineArgs(c, BuildOptions{Engine: suiteCurrent}))
	if !strings.Contains(wantArgs, "slab_sizes=152-5056,hashpower=20,") {
		t.Fatalf("apply: Auto arguments lack the derived classes and hash power: %q", wantArgs)
	}
	eventually(t, "pods roll to the derived arguments", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, sts); err != nil {
			return false, err.Error()
		}
		h := sts.Spec.Template.Annotations[ConfigHashAnnotation]
		return h == engine.ConfigHash(wantArgs) && h != manualHash, h
	})
	if got, err := argsOf(t, ns, ConfigMapOfPod(&sts.Spec.Template.Spec)); err != nil || got != wantArgs {
		t.Errorf("the new revision's ConfigMap holds %q (%v), want %q", got, err, wantArgs)
	}
	eventually(t, "recommendation marked applied", func() (bool, string) {
		r := getCache(t, ns, "prof").Status.Recommendation
		return r != nil && r.Applied, fmt.Sprintf("%+v", r)
	})
}
