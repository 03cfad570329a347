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

package controllers

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

func newCache(mutate ...func(*cachev1alpha1.Cache)) *cachev1alpha1.Cache {
	c := &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: 1},
		Spec: cachev1alpha1.CacheSpec{
			Replicas: ptr.To(int32(3)),
			Image:    "localhost/cachetd:test",
			Memory:   resource.MustParse("64Mi"),
			CPU:      ptr.To(int32(2)),
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func TestEngineArgsDefaults(t *testing.T) {
	got := EngineArgs(newCache())
	want := []string{"-p", "11211", "-t", "2", "-m", "64", "-c", "1024", "-I", "1m", "-f", "1.25", "-n", "48", "-o", "conn_buffer_limit=8m"}
	if !slices.Equal(got, want) {
		t.Fatalf("EngineArgs = %q, want %q", got, want)
	}
}

func TestEngineArgsExplicit(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Memory = resource.MustParse("1Gi")
		c.Spec.Engine = cachev1alpha1.EngineSpec{
			Threads:        ptr.To(int32(4)),
			MaxConnections: ptr.To(int32(4096)),
			MaxItemSize:    ptr.To(resource.MustParse("512Ki")),
			HashPower:      ptr.To(int32(20)),
			ChunkSizes:     []int32{64, 128, 1024},
		}
	})
	got := EngineArgs(c)
	want := []string{"-p", "11211", "-t", "4", "-m", "1024", "-c", "4096", "-I", "512k", "-o", "slab_sizes=64-128-1024,hashpower=20,conn_buffer_limit=16m"}
	if !slices.Equal(got, want) {
		t.Fatalf("EngineArgs = %q, want %q", got, want)
	}
}

func TestThreadsFollowCPUAndNeverZero(t *testing.T) {
	if got := Threads(newCache(func(c *cachev1alpha1.Cache) { c.Spec.CPU = ptr.To(int32(3)) })); got != 3 {
		t.Errorf("threads for 3 CPUs = %d, want 3", got)
	}
	shared := newCache(func(c *cachev1alpha1.Cache) { c.Spec.CPU = ptr.To(int32(0)); c.Spec.DedicatedCPUs = ptr.To(false) })
	if got := Threads(shared); got != 1 {
		t.Errorf("threads for cpu 0 = %d, want 1", got)
	}
}

func TestArgsFileAndHash(t *testing.T) {
	a := ArgsFile(EngineArgs(newCache()))
	if !strings.HasPrefix(a, "-p\n11211\n-t\n2\n") || !strings.HasSuffix(a, "\nconn_buffer_limit=8m\n") {
		t.Fatalf("args file is not one argument per line: %q", a)
	}
	b := ArgsFile(EngineArgs(newCache(func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("128Mi") })))
	if ConfigHash(a) == ConfigHash(b) {
		t.Fatal("config hash did not change with the memory")
	}
	if ConfigHash(a) != ConfigHash(ArgsFile(EngineArgs(newCache()))) {
		t.Fatal("config hash is not stable for equal specs")
	}
}

func TestMemoryLimitFormula(t *testing.T) {
	// 64Mi item memory, smallest chunk 38+48 -> 88 bytes: 762600 items / 1.5
	// -> 2^19 buckets of 4 bytes = 2Mi, plus half of it while expanding = 3Mi;
	// 1024 connections x 32Ki = 32Mi; buffer cap 2 threads x 4Mi = 8Mi;
	// 2 threads x 2Mi = 4Mi; base 16Mi. Total 64+3+32+8+4+16 = 127Mi.
	if got, want := MemoryLimitBytes(newCache()), int64(127<<20); got != want {
		t.Fatalf("memory limit = %dMi, want %dMi", got>>20, want>>20)
	}
	if got := SmallestItemBytes(newCache()); got != 88 {
		t.Fatalf("smallest item %d, want 88", got)
	}
	// The docs/operator.md table.
	for _, tc := range []struct {
		mem     string
		cpu     int32
		wantMiB int64
	}{{"64Mi", 1, 121}, {"64Mi", 2, 127}, {"1Gi", 2, 1132}} {
		c := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse(tc.mem); c.Spec.CPU = ptr.To(tc.cpu) })
		if got := MemoryLimitBytes(c) >> 20; got != tc.wantMiB {
			t.Errorf("limit for %s/%d CPU = %dMi, want %dMi", tc.mem, tc.cpu, got, tc.wantMiB)
		}
	}
	// A bigger initial hash table is budgeted as such, up to the engine's ceiling.
	c := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Engine.HashPower = ptr.To(int32(24)) })
	if got, want := HashTableBytes(c), int64(3*(1<<25)); got != want { // 2^24 buckets x 4 bytes x 1.5
		t.Fatalf("hash table for hashpower 24 = %d, want %d", got, want)
	}
	huge := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("1Ti") })
	if got, want := HashTableBytes(huge), int64(3*(1<<31)); got != want { // capped at 2^30 buckets
		t.Fatalf("hash table for 1Ti = %d, want %d", got, want)
	}
	// Explicit chunk sizes set the smallest item.
	chunks := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Engine.ChunkSizes = []int32{100, 200} })
	if got := SmallestItemBytes(chunks); got != 104 {
		t.Fatalf("smallest item with chunkSizes = %d, want 104", got)
	}
}

