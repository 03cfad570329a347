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

// Package engine is the operator's model of cachetd: which arguments a Cache
// spec becomes, how much memory the process needs for them, and how big its
// hash table grows. It knows nothing of Kubernetes objects. The engine
// defines its own memory bound (cachetd --memory-budget, engine/src/
// memory_budget.c); Budget computes a pod's limit from the spec without
// running the engine, and contract_test.go checks it against the built
// engine's answer for the arguments Args generates.
package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

const (
	// Port cachetd serves the memcached protocol on inside every pod.
	Port = 11211

	// Memory overhead of one process on top of spec.memory, from how cachetd
	// allocates (engine/src/net.c, assoc.c, slabs.c); see docs/operator.md
	// for the formula and what it does not cover.
	PerConnectionBytes = 36 << 10 // a resting connection: 16 KiB read + 16 KiB output buffer, the connection, a line being read (engine/README.md "Memory")
	PerThreadBytes     = 2 << 20  // a worker's stack, event loop and per-thread caches
	// Each worker's event table has a 32-byte slot per fd the process can
	// hold: maxConnections, 8 per worker, the most listening sockets a
	// worker can hold (16: every worker listens on every address) per
	// worker, and 1024 more (cachetd settings_fd_table_size, counted in
	// --memory-budget's workers term).
	FDTableSlotBytes          = 32
	FDTablePerWorker          = 8
	FDTableListenersPerWorker = 16
	FDTableMarginSlots        = 1024
	// ConnBufferPerThreadBytes sizes cachetd's process-wide cap on
	// connection buffer memory above the resting 32 KiB (-o conn_buffer_limit):
	// queued and unsent replies (read buffers never grow: a long get line is
	// answered as it arrives). Over the cap, cachetd
	// stops parsing connections with unsent output until they drain.
	ConnBufferPerThreadBytes = 4 << 20
	BaseBytes                = 16 << 20 // binary, libc, clock/cleaner/expander/mover threads, slab page rounding
	// SockSndBufBytes and SockRcvBufBytes are each connection's kernel socket
	// buffers (-o sock_sndbuf, sock_rcvbuf). Left to autotuning, one slow
	// reader's send buffer grows to net.ipv4.tcp_wmem's maximum (4 MiB),
	// which a cgroup v2 node charges to the pod. 64 KiB (128 KiB once the
	// kernel doubles it) keeps a low-RTT network's pipelined small-value
	// replies flowing; requests are small, so 16 KiB receives them.
	SockSndBufBytes = 64 << 10
	SockRcvBufBytes = 16 << 10
	// PerSocketKernelBytes is one connection's socket memory as cachetd
	// --memory-budget counts it (socket_buffers): the kernel's doubled send
	// and receive buffers, 4 KiB of forward allocation past them, 4 KiB for
	// the socket, file and epoll entry.
	PerSocketKernelBytes = 2*SockSndBufBytes + 2*SockRcvBufBytes + 8<<10
	// MetricsBytes is the metrics thread (-o metrics_port): its stack, 16
	// connections' request buffers and one /metrics body at the engine's 4 MiB
	// cap (about 20 KB in practice).
	MetricsBytes = 4 << 20
	// MetricsConnsMax is the metrics port's connections at once; with
	// -o metrics_tls each holds a TLS connection's TLSConnBytes too.
	MetricsConnsMax = 16
	// WatchersBytes is memcached's `watch` (cachetd's logger.c, never off:
	// the operator does not pass -W): at most 8 watchers, each a fixed
	// 32 KiB ring of lines not yet sent and the socket it keeps after leaving
	// its worker (4 KiB, plus its kernel buffers when SocketBuffers fixes
	// them), and the 1 MiB thread that sends to them.
	WatchersMax      = 8
	WatcherRingBytes = 32 << 10
	WatcherThread    = 1 << 20
	// AuthFileMaxBytes is the largest authfile cachetd accepts (-Y, auth.c
	// AUTH_FILE_MAX); it holds two copies while a reload reads the new one.
	AuthFileMaxBytes = 64 << 10
	// TLSConnBytes is one TLS connection's OpenSSL session and record
	// buffers (cachetd's tls.c; 37.6 KB measured), TLSFixedBytes OpenSSL's
	// tables and the two contexts of a certificate refresh.
	TLSConnBytes  = 48 << 10
	TLSFixedBytes = 4 << 20
	// TLSSendBufBytes is a data connection's sealed records waiting for
	// the socket (tls.c TLS_SEND_MAX, a record: TLS sends are batched
	// through io_uring like plaintext ones); the metrics port has none.
	TLSSendBufBytes = 17 << 10
	// MissRatioCurveBytes is the engine's live miss-ratio curve (`stats
	// mrc`, engine/src/mrc.c): the SHARDS estimator of 8192 sampled keys
	// and the miss tags, plus the page mover's per-class shadow table
	// (engine/src/slabs_gain.c, 8Ki slots of 8 bytes), allocated at start
	// whatever the spec, and the 1 MiB cachet-mrc thread that folds them
	// (cachetd --memory-budget's miss_ratio_curve term, pinned by
	// contract_test.go).
	MissRatioCurveBytes = 778000 + 8192*8 + MRCThreadBytes
	MRCThreadBytes      = 1 << 20
	HashBucketBytes     = 4 // a bucket is a 32-bit item handle
	ItemFixedBytes      = cachev1alpha1.ItemFixedBytes
	HashLoadFactor      = 1.5 // the table doubles when items exceed 1.5 x buckets
	DefaultHashPower    = 16
	MaxHashPower        = 30 // cachetd's ceiling

	// Engine defaults, written out explicitly so that status.engineArgs is complete.
	DefaultMaxConnections = 1024
	DefaultMaxItemSize    = 1 << 20
	DefaultGrowthFactor   = "1.25"
	DefaultMinChunk       = 48
)

