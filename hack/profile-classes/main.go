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

// profile-classes prints the slab classes the operator derives for a
// value-size histogram, so that a benchmark (hack/bench-profiles.sh) runs the
// engine with exactly what a Cache with that workloadProfile would get: it
// goes through engine.Derive, not a copy of it. Input on stdin: one
// "VALUE_BYTES WEIGHT" a line. Output: the -o slab_sizes value, then the
// predicted and current waste on a second line.
//
// With -needs, each line's BYTES is already the chunk an item needs
// (measured on a running engine, as engine/bench/profiles.py does) and the
// output is the -o slab_sizes of at most -k classes that
// engine.ClassesForMemory chooses at -memory for the items counted by the
// weights (the same DP and page model as Derive and Observe): the bench
// then runs the one derivation instead of a copy of it; a second line gives
// the model's items kept with them. -table also prints,
// to stderr, the model's items kept for every count of classes.
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

func main() {
	key := flag.Int("key", 32, "key bytes")
	mem := flag.String("memory", "64Mi", "spec.memory")
	flags := flag.Bool("flags", true, "items carry nonzero client flags")
	needs := flag.Bool("needs", false, "input BYTES are chunk needs, WEIGHT item counts: print ClassesForMemory for at most -k classes at -memory")
	k := flag.Int("k", engine.MaxProfileClasses, "most classes, with -needs")
	table := flag.Bool("table", false, "with -needs: print the page model's items kept for every count of classes to stderr")
	flag.Parse()
	p := &cachev1alpha1.WorkloadProfile{KeyBytes: ptr.To(int32(*key)), ClientFlags: flags}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		b, err1 := strconv.Atoi(f[0])
		w, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "profile-classes: not \"BYTES WEIGHT\": %q\n", sc.Text())
			os.Exit(2)
		}
		p.ValueSizes = append(p.ValueSizes, cachev1alpha1.ValueSizeBucket{Bytes: int32(b), Weight: int32(w)})
	}
	if *needs {
		shares := needShares(p.ValueSizes)
		memQ := resource.MustParse(*mem)
		memBytes := memQ.Value()
		var items float64
		for _, s := range shares {
			items += s.Weight
		}
		if *table {
			page := engine.SlabPageBytes(memBytes)
			for i, set := range engine.ClassSets(shares, *k) {
				fmt.Fprintf(os.Stderr, "classes %d kept %.0f waste %.1f\n", i+1,
					engine.ItemsKept(shares, set, items, memBytes, page), engine.Waste(shares, set))
				fmt.Fprintf(os.Stderr, "set %d %s\n", i+1, joinClasses(set))
			}
		}
		classes := engine.ClassesForMemory(shares, *k, items, memBytes)
		printClasses(classes)
		fmt.Printf("page model: %.0f of %.0f items kept at %s\n", engine.ItemsKept(shares, classes, items, memBytes, engine.SlabPageBytes(memBytes)), items, *mem)
		return
	}
	s := &cachev1alpha1.CacheSpec{Memory: resource.MustParse(*mem), WorkloadProfile: p}
	d := engine.Derive(s)
	printClasses(d.ChunkSizes)
	fmt.Printf("predicted waste %.1f%%, default ladder %.1f%%\n", 100*d.PredictedWaste, 100*d.CurrentWaste)
}

// needShares is the histogram of chunk needs, ascending and merged, as
// OptimalClasses takes it.
func needShares(lines []cachev1alpha1.ValueSizeBucket) []engine.SizeShare {
	byBytes := map[int64]float64{}
	for _, l := range lines {
		byBytes[int64(l.Bytes)] += float64(l.Weight)
	}
	out := make([]engine.SizeShare, 0, len(byBytes))
	for b, w := range byBytes {
		out = append(out, engine.SizeShare{Bytes: b, Weight: w})
	}
	slices.SortFunc(out, func(a, b engine.SizeShare) int { return cmp.Compare(a.Bytes, b.Bytes) })
	return out
}

func printClasses(classes []int64) { fmt.Println(joinClasses(classes)) }

func joinClasses(classes []int64) string {
	s := make([]string, len(classes))
	for i, c := range classes {
		s[i] = strconv.FormatInt(c, 10)
	}
	return strings.Join(s, "-")
}
