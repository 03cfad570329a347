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

// Workload profiles (issue 23): a declared value-size histogram becomes slab
// classes, a hash power and an item memory. memcached fixes its classes at
// start from -f or -o slab_sizes and nothing derives them from the sizes a
// cache holds; here an exact dynamic program picks the classes that waste
// the fewest bytes per item. Everything is pure: the controller calls Derive
// for status.recommendation, and Effective folds an apply: Auto derivation
// into the spec that Args and Budget read, so the memory formula covers the
// derived arguments by construction.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

const (
	// MaxProfileClasses is the most classes the derivation gives: as many
	// as spec.engine.chunkSizes takes (cachetd has 63 item classes and
	// appends one of slab_chunk_max itself). How many of them a workload
	// gets is the page model's choice (ClassesForMemory, pagemodel.go):
	// measured at a full cache (docs/benchmarks.md, part (b)), on a wide
	// log-normal mix more classes kept more items, on a two-mode mix 62
	// kept 4% fewer than 24, each class holding pages of its own.
	MaxProfileClasses = 62
	// Tail fields an item may carry besides the CAS: defined with ItemBytes
	// in the API package, whose webhook sizes items the same way.
	ItemFlagsBytes  = cachev1alpha1.ItemFlagsBytes
	ItemExpiryBytes = cachev1alpha1.ItemExpiryBytes
	ItemRefBytes    = cachev1alpha1.ItemRefBytes
	ItemRefMinBytes = cachev1alpha1.ItemRefMinBytes
	// MinClassBytes is the smallest slab class cachetd accepts: an item's
	// fixed part and 16 bytes (engine/src/settings.c, slabs.c min_chunk);
	// smaller items share it.
	MinClassBytes = (ItemFixedBytes + 16 + 7) &^ 7
	// DefaultProfileKeyBytes is the key length of a profile that names
	// neither a preset with one nor keyBytes.
	DefaultProfileKeyBytes = cachev1alpha1.DefaultProfileKeyBytes
	// profilePageBytes is the slab page each class in use holds at least
	// partly empty: the engine's largest (settings_slab_page_size).
	profilePageBytes = 1 << 20
	// extstoreRAMShare: a value goes to disk only when its RAM stub is at
	// most a quarter of the chunk it leaves, so that each item on disk frees
	// at least three quarters of its memory.
	extstoreRAMShare = 4
)

// ProfilePreset is a named value-size shape with its typical key length.
type ProfilePreset struct {
	KeyBytes   int32
	TTLSeconds int32
	ValueSizes []cachev1alpha1.ValueSizeBucket
}

// ProfilePresets are the shapes spec.workloadProfile.preset names
// (docs/profiles.md explains each). Weights are shares of the items in
// percent.
var ProfilePresets = map[string]ProfilePreset{
	// counters, feature flags, small JSON: a few to a hundred bytes
	"small-objects": {KeyBytes: 24, ValueSizes: []cachev1alpha1.ValueSizeBucket{
		{Bytes: 16, Weight: 20}, {Bytes: 32, Weight: 30}, {Bytes: 64, Weight: 30}, {Bytes: 128, Weight: 20}}},
	// serialized web sessions: around 1 KiB, a long tail to 4 KiB, 30 min TTL
	"sessions": {KeyBytes: 40, TTLSeconds: 1800, ValueSizes: []cachev1alpha1.ValueSizeBucket{
		{Bytes: 256, Weight: 10}, {Bytes: 512, Weight: 25}, {Bytes: 1024, Weight: 35}, {Bytes: 2048, Weight: 20}, {Bytes: 4096, Weight: 10}}},
	// ids and counters next to rendered blobs: two modes, nothing between
	"bimodal": {KeyBytes: 32, ValueSizes: []cachev1alpha1.ValueSizeBucket{
		{Bytes: 64, Weight: 35}, {Bytes: 128, Weight: 25}, {Bytes: 8192, Weight: 25}, {Bytes: 16384, Weight: 15}}},
	// rendered page parts: roughly log-normal from 2 KiB to 64 KiB
	"html-fragments": {KeyBytes: 64, TTLSeconds: 300, ValueSizes: []cachev1alpha1.ValueSizeBucket{
		{Bytes: 2048, Weight: 10}, {Bytes: 4096, Weight: 20}, {Bytes: 8192, Weight: 30}, {Bytes: 16384, Weight: 25}, {Bytes: 32768, Weight: 10}, {Bytes: 65536, Weight: 5}}},
}

// SizeShare is one item size (chunk bytes it needs, 8-byte aligned) and its
// share of the items.
type SizeShare struct {
	Bytes  int64
	Weight float64
}