// Extstore (values of large cold items on disk, memcached's -o ext_*).
const (
	// ExtstoreDir is where each pod's extstore volume is mounted, and
	// ExtstoreFile the file cachetd keeps on it.
	ExtstoreDir  = "/data/extstore"
	ExtstoreFile = ExtstoreDir + "/cache"
	// The extstore file is ExtstoreFilePercent of the claim less
	// ExtstoreFileReserveBytes; the rest is the filesystem's. Measured on
	// ext4 made by `mkfs.ext4 -F` with defaults on a device of exactly the
	// claim's size (space a non-root user can allocate: free blocks less
	// the 5% reserved for root, from dumpe2fs -h), against this rule:
	//
	//	claim   usable MiB (share)   file MiB   margin MiB
	//	80Mi        65.45 (81.8%)        8.00        57.45  1 KiB blocks
	//	256Mi      217.10 (84.8%)      166.40        50.70  1 KiB blocks
	//	512Mi      461.59 (90.2%)      396.80        64.79
	//	1Gi        922.20 (90.1%)      857.60        64.60
	//	2Gi       1843.43 (90.0%)     1779.20        64.23  64 MiB journal
	//	8Gi       7553.84 (92.2%)     7308.80       245.04
	//	64Gi     60666.72 (92.6%)    58918.40      1748.32
	//	1Ti     978589.60 (93.3%)   943654.40     34935.20
	//
	// Below 512Mi ext4 uses 1 KiB blocks and more inodes; from 2Gi to 16Gi
	// its journal is 64 MiB, so a flat percentage (92% was tried) leaves
	// too little at 1-2Gi. docs/operator.md has the script. XFS keeps no
	// root reserve and less metadata.
	ExtstoreFilePercent      = 90
	ExtstoreFileReserveBytes = 64 << 20
	// ExtstoreWriteBufferBytes is one write buffer (ext_wbuf_size, memcached's
	// default 4 MB). Pages are whole multiples of it (the API enforces it).
	ExtstoreWriteBufferBytes = 4 << 20
	// ExtstoreWriteBuffers: cachetd's extstore has one write buffer per
	// page bucket, and three buckets (default, compact, low-TTL;
	// engine/src/extstore.h EXT_BUCKETS), allocated at start; and the
	// compactor reads a page one write buffer's worth at a time.
	ExtstoreWriteBuffers = 3 + 1
	// ExtstoreBackgroundThreads: the flusher and the compactor (the IO
	// threads are counted apart).
	ExtstoreBackgroundThreads = 2
	// ExtstorePageTableBytes per page of the file: its struct page (88
	// bytes, with its stream pins) and its free-list slot (4).
	ExtstorePageTableBytes = 88 + 4
	// ExtstoreRecordOverhead is what a record adds to its value on disk:
	// its 16-byte header and the key (at most 250 bytes).
	ExtstoreRecordOverhead = 16 + 250
	// ExtstoreLocatorBytes is what an extstore stub stores after its key:
	// the 12-byte locator (page, version, offset, CRC). The value's length
	// is in the item header; the expiry and flags only when the item has
	// them (engine/src/storage_internal.h, "extstore stubs").
	ExtstoreLocatorBytes = 12
	// ExtstoreStubBytes is the smallest chunk an extstore stub takes:
	// cachetd gives stubs 8-byte classes from a 2-byte key's stub that
	// never expires (the fixed part, the key and the locator, 8-byte
	// aligned) up to -n's class; ordinary items never use them.
	ExtstoreStubBytes = (ItemFixedBytes + 2 + ExtstoreLocatorBytes + 7) &^ 7
	// ExtstoreAlign is the O_DIRECT alignment of reads and buffers.
	ExtstoreAlign = 4 << 10

	DefaultExtstorePageSize    = 64 << 20
	DefaultExtstoreItemMinSize = 512
	DefaultExtstoreIOThreads   = 1
	// ExtstoreIODepth is ext_io_depth, the reads each IO thread has in
	// flight at once (through io_uring), each with its own buffer. The
	// operator passes it, so the memory below stays right whatever the
	// engine's default becomes.
	ExtstoreIODepth = 8
	// ExtstoreWorkerReadBytes is what each worker keeps for the disk reads
	// it makes itself (engine/src/ext_io.h): EXT_WORKER_READS (64) O_DIRECT
	// buffers of EXT_WORKER_READ_BYTES (32 KiB), plus a job and a ring slot
	// for each, counted at 1 KiB.
	ExtstoreWorkerReadBytes = 64 * (32<<10 + 1<<10)
)

