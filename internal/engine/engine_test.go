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
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

func spec(mutate ...func(*cachev1alpha1.CacheSpec)) *cachev1alpha1.CacheSpec {
	s := &cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi"), CPU: ptr.To(int32(2))}
	for _, m := range mutate {
		m(s)
	}
	return s
}

// current is how the operator shapes a Cache that runs its own engine image.
var current = Options{SocketBuffers: true}

func TestArgsDefaults(t *testing.T) {
	got := Args(spec(), current)
	want := []string{"-p", "11211", "-t", "2", "-m", "64", "-c", "1024", "-I", "1m", "-f", "1.25", "-n", "48", "-o", "conn_buffer_limit=8m,sock_sndbuf=64k,sock_rcvbuf=16k"}
	if !slices.Equal(got, want) {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}

func TestArgsExplicit(t *testing.T) {
	s := spec(func(s *cachev1alpha1.CacheSpec) {
		s.Memory = resource.MustParse("1Gi")
		s.Engine = cachev1alpha1.EngineSpec{
			Threads:        ptr.To(int32(4)),
			MaxConnections: ptr.To(int32(4096)),
			MaxItemSize:    ptr.To(resource.MustParse("512Ki")),
			HashPower:      ptr.To(int32(20)),
			ChunkSizes:     []int32{64, 128, 1024},
		}
	})
	got := Args(s, Options{MetricsPort: 9150, SocketBuffers: true})
	want := []string{"-p", "11211", "-t", "4", "-m", "1024", "-c", "4096", "-I", "512k", "-o", "slab_sizes=64-128-1024,hashpower=20,conn_buffer_limit=16m,sock_sndbuf=64k,sock_rcvbuf=16k,metrics_port=9150"}
	if !slices.Equal(got, want) {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}

// connectionPlacement CPU asks cachetd to place connections by the CPU that
// received them; only pinned (dedicated) workers have one, so shared CPUs
// never get it (the CRD refuses that combination too).
func TestArgsConnectionPlacement(t *testing.T) {
	placed := spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ConnectionPlacement = cachev1alpha1.ConnectionPlacementCPU })
	if got := Args(placed, current); !strings.Contains(got[len(got)-1], "conn_placement=cpu") {
		t.Fatalf("Args = %q, want conn_placement=cpu", got)
	}
	off := spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ConnectionPlacement = cachev1alpha1.ConnectionPlacementOff })
	shared := spec(func(s *cachev1alpha1.CacheSpec) {
		s.Engine.ConnectionPlacement = cachev1alpha1.ConnectionPlacementCPU
		s.DedicatedCPUs = ptr.To(false)
	})
	for _, s := range []*cachev1alpha1.CacheSpec{off, shared} {
		if got := Args(s, current); strings.Contains(strings.Join(got, " "), "conn_placement") {
			t.Fatalf("Args = %q, want no conn_placement", got)
		}
	}
}

// An engine image other than the operator's own (a Cache pinned to an older
// cachetd) is given no option an older cachetd refuses: no sock_sndbuf or
// sock_rcvbuf, and so no socket_buffers term in its limit.
func TestArgsForAnotherEngineImageHaveNoSocketBuffers(t *testing.T) {
	got := Args(spec(), Options{})
	want := []string{"-p", "11211", "-t", "2", "-m", "64", "-c", "1024", "-I", "1m", "-f", "1.25", "-n", "48", "-o", "conn_buffer_limit=8m"}
	if !slices.Equal(got, want) {
		t.Fatalf("Args = %q, want %q", got, want)
	}
	older, newer := Budget(spec(), Options{}), Budget(spec(), current)
	// 168Mi of connections' socket buffers, and 8 watchers' sockets of
	// 168Ki instead of 4Ki: 1.28Mi; each limit is rounded up to a MiB, so
	// they differ by that much within a MiB either way
	grown := newer.SocketBuffers + newer.Watchers - older.Watchers
	if older.SocketBuffers != 0 || newer.SocketBuffers != 168<<20 || newer.Watchers-older.Watchers != WatchersMax*(PerSocketKernelBytes-4<<10) ||
		newer.Limit-older.Limit < grown-1<<20 || newer.Limit-older.Limit > grown+1<<20 {
		t.Fatalf("budget without socket buffers %+v, with %+v: want no socket_buffers term, 169.3Mi less", older, newer)
	}
}

