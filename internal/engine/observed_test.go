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

package engine

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// scrape is the shape of cachetd's /metrics for the families an Observed
// profile reads (engine/src/metrics.c), with unrelated families around.
const scrape = `# HELP memcached_limit_bytes Number of bytes this server is allowed to use for storage.
# TYPE memcached_limit_bytes gauge
memcached_limit_bytes 8388608
# HELP cachet_item_sizes Items stored now whose size (header, key and value) is at most max_bytes.
# TYPE cachet_item_sizes gauge
cachet_item_sizes{max_bytes="32"} 0
cachet_item_sizes{max_bytes="64"} 0
cachet_item_sizes{max_bytes="160"} 150
cachet_item_sizes{max_bytes="192"} 150
cachet_item_sizes{max_bytes="2048"} 300
cachet_item_sizes{max_bytes="4096"} 300
cachet_item_sizes{max_bytes="+Inf"} 310
# HELP cachet_missed_item_sizes_total Items stored right after a GET missed them.
# TYPE cachet_missed_item_sizes_total counter
cachet_missed_item_sizes_total{max_bytes="160"} 150
cachet_missed_item_sizes_total{max_bytes="+Inf"} 300
# HELP cachet_miss_ratio Estimated miss ratio.
# TYPE cachet_miss_ratio gauge
cachet_miss_ratio{cache_bytes="4194304"} 0.5
cachet_miss_ratio{cache_bytes="1048576"} 0.9
cachet_miss_ratio{cache_bytes="8388608"} 0.2
# HELP cachet_mrc_references_total GETs the miss-ratio curve has seen.
# TYPE cachet_mrc_references_total counter
cachet_mrc_references_total 1200
`

