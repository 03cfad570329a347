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

// The page model (issue 23): how many slab classes to derive. The DP
// (ClassSets) gives the least-waste classes for every count up to
// MaxProfileClasses, but fewer waste is not more items: the engine gives
// memory to classes a whole slab page at a time, and every class in use
// holds pages of its own. Measured on a two-mode mix (docs/benchmarks.md,
// part (b)), 62 classes kept 4% fewer items than 24, the extra classes
// each holding pages that small items could have used; on a wide
// log-normal mix more classes kept more. So the count is chosen by a model
// of the items a full cache keeps, at the memory and page size the Cache
// runs with.
//
// The model follows how the engine fills: items arrive in their shares;
// each class takes a page when its last one is full, until -m has no page
// left; from then on a class fills what is left of its pages and then
// evicts its own items. So each class ends with the pages it held when
// memory ran out, all full (or all its items, if fewer). Everything is
// pure and deterministic; ItemsKept is calibrated against real cachetd runs
// in docs/benchmarks.md.

import (
	"math"
	"sort"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// SlabPageBytes is the engine's slab page for an item memory of mem bytes
// (engine/src/settings.c settings_slab_page_size: twice the default
// slab_chunk_max).
func SlabPageBytes(mem int64) int64 { return 2 * cachev1alpha1.SlabChunkMax(mem) }

// pageClass is one class's share of the items and how many fit a page.
type pageClass struct {
	share   float64
	perPage float64
}

// pageClasses maps sizes (chunk needs and shares) onto classes (ascending);
// sizes above the largest class are chained and left out.
func pageClasses(sizes []SizeShare, classes []int64, pageBytes int64) []pageClass {
	out := make([]pageClass, len(classes))
	var total float64
	for _, s := range sizes {
		i := sort.Search(len(classes), func(i int) bool { return classes[i] >= s.Bytes })
		if i == len(classes) || s.Weight <= 0 {
			continue
		}
		out[i].share += s.Weight
		total += s.Weight
	}
	for i := range out {
		out[i].perPage = math.Floor(float64(pageBytes) / float64(classes[i]))
		if total > 0 {
			out[i].share /= total
		}
	}
	return out
}

// pagesFor is the pages a class is expected to hold after n items of all
// classes arrived in random order. Its count is binomial (n, share), and it
// holds ceil(count / perPage) pages: E = sum over j of P(count > j x
// perPage), the normal approximation with continuity correction past the
// first page. Taking the mean count instead (ceil(n x share / perPage))
// misses whole pages: a class whose next page falls within the arrival
// order's noise of the moment memory runs out gets it or not by chance,
// and a page of small items is thousands of items (measured: 24 classes on
// the bimodal mix, one 144-byte page fewer than the mean says, 5% of the
// items).
func (c pageClass) pagesFor(n float64) float64 {
	if c.share == 0 || c.perPage == 0 || n <= 0 {
		return 0
	}
	mu := n * c.share
	sd := math.Sqrt(n * c.share * (1 - c.share))
	pages := -math.Expm1(n * math.Log1p(-c.share)) // at least one item: its first page
	if c.share == 1 {
		pages = 1
	}
	if sd == 0 {
		return max(math.Ceil(mu/c.perPage), pages)
	}
	// pages j+1, j >= 1: certain below mu - 8 sd, impossible above mu + 8 sd
	first := max(1, math.Floor((mu-8*sd)/c.perPage))
	pages += first - 1
	for j := first; j*c.perPage <= mu+8*sd; j++ {
		pages += 1 - normalCDF((j*c.perPage+0.5-mu)/sd)
	}
	return pages
}

func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// ItemsKept is the model's items a full cache keeps when items items of
// these sizes (chunk needs; weights are shares) are stored once each in
// random order into classes, with memBytes of slab pages of pageBytes.
func ItemsKept(sizes []SizeShare, classes []int64, items float64, memBytes, pageBytes int64) float64 {
	pcs := pageClasses(sizes, classes, pageBytes)
	pages := math.Floor(float64(memBytes) / float64(pageBytes))
	held := func(n float64) float64 {
		var p float64
		for _, c := range pcs {
			p += c.pagesFor(n)
		}
		return p
	}
	// n: the items stored when the last free page was taken (the n whose
	// expected pages fill memory), found by bisection: held grows with n
	n := items
	if held(items) > pages {
		lo, hi := 0.0, items
		for hi-lo > 0.01 {
			mid := (lo + hi) / 2
			if held(mid) <= pages {
				lo = mid
			} else {
				hi = mid
			}
		}
		n = lo
	}
	var kept float64
	for _, c := range pcs {
		kept += min(c.pagesFor(n)*c.perPage, items*c.share)
	}
	return kept
}

// ClassesForMemory chooses among the least-waste classes for every count
// up to k (ClassSets) the count that keeps the most items at memBytes by
// the page model. When memory is not binding (several counts keep every
// item) the least waste wins, then the fewest classes: what OptimalClasses
// picks when its classes fit, and the most room left for items beyond
// those counted. Without items or memory (<= 0) the model has nothing to
// weigh: OptimalClasses.
func ClassesForMemory(sizes []SizeShare, k int, items float64, memBytes int64) []int64 {
	if items <= 0 || memBytes <= 0 {
		return OptimalClasses(sizes, k)
	}
	page := SlabPageBytes(memBytes)
	var best []int64
	var bestKept, bestWaste float64
	for _, set := range ClassSets(sizes, k) {
		kept := ItemsKept(sizes, set, items, memBytes, page)
		waste := Waste(sizes, set)
		if best == nil || kept > bestKept+1e-6 || (kept >= bestKept-1e-6 && waste < bestWaste-1e-9) {
			best, bestKept, bestWaste = set, kept, waste
		}
	}
	return best
}
