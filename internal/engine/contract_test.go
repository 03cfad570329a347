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

// The contract between the operator and the engine, checked against the
// built cachetd itself: every spec the webhook admits becomes arguments the
// engine accepts (cachetd --check-args), every spec the webhook refuses is
// refused by the engine too or names the operator-only rule that refuses it,
// and Budget covers the engine's own memory bound (cachetd --memory-budget).

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/test/utils"
)

// cachetd is the engine binary (utils.Cachetd).
func cachetd(t *testing.T) string { return utils.Cachetd(t, filepath.Join("..", "..")) }

// runEngine runs cachetd with a mode flag and the args; it returns stdout,
// stderr and the exit code.
func runEngine(t *testing.T, bin, mode string, args []string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{mode}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("cannot run %s: %v", bin, err)
	return "", "", -1
}

type contractCase struct {
	name string
	spec *cachev1alpha1.CacheSpec
	// operatorOnly names the rule when the webhook refuses a spec for a
	// reason the engine cannot see in its arguments; empty means the engine
	// must refuse it too.
	operatorOnly string
}

func withExtstore(size string, mutate ...func(*cachev1alpha1.ExtstoreSpec)) func(*cachev1alpha1.CacheSpec) {
	return func(s *cachev1alpha1.CacheSpec) {
		s.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse(size)}
		for _, m := range mutate {
			m(s.Extstore)
		}
	}
}

func memory(q string) func(*cachev1alpha1.CacheSpec) {
	return func(s *cachev1alpha1.CacheSpec) { s.Memory = resource.MustParse(q) }
}

func maxItem(q string) func(*cachev1alpha1.CacheSpec) {
	return func(s *cachev1alpha1.CacheSpec) { s.Engine.MaxItemSize = ptr.To(resource.MustParse(q)) }
}

