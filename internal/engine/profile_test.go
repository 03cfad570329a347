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
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// bruteForceWaste tries every set of at most k classes among the sizes that
// holds the largest one, and returns the least Waste.
func bruteForceWaste(sizes []SizeShare, k int) float64 {
	n := len(sizes)
	best := math.Inf(1)
	for mask := 0; mask < 1<<(n-1); mask++ {
		classes := []int64{}
		for i := 0; i < n-1; i++ {
			if mask&(1<<i) != 0 {
				classes = append(classes, sizes[i].Bytes)
			}
		}
		classes = append(classes, sizes[n-1].Bytes)
		if len(classes) <= k {
			best = min(best, Waste(sizes, classes))
		}
	}
	return best
}

func TestOptimalClassesMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.Intn(11)
		seen := map[int64]bool{}
		var sizes []SizeShare
		for len(sizes) < n {
			b := int64(48 + 8*rng.Intn(400))
			if !seen[b] {
				seen[b] = true
				sizes = append(sizes, SizeShare{Bytes: b, Weight: float64(1 + rng.Intn(100))})
			}
		}
		slices.SortFunc(sizes, func(a, b SizeShare) int { return int(a.Bytes - b.Bytes) })
		for k := 1; k <= n; k++ {
			got := OptimalClasses(sizes, k)
			if len(got) > k || got[len(got)-1] != sizes[n-1].Bytes || !slices.IsSorted(got) {
				t.Fatalf("sizes %v, k %d: classes %v are not at most k ascending classes ending at the largest size", sizes, k, got)
			}
			if g, want := Waste(sizes, got), bruteForceWaste(sizes, k); math.Abs(g-want) > 1e-9 {
				t.Fatalf("sizes %v, k %d: classes %v waste %.4f per item, brute force finds %.4f", sizes, k, got, g, want)
			}
			// the page model chooses among the DP's set for each count
			if set := ClassSets(sizes, n)[k-1]; len(set) != k || math.Abs(Waste(sizes, set)-bruteForceWaste(sizes, k)) > 1e-9 {
				t.Fatalf("sizes %v: ClassSets' %d classes %v waste %.4f per item, brute force finds %.4f", sizes, k, set, Waste(sizes, set), bruteForceWaste(sizes, k))
			}
		}
	}
}

func TestOptimalClasses(t *testing.T) {
	sizes := []SizeShare{{64, 10}, {72, 10}, {200, 1}, {1000, 50}, {1008, 50}}
	for _, tc := range []struct {
		k    int
		want []int64
	}{
		{1, []int64{1008}},
		// the heavy pair near 1000 keeps its own class before the light 200
		{2, []int64{72, 1008}},
		// 200 into 1008 wastes 808 once; 1000 into 1008 wastes 8 fifty times
		{3, []int64{72, 200, 1008}},
		{4, []int64{72, 200, 1000, 1008}},
		{5, []int64{64, 72, 200, 1000, 1008}},
		{9, []int64{64, 72, 200, 1000, 1008}},
	} {
		if got := OptimalClasses(sizes, tc.k); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("k %d: classes %v, want %v", tc.k, got, tc.want)
		}
	}
	// fewer classes when more would waste nothing less
	if got := OptimalClasses([]SizeShare{{64, 1}, {72, 0}, {80, 1}}, 3); !reflect.DeepEqual(got, []int64{64, 80}) {
		t.Errorf("a weightless size gets a class of its own: %v", got)
	}
}

func TestItemBytes(t *testing.T) {
	for _, tc := range []struct {
		key, value int64
		flags, ttl bool
		want       int64
	}{
		{10, 5, false, false, 48},      // header 19 + CAS 8 + 15 = 42
		{10, 5, true, false, 48},       // + flags 4 = 46
		{10, 10, true, true, 56},       // 27 + 20 + flags 4 + expiry 4 = 55
		{10, 1024, false, false, 1064}, // no reference count up to 1024: 1061
		{10, 1025, false, false, 1072}, // one past: + 4 = 1066
	} {
		if got := cachev1alpha1.ItemBytes(tc.key, tc.value, tc.flags, tc.ttl); got != tc.want {
			t.Errorf("ItemBytes(%d, %d, flags %v, ttl %v) = %d, want %d", tc.key, tc.value, tc.flags, tc.ttl, got, tc.want)
		}
	}
}

// The table grows when items exceed 1.5 x buckets (assoc.c): the derived
// power is the smallest that never does, never below the engine's default.
func TestHashPowerFor(t *testing.T) {
	for _, tc := range []struct {
		items int64
		want  int32
	}{
		{1, DefaultHashPower},
		{3 << 15, 16},   // exactly 1.5 x 2^16: no expansion
		{3<<15 + 1, 17}, // one more expands 2^16
		{3 << 19, 20},   // 1.5 x 2^20
		{3<<19 + 1, 21}, // one more
		{1 << 40, MaxHashPower},
	} {
		got := HashPowerFor(tc.items)
		if got != tc.want {
			t.Errorf("HashPowerFor(%d) = %d, want %d", tc.items, got, tc.want)
		}
		buckets := int64(1) << got
		if got < MaxHashPower && tc.items > buckets+buckets/2 {
			t.Errorf("HashPowerFor(%d) = %d expands: %d items > 1.5 x %d", tc.items, got, tc.items, buckets)
		}
	}
}