// MetricsTLS says the metrics port serves HTTPS (-o metrics_tls): with
// spec.tls.metrics, and only when there is a metrics port.
func MetricsTLS(o Options) bool {
	return o.TLS != nil && o.TLS.Metrics && o.MetricsPort > 0
}

// DefaultMetricsPort is where the operator has cachetd serve /healthz and
// /metrics unless told otherwise.
const DefaultMetricsPort = 9150

// Options are the operator-wide choices that shape every engine's arguments.
type Options struct {
	// MetricsPort, when not 0, has cachetd serve GET /healthz and GET
	// /metrics over plain HTTP on that port (-o metrics_port).
	MetricsPort int32
	// SocketBuffers says the engine image understands -o sock_sndbuf and
	// sock_rcvbuf, which an older cachetd refuses (exit 64): true only for
	// the operator's own engine image. Without it Args passes only what
	// every cachetd of this API version understands, and Budget has no
	// socket_buffers term: the kernel's socket memory is then not bounded.
	SocketBuffers bool
	// AuthFile, when set, is the path of the authfile cachetd reads with -Y
	// (memcached's ASCII authentication, user:password lines).
	AuthFile string
	// TLS, when set, has cachetd serve the memcached port over TLS only
	// (-Z and memcached's -o ssl_* options) with these mounted files.
	TLS *TLSFiles
}

// TLSFiles are the PEM files and client verification of -Z.
type TLSFiles struct {
	ChainCert, Key string
	// CACert and VerifyMode (memcached's ssl_verify_mode: 0 none, 2 require
	// a client certificate signed by CACert) for mutual TLS.
	CACert     string
	VerifyMode int
	// MinVersion is memcached's ssl_min_version: 0-3 for TLS 1.0-1.3; 0
	// leaves the engine's default (TLS 1.2).
	MinVersion int
	// Metrics serves the metrics port over HTTPS with these files too
	// (-o metrics_tls); it applies only with Options.MetricsPort.
	Metrics bool
}

// Where the pods mount their secrets: each a whole-Secret volume (never a
// subPath), so that the kubelet swaps rotated files in place and the engine
// picks them up without a restart.
const (
	TLSDir      = "/etc/cachet/tls"
	ClientCADir = "/etc/cachet/client-ca"
	AuthDir     = "/etc/cachet/auth"
	// AuthFileKey is the key of the operator's derived authfile Secret.
	AuthFileKey = "authfile"
)

