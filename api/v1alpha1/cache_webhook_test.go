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

package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

func cache(mutate ...func(*Cache)) *Cache {
	c := &Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
		Spec:       CacheSpec{Memory: resource.MustParse("64Mi"), CPU: ptr.To(int32(2))},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func TestDefaulterFillsOnlyAnEmptyImage(t *testing.T) {
	d := &CacheDefaulter{EngineImage: "localhost/cachetd:1"}
	c := cache()
	if err := d.Default(context.Background(), c); err != nil || c.Spec.Image != "localhost/cachetd:1" {
		t.Fatalf("image %q err %v", c.Spec.Image, err)
	}
	c = cache(func(c *Cache) { c.Spec.Image = "localhost/cachetd:pinned" })
	_ = d.Default(context.Background(), c)
	if c.Spec.Image != "localhost/cachetd:pinned" {
		t.Fatalf("an explicit image was overwritten: %q", c.Spec.Image)
	}
}

func TestValidSpecsPass(t *testing.T) {
	for name, c := range map[string]*Cache{
		"minimal": cache(),
		"full": cache(func(c *Cache) {
			c.Spec.Memory = resource.MustParse("1Gi")
			c.Spec.Engine = EngineSpec{MaxItemSize: ptr.To(resource.MustParse("4Mi")), ChunkSizes: []int32{64, 128, 512 << 10}}
			c.Spec.Placement.PodLabels = map[string]string{"team": "web"}
		}),
		"growth": cache(func(c *Cache) { c.Spec.Engine.GrowthFactor = ptr.To("1.07") }),
	} {
		errs, warns := ValidateCacheSpec(c)
		if len(errs) != 0 || len(warns) != 0 {
			t.Errorf("%s: errs %v warnings %v", name, errs, warns)
		}
	}
}

func TestEveryRejectionNamesFieldAndRule(t *testing.T) {
	cases := map[string]struct {
		c     *Cache
		field string
		rule  string
	}{
		"memory not MiB":      {cache(func(c *Cache) { c.Spec.Memory = resource.MustParse("100M") }), "spec.memory", "whole number of MiB"},
		"item too small":      {cache(func(c *Cache) { c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("512")) }), "spec.engine.maxItemSize", "at least 1Ki"},
		"item too big":        {cache(func(c *Cache) { c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("2Gi")) }), "spec.engine.maxItemSize", "at most 128Mi"},
		"item over half":      {cache(func(c *Cache) { c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("33Mi")) }), "spec.engine.maxItemSize", "half of spec.memory (32Mi)"},
		"default item vs mem": {cache(func(c *Cache) { c.Spec.Memory = resource.MustParse("1Mi") }), "spec.memory", "twice spec.engine.maxItemSize"},
		"factor":              {cache(func(c *Cache) { c.Spec.Engine.GrowthFactor = ptr.To("5") }), "spec.engine.growthFactor", "at most 4.0"},
		"factor not a number": {cache(func(c *Cache) { c.Spec.Engine.GrowthFactor = ptr.To("1.2.3") }), "spec.engine.growthFactor", "decimal number"},
		"chunk unaligned":     {cache(func(c *Cache) { c.Spec.Engine.ChunkSizes = []int32{60} }), "spec.engine.chunkSizes[0]", "multiple of 8"},
		"chunk over item":     {cache(func(c *Cache) { c.Spec.Engine.ChunkSizes = []int32{64, 1<<20 + 8} }), "spec.engine.chunkSizes[1]", "at most spec.engine.maxItemSize"},
		"reserved label":      {cache(func(c *Cache) { c.Spec.Placement.PodLabels = map[string]string{"app.kubernetes.io/name": "x"} }), "spec.placement.podLabels[app.kubernetes.io/name]", "cannot be overridden"},
		"bad label value":     {cache(func(c *Cache) { c.Spec.Placement.PodLabels = map[string]string{"team": "has space"} }), "spec.placement.podLabels[team]", "valid label"},
		"hash annotation":     {cache(func(c *Cache) { c.Spec.Placement.PodAnnotations = map[string]string{ConfigHashAnnotation: "1"} }), "spec.placement.podAnnotations", "roll pods"},
		"long name":           {cache(func(c *Cache) { c.Name = strings.Repeat("a", 53) }), "metadata.name", "52"},
		"name with dot":       {cache(func(c *Cache) { c.Name = "a.b" }), "metadata.name", "Service name"},
		// Defect 9: annotation keys were not validated.
		"bad pod annotation":     {cache(func(c *Cache) { c.Spec.Placement.PodAnnotations = map[string]string{"has space": "x"} }), "spec.placement.podAnnotations[has space]", "valid annotation key"},
		"bad service annotation": {cache(func(c *Cache) { c.Spec.Service.Annotations = map[string]string{"a/b/c": "x"} }), "spec.service.annotations[a/b/c]", "valid annotation key"},
		"bad source range":       {cache(func(c *Cache) { c.Spec.Service.LoadBalancerSourceRanges = []string{"10.0.0.1"} }), "spec.service.loadBalancerSourceRanges[0]", "CIDR"},
	}
	for name, tc := range cases {
		errs, _ := ValidateCacheSpec(tc.c)
		if len(errs) == 0 {
			t.Errorf("%s: accepted", name)
			continue
		}
		msg := errs.ToAggregate().Error()
		if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.rule) {
			t.Errorf("%s: %q lacks %q or %q", name, msg, tc.field, tc.rule)
		}
	}
}

