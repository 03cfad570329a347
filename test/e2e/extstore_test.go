//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// ---------------------------------------------------------------- stage 16

// extstoreValue encodes its key and a generation, so that a value read back
// from the wrong record (a recycled page, a stale locator) can never pass.
func extstoreValue(key string, gen, size int) []byte {
	head := fmt.Sprintf("%s|gen=%d|", key, gen)
	v := bytes.Repeat([]byte(head), size/len(head)+1)
	return v[:size]
}

// statsOf returns the general `stats` of addr as numbers (non-numeric ones
// are left out).
func statsOf(addr string) (map[string]int64, error) {
	lines, err := memcachedCommand(addr, "stats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "STAT" {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				out[f[1]] = n
			}
		}
	}
	return out, nil
}

// sumItemsStat sums one per-class counter of `stats items` over the classes.
func sumItemsStat(addr, name string) (int64, error) {
	lines, err := memcachedCommand(addr, "stats items")
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "STAT" && strings.HasSuffix(f[1], ":"+name) {
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("stats items: %q: %w", l, err)
			}
			sum += n
		}
	}
	return sum, nil
}

// extstoreLocalDisk is a Cache with spec.extstore on the local cluster's
// loop-file disks (StorageClass local-loop, hack/local-cluster.sh): its claim
// binds to a local PV on the pod's node, more data than its memory holds is
// written and read back right with objects on disk, a deleted pod comes back
// with a fresh extstore file, and deleting the Cache leaves no claim and an
// empty, Available disk.
func (s *suite) extstoreLocalDisk(t *testing.T) {
	c := s.c
	const name = "e2e-extstore"
	class := env("E2E_STORAGE_CLASS", "local-loop")
	c.dumpOnFailure(t, name)
	if _, err := c.k("get", "storageclass", class); err != nil {
		t.Fatalf("StorageClass %s (E2E_STORAGE_CLASS) is needed for a local disk: %v", class, err)
	}
	s.applyCache(t, name, fmt.Sprintf("  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n"+
		"  extstore: {size: 256Mi, storageClassName: %s, itemMinSize: 1024, pageSize: 8Mi}\n", class))
	deleted := false
	defer func() {
		if !deleted {
			s.deleteCache(t, name)
		}
	}()
	pods := s.waitCacheReady(t, name, 1, 4*time.Minute)
	podName := pods[0].str("metadata", "name")
	node := pods[0].str("spec", "nodeName")

	pvcs, err := c.items("pvc", "-n", c.cacheNS, "-l", "app.kubernetes.io/instance="+name)
	if err != nil || len(pvcs) != 1 {
		t.Fatalf("want one claim for %s, got %d (err %v)", name, len(pvcs), err)
	}
	pvcName := pvcs[0].str("metadata", "name")
	pvName := pvcs[0].str("spec", "volumeName")
	if pvcs[0].str("status", "phase") != "Bound" || pvName == "" {
		t.Fatalf("claim %s is %s, not bound", pvcName, pvcs[0].str("status", "phase"))
	}
	pv, err := c.getJSON("pv", pvName)
	if err != nil {
		t.Fatal(err)
	}
	pvPath := pv.str("spec", "local", "path")
	terms := pv.list("spec", "nodeAffinity", "required", "nodeSelectorTerms")
	if pvPath == "" || len(terms) == 0 || !strings.Contains(fmt.Sprint(terms[0].get("matchExpressions")), node) {
		t.Fatalf("claim %s bound to %s, which is not a local PV of the pod's node %s: path %q affinity %v", pvcName, pvName, node, pvPath, terms)
	}
	t.Logf("claim %s bound to local PV %s (%s) on node %s", pvcName, pvName, pvPath, node)

	addr := c.portForward(t, c.cacheNS, "pod/"+podName, memcachePort)
	mc := memcache.New(addr)
	mc.Timeout = 10 * time.Second
	mc.MaxIdleConns = 4
	// 64 MiB of 4 KiB values into 32 MiB of memory: half or more must go to disk.
	const valueSize, count = 4096, 16384
	keys := make([]string, count)
	for i := range keys {
		keys[i] = fmt.Sprintf("ext-%05d", i)
		if err := mc.Set(&memcache.Item{Key: keys[i], Value: extstoreValue(keys[i], 1, valueSize), Flags: uint32(i)}); err != nil {
			t.Fatalf("set %s (%d of %d): %v", keys[i], i+1, count, err)
		}
	}
	st, err := statsOf(addr)
	if err != nil {
		t.Fatal(err)
	}
	if st["extstore_objects_written"] == 0 || st["extstore_objects_used"] == 0 {
		t.Fatalf("after %d MiB of sets into 32 MiB nothing is on disk: extstore_objects_written %d, extstore_objects_used %d",
			count*valueSize>>20, st["extstore_objects_written"], st["extstore_objects_used"])
	}
	t.Logf("after the sets: extstore_objects_written %d, extstore_objects_used %d, evictions %d, curr_items %d",
		st["extstore_objects_written"], st["extstore_objects_used"], st["evictions"], st["curr_items"])

	hits := 0
	for lo := 0; lo < count; lo += 100 {
		batch := keys[lo:min(lo+100, count)]
		got, err := mc.GetMulti(batch)
		if err != nil {
			t.Fatalf("get of %d keys from %s: %v", len(batch), batch[0], err)
		}
		for k, it := range got {
			i, _ := strconv.Atoi(strings.TrimPrefix(k, "ext-"))
			if !bytes.Equal(it.Value, extstoreValue(k, 1, valueSize)) || it.Flags != uint32(i) {
				t.Fatalf("key %s came back wrong (flags %d, %d bytes, starts %q)", k, it.Flags, len(it.Value), it.Value[:min(len(it.Value), 40)])
			}
			hits++
		}
	}
	after, err := statsOf(addr)
	if err != nil {
		t.Fatal(err)
	}
	diskHits := after["get_extstore"] - st["get_extstore"]
	t.Logf("read back: %d of %d hits, %d served from disk, miss_from_extstore %d, badcrc_from_extstore %d",
		hits, count, diskHits, after["miss_from_extstore"], after["badcrc_from_extstore"])
	// A key may be missing only if the server said it let go of it: an
	// eviction from memory (by a store, or by the slab mover taking a page
	// for another class: memcached counts those apart too) or of a disk
	// page, or a failed disk read.
	moverEvicted, err := sumItemsStat(addr, "slab_reassign_evictions")
	if err != nil {
		t.Fatal(err)
	}
	lost := after["evictions"] + moverEvicted + after["extstore_objects_evicted"] + after["miss_from_extstore"] + after["badcrc_from_extstore"]
	// ... and most keys must come back: 64 MiB of values fit on the 166 MiB
	// file many times over.
	if diskHits == 0 || int64(hits) < int64(count)-lost || hits < count/2 {
		t.Fatalf("%d hits of %d with %d from disk, but the server accounts for only %d lost values: values on disk were not read back",
			hits, count, diskHits, lost)
	}
	t.Logf("every missing key is accounted for: %d lost (evictions %d, slab mover %d, disk page evictions %d, failed disk reads %d)",
		lost, after["evictions"], moverEvicted, after["extstore_objects_evicted"], after["miss_from_extstore"])

	// A deleted pod comes back with the same claim and a fresh file.
	c.mustK(t, "delete", "pod", podName, "-n", c.cacheNS, "--wait=true")
	s.waitCacheReady(t, name, 1, 3*time.Minute)
	addr = c.portForward(t, c.cacheNS, "pod/"+podName, memcachePort)
	st, err = statsOf(addr)
	if err != nil {
		t.Fatal(err)
	}
	if st["extstore_objects_used"] != 0 || st["curr_items"] != 0 {
		t.Fatalf("the replaced pod starts with extstore_objects_used %d and curr_items %d, want an empty cache and file",
			st["extstore_objects_used"], st["curr_items"])
	}
	if _, err := memcache.New(addr).Get(keys[count-1]); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get %s from the replaced pod: %v, want a miss", keys[count-1], err)
	}
	if again, err := c.getJSON("pvc", pvcName, "-n", c.cacheNS); err != nil || again.str("spec", "volumeName") != pvName {
		t.Fatalf("the replaced pod's claim: %v (volume %q, want %s)", err, again.str("spec", "volumeName"), pvName)
	}

	// Deleting the Cache deletes the claim; the disk is wiped and offered again.
	s.deleteCache(t, name)
	deleted = true
	eventually(t, 2*time.Minute, 2*time.Second, "claim "+pvcName+" deleted (and with local-loop, PV "+pvName+" wiped and Available)", func() (bool, string) {
		left, err := c.items("pvc", "-n", c.cacheNS, "-l", "app.kubernetes.io/instance="+name)
		if err != nil {
			return false, err.Error()
		}
		if class != "local-loop" {
			// another class's volumes are its provisioner's to delete or keep
			return len(left) == 0, fmt.Sprintf("%d claims left", len(left))
		}
		p, err := c.getJSON("pv", pvName)
		if err != nil {
			return false, err.Error()
		}
		return len(left) == 0 && p.str("status", "phase") == "Available", fmt.Sprintf("%d claims left, PV %s", len(left), p.str("status", "phase"))
	})
	if c.nodeLocal && class == "local-loop" {
		entries, err := os.ReadDir(pvPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "lost+found" {
				t.Errorf("the released disk %s still holds %s", pvPath, e.Name())
			}
		}
	}
}