func TestResourcesGuaranteedOnlyWhenDedicated(t *testing.T) {
	r := Resources(newCache())
	if !r.Requests.Cpu().Equal(*r.Limits.Cpu()) || !r.Requests.Memory().Equal(*r.Limits.Memory()) || r.Limits.Cpu().Value() != 2 {
		t.Fatalf("dedicated resources are not Guaranteed with 2 CPUs: %+v", r)
	}
	shared := Resources(newCache(func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false) }))
	if _, ok := shared.Limits[corev1.ResourceCPU]; ok {
		t.Fatalf("shared pods must have no CPU limit (no CFS throttling): %+v", shared)
	}
	if shared.Requests.Cpu().Value() != 2 {
		t.Fatalf("shared pods still request their CPUs: %+v", shared)
	}
	none := Resources(newCache(func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false); c.Spec.CPU = ptr.To(int32(0)) }))
	if _, ok := none.Requests[corev1.ResourceCPU]; ok {
		t.Fatalf("cpu 0 must request no CPU: %+v", none)
	}
}

func TestStatefulSetPodTemplate(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Placement = cachev1alpha1.PlacementSpec{
			NodeSelector:   map[string]string{"disk": "nvme"},
			PodLabels:      map[string]string{"team": "web"},
			PodAnnotations: map[string]string{"note": "x"},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
			}},
			PriorityClassName: "high",
		}
	})
	sts := StatefulSet(c, "localhost/default:1")
	if sts.Name != "web" || sts.Namespace != "prod" || sts.Spec.ServiceName != "web-headless" || *sts.Spec.Replicas != 3 {
		t.Fatalf("identity wrong: %s/%s service %s replicas %d", sts.Namespace, sts.Name, sts.Spec.ServiceName, *sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Fatalf("policy %s strategy %s", sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
	}
	tpl := sts.Spec.Template
	if tpl.Labels["team"] != "web" || tpl.Labels["app.kubernetes.io/instance"] != "web" || tpl.Annotations["note"] != "x" {
		t.Fatalf("pod metadata: %v %v", tpl.Labels, tpl.Annotations)
	}
	if tpl.Annotations[ConfigHashAnnotation] != ConfigHash(ArgsFile(EngineArgs(c))) {
		t.Fatal("pod template does not carry the config hash")
	}
	ps := tpl.Spec
	if ps.NodeSelector["disk"] != "nvme" || ps.PriorityClassName != "high" {
		t.Fatal("placement not copied")
	}
	if sel := ps.TopologySpreadConstraints[0].LabelSelector; sel == nil || sel.MatchLabels["app.kubernetes.io/instance"] != "web" {
		t.Fatal("empty spread selector not filled with the pods' labels")
	}
	if c.Spec.Placement.TopologySpreadConstraints[0].LabelSelector != nil {
		t.Fatal("builder mutated the Cache")
	}
	if *ps.SecurityContext.RunAsUser != EngineUID || !*ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod security context: %+v", ps.SecurityContext)
	}
	ctr := ps.Containers[0]
	if ctr.Image != "localhost/cachetd:test" {
		t.Fatalf("image %q: spec.image must win over the operator default", ctr.Image)
	}
	if !slices.Equal(ctr.Command, []string{"/usr/local/bin/cachetd", "--args-file", "/etc/cachet/args"}) {
		t.Fatalf("command %q", ctr.Command)
	}
	sc := ctr.SecurityContext
	if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("container security context: %+v", sc)
	}
	if !slices.Equal(ctr.ReadinessProbe.Exec.Command, []string{"/usr/local/bin/cachet-probe", "-p", "11211"}) {
		t.Fatalf("readiness probe %q", ctr.ReadinessProbe.Exec.Command)
	}
	if ctr.Lifecycle.PreStop.Sleep == nil || ctr.Lifecycle.PreStop.Sleep.Seconds != PreStopSleepSeconds {
		t.Fatal("preStop sleep missing")
	}
	if !ctr.VolumeMounts[0].ReadOnly || ps.Volumes[0].ConfigMap.Name != "web-config" {
		t.Fatal("config volume not mounted read-only from the ConfigMap")
	}

	onDelete := StatefulSet(newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy
		c.Spec.Image = ""
	}), "localhost/default:1")
	if onDelete.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Fatal("OnDelete not honoured")
	}
	if onDelete.Spec.Template.Spec.Containers[0].Image != "localhost/default:1" {
		t.Fatal("operator default image not used when spec.image is empty")
	}
}

func TestServicesAndPDB(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Service = cachev1alpha1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Port: 2000, Annotations: map[string]string{"a": "b"}}
		c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(intstr.FromString("50%"))
	})
	h := HeadlessService(c)
	if h.Name != "web-headless" || h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses || h.Spec.Ports[0].Port != 11211 {
		t.Fatalf("headless service: %+v", h.Spec)
	}
	s := ClientService(c)
	if s.Name != "web" || s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.Ports[0].Port != 2000 || s.Spec.Ports[0].TargetPort.StrVal != "memcache" || s.Annotations["a"] != "b" {
		t.Fatalf("client service: %+v %v", s.Spec, s.Annotations)
	}
	p := PodDisruptionBudget(c)
	if p.Spec.MaxUnavailable.String() != "50%" || p.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "web" {
		t.Fatalf("pdb: %+v", p.Spec)
	}
	if d := PodDisruptionBudget(newCache()); d.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatal("pdb default is not 1")
	}
	for _, l := range []map[string]string{h.Labels, s.Labels, p.Labels, ConfigMap(c).Labels} {
		if l["app.kubernetes.io/managed-by"] != "cachet-operator" || l["app.kubernetes.io/component"] != "cache" {
			t.Fatalf("labels %v", l)
		}
	}
}

func TestPodHost(t *testing.T) {
	if got := PodHost(newCache(), "web-0", "example.org"); got != "web-0.web-headless.prod.svc.example.org" {
		t.Fatal(got)
	}
}