func TestWarnings(t *testing.T) {
	_, w := ValidateCacheSpec(cache(func(c *Cache) { c.Spec.Engine.Threads = ptr.To(int32(8)) }))
	if len(w) != 1 || !strings.Contains(w[0], "share each exclusive core") {
		t.Errorf("threads warning: %v", w)
	}
	_, w = ValidateCacheSpec(cache(func(c *Cache) {
		c.Spec.Engine.Threads = ptr.To(int32(8))
		c.Spec.DedicatedCPUs = ptr.To(false)
	}))
	if len(w) != 0 {
		t.Errorf("shared cores need no threads warning: %v", w)
	}
	// Defect 9: "0%" blocks drains as surely as 0.
	for _, v := range []intstr.IntOrString{intstr.FromInt32(0), intstr.FromString("0%"), intstr.FromString("00%")} {
		_, w = ValidateCacheSpec(cache(func(c *Cache) { c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(v) }))
		if len(w) != 1 || !strings.Contains(w[0], "drains will block") {
			t.Errorf("pdb warning for %s: %v", v.String(), w)
		}
	}
	_, w = ValidateCacheSpec(cache(func(c *Cache) { c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(intstr.FromString("10%")) }))
	if len(w) != 0 {
		t.Errorf("10%% is no reason to warn: %v", w)
	}
	// Defect 9: a LoadBalancer for an unauthenticated protocol, open to all.
	_, w = ValidateCacheSpec(cache(func(c *Cache) { c.Spec.Service.Type = "LoadBalancer" }))
	if len(w) != 1 || !strings.Contains(w[0], "no authentication") || !strings.Contains(w[0], "loadBalancerSourceRanges") {
		t.Errorf("load balancer warning: %v", w)
	}
	_, w = ValidateCacheSpec(cache(func(c *Cache) {
		c.Spec.Service.Type = "LoadBalancer"
		c.Spec.Service.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
	}))
	if len(w) != 0 {
		t.Errorf("a load balancer with source ranges: %v", w)
	}
}

// Issue 24, until the pods serve them: spec.tls and spec.auth are accepted
// with a warning that traffic is still plaintext and unauthenticated.
// spec.tls and spec.auth reach the pods: nothing to warn about.
func TestTLSAndAuthAreServedWithoutAWarning(t *testing.T) {
	_, w := ValidateCacheSpec(cache(func(c *Cache) {
		c.Spec.TLS = &TLSSpec{SecretName: "mine"}
		c.Spec.Auth = &AuthSpec{SecretRef: LocalSecretReference{Name: "users"}}
	}))
	if len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
}

// Defect 11: nothing said that a spec change restarts (and empties) every pod.
func TestRestartWarning(t *testing.T) {
	old := cache(func(c *Cache) { c.Spec.Image = "img:1" })
	if w := RestartWarning(old, cache(func(c *Cache) { c.Spec.Image = "img:1"; c.Spec.Replicas = ptr.To(int32(5)) })); w != "" {
		t.Errorf("scaling restarts no pod: %q", w)
	}
	if w := RestartWarning(old, cache()); w != "" {
		t.Errorf("an image the defaulter fills is no change: %q", w)
	}
	w := RestartWarning(old, cache(func(c *Cache) {
		c.Spec.Image = "img:1"
		c.Spec.Engine.MaxConnections = ptr.To(int32(10))
		c.Spec.Placement.PriorityClassName = "x"
	}))
	if !strings.Contains(w, "spec.engine, spec.placement restarts every pod") || !strings.Contains(w, "one at a time") || !strings.Contains(w, "empty cache") {
		t.Errorf("warning %q", w)
	}
	v := &CacheValidator{}
	warns, err := v.ValidateUpdate(context.Background(), old, cache(func(c *Cache) { c.Spec.Image = "img:2"; c.Spec.UpdateStrategy.Type = OnDeleteStrategy }))
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0], "spec.image") || !strings.Contains(warns[0], "OnDelete") {
		t.Errorf("ValidateUpdate warnings %v err %v", warns, err)
	}
}

func TestValidatorReturnsInvalidError(t *testing.T) {
	v := &CacheValidator{}
	_, err := v.ValidateUpdate(context.Background(), cache(), cache(func(c *Cache) { c.Spec.Memory = resource.MustParse("100M") }))
	if err == nil || !strings.Contains(err.Error(), `Cache.cache.cachet.dev "web" is invalid`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := v.ValidateDelete(context.Background(), cache()); err != nil {
		t.Fatal(err)
	}
}

// A value of the wrong type deep in the spec is named by its path and echoed
// as written; the walk follows the Go types, so no field is left out.
func TestUndecodableFieldsNameTheirPathAndValue(t *testing.T) {
	var spec map[string]any
	raw := `{"memory": "64Mi", "cpu": "500m", "replicas": 2,
		"placement": {"tolerations": [{"key": "a"}, {"tolerationSeconds": "soon"}], "podLabels": {"team": 7}},
		"extstore": {"size": "1Gi", "nodeLossTimeout": "5 minutes"}}`
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range undecodableFields(field.NewPath("spec"), reflect.TypeFor[CacheSpec](), spec) {
		got[e.Field] = fmt.Sprint(e.BadValue) + ": " + e.Detail
	}
	want := map[string]string{
		"spec.cpu": "500m: must be a whole number such as 2, written without quotes or units",
		"spec.placement.tolerations[1].tolerationSeconds": "soon: must be a whole number such as 2, written without quotes or units",
		"spec.placement.podLabels[team]":                  "7: must be a string",
		"spec.extstore.nodeLossTimeout":                   "5 minutes: must be a duration such as 90s, 5m or 1h30m",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
