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

package tuner

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/nodetuner/fixture"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

// kubelet serves the PodResources API on a unix socket, as the kubelet
// does, with pods the test changes.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	alloc []int64
}

func (k *kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *kubelet) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	return &podresourcesv1.AllocatableResourcesResponse{CpuIds: k.alloc}, nil
}

func (k *kubelet) set(pods ...*podresourcesv1.PodResources) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = pods
}

func startKubelet(t *testing.T, alloc []int64) (*kubelet, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{alloc: alloc}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return k, dir
}

func pod(ns, name string, cpus ...int64) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesv1.ContainerResources{
		{Name: "sidecar"}, {Name: "cachetd", CpuIds: cpus}}}
}

// This VM, a cache pod on CPU 1: a pass places the NIC vectors on CPU 0
// (housekeeping), the pod leaving puts back every byte.
func TestPassAppliesAndRevertsFromPodResources(t *testing.T) {
	root := fixture.Copy(t, "this-machine")
	before := fixture.Snapshot(t, root)
	k, dir := startKubelet(t, []int64{0, 1})
	k.set(pod("default", "cache-sample-0", 1), pod("kube-system", "kube-proxy-x"))
	cfg := Config{HostRoot: root, PodResourcesDir: dir, StateDir: t.TempDir(), IrqbalanceRun: t.TempDir(), AssumeStrategy: plan.Auto}

	dry := cfg
	dry.DryRun = true
	td, err := New(dry, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := td.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.String(), "write proc/irq/38/smp_affinity_list = 0") {
		t.Errorf("dry-run plan:\n%s", p)
	}
	if got := fixture.Snapshot(t, root); len(got) != len(before) || got[filepath.Join(root, "proc/irq/38/smp_affinity_list")] != "0-1\n" {
		t.Error("dry-run changed the node")
	}

	tu, err := New(cfg, nil, NewMetrics(filepath.Join(root, "proc"), filepath.Join(root, "sys")))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := tu.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Pod != "default/cache-sample-0" || st[0].Status != "True" || st[0].Strategy != "housekeeping" {
		t.Errorf("statuses %+v", st)
	}
	for path, want := range map[string]string{"proc/irq/38/smp_affinity_list": "0", "proc/irq/39/smp_affinity_list": "0", "sys/class/net/eth0/queues/rx-0/rps_cpus": "1"} {
		if raw, _ := os.ReadFile(filepath.Join(root, path)); strings.TrimSpace(string(raw)) != want {
			t.Errorf("%s = %q, want %s", path, raw, want)
		}
	}
	k.set(pod("kube-system", "kube-proxy-x"))
	if _, _, err := tu.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := fixture.Snapshot(t, root)
	for path, v := range before {
		if after[path] != v {
			t.Errorf("%s = %q after the pod left, want %q", path, after[path], v)
		}
	}
}