func TestDerive(t *testing.T) {
	s := spec(memory("1Gi"), func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{
			ValueSizes:    []cachev1alpha1.ValueSizeBucket{{Bytes: 100, Weight: 3}, {Bytes: 5000, Weight: 1}, {Bytes: 2 << 20, Weight: 1}},
			KeyBytes:      ptr.To(int32(20)),
			ExpectedItems: ptr.To(int64(1_000_000)),
		}
	})
	d := Derive(s)
	// 27 + 20 + 100 + flags 4 = 151 -> 152; 5000 + 51 + refcount 4 = 5055 -> 5056;
	// 2 MiB is over -I (1 MiB): no class
	if want := []int64{152, 5056}; !reflect.DeepEqual(d.ChunkSizes, want) {
		t.Errorf("classes %v, want %v", d.ChunkSizes, want)
	}
	if d.PredictedWaste != 0 || d.CurrentWaste <= 0.03 {
		t.Errorf("waste: derived %.3f (want 0: one class per size), -f 1.25 %.3f (want over 3%%)", d.PredictedWaste, d.CurrentWaste)
	}
	if *d.HashPower != 20 {
		t.Errorf("hash power %d for 1e6 items, want 20 (1.5 x 2^20 = 1572864)", *d.HashPower)
	}
	// 3/4 x 152 + 1/4 x 5056 = 1378 bytes an item, plus a page for each of 3 classes
	if want := int64(math.Ceil((1e6*1378+3<<20)/(1<<20))) << 20; d.MemoryBytes != want {
		t.Errorf("memory %d, want %d", d.MemoryBytes, want)
	}
	if d.ExtstoreItemMinSize != 0 {
		t.Errorf("extstore threshold %d without extstore", d.ExtstoreItemMinSize)
	}
	// 2 MiB + 20 + 27 + 4 flags + 4 refcount
	if d.Notes != "items of 2097208 bytes (value, key and header) are over spec.engine.maxItemSize (1048576 bytes): the engine refuses them, so they get no class" {
		t.Errorf("the size over -I is dropped without a note: %q", d.Notes)
	}
	s.WorkloadProfile.TargetHitRatio = ptr.To("0.9")
	if d := Derive(s); !strings.Contains(d.Notes, "Observed") || !strings.Contains(d.Notes, "maxItemSize") {
		t.Errorf("targetHitRatio on a Declared profile is not reported as needing Observed beside the dropped size: %q", d.Notes)
	}
}

// Effective replaces the ladder only with derived classes: a profile whose
// every size is chained (above the slab chunk max) derives none, and the
// spec's own growthFactor, minChunk and chunkSizes stay.
func TestEffectiveKeepsTheLadderWithoutDerivedClasses(t *testing.T) {
	ladder := func(s *cachev1alpha1.CacheSpec) {
		s.Engine.GrowthFactor, s.Engine.MinChunk = ptr.To("1.07"), ptr.To(int32(64))
		s.Engine.MaxItemSize = ptr.To(resource.MustParse("4Mi"))
	}
	chained := spec(memory("1Gi"), ladder, func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Apply: cachev1alpha1.ProfileApplyAuto,
			ValueSizes: []cachev1alpha1.ValueSizeBucket{{Bytes: 1 << 20, Weight: 1}, {Bytes: 2 << 20, Weight: 1}}}
	})
	if d := Derive(chained); len(d.ChunkSizes) != 0 {
		t.Fatalf("sizes above the slab chunk max (%d) derived classes %v", cachev1alpha1.SlabChunkMax(1<<30), d.ChunkSizes)
	}
	e := Effective(chained)
	if e.Engine.GrowthFactor == nil || *e.Engine.GrowthFactor != "1.07" || e.Engine.MinChunk == nil || *e.Engine.MinChunk != 64 {
		t.Errorf("the spec's ladder was dropped for none: growthFactor %v minChunk %v chunkSizes %v", e.Engine.GrowthFactor, e.Engine.MinChunk, e.Engine.ChunkSizes)
	}
	derived := spec(memory("1Gi"), ladder, func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Apply: cachev1alpha1.ProfileApplyAuto, Preset: "sessions"}
	})
	if e := Effective(derived); e.Engine.GrowthFactor != nil || e.Engine.MinChunk != nil || len(e.Engine.ChunkSizes) != 5 {
		t.Errorf("derived classes did not replace the ladder: growthFactor %v minChunk %v chunkSizes %v", e.Engine.GrowthFactor, e.Engine.MinChunk, e.Engine.ChunkSizes)
	}
}