// Defect 2: with shared CPUs the engine pinned worker i to the i-th allowed
// CPU, so every shared Cache of a node stacked on its lowest shared CPUs.
func TestSharedCPUsAreNotPinned(t *testing.T) {
	shared := Args(spec(func(s *cachev1alpha1.CacheSpec) { s.DedicatedCPUs = ptr.To(false) }), Options{})
	if o := shared[len(shared)-1]; !strings.Contains(o, "cpus=none") {
		t.Fatalf("shared-CPU args %q do not turn pinning off (-o cpus=none)", shared)
	}
	dedicated := Args(spec(), Options{})
	if strings.Contains(strings.Join(dedicated, " "), "cpus=") {
		t.Fatalf("dedicated args %q must pin (no cpus= option)", dedicated)
	}
}

func TestThreadsFollowCPUAndNeverZero(t *testing.T) {
	if got := Threads(spec(func(s *cachev1alpha1.CacheSpec) { s.CPU = ptr.To(int32(3)) })); got != 3 {
		t.Errorf("threads for 3 CPUs = %d, want 3", got)
	}
	if got := Threads(spec(func(s *cachev1alpha1.CacheSpec) { s.CPU = ptr.To(int32(0)); s.DedicatedCPUs = ptr.To(false) })); got != 1 {
		t.Errorf("threads for cpu 0 = %d, want 1", got)
	}
}

func TestArgsFileRoundTripAndHash(t *testing.T) {
	args := Args(spec(), current)
	a := ArgsFile(args)
	if !strings.HasPrefix(a, "-p\n11211\n-t\n2\n") || !strings.HasSuffix(a, "\nconn_buffer_limit=8m,sock_sndbuf=64k,sock_rcvbuf=16k\n") {
		t.Fatalf("args file is not one argument per line: %q", a)
	}
	if !slices.Equal(ParseArgsFile(a), args) {
		t.Fatalf("ParseArgsFile(ArgsFile(a)) = %q", ParseArgsFile(a))
	}
	b := ArgsFile(Args(spec(func(s *cachev1alpha1.CacheSpec) { s.Memory = resource.MustParse("128Mi") }), current))
	if ConfigHash(a) == ConfigHash(b) {
		t.Fatal("config hash did not change with the memory")
	}
	if ConfigHash(a) != ConfigHash(ArgsFile(Args(spec(), current))) {
		t.Fatal("config hash is not stable for equal specs")
	}
}