// profileShape resolves a profile's preset and defaults.
func profileShape(p *cachev1alpha1.WorkloadProfile) (sizes []cachev1alpha1.ValueSizeBucket, key, ttl int32) {
	key, sizes = DefaultProfileKeyBytes, p.ValueSizes
	if pre, ok := ProfilePresets[p.Preset]; ok {
		sizes, key, ttl = pre.ValueSizes, pre.KeyBytes, pre.TTLSeconds
	}
	if p.KeyBytes != nil {
		key = *p.KeyBytes
	}
	if p.TTLSeconds != nil {
		ttl = *p.TTLSeconds
	}
	return sizes, key, ttl
}

// ProfileSizes are a profile's item sizes (at least MinClassBytes: that is
// the chunk the smallest items take), ascending, equal sizes merged.
func ProfileSizes(p *cachev1alpha1.WorkloadProfile) []SizeShare {
	buckets, key, ttl := profileShape(p)
	flags := p.ClientFlags == nil || *p.ClientFlags
	byBytes := map[int64]float64{}
	for _, b := range buckets {
		byBytes[max(cachev1alpha1.ItemBytes(int64(key), int64(b.Bytes), flags, ttl > 0), MinClassBytes)] += float64(b.Weight)
	}
	out := make([]SizeShare, 0, len(byBytes))
	for n, w := range byBytes {
		out = append(out, SizeShare{Bytes: n, Weight: w})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes < out[j].Bytes })
	return out
}

// Waste is the expected unused bytes per item when each size goes to the
// smallest class that holds it (classes ascending). Sizes above the largest
// class are left out: the engine chains them from its largest chunks.
func Waste(sizes []SizeShare, classes []int64) float64 {
	var wasted, weight float64
	for _, s := range sizes {
		i := sort.Search(len(classes), func(i int) bool { return classes[i] >= s.Bytes })
		if i == len(classes) {
			continue
		}
		wasted += s.Weight * float64(classes[i]-s.Bytes)
		weight += s.Weight
	}
	if weight == 0 {
		return 0
	}
	return wasted / weight
}

// OptimalClasses picks at most k classes among the sizes that hold items (an optimal class
// always equals some item size: shrinking it to the largest size it holds
// wastes less) that minimise Waste: the fewest classes that reach the least
// waste of any count up to k (ClassSets has the best set for every count).
func OptimalClasses(sizes []SizeShare, k int) []int64 {
	sets := ClassSets(sizes, k)
	if len(sets) == 0 {
		return nil
	}
	sizes = withItems(sizes)
	// more classes never waste more; take the fewest that reach the least
	c := len(sets)
	for c > 1 && Waste(sizes, sets[c-2]) <= Waste(sizes, sets[c-1]) {
		c--
	}
	return sets[c-1]
}

// withItems drops the sizes that hold no items: no items, no class.
func withItems(sizes []SizeShare) []SizeShare {
	return slices.DeleteFunc(slices.Clone(sizes), func(s SizeShare) bool { return s.Weight <= 0 })
}

// ClassSets is, for every count c from 1 to min(k, sizes with items), the c
// classes that minimise Waste (sets[c-1], ascending), by a dynamic program
// over prefixes: best[c][j] is the least weighted waste of sizes[0..j] in c
// classes, the last one sizes[j]. O(k n^2) for n sizes; exact. The page
// model (ClassesForMemory) chooses the count among them.
func ClassSets(sizes []SizeShare, k int) [][]int64 {
	sizes = withItems(sizes)
	n := len(sizes)
	k = min(k, n)
	if k <= 0 {
		return nil
	}
	// cost(i, j): sizes[i..j] in one class of sizes[j], from prefix sums
	w, wb := make([]float64, n+1), make([]float64, n+1)
	for i, s := range sizes {
		w[i+1] = w[i] + s.Weight
		wb[i+1] = wb[i] + s.Weight*float64(s.Bytes)
	}
	cost := func(i, j int) float64 {
		return float64(sizes[j].Bytes)*(w[j+1]-w[i]) - (wb[j+1] - wb[i])
	}
	best := make([][]float64, k+1)
	from := make([][]int, k+1)
	for c := range best {
		best[c], from[c] = make([]float64, n), make([]int, n)
		for j := range best[c] {
			best[c][j] = math.Inf(1)
		}
	}
	for j := 0; j < n; j++ {
		best[1][j] = cost(0, j)
	}
	for c := 2; c <= k; c++ {
		for j := c - 1; j < n; j++ {
			for i := c - 1; i <= j; i++ { // the last class holds sizes[i..j]
				if v := best[c-1][i-1] + cost(i, j); v < best[c][j] {
					best[c][j], from[c][j] = v, i
				}
			}
		}
	}
	sets := make([][]int64, k)
	for count := 1; count <= k; count++ {
		out := make([]int64, count)
		for c, j := count, n-1; c >= 1; c-- {
			out[c-1] = sizes[j].Bytes
			if c > 1 {
				j = from[c][j] - 1
			}
		}
		sets[count-1] = out
	}
	return sets
}