// admittedSpecs span the engine's arguments: sizes, connections, threads,
// slab classes, hash power, extstore with 1 and 4 IO threads.
var admittedSpecs = []contractCase{
	{name: "default", spec: spec()},
	{name: "smallest", spec: spec(memory("8Mi"), func(s *cachev1alpha1.CacheSpec) { s.CPU = ptr.To(int32(1)) })},
	{name: "small items", spec: spec(memory("16Mi"), maxItem("1Ki"))},
	{name: "large", spec: spec(memory("32767Mi"), maxItem("128Mi"), func(s *cachev1alpha1.CacheSpec) { s.CPU = ptr.To(int32(8)) })},
	{name: "many connections", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.MaxConnections = ptr.To(int32(65536)) })},
	// each worker's event table grows with -c: 16 x 2 MiB of them
	{name: "many connections, 16 threads", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.DedicatedCPUs = ptr.To(false)
		s.CPU = ptr.To(int32(0))
		s.Engine.Threads = ptr.To(int32(16))
		s.Engine.MaxConnections = ptr.To(int32(65536))
	})},
	{name: "shared CPUs, 16 threads", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.DedicatedCPUs = ptr.To(false)
		s.CPU = ptr.To(int32(0))
		s.Engine.Threads = ptr.To(int32(16))
	})},
	{name: "connections placed by CPU", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.Engine.ConnectionPlacement = cachev1alpha1.ConnectionPlacementCPU
	})},
	{name: "tls from a Secret, mutual, TLS 1.3", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.TLS = &cachev1alpha1.TLSSpec{SecretName: "certs", ClientAuth: "Require", MinVersion: "TLSv1.3",
			ClientCA: &cachev1alpha1.SecretKeyRef{Name: "clients", Key: "bundle.pem"}}
	})},
	{name: "tls from an issuer, auth", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.TLS = &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "ca"}, ClientAuth: "None", MinVersion: "TLSv1.2"}
		s.Auth = &cachev1alpha1.AuthSpec{SecretRef: cachev1alpha1.LocalSecretReference{Name: "users"}}
	})},
	{name: "explicit hashpower", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.HashPower = ptr.To(int32(24)) })},
	{name: "growth factor and min chunk", spec: spec(func(s *cachev1alpha1.CacheSpec) {
		s.Engine.GrowthFactor = ptr.To("4")
		s.Engine.MinChunk = ptr.To(int32(16))
	})},
	{name: "chunk sizes", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 96, 1024, 65536} })},
	{name: "chunk sizes up to half a slab page", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 524288} })},
	{name: "chunk sizes, small memory", spec: spec(memory("8Mi"), func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 65536} })},
	{name: "extstore, 1 IO thread", spec: spec(withExtstore("10Gi"))},
	// item counts of exactly 1.5 x 2^p, where the engine's table stops
	// growing one power short of items/1.5+1 rounded up: 48-byte extstore
	// stubs at 9 x 2^k bytes, 80-byte items at 15 x 2^k
	{name: "9Gi of extstore stubs", spec: spec(memory("9Gi"), withExtstore("100Gi"))},
	{name: "1152Mi of extstore stubs", spec: spec(memory("1152Mi"), withExtstore("10Gi"))},
	{name: "15Gi of extstore stubs", spec: spec(memory("15Gi"), withExtstore("100Gi"))},
	{name: "960Mi of extstore stubs", spec: spec(memory("960Mi"), withExtstore("10Gi"))},
	{name: "9Gi of items", spec: spec(memory("9Gi"))},
	{name: "1152Mi of items", spec: spec(memory("1152Mi"))},
	{name: "15Gi of items", spec: spec(memory("15Gi"))},
	{name: "960Mi of items", spec: spec(memory("960Mi"))},
	{name: "extstore, 4 IO threads, big pages", spec: spec(withExtstore("1Ti", func(e *cachev1alpha1.ExtstoreSpec) {
		e.IOThreads = ptr.To(int32(4))
		e.PageSize = ptr.To(resource.MustParse("256Mi"))
		e.ItemMinSize = ptr.To(int64(4096))
	}))},
	{name: "extstore, largest item", spec: spec(memory("256Mi"), maxItem("4091Ki"), withExtstore("1Gi", func(e *cachev1alpha1.ExtstoreSpec) {
		e.PageSize = ptr.To(resource.MustParse("4Mi"))
	}))},
	// apply: Auto workload profiles: the derived classes, hash power and
	// extstore threshold reach the arguments and the budget
	{name: "profile small-objects", spec: spec(profile("small-objects", 2_000_000))},
	{name: "profile sessions", spec: spec(profile("sessions", 100_000))},
	{name: "profile bimodal, small memory", spec: spec(memory("8Mi"), profile("bimodal", 1000))},
	{name: "profile html-fragments, extstore", spec: spec(memory("256Mi"), profile("html-fragments", 50_000), withExtstore("10Gi"))},
	// seed 003's items are smaller than the engine's smallest class
	{name: "profile of tiny items, no flags", spec: spec(memory("8Mi"), func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Apply: cachev1alpha1.ProfileApplyAuto, KeyBytes: ptr.To(int32(1)), ClientFlags: ptr.To(false),
			ValueSizes: []cachev1alpha1.ValueSizeBucket{{Bytes: 1, Weight: 5}, {Bytes: 9, Weight: 5}, {Bytes: 17, Weight: 5}, {Bytes: 29, Weight: 5}}}
	})},
	{name: "profile of 64 buckets, some chained", spec: spec(memory("64Mi"), func(s *cachev1alpha1.CacheSpec) {
		p := &cachev1alpha1.WorkloadProfile{Apply: cachev1alpha1.ProfileApplyAuto, ExpectedItems: ptr.To(int64(300_000_000))}
		for i := int32(1); i <= 64; i++ {
			p.ValueSizes = append(p.ValueSizes, cachev1alpha1.ValueSizeBucket{Bytes: i * i * 200, Weight: 65 - i})
		}
		s.WorkloadProfile = p
	})},
}

// profile is an apply: Auto preset profile with expected items.
func profile(preset string, items int64) func(*cachev1alpha1.CacheSpec) {
	return func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Preset: preset, ExpectedItems: &items, Apply: cachev1alpha1.ProfileApplyAuto}
	}
}