func TestMemoryBudget(t *testing.T) {
	// 64Mi item memory, smallest chunk 27+48 -> 80 bytes: 838860 items / 1.5
	// -> 2^20 buckets of 4 bytes = 4Mi, plus half of it while expanding = 6Mi;
	// 1024 connections x 36Ki = 36Mi; buffer cap 2 threads x 4Mi = 8Mi,
	// x 17/16 = 8.5Mi; kernel socket buffers 1024 x (2 x 64Ki + 2 x 16Ki +
	// 8Ki) = 168Mi; 2 threads x (2Mi + an event table of 1024 + 2 x (8 + 16) +
	// 1024 slots of 32 bytes) = 4Mi + 131Ki; 8 watchers x (32Ki ring + 168Ki
	// socket) + their 1Mi thread = 2.56Mi; the miss-ratio curve and the mover's shadow table 824Ki
	// and the cachet-mrc thread 1Mi; base 16Mi.
	// Total 64+6+36+8.5+168+4.13+2.56+1.8+16 = 306.96 -> 307Mi.
	b := Budget(spec(), current)
	if b.Limit != 307<<20 || b.MissRatioCurve != MissRatioCurveBytes || b.Watchers != 8*(32<<10+168<<10)+1<<20 || b.HashTable != 6<<20 || b.Connections != 36<<20 || b.ConnBufferCap != 17<<19 ||
		b.SocketBuffers != 168<<20 || b.Workers != 2*(2<<20+2096*32) || b.Base != 16<<20 {
		t.Fatalf("budget %+v", b)
	}
	if MemoryLimitBytes(spec(), current) != b.Limit {
		t.Fatal("MemoryLimitBytes is not Budget().Limit")
	}
	if got := SmallestItemBytes(spec()); got != 80 {
		t.Fatalf("smallest item %d, want 80", got)
	}
	// The docs/operator.md table.
	for _, tc := range []struct {
		mem     string
		cpu     int32
		wantMiB int64
	}{{"64Mi", 1, 301}, {"64Mi", 2, 307}, {"1Gi", 2, 1357}} {
		s := spec(func(s *cachev1alpha1.CacheSpec) { s.Memory = resource.MustParse(tc.mem); s.CPU = ptr.To(tc.cpu) })
		if got := MemoryLimitBytes(s, current) >> 20; got != tc.wantMiB {
			t.Errorf("limit for %s/%d CPU = %dMi, want %dMi", tc.mem, tc.cpu, got, tc.wantMiB)
		}
		// The metrics thread adds its 4 MiB.
		if got := MemoryLimitBytes(s, Options{MetricsPort: DefaultMetricsPort, SocketBuffers: true}) >> 20; got != tc.wantMiB+4 {
			t.Errorf("limit for %s/%d CPU = %dMi, want %dMi", tc.mem, tc.cpu, got, tc.wantMiB)
		}
	}
	// A table that starts at its largest power never grows: no old table.
	if got, want := HashTableBytes(spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.HashPower = ptr.To(int32(24)) })), int64(1<<26); got != want {
		t.Fatalf("hash table for hashpower 24 = %d, want %d", got, want)
	}
	if got, want := HashTableBytes(spec(func(s *cachev1alpha1.CacheSpec) { s.Memory = resource.MustParse("1Ti") })), int64(3*(1<<31)); got != want {
		t.Fatalf("hash table for 1Ti = %d, want %d (capped at 2^30 buckets)", got, want)
	}
	if got := SmallestItemBytes(spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{100, 200} })); got != 104 {
		t.Fatalf("smallest item with chunkSizes = %d, want 104", got)
	}
	// Extstore: stubs of 48 bytes or more, as many as the memory holds
	// (stale stubs stay in RAM after their page is evicted): 64Mi / 48 =
	// 1398101 / 1.5 -> 2^20 buckets, 1Gi -> 2^24: the same tables as with
	// 80-byte items; 10Gi: 223696213 / 1.5 -> 2^28, where 80-byte items
	// (and 56-byte stubs) need 2^27.
	withExt := func(mem string) *cachev1alpha1.CacheSpec {
		return spec(func(s *cachev1alpha1.CacheSpec) {
			s.Memory = resource.MustParse(mem)
			s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("10Gi")}
		})
	}
	for _, tc := range []struct {
		mem        string
		items, tbl int64
	}{
		{"64Mi", 1398101, 6 << 20},
		{"1Gi", 1 << 30 / 48, 96 << 20},
		{"10Gi", 223696213, 1536 << 20},
		// 12Gi: 268435456 / 1.5 -> 2^28, where 80-byte items need 2^27
		{"12Gi", 12 << 30 / 48, 1536 << 20},
	} {
		if got := MaxItems(withExt(tc.mem)); got != tc.items {
			t.Errorf("items with extstore for %s = %d, want %d", tc.mem, got, tc.items)
		}
		if got := HashTableBytes(withExt(tc.mem)); got != tc.tbl {
			t.Errorf("hash table with extstore for %s = %d, want %d", tc.mem, got, tc.tbl)
		}
	}
	// Without extstore, or with explicit chunk sizes, every item the smallest chunk.
	if got, want := MaxItems(spec()), int64(64<<20/80); got != want {
		t.Errorf("items without extstore = %d, want %d", got, want)
	}
}