// ClassLadder is the classes a spec's engine settings give (slabs.c): the
// explicit chunk sizes, or the -n/-f ladder, then slab_chunk_max.
func ClassLadder(s *cachev1alpha1.CacheSpec) []int64 {
	chunkMax := cachev1alpha1.SlabChunkMax(s.Memory.Value())
	var out []int64
	if len(s.Engine.ChunkSizes) > 0 {
		for _, c := range s.Engine.ChunkSizes {
			out = append(out, (int64(c)+7)&^7)
		}
	} else {
		f := 1.25
		if s.Engine.GrowthFactor != nil {
			if v, err := strconv.ParseFloat(*s.Engine.GrowthFactor, 64); err == nil && v > 1 {
				f = v
			}
		}
		n := int64(DefaultMinChunk)
		if s.Engine.MinChunk != nil {
			n = int64(*s.Engine.MinChunk)
		}
		next, prev := float64(ItemFixedBytes+n), int64(0)
		for len(out) < 62 {
			sz := (int64(math.Ceil(next)) + 7) &^ 7
			if sz <= prev {
				sz = prev + 8
			}
			if sz >= chunkMax {
				break
			}
			out = append(out, sz)
			prev, next = sz, float64(sz)*f
		}
	}
	if len(out) == 0 || out[len(out)-1] < chunkMax {
		out = append(out, chunkMax)
	}
	return out
}

// HashPowerFor is the smallest table (power of two, from the engine's
// default to its ceiling) that holds items without growing: cachetd expands
// when items exceed 1.5 x buckets (engine/src/assoc.c needs_expansion).
func HashPowerFor(items int64) int32 {
	return grownHashPower(items, DefaultHashPower)
}

// grownHashPower is the power a table that starts at from reaches when it
// holds items, by the engine's own loop (engine/src/memory_budget.c
// hash_table_bytes): it grows only while items exceed 1.5 x buckets, so
// exactly 1.5 x 2^p items stay at power p.
func grownHashPower(items int64, from int32) int32 {
	p := from
	for p < MaxHashPower && items > (int64(1)<<p)+(int64(1)<<p)/2 {
		p++
	}
	return p
}

// Derivation is what a workload profile gives for a spec.
type Derivation struct {
	ChunkSizes []int64
	HashPower  *int32
	// MemoryBytes holds expectedItems in the derived classes (0 without
	// expectedItems).
	MemoryBytes int64
	// ExtstoreItemMinSize with spec.extstore, else 0.
	ExtstoreItemMinSize int64
	// Predicted and current waste, as a share of the chunk bytes.
	PredictedWaste, CurrentWaste float64
	Notes                        string
}

// Derive turns spec.workloadProfile into classes, hash power, memory and
// extstore threshold; nil without a profile.
func Derive(s *cachev1alpha1.CacheSpec) *Derivation {
	p := s.WorkloadProfile
	if p == nil {
		return nil
	}
	chunkMax := cachev1alpha1.SlabChunkMax(s.Memory.Value())
	// items over -I (a value just under maxItemSize, with its key and
	// header) are refused by the engine, so they get no class
	itemMax := MaxItemSizeBytes(s)
	var all, slabbed []SizeShare // slabbed: what fits a slab chunk; larger items are chained
	var notes []string
	for _, sz := range ProfileSizes(p) {
		if sz.Bytes > itemMax {
			// The webhook refuses such valueSizes; a preset's reach here.
			notes = append(notes, fmt.Sprintf("items of %d bytes (value, key and header) are over spec.engine.maxItemSize (%d bytes): the engine refuses them, so they get no class", sz.Bytes, itemMax))
			continue
		}
		all = append(all, sz)
		if sz.Bytes <= chunkMax {
			slabbed = append(slabbed, sz)
		}
	}
	// The number of classes: with expectedItems, the page model's at
	// spec.memory (ClassesForMemory); without, the least waste.
	var slabbedItems float64
	if p.ExpectedItems != nil {
		slabbedItems = float64(*p.ExpectedItems) * weightOf(slabbed) / max(weightOf(all), 1e-300)
	}
	d := &Derivation{ChunkSizes: ClassesForMemory(slabbed, MaxProfileClasses, slabbedItems, s.Memory.Value())}
	derived := append(append([]int64{}, d.ChunkSizes...), chunkMax)
	d.PredictedWaste = wasteShare(slabbed, derived)
	d.CurrentWaste = wasteShare(slabbed, ClassLadder(s))
	if p.ExpectedItems != nil {
		items := *p.ExpectedItems
		hp := HashPowerFor(items)
		d.HashPower = &hp
		var total, weight float64
		for _, sz := range all {
			chunk := float64(sz.Bytes)
			if sz.Bytes <= chunkMax {
				chunk += Waste([]SizeShare{sz}, derived)
			}
			total += sz.Weight * chunk
			weight += sz.Weight
		}
		bytes := float64(len(derived) * profilePageBytes)
		if weight > 0 {
			bytes += float64(items) * total / weight
		}
		const mib = 1 << 20
		d.MemoryBytes = max(int64(math.Ceil(bytes/mib))*mib, 8*mib)
	}
	if s.Extstore != nil {
		_, key, ttl := profileShape(p)
		// the stub of an item with the profile's key, flags and TTL
		stub := cachev1alpha1.ItemBytes(int64(key), ExtstoreLocatorBytes, p.ClientFlags == nil || *p.ClientFlags, ttl > 0)
		// value size whose item is extstoreRAMShare stubs
		v := extstoreRAMShare*stub - cachev1alpha1.ItemBytes(int64(key), 0, true, true)
		d.ExtstoreItemMinSize = min(max(v, DefaultExtstoreItemMinSize), MaxItemSizeBytes(s)-1)
	}
	if p.TargetHitRatio != nil {
		notes = append(notes, "targetHitRatio needs a miss-ratio curve, which only source: Observed has: memory is sized for all expectedItems")
	}
	d.Notes = strings.Join(notes, "; ")
	return d
}

