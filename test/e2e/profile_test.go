//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/test/utils"
)

// ---------------------------------------------------------------- stage 18

// observedProfile: a Cache with an Observed workload profile (apply: Auto,
// read every 3 s) under a bounded two-mode load through a port-forward gets
// one recommended class per mode from the operator's own reads of the pod's
// /metrics, rolls once to them, and then stays put: after the roll the same
// load on the new pod finds the pod running the recommended classes, and the
// configuration hash does not move over more observations.
func (s *suite) observedProfile(t *testing.T) {
	c := s.c
	const name = "e2e-observed"
	c.dumpOnFailure(t, name)
	// item sizes just above two classes of the default -f 1.25 ladder (352
	// and 2696), which wastes 15% of the chunk bytes on them
	const small, large, keys = 240, 2200, 1000
	s.applyCache(t, name, "  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n"+
		"  workloadProfile: {source: Observed, apply: Auto, observeIntervalSeconds: 3}\n")
	defer s.deleteCache(t, name)
	pods := s.waitCacheReady(t, name, 1, 3*time.Minute)
	firstHash := pods[0].strMap("metadata", "annotations")[configHashKey]
	pod := "pod/" + pods[0].str("metadata", "name")
	if err := utils.MixedSizeLoad(c.portForward(t, c.cacheNS, pod, 11211), keys, small, large, time.Minute); err != nil {
		t.Fatal(err)
	}

	var classes string
	eventually(t, 90*time.Second, time.Second, "the recommendation applied", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		classes = cache.str("status", "recommendation", "appliedChunkSizes")
		return classes != "" && classes != "null", cache.str("status", "recommendation")
	})
	cache, err := s.getCache(name)
	if err != nil {
		t.Fatal(err)
	}
	// one class per mode: the histogram bucket holding each mode's items
	// (key, value and the engine's header)
	var got []int
	raw, _ := cache.get("status", "recommendation", "chunkSizes").([]any)
	for _, v := range raw {
		if f, ok := v.(float64); ok {
			got = append(got, int(f))
		}
	}
	within := func(class, item int) bool { return class >= item-8 && class <= item+item/8+32 }
	itemOf := func(v int) int {
		return int(cachev1alpha1.ItemBytes(int64(utils.MixedSizeLoadKeyBytes), int64(v), false, false))
	}
	if len(got) != 2 || !within(got[0], itemOf(small)) || !within(got[1], itemOf(large)) {
		t.Fatalf("recommended classes %v do not match the load's modes (items of about %d and %d bytes)", got, itemOf(small), itemOf(large))
	}
	if ok, msg := hasEvent(c, name, "ProfileApplied", "applied"); !ok {
		t.Errorf("no ProfileApplied event: %s", msg)
	}
	slabSizes := fmt.Sprintf("slab_sizes=%d-%d", got[0], got[1])
	var rolledHash string
	eventually(t, 2*time.Minute, time.Second, "one pod on the applied classes", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		revs := cache.list("status", "revisions")
		rolledHash = cache.str("status", "configHash")
		return len(revs) == 1 && revs[0].str("configHash") == rolledHash && rolledHash != firstHash &&
			strings.Contains(cache.str("status", "engineArgs"), slabSizes) && cache.num("status", "readyReplicas") == 1, cache.str("status", "revisions")
	})
	wide := c.mustK(t, "get", "cch", name, "-n", c.cacheNS, "-o", "wide")
	if !strings.Contains(wide, "WASTE%") || !strings.Contains(wide, "HIT") {
		t.Errorf("kubectl get cch -o wide lacks the Waste%% and Hit columns:\n%s", wide)
	}
	t.Logf("after the roll:\n%s", wide)

	// The new pod starts empty; the same load again, then more
	// observations: the pod runs the recommended classes, no second roll.
	pods = s.waitCacheReady(t, name, 1, 2*time.Minute)
	if err := utils.MixedSizeLoad(c.portForward(t, c.cacheNS, "pod/"+pods[0].str("metadata", "name"), 11211), keys, small, large, time.Minute); err != nil {
		t.Fatal(err)
	}
	var stable int
	eventually(t, time.Minute, time.Second, "the pod runs the recommendation", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		stable = cache.num("status", "recommendation", "stableObservations")
		return strings.HasPrefix(cache.str("status", "recommendation", "decision"), "the pods run the recommended classes"), cache.str("status", "recommendation")
	})
	eventually(t, time.Minute, time.Second, "two more observations", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		return cache.num("status", "recommendation", "stableObservations") >= stable+2, cache.str("status", "recommendation")
	})
	cache, err = s.getCache(name)
	if err != nil {
		t.Fatal(err)
	}
	if h := cache.str("status", "configHash"); h != rolledHash || len(cache.list("status", "revisions")) != 1 {
		t.Errorf("rolled again: configHash %s (was %s), revisions %s", h, rolledHash, cache.str("status", "revisions"))
	}
	if n := strings.Count(c.mustK(t, "get", "events", "-n", c.cacheNS, "--field-selector", "involvedObject.name="+name+",reason=ProfileApplied", "-o", "name"), "\n"); n != 1 {
		t.Errorf("%d ProfileApplied events, want 1", n)
	}
}
