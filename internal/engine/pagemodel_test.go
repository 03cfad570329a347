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
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// benchMix is a chunk-need histogram shaped like docs/benchmarks.md part
// (b)'s mixes (8-byte keys: a chunk needs 35 + value bytes, +4 over 1 KiB,
// 8-byte aligned), scaled to items: modes of (share, log-space or linear
// centre and spread).
func benchMix(items float64, density func(value float64) float64) []SizeShare {
	by := map[int64]float64{}
	var total float64
	for v := 1.0; v <= 8000; v++ {
		d := density(v)
		if d <= 0 {
			continue
		}
		need := int64(35 + v)
		if v > 1024 {
			need += 4
		}
		need = max((need+7)&^7, MinClassBytes)
		by[need] += d
		total += d
	}
	var out []SizeShare
	for b := int64(MinClassBytes); b <= 8192; b += 8 {
		if w := math.Round(items * by[b] / total); w > 0 {
			out = append(out, SizeShare{Bytes: b, Weight: w})
		}
	}
	return out
}

func gauss(x, mu, sd float64) float64 { return math.Exp(-(x-mu)*(x-mu)/(2*sd*sd)) / sd }

// bimodal: 70% ~100 B (sd 10), 30% ~3000 B (sd 300), as part (b).
func bimodalMix(items float64) []SizeShare {
	return benchMix(items, func(v float64) float64 { return 0.7*gauss(v, 100, 10) + 0.3*gauss(v, 3000, 300) })
}

// log-normal: median 300 B, sigma 1.2, as part (b) (without its 8000 B cap).
func logNormalMix(items float64) []SizeShare {
	return benchMix(items, func(v float64) float64 { return gauss(math.Log(v), 5.7, 1.2) / v })
}

func TestItemsKept(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		sizes   []SizeShare
		classes []int64
		items   float64
		mem     int64
		want    float64
	}{
		// one class: every page full of 8,192 chunks of 128 bytes
		{"one class, binding", []SizeShare{{128, 1}}, []int64{128}, 1e6, 10 * mib, 10 * 8192},
		{"one class, fits", []SizeShare{{128, 1}}, []int64{128}, 50_000, 10 * mib, 50_000},
		// a size above the largest class is chained: left out
		{"chained size left out", []SizeShare{{128, 1}, {4096, 1}}, []int64{128}, 50_000, 10 * mib, 50_000},
		// three quarters of the items in 128-byte chunks (a page per 10,923
		// items), a quarter in 256 (a page per 16,384): after 54,613 items
		// the first has 5 pages, the second 4 of its share's 3.3, and the
		// first wants a sixth that 9 pages do not have
		{"two classes", []SizeShare{{128, 3}, {256, 1}}, []int64{128, 256}, 1e6, 9 * mib, 5*8192 + 4*4096},
		// a class with 100 items takes a page of its own, leaving 9 to the other
		{"a tiny class holds a page", []SizeShare{{128, 999_900}, {1024, 100}}, []int64{128, 1024}, 1e6, 10 * mib, 9*8192 + 100},
		// merged into one class of 1,024-byte chunks: 10 x 1,024 items
		{"merged instead", []SizeShare{{128, 999_900}, {1024, 100}}, []int64{1024}, 1e6, 10 * mib, 10 * 1024},
	} {
		if got := ItemsKept(tc.sizes, tc.classes, tc.items, tc.mem, mib); math.Abs(got-tc.want) > 0.001*tc.want {
			t.Errorf("%s: %.1f items kept, want %.0f", tc.name, got, tc.want)
		}
	}
}

func TestItemsKeptWeighsAPageOnTheEdge(t *testing.T) {
	// Two classes of equal shares, 128- and 256-byte chunks, 4 pages: after
	// 16,384 items the first has filled 1 page, the second 2, and both want
	// one more at the same moment. Which gets the last page is the arrival
	// order's chance: expected halfway between 2 + 2 pages (24,576 items)
	// and 1 + 3 (20,480); the mean count alone says one or the other.
	const mib = 1 << 20
	sizes, classes := []SizeShare{{128, 1}, {256, 1}}, []int64{128, 256}
	got := ItemsKept(sizes, classes, 1e6, 4*mib, mib)
	lo, hi := float64(8192+3*4096), float64(2*8192+2*4096)
	if math.Abs(got-(lo+hi)/2) > 0.05*(hi-lo) {
		t.Errorf("%.0f items kept, want about %.0f, halfway between %.0f and %.0f", got, (lo+hi)/2, lo, hi)
	}
}