func TestExtstoreArgs(t *testing.T) {
	if strings.Contains(strings.Join(Args(spec(), Options{}), " "), "ext_") {
		t.Fatal("ext_ options without spec.extstore")
	}
	// Defaults: a 10Gi claim holds a file of 90% of it less 64Mi, rounded
	// down to a MiB: 10240 x 0.90 - 64 = 9152M.
	got := Args(spec(func(s *cachev1alpha1.CacheSpec) {
		s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("10Gi")}
	}), current)
	want := "conn_buffer_limit=8m,sock_sndbuf=64k,sock_rcvbuf=16k,ext_path=/data/extstore/cache:9152M,ext_page_size=64,ext_wbuf_size=4,ext_threads=1,ext_io_depth=8,ext_item_size=512"
	if o := got[len(got)-1]; o != want {
		t.Fatalf("-o %q, want %q", o, want)
	}
	got = Args(spec(func(s *cachev1alpha1.CacheSpec) {
		s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("1Ti"), PageSize: ptr.To(resource.MustParse("256Mi")),
			IOThreads: ptr.To(int32(4)), ItemMinSize: ptr.To(int64(4096))}
	}), Options{MetricsPort: 9150, SocketBuffers: true})
	want = "conn_buffer_limit=8m,sock_sndbuf=64k,sock_rcvbuf=16k,metrics_port=9150,ext_path=/data/extstore/cache:943654M,ext_page_size=256,ext_wbuf_size=4,ext_threads=4,ext_io_depth=8,ext_item_size=4096"
	if o := got[len(got)-1]; o != want {
		t.Fatalf("-o %q, want %q", o, want)
	}
}

func TestExtstoreMemoryBudget(t *testing.T) {
	base := Budget(spec(), Options{})
	if base.Extstore != 0 {
		t.Fatalf("extstore memory without extstore: %d", base.Extstore)
	}
	// One IO thread, two workers, maxItemSize 1Mi, a 10Gi claim (9152Mi
	// file, 143 pages of 64Mi); the terms are spelled out at the check.
	s := spec(func(s *cachev1alpha1.CacheSpec) {
		s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("10Gi")}
	})
	b := Budget(s, current)
	// 4 x 4Mi of write buffers + 4Ki, the flusher's 1Mi, 8 read buffers of
	// 1Mi+8Ki for the IO thread, 2 workers x (1Mi + 1Mi+8Ki + 64 x 33Ki of
	// their own reads), 143 pages x 92 B, 3 stacks of 2Mi.
	if want := int64(35<<20 + 84<<10 + 2*64*33<<10 + 143*92); b.Extstore != want {
		t.Fatalf("extstore memory %d, want %d", b.Extstore, want)
	}
	// 305.1Mi + 39.1Mi + 94.6Ki + 824Ki + 1Mi (the miss-ratio curve and
	// its thread) -> 347Mi: the limit grows by the part, rounded up.
	if b.Limit != 347<<20 {
		t.Fatalf("limit %dMi, want 347Mi", b.Limit>>20)
	}
	// Four IO threads, two workers and 2Mi items (with extstore the API
	// allows at most 4091Ki): 16Mi + 4Ki, the flusher's 2Mi, 4 x 8 read
	// buffers of 2Mi + 8Ki, 2 x (2Mi + 2Mi + 8Ki), the page table, 6 stacks.
	s.Extstore.IOThreads = ptr.To(int32(4))
	s.Memory = resource.MustParse("64Mi")
	s.Engine.MaxItemSize = ptr.To(resource.MustParse("2Mi"))
	if got, want := ExtstoreBytes(s), int64(16<<20+4<<10+2<<20+32*(2<<20+8<<10)+2*(4<<20+8<<10+64*33<<10)+143*92+6*(2<<20)); got != want {
		t.Fatalf("extstore memory with 4 IO threads %d, want %d", got, want)
	}
	// Every worker may read an item on disk back: more workers, more memory.
	s.Engine.Threads = ptr.To(int32(4))
	if got, want := ExtstoreBytes(s), int64(16<<20+4<<10+2<<20+32*(2<<20+8<<10)+4*(4<<20+8<<10+64*33<<10)+143*92+6*(2<<20)); got != want {
		t.Fatalf("extstore memory with 4 workers %d, want %d", got, want)
	}
}

// The API's CEL rule lets through any size whose 90% less 64Mi holds two
// pages; the file computed here must hold them too, to the byte:
// 223696214 x 0.90 - 64Mi is just over 128Mi, one byte less is under.
func TestExtstoreFileHoldsWhatTheAPIAdmits(t *testing.T) {
	e := &cachev1alpha1.ExtstoreSpec{Size: *resource.NewQuantity(223696214, resource.DecimalSI)}
	if got := ExtstoreFileBytes(e); got != 128<<20 {
		t.Fatalf("file %d bytes, want 128Mi (two 64Mi pages)", got)
	}
	e.Size = *resource.NewQuantity(223696213, resource.DecimalSI)
	if got := ExtstoreFileBytes(e); got >= 128<<20 {
		t.Fatalf("file %d bytes, want less than 128Mi", got)
	}
	if got := ExtstoreFileBytes(&cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("32Mi")}); got != 0 {
		t.Fatalf("file of a 32Mi claim %d, want 0", got)
	}
}