func TestParsePodMetrics(t *testing.T) {
	s, err := ParsePodMetrics("p-0", strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	// de-cumulated, empty buckets and +Inf (chained items) left out
	if want := []SizeShare{{160, 150}, {2048, 150}}; !reflect.DeepEqual(s.Sizes, want) {
		t.Errorf("sizes %v, want %v", s.Sizes, want)
	}
	if want := []CurvePoint{{1048576, 0.9}, {4194304, 0.5}, {8388608, 0.2}}; !reflect.DeepEqual(s.Curve, want) {
		t.Errorf("curve %v, want ascending %v", s.Curve, want)
	}
	if s.References != 1200 {
		t.Errorf("references %v", s.References)
	}
	for name, bad := range map[string]string{
		"not prometheus text": "cachet_item_sizes{max_bytes=\"64\" 3\n",
		"bad bucket":          "cachet_item_sizes{max_bytes=\"x\"} 3\n",
		"ratio over 1":        "cachet_miss_ratio{cache_bytes=\"64\"} 1.5\n",
		"no size":             "cachet_miss_ratio{cache_bytes=\"\"} 0.5\n",
	} {
		if _, err := ParsePodMetrics("p", strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted %q", name, bad)
		}
	}
}

func TestMissRatioAt(t *testing.T) {
	c := []CurvePoint{{100, 0.8}, {200, 0.4}, {400, 0.2}}
	for _, tc := range []struct {
		at, want float64
	}{{50, 0.8}, {100, 0.8}, {150, 0.6}, {300, 0.3}, {400, 0.2}, {1000, 0.2}} {
		if got := MissRatioAt(c, tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
	if MissRatioAt(nil, 5) != 1 {
		t.Error("an empty curve predicts hits")
	}
}

func TestMergeCurvesWeighsByReferences(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []PodSample
		want []CurvePoint
		refs float64
	}{
		{"same grid: the fleet's misses over its GETs",
			[]PodSample{{References: 300, Curve: []CurvePoint{{100, 0.5}, {200, 0.1}}}, {References: 100, Curve: []CurvePoint{{100, 0.9}, {200, 0.5}}}},
			[]CurvePoint{{100, 0.6}, {200, 0.2}}, 400},
		{"a pod with no GET counts for nothing",
			[]PodSample{{References: 0, Curve: []CurvePoint{{100, 1}}}, {References: 10, Curve: []CurvePoint{{100, 0.3}}}},
			[]CurvePoint{{100, 0.3}}, 10},
		{"grids differ: union, each pod interpolated",
			[]PodSample{{References: 1, Curve: []CurvePoint{{100, 0.8}, {300, 0.4}}}, {References: 1, Curve: []CurvePoint{{200, 0.2}}}},
			[]CurvePoint{{100, 0.5}, {200, 0.4}, {300, 0.3}}, 2},
		{"no GETs at all", []PodSample{{Curve: []CurvePoint{{100, 1}}}}, nil, 0},
	} {
		got, refs := MergeCurves(tc.pods)
		if refs != tc.refs || len(got) != len(tc.want) {
			t.Errorf("%s: %v (%v refs), want %v (%v)", tc.name, got, refs, tc.want, tc.refs)
			continue
		}
		for i := range got {
			if got[i].CacheBytes != tc.want[i].CacheBytes || math.Abs(got[i].MissRatio-tc.want[i].MissRatio) > 1e-9 {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func TestMergeSizesAdds(t *testing.T) {
	got := MergeSizes([]PodSample{{Sizes: []SizeShare{{64, 2}, {128, 1}}}, {Sizes: []SizeShare{{128, 3}, {4096, 5}}}})
	if want := []SizeShare{{64, 2}, {128, 4}, {4096, 5}}; !reflect.DeepEqual(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
}

// A wide histogram (a log-normal mix in the engine's 32-byte buckets) gets
// as many classes as spec.engine.chunkSizes takes, the CRD's maxItems: on
// such a mix more classes kept more items at a full cache (24, 32, 48 and 63
// classes at -m 64 and -m 256, docs/benchmarks.md part (b)), and Effective
// must hand the engine no more than the API admits.
func TestObserveUsesEveryClassTheSpecTakes(t *testing.T) {
	crd, err := os.ReadFile("../../config/crd/bases/cache.cachet.dev_caches.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The schema itself, not the text: a pattern over the YAML would take
	// the next maxItems of any field when chunkSizes has none.
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(crd, &def); err != nil || len(def.Spec.Versions) != 1 || def.Spec.Versions[0].Schema == nil {
		t.Fatalf("the CRD: %v", err)
	}
	maxItems := def.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["engine"].Properties["chunkSizes"].MaxItems
	if maxItems == nil {
		t.Fatal("spec.engine.chunkSizes has no maxItems in the CRD")
	}
	limit := int(*maxItems)
	var sizes []SizeShare
	for b := int64(64); b <= 8032; b += 32 {
		x := (math.Log(float64(b)) - 5.8) / 1.2
		sizes = append(sizes, SizeShare{Bytes: b, Weight: math.Round(1e6 * math.Exp(-x*x/2) / float64(b))})
	}
	o := Observe([]PodSample{{Sizes: sizes}}, 64<<30) // memory to spare: the least waste
	if len(o.Classes) != limit {
		t.Errorf("%d classes for %d sizes, want spec.engine.chunkSizes' limit %d", len(o.Classes), len(sizes), limit)
	}
}

func TestObserveFindsTheModes(t *testing.T) {
	// two value-size modes over two pods: the classes are the modes' buckets
	pods := []PodSample{
		{Sizes: []SizeShare{{160, 400}, {2304, 200}}, References: 800, Curve: []CurvePoint{{1 << 20, 0.3}}},
		{Sizes: []SizeShare{{160, 300}, {2304, 300}}, References: 800, Curve: []CurvePoint{{1 << 20, 0.5}}},
	}
	o := Observe(pods, 64<<20)
	if want := []int64{160, 2304}; !reflect.DeepEqual(o.Classes, want) {
		t.Errorf("classes %v, want the modes %v", o.Classes, want)
	}
	if o.Items != 1200 || len(o.Curve) != 1 || math.Abs(o.Curve[0].MissRatio-0.4) > 1e-9 {
		t.Errorf("items %v, curve %v", o.Items, o.Curve)
	}
	few := Observe([]PodSample{{Sizes: []SizeShare{{160, 10}}, References: 10, Curve: []CurvePoint{{1 << 20, 0.3}}}}, 64<<20)
	if few.Classes != nil || few.Curve != nil || len(few.Notes) != 2 {
		t.Errorf("too little data still recommends: %+v", few)
	}
	// items over the slab chunk max are chained: no class for them
	big := Observe([]PodSample{{Sizes: []SizeShare{{160, 600}, {1 << 20, 600}}}}, 64<<20)
	if want := []int64{160}; !reflect.DeepEqual(big.Classes, want) {
		t.Errorf("chained items got a class: %v", big.Classes)
	}
}

func TestMemoryForCurve(t *testing.T) {
	const mib = 1 << 20
	curve := []CurvePoint{{4 * mib, 0.6}, {8 * mib, 0.3}, {16 * mib, 0.105}, {32 * mib, 0.1}}
	for _, tc := range []struct {
		name          string
		target, waste float64
		classes       int
		want          int64
		reached       bool
	}{
		{"knee: within a point of the best", 0, 0, 0, 16 * mib, true},
		{"target", 0.7, 0, 0, 8 * mib, true},
		{"waste and pages add", 0.7, 0.5, 2, 18 * mib, true},
		{"target out of reach", 0.95, 0, 0, 32 * mib, false},
		{"at least 8 MiB", 0.3, 0, 0, 8 * mib, true},
	} {
		got, reached := MemoryForCurve(curve, tc.target, tc.waste, tc.classes)
		if got != tc.want || reached != tc.reached {
			t.Errorf("%s: %d MiB (reached %v), want %d MiB (%v)", tc.name, got/mib, reached, tc.want/mib, tc.reached)
		}
	}
}

func TestDecideHysteresis(t *testing.T) {
	const chunkMax = 512 << 10
	sizes := []SizeShare{{160, 500}, {2304, 500}}
	modes := []int64{160, 2304}
	ladder := withChunkMax([]int64{96, 256, 4096}, chunkMax) // wastes a third of the chunk bytes on these modes
	obs := Observation{Classes: modes, Sizes: sizes, Items: 1000}
	noisy := Observation{Classes: []int64{160, 2048, 2304}, Sizes: []SizeShare{{160, 500}, {2048, 1}, {2304, 499}}, Items: 1000}
	shifted := Observation{Classes: []int64{512, 4096}, Sizes: []SizeShare{{512, 500}, {4096, 500}}, Items: 1000}
	for _, tc := range []struct {
		name       string
		in         DecideInput
		apply      bool
		stable     int32
		why        string
		recommends []int64
	}{
		{"first observation: not stable yet",
			DecideInput{Obs: obs, Running: ladder, ChunkMax: chunkMax, Auto: true, Settled: true}, false, 1, "not stable", modes},
		{"stable long enough, gain enough, settled: apply",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 2}, Obs: obs, Running: ladder, ChunkMax: chunkMax, Auto: true, Settled: true}, true, 3, "applied", modes},
		{"manual never applies",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 5}, Obs: obs, Running: ladder, ChunkMax: chunkMax, Settled: true}, false, 6, "Manual", modes},
		{"back to manual: the pods run the ladder again, nothing is applied",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 5, Applied: modes}, Obs: obs, Running: ladder, ChunkMax: chunkMax, Settled: true}, false, 6, "Manual", modes},
		{"a roll under way waits",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 5}, Obs: obs, Running: ladder, ChunkMax: chunkMax, Auto: true}, false, 6, "roll", modes},
		{"already running them: stays put",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 5, Applied: modes}, Obs: obs, Running: withChunkMax(modes, chunkMax), ChunkMax: chunkMax, Auto: true, Settled: true}, false, 6, "run the recommended", modes},
		{"noise within a point keeps the recommendation and its count",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 2}, Obs: noisy, Running: ladder, ChunkMax: chunkMax, Auto: true, Settled: true}, true, 3, "applied", modes},
		{"a shifted workload restarts the count",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 9, Applied: modes}, Obs: shifted, Running: withChunkMax(modes, chunkMax), ChunkMax: chunkMax, Auto: true, Settled: true}, false, 1, "not stable", []int64{512, 4096}},
		{"gain under the threshold",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 5}, Obs: obs, Running: withChunkMax([]int64{168, 2320}, chunkMax), ChunkMax: chunkMax, Auto: true, Settled: true}, false, 6, "too small", modes},
		{"too little data: keeps the state",
			DecideInput{Prev: ProfileState{Recommended: modes, Stable: 2}, Obs: Observation{Notes: []string{"few items"}}, Running: ladder, ChunkMax: chunkMax, Auto: true, Settled: true}, false, 2, "few items", modes},
	} {
		d := Decide(tc.in)
		if d.Apply != tc.apply || d.State.Stable != tc.stable || !strings.Contains(d.Why, tc.why) || !reflect.DeepEqual(d.State.Recommended, tc.recommends) {
			t.Errorf("%s: apply %v stable %d recommends %v why %q; want %v %d %v %q", tc.name, d.Apply, d.State.Stable, d.State.Recommended, d.Why, tc.apply, tc.stable, tc.recommends, tc.why)
		}
		if !tc.in.Auto && d.State.Applied != nil {
			t.Errorf("%s: apply: Manual keeps applied classes %v the pods no longer run", tc.name, d.State.Applied)
		}
		if d.Apply && !reflect.DeepEqual(d.State.Applied, d.State.Recommended) {
			t.Errorf("%s: applied %v, not the recommendation", tc.name, d.State.Applied)
		}
	}
}