func TestClassesForMemoryTakesFewerClassesWherePagesCostMore(t *testing.T) {
	const items, mib = 240_000, 1 << 20
	for _, tc := range []struct {
		name       string
		sizes      []SizeShare
		mem        int64
		maxClasses int // at most: the K rule took MaxProfileClasses
		minGain    float64
	}{
		// part (b): 62 classes kept 130,686, 24 kept 135,999 (measured)
		{"bimodal at -m 128", bimodalMix(items), 128 * mib, 40, 1.03},
	} {
		allK := OptimalClasses(tc.sizes, MaxProfileClasses)
		got := ClassesForMemory(tc.sizes, MaxProfileClasses, items, tc.mem)
		page := SlabPageBytes(tc.mem)
		keptK, kept := ItemsKept(tc.sizes, allK, items, tc.mem, page), ItemsKept(tc.sizes, got, items, tc.mem, page)
		if len(got) > tc.maxClasses || kept < tc.minGain*keptK {
			t.Errorf("%s: %d classes keep %.0f by the model; all %d classes keep %.0f: want at most %d classes keeping %.2fx",
				tc.name, len(got), kept, len(allK), keptK, tc.maxClasses, tc.minGain)
		}
	}
}

func TestClassesForMemoryKeepsManyClassesOnAWideMix(t *testing.T) {
	// part (b)'s log-normal at -m 64: 24, 32, 48, 62 classes kept ever more
	const items, mib = 240_000, 1 << 20
	sizes := logNormalMix(items)
	got := ClassesForMemory(sizes, MaxProfileClasses, items, 64*mib)
	if len(got) < 56 {
		t.Errorf("%d classes on a wide log-normal mix at -m 64, want at least 56", len(got))
	}
}

func TestClassesForMemoryWithMemoryToSpare(t *testing.T) {
	// everything fits at every count: the least waste, as without a model
	for _, tc := range []struct {
		name  string
		sizes []SizeShare
	}{
		{"bimodal", bimodalMix(10_000)},
		{"log-normal", logNormalMix(10_000)},
		{"three sizes", []SizeShare{{48, 1000}, {56, 1000}, {64, 1000}}},
	} {
		want := OptimalClasses(tc.sizes, MaxProfileClasses)
		if got := ClassesForMemory(tc.sizes, MaxProfileClasses, weightOf(tc.sizes), 1<<30); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want the least-waste %v", tc.name, got, want)
		}
		if got := ClassesForMemory(tc.sizes, MaxProfileClasses, 0, 1<<30); !reflect.DeepEqual(got, want) {
			t.Errorf("%s without items: %v, want the least-waste %v", tc.name, got, want)
		}
	}
}

func TestDeriveAndObserveChooseTheCountAtTheirMemory(t *testing.T) {
	// A profile whose items fill its memory: Derive, with expectedItems and
	// spec.memory, gets the page model's count; without expectedItems, the
	// least waste. Observe, with the pods' items and memory, the same.
	var buckets []cachev1alpha1.ValueSizeBucket
	for _, s := range bimodalMix(10_000) {
		buckets = append(buckets, cachev1alpha1.ValueSizeBucket{Bytes: int32(s.Bytes - 35), Weight: int32(s.Weight)})
	}
	spec := func(items *int64) *cachev1alpha1.CacheSpec {
		return &cachev1alpha1.CacheSpec{Memory: resource.MustParse("128Mi"), WorkloadProfile: &cachev1alpha1.WorkloadProfile{
			ValueSizes: buckets, KeyBytes: ptr.To(int32(8)), ClientFlags: ptr.To(false), ExpectedItems: items}}
	}
	sizes := ProfileSizes(spec(nil).WorkloadProfile)
	loose := Derive(spec(nil)).ChunkSizes
	tight := Derive(spec(ptr.To(int64(240_000)))).ChunkSizes
	if want := OptimalClasses(sizes, MaxProfileClasses); !reflect.DeepEqual(loose, want) {
		t.Errorf("without expectedItems: %d classes, want the least-waste %d", len(loose), len(want))
	}
	if want := ClassesForMemory(sizes, MaxProfileClasses, 240_000, 128<<20); !reflect.DeepEqual(tight, want) || len(tight) >= len(loose) {
		t.Errorf("with 240,000 items in 128Mi: %d classes, want the page model's %d, fewer than %d", len(tight), len(want), len(loose))
	}
	// two pods holding 240,000 items each of the same shape at 128Mi
	var pod []SizeShare
	for _, s := range sizes {
		pod = append(pod, SizeShare{Bytes: s.Bytes, Weight: s.Weight * 24})
	}
	o := Observe([]PodSample{{Sizes: pod}, {Sizes: pod}}, 128<<20)
	if want := ClassesForMemory(pod, MaxProfileClasses, weightOf(pod), 128<<20); !reflect.DeepEqual(o.Classes, want) || len(o.Classes) >= len(loose) {
		t.Errorf("Observe: %d classes, want the page model's %d per pod", len(o.Classes), len(want))
	}
}