var refusedSpecs = []contractCase{
	{name: "item under 1Ki", spec: spec(maxItem("512"))},
	{name: "item over 128Mi", spec: spec(memory("1Gi"), maxItem("256Mi"))},
	{name: "item over half the memory", spec: spec(maxItem("48Mi"))},
	{name: "memory under twice the default item", spec: spec(memory("1Mi"))},
	{name: "growth factor 1", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.GrowthFactor = ptr.To("1.0") })},
	{name: "chunk size over the item size", spec: spec(maxItem("1Ki"), func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 2048} })},
	{name: "chunk size over half a slab page", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 600000} })},
	{name: "chunk size over half a small slab page", spec: spec(memory("8Mi"), func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{48, 65544} })},
	{name: "growth factor 5", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.GrowthFactor = ptr.To("5") }),
		operatorOnly: "growthFactor at most 4: the engine takes up to 100, the API keeps classes useful"},
	{name: "chunk size not 8-aligned", spec: spec(func(s *cachev1alpha1.CacheSpec) { s.Engine.ChunkSizes = []int32{100} }),
		operatorOnly: "chunkSizes multiples of 8: the engine rounds up, the API says so instead"},
	{name: "profile value over the item size", spec: spec(maxItem("1Ki"), func(s *cachev1alpha1.CacheSpec) {
		s.WorkloadProfile = &cachev1alpha1.WorkloadProfile{ValueSizes: []cachev1alpha1.ValueSizeBucket{{Bytes: 2048, Weight: 1}}, Apply: cachev1alpha1.ProfileApplyAuto}
	}), operatorOnly: "workloadProfile value sizes at most maxItemSize: the derived classes stay within -I, the engine never sees the value sizes"},
	{name: "fractional MiB", spec: spec(memory("64.5Mi")),
		operatorOnly: "memory in whole MiB: Args writes -m in MiB, so the engine never sees the fraction"},
}

func cacheOf(s *cachev1alpha1.CacheSpec) *cachev1alpha1.Cache {
	return &cachev1alpha1.Cache{ObjectMeta: metav1.ObjectMeta{Name: "contract", Namespace: "default"}, Spec: *s}
}

// variants are the operator-wide options a spec's arguments are checked
// under: with and without the metrics thread, for the operator's own engine
// image (socket buffers fixed) and for another one (none), and with -Y and
// -Z (--check-args and --memory-budget open neither the authfile nor the
// certificates).
var variants = []Options{{}, {MetricsPort: DefaultMetricsPort}, {SocketBuffers: true}, {MetricsPort: DefaultMetricsPort, SocketBuffers: true},
	{SocketBuffers: true, AuthFile: "/etc/cachet/auth/authfile"},
	{SocketBuffers: true, TLS: &TLSFiles{ChainCert: "/etc/cachet/tls/tls.crt", Key: "/etc/cachet/tls/tls.key",
		CACert: "/etc/cachet/tls/ca.crt", VerifyMode: 2, MinVersion: 3}},
	{MetricsPort: DefaultMetricsPort, SocketBuffers: true, TLS: &TLSFiles{ChainCert: "/etc/cachet/tls/tls.crt",
		Key: "/etc/cachet/tls/tls.key", Metrics: true}}}

func TestAdmittedSpecsStartTheEngine(t *testing.T) {
	bin := cachetd(t)
	for _, tc := range admittedSpecs {
		for _, o := range variants {
			if errs, _ := cachev1alpha1.ValidateCacheSpec(cacheOf(tc.spec)); len(errs) > 0 {
				t.Errorf("%s: the webhook refuses a spec the table says it admits: %v", tc.name, errs)
				continue
			}
			args := Args(tc.spec, o)
			if _, stderr, code := runEngine(t, bin, "--check-args", args); code != 0 {
				t.Errorf("%s: the webhook admits it, cachetd --check-args %s exits %d: %s",
					tc.name, strings.Join(args, " "), code, stderr)
			}
		}
	}
}

func TestRefusedSpecsAreRefusedByTheEngineOrNamed(t *testing.T) {
	bin := cachetd(t)
	for _, tc := range refusedSpecs {
		if errs, _ := cachev1alpha1.ValidateCacheSpec(cacheOf(tc.spec)); len(errs) == 0 {
			t.Errorf("%s: the webhook admits a spec the table says it refuses", tc.name)
			continue
		}
		args := Args(tc.spec, Options{})
		_, stderr, code := runEngine(t, bin, "--check-args", args)
		switch {
		case tc.operatorOnly == "" && code != 64:
			t.Errorf("%s: refused by the webhook only; cachetd --check-args %s exits %d: name the operator-only rule or make the engine refuse it",
				tc.name, strings.Join(args, " "), code)
		case tc.operatorOnly == "" && !strings.HasPrefix(stderr, "cachetd: "):
			t.Errorf("%s: cachetd refuses without a message: %q", tc.name, stderr)
		case tc.operatorOnly != "" && code != 0:
			t.Errorf("%s: named operator-only (%s), yet cachetd refuses it too (%d: %s): drop the name",
				tc.name, tc.operatorOnly, code, stderr)
		}
	}
}