// ForSpec completes the operator-wide options with what the spec asks of
// this Cache (spec.tls, spec.auth): the mounted files the engine reads. Args
// and Budget apply it, so the arguments and the memory formula agree.
func ForSpec(s *cachev1alpha1.CacheSpec, o Options) Options {
	if s.Auth != nil && o.AuthFile == "" {
		o.AuthFile = AuthDir + "/" + AuthFileKey
	}
	if t := s.TLS; t != nil && o.TLS == nil {
		files := &TLSFiles{ChainCert: TLSDir + "/tls.crt", Key: TLSDir + "/tls.key"}
		if t.ClientAuth == "Require" {
			files.VerifyMode = 2
			files.CACert = TLSDir + "/ca.crt"
			if t.ClientCA != nil {
				files.CACert = ClientCADir + "/" + ClientCAKey(t.ClientCA)
			}
		}
		if t.MinVersion == "TLSv1.3" {
			files.MinVersion = 3
		}
		files.Metrics = t.Metrics
		o.TLS = files
	}
	return o
}

// ClientCAKey is the key of spec.tls.clientCA with its default applied.
func ClientCAKey(r *cachev1alpha1.SecretKeyRef) string {
	if r.Key != "" {
		return r.Key
	}
	return "ca.crt"
}

// Threads is the number of worker threads: spec.engine.threads, or one per CPU.
func Threads(s *cachev1alpha1.CacheSpec) int32 {
	if s.Engine.Threads != nil {
		return *s.Engine.Threads
	}
	return max(s.CPUs(), 1)
}

// MaxConnections with its default applied.
func MaxConnections(s *cachev1alpha1.CacheSpec) int32 {
	if s.Engine.MaxConnections != nil {
		return *s.Engine.MaxConnections
	}
	return DefaultMaxConnections
}

// MaxItemSizeBytes with its default applied.
func MaxItemSizeBytes(s *cachev1alpha1.CacheSpec) int64 {
	if s.Engine.MaxItemSize != nil {
		return s.Engine.MaxItemSize.Value()
	}
	return DefaultMaxItemSize
}

// ItemMemoryMiB is spec.memory in whole MiB (cachetd -m), rounded down; the
// API refuses values that are not whole MiB, so nothing is lost.
func ItemMemoryMiB(s *cachev1alpha1.CacheSpec) int64 {
	return s.Memory.Value() >> 20
}

// sizeArg writes a byte count the way memcached's -I reads it.
func sizeArg(b int64) string {
	switch {
	case b%(1<<30) == 0:
		return strconv.FormatInt(b>>30, 10) + "g"
	case b%(1<<20) == 0:
		return strconv.FormatInt(b>>20, 10) + "m"
	case b%(1<<10) == 0:
		return strconv.FormatInt(b>>10, 10) + "k"
	}
	return strconv.FormatInt(b, 10)
}