// Effective's extstore threshold comes from a Declared profile's key and
// value sizes; an Observed profile declares none (its keyBytes would only be
// a guess beside what the pods hold), so spec.extstore.itemMinSize, or the
// engine's default when unset, stays.
func TestEffectiveExtstoreThreshold(t *testing.T) {
	withProfile := func(source, apply string, itemMinSize *int64) *cachev1alpha1.CacheSpec {
		return spec(memory("1Gi"), func(s *cachev1alpha1.CacheSpec) {
			s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("10Gi"), ItemMinSize: itemMinSize}
			// 250-byte keys: four stubs hold more than the 512-byte floor,
			// so a derived threshold shows
			s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Source: source, Apply: apply, KeyBytes: ptr.To(int32(250))}
			if source == cachev1alpha1.ProfileSourceDeclared {
				s.WorkloadProfile.Preset = "sessions"
			}
		})
	}
	declared := withProfile(cachev1alpha1.ProfileSourceDeclared, cachev1alpha1.ProfileApplyAuto, nil)
	derived := Derive(declared).ExtstoreItemMinSize
	if derived <= DefaultExtstoreItemMinSize {
		t.Fatalf("derived threshold %d for 250-byte keys does not stand out from the default %d", derived, DefaultExtstoreItemMinSize)
	}
	for _, tc := range []struct {
		name        string
		spec        *cachev1alpha1.CacheSpec
		itemMinSize int64 // what the engine runs
	}{
		{"Declared Auto: derived", declared, derived},
		{"Declared Auto over the user's: derived", withProfile(cachev1alpha1.ProfileSourceDeclared, cachev1alpha1.ProfileApplyAuto, ptr.To(int64(700))), derived},
		{"Declared Manual: the user's", withProfile(cachev1alpha1.ProfileSourceDeclared, cachev1alpha1.ProfileApplyManual, ptr.To(int64(700))), 700},
		{"Observed Auto: the user's", withProfile(cachev1alpha1.ProfileSourceObserved, cachev1alpha1.ProfileApplyAuto, ptr.To(int64(700))), 700},
		{"Observed Auto, unset: the engine's default", withProfile(cachev1alpha1.ProfileSourceObserved, cachev1alpha1.ProfileApplyAuto, nil), DefaultExtstoreItemMinSize},
		{"Observed Manual: the user's", withProfile(cachev1alpha1.ProfileSourceObserved, cachev1alpha1.ProfileApplyManual, ptr.To(int64(700))), 700},
	} {
		e := Effective(tc.spec)
		if got := ExtstoreItemMinBytes(e.Extstore); got != tc.itemMinSize {
			t.Errorf("%s: threshold %d, want %d", tc.name, got, tc.itemMinSize)
		}
		arg := "ext_item_size=" + strconv.FormatInt(tc.itemMinSize, 10)
		if a := Args(tc.spec, Options{}); !slices.ContainsFunc(a, func(s string) bool { return slices.Contains(strings.Split(s, ","), arg) }) {
			t.Errorf("%s: arguments lack %s: %v", tc.name, arg, a)
		}
	}
}

func TestPresetsGiveTheirShape(t *testing.T) {
	for name := range ProfilePresets {
		s := spec(memory("1Gi"), func(s *cachev1alpha1.CacheSpec) {
			s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Preset: name}
		})
		d := Derive(s)
		if len(d.ChunkSizes) != len(ProfilePresets[name].ValueSizes) || d.PredictedWaste != 0 {
			t.Errorf("%s: classes %v waste %.3f: want one class per bucket and no waste", name, d.ChunkSizes, d.PredictedWaste)
		}
		if d.PredictedWaste >= d.CurrentWaste {
			t.Errorf("%s: derived waste %.3f not below the default ladder's %.3f", name, d.PredictedWaste, d.CurrentWaste)
		}
	}
}

// Manual only recommends; Auto changes the arguments and the budget.
func TestApplyModes(t *testing.T) {
	plain := spec()
	manual := spec(func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Preset: "sessions", ExpectedItems: ptr.To(int64(50_000_000)), Apply: cachev1alpha1.ProfileApplyManual}
	})
	if !reflect.DeepEqual(Args(manual, Options{}), Args(plain, Options{})) || Budget(manual, Options{}) != Budget(plain, Options{}) {
		t.Errorf("apply: Manual changes the engine: %v", Args(manual, Options{}))
	}
	auto := manual.DeepCopy()
	auto.WorkloadProfile.Apply = cachev1alpha1.ProfileApplyAuto
	args := strings.Join(Args(auto, Options{}), " ")
	if !strings.Contains(args, "slab_sizes=") || !strings.Contains(args, "hashpower=25") || strings.Contains(args, "-f ") {
		t.Errorf("apply: Auto arguments lack the derived classes and hash power 25 (5e7 items: 1.5 x 2^25 holds them): %s", args)
	}
	if Budget(auto, Options{}).HashTable <= Budget(plain, Options{}).HashTable {
		t.Errorf("the budget's hash table does not grow with the derived hash power")
	}
	ext := auto.DeepCopy()
	ext.Memory = resource.MustParse("1Gi")
	ext.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("10Gi")}
	if a := strings.Join(Args(ext, Options{}), " "); !strings.Contains(a, "ext_item_size=512,") && !strings.HasSuffix(a, "ext_item_size=512") {
		t.Errorf("extstore threshold for 40-byte keys is not 512 (4 stubs of 88 bytes = a 272-byte value, below the 512 floor): %s", a)
	}
}