// The file leaves ext4 room at every size measured (usable bytes for a
// non-root user on mkfs.ext4 defaults, see ExtstoreFilePercent).
func TestExtstoreFileFitsMeasuredExt4(t *testing.T) {
	for _, m := range []struct {
		claim        string
		usableMiB100 int64 // hundredths of a MiB
	}{
		{"80Mi", 6545}, {"256Mi", 21710}, {"512Mi", 46159}, {"1Gi", 92220},
		{"2Gi", 184343}, {"8Gi", 755384}, {"64Gi", 6066672}, {"1Ti", 97858960},
	} {
		file := ExtstoreFileBytes(&cachev1alpha1.ExtstoreSpec{Size: resource.MustParse(m.claim)})
		usable := m.usableMiB100 * (1 << 20) / 100
		if margin := usable - file; margin < 32<<20 {
			t.Errorf("claim %s: file %d MiB leaves %d MiB of the %d usable, want at least 32", m.claim, file>>20, margin>>20, usable>>20)
		}
	}
}

// spec.tls and spec.auth reach the engine's arguments and its memory formula
// through the same options.
func TestSpecSecurityReachesArgsAndBudget(t *testing.T) {
	s := &cachev1alpha1.CacheSpec{}
	plain := Budget(s, Options{})
	s.TLS = &cachev1alpha1.TLSSpec{SecretName: "certs", ClientAuth: "Require", MinVersion: "TLSv1.3"}
	s.Auth = &cachev1alpha1.AuthSpec{SecretRef: cachev1alpha1.LocalSecretReference{Name: "users"}}
	args := strings.Join(Args(s, Options{}), " ")
	for _, want := range []string{"-Y /etc/cachet/auth/authfile", "-Z",
		"ssl_chain_cert=/etc/cachet/tls/tls.crt,ssl_key=/etc/cachet/tls/tls.key,ssl_ca_cert=/etc/cachet/tls/ca.crt,ssl_verify_mode=2,ssl_min_version=3"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	b := Budget(s, Options{})
	if b.TLS == 0 || b.Auth == 0 || b.Limit <= plain.Limit {
		t.Errorf("budget with tls and auth %+v, without %+v", b, plain)
	}
	s.TLS.ClientCA = &cachev1alpha1.SecretKeyRef{Name: "clients"}
	if args := strings.Join(Args(s, Options{}), " "); !strings.Contains(args, "ssl_ca_cert="+ClientCADir+"/ca.crt") {
		t.Errorf("spec.tls.clientCA is not the CA file: %s", args)
	}
}

// spec.tls.metrics reaches the engine as -o metrics_tls, and its memory as 16
// TLS connections more in the metrics term, only when there is a metrics port.
func TestSpecTLSMetricsReachesArgsAndBudget(t *testing.T) {
	withPort := Options{MetricsPort: DefaultMetricsPort}
	for _, tc := range []struct {
		name    string
		tls     *cachev1alpha1.TLSSpec
		o       Options
		flag    bool
		metrics int64
	}{
		{"no tls", nil, withPort, false, MetricsBytes},
		{"tls, metrics plain", &cachev1alpha1.TLSSpec{SecretName: "certs"}, withPort, false, MetricsBytes},
		{"tls, metrics https", &cachev1alpha1.TLSSpec{SecretName: "certs", Metrics: true}, withPort, true, MetricsBytes + 16*TLSConnBytes},
		{"tls, metrics https, no metrics port", &cachev1alpha1.TLSSpec{SecretName: "certs", Metrics: true}, Options{}, false, 0},
	} {
		s := &cachev1alpha1.CacheSpec{TLS: tc.tls}
		args := strings.Join(Args(s, tc.o), " ")
		if got := strings.Contains(args, "metrics_tls"); got != tc.flag {
			t.Errorf("%s: metrics_tls in args %v, want %v: %s", tc.name, got, tc.flag, args)
		}
		if got := Budget(s, tc.o).Metrics; got != tc.metrics {
			t.Errorf("%s: Budget's Metrics %d, want %d", tc.name, got, tc.metrics)
		}
	}
}