// Args are cachetd's arguments for a spec (with an apply: Auto workload
// profile's derivation in place, see Effective), one element per argument, in a
// fixed order so that equal specs hash equally. Without dedicated CPUs the
// workers are not pinned (-o cpus=none): pinning worker i to the i-th allowed
// CPU would stack every shared Cache of a node on its lowest shared CPUs.
func Args(s *cachev1alpha1.CacheSpec, o Options) []string {
	s = Effective(s)
	o = ForSpec(s, o)
	e := s.Engine
	args := []string{
		"-p", strconv.Itoa(Port),
		"-t", strconv.Itoa(int(Threads(s))),
		"-m", strconv.FormatInt(ItemMemoryMiB(s), 10),
		"-c", strconv.Itoa(int(MaxConnections(s))),
		"-I", sizeArg(MaxItemSizeBytes(s)),
	}
	var opts []string
	if len(e.ChunkSizes) > 0 {
		sizes := make([]string, len(e.ChunkSizes))
		for i, n := range e.ChunkSizes {
			sizes[i] = strconv.Itoa(int(n))
		}
		opts = append(opts, "slab_sizes="+strings.Join(sizes, "-"))
	} else {
		f, n := DefaultGrowthFactor, int32(DefaultMinChunk)
		if e.GrowthFactor != nil {
			f = *e.GrowthFactor
		}
		if e.MinChunk != nil {
			n = *e.MinChunk
		}
		args = append(args, "-f", f, "-n", strconv.Itoa(int(n)))
	}
	if e.HashPower != nil {
		opts = append(opts, "hashpower="+strconv.Itoa(int(*e.HashPower)))
	}
	opts = append(opts, "conn_buffer_limit="+sizeArg(ConnBufferLimitBytes(s)))
	if o.SocketBuffers {
		opts = append(opts, "sock_sndbuf="+sizeArg(SockSndBufBytes), "sock_rcvbuf="+sizeArg(SockRcvBufBytes))
	}
	if !s.IsDedicatedCPUs() {
		opts = append(opts, "cpus=none")
	} else if e.ConnectionPlacement == cachev1alpha1.ConnectionPlacementCPU {
		opts = append(opts, "conn_placement=cpu")
	}
	if o.MetricsPort > 0 {
		opts = append(opts, "metrics_port="+strconv.Itoa(int(o.MetricsPort)))
	}
	if s.Extstore != nil {
		opts = append(opts, extstoreOptions(s.Extstore)...)
	}
	if o.AuthFile != "" {
		args = append(args, "-Y", o.AuthFile)
	}
	if t := o.TLS; t != nil {
		args = append(args, "-Z")
		opts = append(opts, "ssl_chain_cert="+t.ChainCert, "ssl_key="+t.Key)
		if t.CACert != "" {
			opts = append(opts, "ssl_ca_cert="+t.CACert)
		}
		if t.VerifyMode != 0 {
			opts = append(opts, "ssl_verify_mode="+strconv.Itoa(t.VerifyMode))
		}
		if t.MinVersion != 0 {
			opts = append(opts, "ssl_min_version="+strconv.Itoa(t.MinVersion))
		}
		if MetricsTLS(o) {
			opts = append(opts, "metrics_tls")
		}
	}
	return append(args, "-o", strings.Join(opts, ","))
}

// ExtstorePageBytes is spec.extstore.pageSize with its default applied.
func ExtstorePageBytes(e *cachev1alpha1.ExtstoreSpec) int64 {
	if e.PageSize != nil {
		return e.PageSize.Value()
	}
	return DefaultExtstorePageSize
}

// ExtstoreItemMinBytes is spec.extstore.itemMinSize with its default applied.
func ExtstoreItemMinBytes(e *cachev1alpha1.ExtstoreSpec) int64 {
	if e.ItemMinSize != nil {
		return *e.ItemMinSize
	}
	return DefaultExtstoreItemMinSize
}

// ExtstoreIOThreads is spec.extstore.ioThreads with its default applied.
func ExtstoreIOThreads(e *cachev1alpha1.ExtstoreSpec) int32 {
	if e.IOThreads != nil {
		return *e.IOThreads
	}
	return DefaultExtstoreIOThreads
}

// ExtstoreFileBytes is the size of the extstore file on a claim of
// spec.extstore.size: ExtstoreFilePercent of it less
// ExtstoreFileReserveBytes, rounded down to a whole MiB (memcached's
// ext_path reads a size with an M suffix); 0 when nothing is left (the API
// refuses such a size).
func ExtstoreFileBytes(e *cachev1alpha1.ExtstoreSpec) int64 {
	const mib = 1 << 20
	// multiplied first, so the division loses nothing (the API caps the
	// size at 64Ti: size x 90 fits in an int64)
	file := e.Size.Value()*ExtstoreFilePercent/100 - ExtstoreFileReserveBytes
	if file < 0 {
		return 0
	}
	return file / mib * mib
}

// extstoreOptions are the -o ext_* options of a spec with extstore.
func extstoreOptions(e *cachev1alpha1.ExtstoreSpec) []string {
	return []string{
		"ext_path=" + ExtstoreFile + ":" + strconv.FormatInt(ExtstoreFileBytes(e)>>20, 10) + "M",
		"ext_page_size=" + strconv.FormatInt(ExtstorePageBytes(e)>>20, 10),
		"ext_wbuf_size=" + strconv.Itoa(ExtstoreWriteBufferBytes>>20),
		"ext_threads=" + strconv.Itoa(int(ExtstoreIOThreads(e))),
		"ext_io_depth=" + strconv.Itoa(ExtstoreIODepth),
		"ext_item_size=" + strconv.FormatInt(ExtstoreItemMinBytes(e), 10),
	}
}