func TestRecommendObservedAndTheSpecItApplies(t *testing.T) {
	s := &cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi"), WorkloadProfile: &cachev1alpha1.WorkloadProfile{
		Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyAuto, TargetHitRatio: ptr.To("0.75")}}
	pods := []PodSample{
		{Name: "c-0", Sizes: []SizeShare{{160, 400}, {2304, 400}}, References: 1000, Curve: []CurvePoint{{32 << 20, 0.5}, {64 << 20, 0.3}, {128 << 20, 0.2}}},
		{Name: "c-1", Sizes: []SizeShare{{160, 100}, {2304, 100}}, References: 1000, Curve: []CurvePoint{{32 << 20, 0.5}, {64 << 20, 0.3}, {128 << 20, 0.2}}},
	}
	var prev *cachev1alpha1.Recommendation
	var d Decision
	for i := 0; i < StableObservationsToApply; i++ {
		prev, d = RecommendObserved(WithObservedClasses(s, prev), prev, pods, true)
	}
	if !d.Apply || !reflect.DeepEqual(prev.AppliedChunkSizes, []int32{160, 2304}) || !prev.Applied {
		t.Fatalf("not applied after %d stable observations: %+v", StableObservationsToApply, prev)
	}
	if prev.Memory == nil || prev.Memory.Value() < 128<<20 || prev.PredictedHitRatio != "0.800" || len(prev.Pods) != 2 || prev.Pods[1].PredictedWastePercent != "0.0" {
		t.Errorf("recommendation %+v", prev)
	}
	run := WithObservedClasses(s, prev)
	if !reflect.DeepEqual(run.Engine.ChunkSizes, []int32{160, 2304}) || s.Engine.ChunkSizes != nil {
		t.Errorf("applied classes do not reach the engine's spec (or leak into the user's): %v / %v", run.Engine.ChunkSizes, s.Engine.ChunkSizes)
	}
	if !strings.Contains(strings.Join(Args(run, Options{}), " "), "slab_sizes=160-2304") {
		t.Errorf("args %v", Args(run, Options{}))
	}
	next, d := RecommendObserved(run, prev, pods, true)
	if d.Apply || next.CurrentWastePercent != "0.0" || !strings.Contains(next.Decision, "run the recommended") {
		t.Errorf("after the apply it does not stay put: %+v", next)
	}
	manual := *s
	manual.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyManual}
	if WithObservedClasses(&manual, prev) != &manual || Recommend(&manual) != nil {
		t.Error("a Manual Observed profile reaches the engine or gets a Declared recommendation")
	}
}