// engineBudget is cachetd --memory-budget's answer.
type engineBudget struct {
	Terms   map[string]int64 `json:"terms"`
	Total   int64            `json:"total"`
	Bounded bool             `json:"bounded"`
}

// budgetSlack is how far Budget may stand above the engine's bound: the
// MiB rounding of the limit, and the margin Budget keeps on threads (2 MiB
// each where the engine counts 1: kernel stacks, page tables and io_uring
// memory are charged to the pod's cgroup) and on the fixed part (16 MiB
// against the engine's 14.2 MiB of region alignment, storage tables and
// fixed threads).
func budgetSlack(s *cachev1alpha1.CacheSpec) int64 {
	threads := int64(Threads(s))
	if s.Extstore != nil {
		threads += ExtstoreBackgroundThreads + int64(ExtstoreIOThreads(s.Extstore))
	}
	return 1<<20 + threads<<20 + 2<<20
}

func TestBudgetCoversTheEnginesMemoryBound(t *testing.T) {
	bin := cachetd(t)
	for _, tc := range admittedSpecs {
		for _, o := range variants {
			args := Args(tc.spec, o)
			out, stderr, code := runEngine(t, bin, "--memory-budget", args)
			if code != 0 {
				t.Errorf("%s: cachetd --memory-budget %s exits %d: %s", tc.name, strings.Join(args, " "), code, stderr)
				continue
			}
			var eb engineBudget
			// without fixed socket buffers the engine says its bound is
			// no bound (the kernel autotunes them), and Budget leaves the
			// socket_buffers term out: the rest must still be covered
			if err := json.Unmarshal([]byte(out), &eb); err != nil || eb.Bounded != o.SocketBuffers || eb.Total <= 0 {
				t.Errorf("%s (socket buffers %v): unreadable --memory-budget answer or bounded %v %q: %v", tc.name, o.SocketBuffers, eb.Bounded, out, err)
				continue
			}
			var sum int64
			for _, v := range eb.Terms {
				sum += v
			}
			if sum != eb.Total {
				t.Errorf("%s: the engine's terms sum to %d, its total says %d", tc.name, sum, eb.Total)
			}
			if !o.SocketBuffers {
				eb.Total -= eb.Terms["socket_buffers"]
			}
			b := Budget(tc.spec, o)
			if got := eb.Terms["metrics"]; got != b.Metrics {
				t.Errorf("%s: the engine's metrics term is %d bytes, Budget's Metrics %d", tc.name, got, b.Metrics)
			}
			if got := eb.Terms["hash_table"]; got != b.HashTable {
				t.Errorf("%s: the engine's hash_table term is %d bytes, Budget's HashTable %d", tc.name, got, b.HashTable)
			}
			if got := eb.Terms["miss_ratio_curve"]; got != b.MissRatioCurve {
				t.Errorf("%s: the engine's miss_ratio_curve term is %d bytes, Budget's MissRatioCurve %d", tc.name, got, b.MissRatioCurve)
			}
			if b.Limit < eb.Total {
				t.Errorf("%s (metrics %v): Budget %d is %d bytes below the engine's bound %d (terms %v)",
					tc.name, o.MetricsPort > 0, b.Limit, eb.Total-b.Limit, eb.Total, eb.Terms)
			}
			if slack := budgetSlack(tc.spec); b.Limit-eb.Total > slack {
				t.Errorf("%s (metrics %v): Budget %d exceeds the engine's bound %d by %d, more than the stated slack %d (terms %v, budget %+v)",
					tc.name, o.MetricsPort > 0, b.Limit, eb.Total, b.Limit-eb.Total, slack, eb.Terms, b)
			}
		}
	}
}