// ExtstoreBytes is the memory extstore adds to a process, from cachetd's
// allocations (engine/src/extstore.c, ext_items.c, ext_io.c):
//
//   - the write buffers, one per page bucket, the compactor's piece of a
//     page (one write buffer) and the file header block;
//   - the flusher's copy buffer of the largest item (-I);
//   - per IO thread, ext_io_depth O_DIRECT read buffers, each a record of
//     the largest item rounded out to 4 KiB at both ends (the value is
//     replied from them);
//   - per worker, what an append, prepend or incr of an item on disk
//     reads it back through: a value buffer and the same thread-local
//     read buffer (kept once used);
//   - per worker, the buffers of the GET reads it makes itself through its
//     own io_uring (ExtstoreWorkerReadBytes);
//   - the page table (a page struct and a free-list slot per page);
//   - the flusher's, the compactor's and the IO threads' stacks.
//
// The values read back and the keys and locators of items on disk live in
// the item memory (spec.memory), which is budgeted already.
func ExtstoreBytes(s *cachev1alpha1.CacheSpec) int64 {
	e := s.Extstore
	if e == nil {
		return 0
	}
	io := int64(ExtstoreIOThreads(e))
	workers := int64(Threads(s))
	maxItem := MaxItemSizeBytes(s)
	readBuffer := (maxItem+ExtstoreRecordOverhead+ExtstoreAlign-1)/ExtstoreAlign*ExtstoreAlign + ExtstoreAlign
	pages := ExtstoreFileBytes(e) / ExtstorePageBytes(e)
	return ExtstoreWriteBuffers*ExtstoreWriteBufferBytes + ExtstoreAlign +
		maxItem +
		io*ExtstoreIODepth*readBuffer +
		workers*(maxItem+readBuffer+ExtstoreWorkerReadBytes) +
		pages*ExtstorePageTableBytes +
		(ExtstoreBackgroundThreads+io)*PerThreadBytes
}

// ArgsFile is the content of cachetd's --args-file: one argument per line.
func ArgsFile(args []string) string {
	return strings.Join(args, "\n") + "\n"
}

// ParseArgsFile reads an arguments file back into its arguments.
func ParseArgsFile(file string) []string {
	return strings.Fields(file)
}

// ConfigHash identifies an arguments file; it is short because it only has
// to change when the content does.
func ConfigHash(argsFile string) string {
	sum := sha256.Sum256([]byte(argsFile))
	return hex.EncodeToString(sum[:8])
}

// ConnBufferLimitBytes is the cap on connection buffer memory the operator
// gives cachetd (-o conn_buffer_limit) and budgets in the pod's limit.
func ConnBufferLimitBytes(s *cachev1alpha1.CacheSpec) int64 {
	return int64(Threads(s)) * ConnBufferPerThreadBytes
}

// SmallestItemBytes is the engine's smallest slab chunk: the first explicit
// chunk size, or the fixed part of an item plus minChunk, 8-byte aligned.
func SmallestItemBytes(s *cachev1alpha1.CacheSpec) int64 {
	if len(s.Engine.ChunkSizes) > 0 {
		return (int64(s.Engine.ChunkSizes[0]) + 7) &^ 7
	}
	n := int64(DefaultMinChunk)
	if s.Engine.MinChunk != nil {
		n = int64(*s.Engine.MinChunk)
	}
	return (ItemFixedBytes + n + 7) &^ 7
}

// MaxItems is the most items one process can hold: every item the smallest
// chunk. With extstore that is a stub's when its class is smaller: stubs
// whose disk page was evicted stay in RAM until read, expired or evicted,
// so the disk's size does not bound them.
func MaxItems(s *cachev1alpha1.CacheSpec) int64 {
	smallest := SmallestItemBytes(s)
	if s.Extstore != nil && len(s.Engine.ChunkSizes) == 0 {
		smallest = min(smallest, ExtstoreStubBytes)
	}
	return s.Memory.Value() / smallest
}