func weightOf(sizes []SizeShare) float64 {
	var w float64
	for _, s := range sizes {
		w += s.Weight
	}
	return w
}

// wasteShare is the unused share of the chunk bytes items take in classes.
func wasteShare(sizes []SizeShare, classes []int64) float64 {
	var used, weight float64
	for _, s := range sizes {
		used += s.Weight * float64(s.Bytes)
		weight += s.Weight
	}
	if weight == 0 {
		return 0
	}
	w := Waste(sizes, classes)
	return w / (used/weight + w)
}

// Effective is the spec the engine runs: with an apply: Auto profile, its
// derived classes, hash power and extstore threshold in place of the
// engine's own settings (the API refuses both at once); otherwise s itself.
// An Observed profile declares no sizes or keys, so it derives no classes
// (WithObservedClasses puts the pods' in) and no extstore threshold:
// spec.extstore.itemMinSize, or the engine's default, stays.
func Effective(s *cachev1alpha1.CacheSpec) *cachev1alpha1.CacheSpec {
	p := s.WorkloadProfile
	if p == nil || p.Apply != cachev1alpha1.ProfileApplyAuto {
		return s
	}
	d := Derive(s)
	e := *s
	// No derived class (every size above the slab chunk max, chained):
	// the user's ladder stays, rather than the engine's default one.
	if len(d.ChunkSizes) > 0 {
		e.Engine.GrowthFactor, e.Engine.MinChunk, e.Engine.ChunkSizes = nil, nil, nil
		for _, c := range d.ChunkSizes {
			e.Engine.ChunkSizes = append(e.Engine.ChunkSizes, int32(c))
		}
	}
	if d.HashPower != nil {
		e.Engine.HashPower = d.HashPower
	}
	if s.Extstore != nil && p.Source != cachev1alpha1.ProfileSourceObserved {
		ext := *s.Extstore
		ext.ItemMinSize = &d.ExtstoreItemMinSize
		e.Extstore = &ext
	}
	return &e
}

// Recommend is status.recommendation for a Declared profile; nil without
// one (an Observed profile's comes from the pods: RecommendObserved).
func Recommend(s *cachev1alpha1.CacheSpec) *cachev1alpha1.Recommendation {
	d := Derive(s)
	if d == nil || s.WorkloadProfile.Source == cachev1alpha1.ProfileSourceObserved {
		return nil
	}
	r := &cachev1alpha1.Recommendation{
		HashPower:             d.HashPower,
		PredictedWastePercent: strconv.FormatFloat(100*d.PredictedWaste, 'f', 1, 64),
		CurrentWastePercent:   strconv.FormatFloat(100*d.CurrentWaste, 'f', 1, 64),
		Applied:               s.WorkloadProfile.Apply == cachev1alpha1.ProfileApplyAuto,
		Notes:                 d.Notes,
	}
	for _, c := range d.ChunkSizes {
		r.ChunkSizes = append(r.ChunkSizes, int32(c))
	}
	if d.MemoryBytes > 0 {
		r.Memory = resource.NewQuantity(d.MemoryBytes, resource.BinarySI)
	}
	if d.ExtstoreItemMinSize > 0 {
		r.ExtstoreItemMinSize = &d.ExtstoreItemMinSize
	}
	return r
}