// The kubelet gone (restarting): the pass fails and changes nothing, rather
// than reverting every pod's tuning.
func TestPassWithoutKubeletChangesNothing(t *testing.T) {
	root := fixture.Copy(t, "this-machine")
	before := fixture.Snapshot(t, root)
	tu, err := New(Config{HostRoot: root, PodResourcesDir: t.TempDir(), StateDir: t.TempDir(), AssumeStrategy: plan.Auto}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tu.Pass(context.Background()); err == nil {
		t.Fatal("a pass without the kubelet succeeded")
	}
	if got := fixture.Snapshot(t, root); len(got) != len(before) {
		t.Error("files appeared")
	}
}

// The API server failing to read a pod's Cache (a 500, a timeout) is not
// the Cache being gone: the pass fails and leaves the pod's tuning as it
// was, rather than reverting it and re-applying it next pass.
func TestCacheReadErrorKeepsTheTuning(t *testing.T) {
	root := fixture.Copy(t, "this-machine")
	k, dir := startKubelet(t, []int64{0, 1})
	k.set(pod("default", "cache-sample-0", 1))
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, cachev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cachePod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cache-sample-0", Labels: map[string]string{
			cachev1alpha1.LabelName: cachev1alpha1.LabelNameValue, cachev1alpha1.LabelComponent: cachev1alpha1.LabelComponentCache,
			cachev1alpha1.LabelInstance: "cache-sample"}},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	cache := &cachev1alpha1.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cache-sample"}}
	var apiDown bool
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cachePod, cache).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isCache := obj.(*cachev1alpha1.Cache); isCache && apiDown {
				return apierrors.NewInternalError(os.ErrDeadlineExceeded)
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	tu, err := New(Config{NodeName: "node-a", HostRoot: root, PodResourcesDir: dir, StateDir: t.TempDir(), IrqbalanceRun: t.TempDir()}, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, st, err := tu.Pass(context.Background()); err != nil || len(st) != 1 || st[0].Status != "True" {
		t.Fatalf("first pass: %v %+v", err, st)
	}
	tuned := fixture.Snapshot(t, root)
	if irq := tuned[filepath.Join(root, "proc/irq/38/smp_affinity_list")]; strings.TrimSpace(irq) != "0" {
		t.Fatalf("irq 38 on %q after the first pass", irq)
	}

	apiDown = true
	if _, _, err := tu.Pass(context.Background()); err == nil {
		t.Error("a pass that could not read the Cache succeeded")
	}
	after := fixture.Snapshot(t, root)
	for path, v := range tuned {
		if got := after[path]; got != v {
			t.Errorf("%s = %q after the API server failed, want %q (still tuned)", path, got, v)
		}
	}

	apiDown = false
	if err := c.Delete(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	if _, st, err := tu.Pass(context.Background()); err != nil || len(st) != 0 {
		t.Fatalf("pass with the Cache gone: %v %+v", err, st)
	}
	if irq := fixture.Snapshot(t, root)[filepath.Join(root, "proc/irq/38/smp_affinity_list")]; irq != "0-1\n" {
		t.Errorf("irq 38 on %q with the Cache gone, want its original 0-1", irq)
	}
}

// irqbalance running without a socket the tuner can reach: the pods are
// tuned but reported IrqbalanceConflict, since it would undo the plan.
func TestIrqbalanceWithoutSocketIsAConflict(t *testing.T) {
	root := fixture.Copy(t, "this-machine")
	if err := os.MkdirAll(filepath.Join(root, "proc/777"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/777/comm"), []byte("irqbalance\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, dir := startKubelet(t, []int64{0, 1})
	k.set(pod("default", "cache-sample-0", 1))
	tu, err := New(Config{HostRoot: root, PodResourcesDir: dir, StateDir: t.TempDir(), IrqbalanceRun: t.TempDir(), AssumeStrategy: plan.Auto}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := tu.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Status != "False" || st[0].Reason != ReasonIrqbalanceConflict || !strings.Contains(st[0].Message, "pid 777") {
		t.Errorf("statuses %+v", st)
	}
}

// Changing the strategy re-plans: what the old plan wrote and the new one
// does not want goes back to its original bytes; none touches nothing.
func TestStrategyChangeReplansAndNoneRestores(t *testing.T) {
	root := fixture.Copy(t, "virtio-vm16")
	before := fixture.Snapshot(t, root)
	k, dir := startKubelet(t, []int64{1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15})
	k.set(pod("prod", "sessions-0", 2, 3, 10, 11))
	state := t.TempDir()
	pass := func(s plan.Strategy) PodStatus {
		t.Helper()
		tu, err := New(Config{HostRoot: root, PodResourcesDir: dir, StateDir: state, IrqbalanceRun: t.TempDir(), AssumeStrategy: s}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := tu.Pass(context.Background())
		if err != nil || len(st) != 1 {
			t.Fatalf("pass %s: %v %+v", s, err, st)
		}
		return st[0]
	}
	read := func(path string) string {
		raw, _ := os.ReadFile(filepath.Join(root, path))
		return strings.TrimSpace(string(raw))
	}
	if st := pass(plan.Siblings); st.Status != "True" || read("proc/irq/25/smp_affinity_list") != "10" {
		t.Fatalf("siblings: %+v, irq 25 on %s", st, read("proc/irq/25/smp_affinity_list"))
	}
	if st := pass(plan.Spread); st.Status != "True" || read("proc/irq/25/smp_affinity_list") != "2" {
		t.Fatalf("spread: %+v, irq 25 on %s", st, read("proc/irq/25/smp_affinity_list"))
	}
	if st := pass(plan.None); st.Reason != plan.ReasonNotRequested {
		t.Fatalf("none: %+v", st)
	}
	after := fixture.Snapshot(t, root)
	for path, v := range before {
		if after[path] != v {
			t.Errorf("%s = %q after irqStrategy none, want %q", path, after[path], v)
		}
	}
}

// A veth in the node's network namespace is written through that
// namespace's sysfs, named relative to the host root so that the journal
// restores it there; NIC and interrupt paths stay the host's.
func TestVethWritesGoToTheNodeNetworkNamespace(t *testing.T) {
	p := plan.Plan{Writes: []plan.Write{
		{Path: "proc/irq/38/smp_affinity_list", Value: "1"},
		{Path: "sys/class/net/eth0/queues/rx-0/rps_cpus", Value: "2"},
		{Path: "sys/class/net/veth1/queues/rx-0/rps_cpus", Value: "2"},
	}}
	if err := vethsInNetns(&p, []plan.Pod{{Key: "a/b", Veth: "veth1"}, {Key: "a/c"}}, "/host", "/run/node-net-sys"); err != nil {
		t.Fatal(err)
	}
	want := []string{"proc/irq/38/smp_affinity_list", "sys/class/net/eth0/queues/rx-0/rps_cpus", "../run/node-net-sys/class/net/veth1/queues/rx-0/rps_cpus"}
	for i, w := range p.Writes {
		if w.Path != want[i] {
			t.Errorf("write %d: %s, want %s", i, w.Path, want[i])
		}
		if i == 2 && filepath.Join("/host", w.Path) != "/run/node-net-sys/class/net/veth1/queues/rx-0/rps_cpus" {
			t.Errorf("resolves to %s", filepath.Join("/host", w.Path))
		}
	}
}

// rps_sock_flow_entries that the tuner's namespace does not show is left
// out with a note, rather than failing the pod's tuning every pass.
func TestAbsentSockFlowSysctlIsLeftOut(t *testing.T) {
	root := t.TempDir()
	p := plan.Plan{Writes: []plan.Write{{Path: sockFlowSysctl, Value: "32768"}, {Path: "proc/irq/38/smp_affinity_list", Value: "1"}}}
	dropAbsentSysctl(&p, root)
	if len(p.Writes) != 1 || p.Writes[0].Path != "proc/irq/38/smp_affinity_list" || len(p.Notes) != 1 {
		t.Errorf("writes %+v notes %v", p.Writes, p.Notes)
	}
	if err := os.MkdirAll(filepath.Join(root, "proc/sys/net/core"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, sockFlowSysctl), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = plan.Plan{Writes: []plan.Write{{Path: sockFlowSysctl, Value: "32768"}}}
	dropAbsentSysctl(&p, root)
	if len(p.Writes) != 1 {
		t.Errorf("a visible sysctl was dropped: %+v", p.Writes)
	}
}