// HashTableBytes bounds the hash table of one process: enough buckets for the
// most items the item memory can hold (every item the smallest chunk) at the
// engine's load factor, rounded up to a power of two (at most the engine's
// ceiling), plus the old half-size table that lives on while the table is
// being expanded, if it ever grows past its initial power (a table that
// starts large enough never has an old one: cachetd --memory-budget's
// hash_table term).
func HashTableBytes(s *cachev1alpha1.CacheSpec) int64 {
	initial := int32(DefaultHashPower)
	if s.Engine.HashPower != nil {
		initial = *s.Engine.HashPower
	}
	power := grownHashPower(MaxItems(s), initial)
	table := (int64(1) << power) * HashBucketBytes
	if power == initial {
		return table
	}
	return table + table/2
}

// FDTableBytes is one worker's event table: a slot per fd the process can
// hold (cachetd settings_fd_table_size).
func FDTableBytes(s *cachev1alpha1.CacheSpec) int64 {
	slots := int64(MaxConnections(s)) + (FDTablePerWorker+FDTableListenersPerWorker)*int64(Threads(s)) + FDTableMarginSlots
	return slots * FDTableSlotBytes
}

// MemoryBudget is one process's memory, part by part.
type MemoryBudget struct {
	ItemMemory, Connections, ConnBufferCap, SocketBuffers, Workers, HashTable, Metrics, Watchers, Auth, TLS, Extstore, MissRatioCurve, Base int64
	// Limit is the sum rounded up to a whole MiB: the container's memory
	// request and limit.
	Limit int64
}

// Budget is the pod's memory limit: the terms of cachetd --memory-budget for
// Args(s, o) (item memory, resting connections, the capped buffer memory
// above them, the kernel's socket buffers when o.SocketBuffers fixes them,
// worker threads, the hash table,
// the metrics thread when there is one, the `watch` watchers' rings, sockets
// and thread, the authfile's two copies with -Y, OpenSSL's sessions with
// -Z, extstore's buffers and threads when
// it is on, the miss-ratio curve), with a margin of
// 1 MiB more per thread and a fixed base of 16 MiB, rounded up to MiB.
// contract_test.go fails when it falls below the engine's bound or rises
// above it by more than that margin.
func Budget(s *cachev1alpha1.CacheSpec, o Options) MemoryBudget {
	s = Effective(s)
	o = ForSpec(s, o)
	b := MemoryBudget{
		ItemMemory:  s.Memory.Value(),
		Connections: int64(MaxConnections(s)) * PerConnectionBytes,
		// every buffer grown above resting is a mapping of its own, rounded
		// up to whole pages: the engine budgets the cap x 17/16
		ConnBufferCap:  ConnBufferLimitBytes(s) * 17 / 16,
		Workers:        int64(Threads(s)) * (PerThreadBytes + FDTableBytes(s)),
		HashTable:      HashTableBytes(s),
		Extstore:       ExtstoreBytes(s),
		MissRatioCurve: MissRatioCurveBytes,
		Base:           BaseBytes,
	}
	if o.SocketBuffers {
		b.SocketBuffers = int64(MaxConnections(s)) * PerSocketKernelBytes
	}
	if o.MetricsPort > 0 {
		b.Metrics = MetricsBytes
	}
	if MetricsTLS(o) {
		b.Metrics += MetricsConnsMax * TLSConnBytes
	}
	watcherSocket := int64(4 << 10)
	if o.SocketBuffers {
		watcherSocket = PerSocketKernelBytes
	}
	b.Watchers = WatchersMax*(WatcherRingBytes+watcherSocket) + WatcherThread
	if o.AuthFile != "" {
		b.Auth = 2 * (AuthFileMaxBytes + 1)
	}
	if o.TLS != nil {
		b.TLS = int64(MaxConnections(s))*(TLSConnBytes+TLSSendBufBytes) + TLSFixedBytes
	}
	total := b.ItemMemory + b.Connections + b.ConnBufferCap + b.SocketBuffers + b.Workers + b.HashTable + b.Metrics + b.Watchers + b.Auth + b.TLS + b.Extstore + b.MissRatioCurve + b.Base
	const mib = 1 << 20
	b.Limit = (total + mib - 1) / mib * mib
	return b
}

// MemoryLimitBytes is Budget(s, o).Limit.
func MemoryLimitBytes(s *cachev1alpha1.CacheSpec, o Options) int64 {
	return Budget(s, o).Limit
}