func TestAdoptRunningClasses(t *testing.T) {
	auto := &cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi"), WorkloadProfile: &cachev1alpha1.WorkloadProfile{
		Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyAuto}}
	running := []string{"-p", "11211", "-m", "64", "-o", "conn_buffer_limit=4m,slab_sizes=288-2304,metrics_port=9150"}
	got := AdoptRunningClasses(auto, nil, running)
	if got == nil || !reflect.DeepEqual(got.AppliedChunkSizes, []int32{288, 2304}) {
		t.Fatalf("a lost status does not adopt the running classes: %+v", got)
	}
	if !strings.Contains(strings.Join(Args(WithObservedClasses(auto, got), Options{}), " "), "slab_sizes=288-2304") {
		t.Error("the adopted classes do not reach the arguments: the pods would roll back")
	}
	kept := &cachev1alpha1.Recommendation{AppliedChunkSizes: []int32{96}}
	manual := auto.DeepCopy()
	manual.WorkloadProfile.Apply = cachev1alpha1.ProfileApplyManual
	for name, tc := range map[string]struct {
		s       *cachev1alpha1.CacheSpec
		r       *cachev1alpha1.Recommendation
		running []string
	}{
		"status has applied classes": {auto, kept, running},
		"manual":                     {manual, nil, running},
		"running the ladder":         {auto, nil, []string{"-f", "1.25", "-n", "48", "-o", "metrics_port=9150"}},
		"nothing running":            {auto, nil, nil},
		"a bad list":                 {auto, nil, []string{"-o", "slab_sizes=1-x"}},
	} {
		if got := AdoptRunningClasses(tc.s, tc.r, tc.running); got != tc.r {
			t.Errorf("%s: adopted %+v", name, got)
		}
	}
}
