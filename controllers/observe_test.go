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
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
	"cachet.dev/cachet/test/utils"
)

// testEngines maps "namespace/pod" to the metrics address of a real cachetd
// a test started for that pod: envtest runs no kubelet, so the suite's
// operator reads those engines in place of the pods' IPs.
var testEngines sync.Map

func testEngineAddr(pod *corev1.Pod) string {
	if a, ok := testEngines.Load(pod.Namespace + "/" + pod.Name); ok {
		return a.(string)
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(suiteEngine.MetricsPort)))
}

// createReadyPods creates the Cache's first n pods, Ready on 127.0.0.1:
// envtest runs no kubelet, and testEngineAddr maps them to engines.
func createReadyPods(t *testing.T, c *cachev1alpha1.Cache, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", c.Name, i), Namespace: c.Namespace, Labels: SelectorLabels(c)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: EngineContainerName, Image: testEngineImage}}},
		}
		if err := k8sClient.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		if err := k8sClient.Status().Update(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
}

// An Observed profile with apply: Auto, on two pods whose engines (real
// cachetd processes) hold a two-mode load: the operator reads both engines'
// /metrics, recommends one class per mode, applies them once the
// recommendation is stable (a new revision with those classes), and then
// stays put over further observations.
func TestObservedProfileRecommendsTheLoadsModesAndAppliesOnce(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	// item sizes just above two classes of the default -f 1.25 ladder
	// (352, 2696 at 64Mi), which wastes 15% of the chunk bytes on them
	const small, large, keys = 240, 2200, 800
	for i := 0; i < 2; i++ {
		e := utils.StartCachetd(t, filepath.Join(".."), "-m", "64")
		if err := utils.MixedSizeLoad(net.JoinHostPort("127.0.0.1", strconv.Itoa(e.Port)), keys, small, large, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		testEngines.Store(fmt.Sprintf("%s/obs-%d", ns, i), net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort)))
	}
	createCache(t, ns, "obs", func(c *cachev1alpha1.Cache) {
		c.Spec.Replicas = ptr.To(int32(2))
		c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{
			Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyAuto,
			ObserveIntervalSeconds: ptr.To(int32(2)),
		}
	})
	key := types.NamespacedName{Namespace: ns, Name: "obs"}
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, sts)
		return err == nil, fmt.Sprint(err)
	})
	firstHash := sts.Spec.Template.Annotations[ConfigHashAnnotation]
	c := getCache(t, ns, "obs")
	createReadyPods(t, c, 2)
	setSTSStatus(t, ns, "obs", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"})

	// one class per mode: the bucket (32 bytes wide up to 512, an eighth of
	// a power of two above) that holds the mode's item size
	itemOf := func(v int) int64 {
		return cachev1alpha1.ItemBytes(int64(utils.MixedSizeLoadKeyBytes), int64(v), false, false)
	}
	holds := func(class int32, item int64) bool {
		return int64(class) >= item-8 && int64(class) <= item+item/8+32
	}
	var r *cachev1alpha1.Recommendation
	eventually(t, "applied: one class per mode, rolled to a new revision", func() (bool, string) {
		r = getCache(t, ns, "obs").Status.Recommendation
		if r == nil || len(r.AppliedChunkSizes) == 0 {
			return false, fmt.Sprintf("%+v", r)
		}
		return true, ""
	})
	if len(r.ChunkSizes) != 2 || !holds(r.ChunkSizes[0], itemOf(small)) || !holds(r.ChunkSizes[1], itemOf(large)) {
		t.Errorf("classes %v do not match the modes (items of %d and %d bytes)", r.ChunkSizes, itemOf(small), itemOf(large))
	}
	if !slices.Equal(r.AppliedChunkSizes, r.ChunkSizes) || r.StableObservations < engine.StableObservationsToApply ||
		r.ObservedItems != 2*keys || len(r.Pods) != 2 || r.PredictedHitRatio == "" || r.CurrentHitRatio == "" || r.Memory == nil {
		t.Errorf("recommendation %+v", r)
	}
	c = getCache(t, ns, "obs")
	want := engine.ConfigHash(engine.ArgsFile(EngineArgs(c, BuildOptions{Engine: suiteCurrent})))
	if a := strings.Join(EngineArgs(c, BuildOptions{Engine: suiteCurrent}), " "); !strings.Contains(a, fmt.Sprintf("slab_sizes=%d-%d", r.ChunkSizes[0], r.ChunkSizes[1])) {
		t.Errorf("the applied classes are not in the engine's arguments: %s", a)
	}
	eventually(t, "the StatefulSet rolls to the applied classes", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, sts); err != nil {
			return false, err.Error()
		}
		h := sts.Spec.Template.Annotations[ConfigHashAnnotation]
		return h == want && h != firstHash, h
	})
	eventually(t, "a ProfileApplied event", func() (bool, string) {
		evs := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "obs" && e.Reason == ReasonProfileApplied && strings.Contains(e.Note, "applied") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// stays put: two more observations of the same load change nothing
	stable := r.StableObservations
	eventually(t, "two more observations", func() (bool, string) {
		r = getCache(t, ns, "obs").Status.Recommendation
		return r.StableObservations >= stable+2, fmt.Sprintf("%+v", r)
	})
	if err := k8sClient.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if h := sts.Spec.Template.Annotations[ConfigHashAnnotation]; h != want || !strings.HasPrefix(r.Decision, "the pods run the recommended classes") {
		t.Errorf("not put after the apply: hash %s (want %s), decision %q", h, want, r.Decision)
	}
}

// blackhole is a real TCP listener on 127.0.0.1 that accepts and never
// answers: a pod the operator's packets reach but whose replies never come
// (a NetworkPolicy that drops them looks the same to the reader).
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// podsAt are pods named by the keys of addrs, read at their values.
func podsAt(names []string, addrs map[string]string) ([]*corev1.Pod, HTTPPodMetrics) {
	var pods []*corev1.Pod
	for _, n := range names {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: corev1.PodStatus{PodIP: "127.0.0.1"}})
	}
	return pods, HTTPPodMetrics{Addr: func(p *corev1.Pod) string { return addrs[p.Name] }}
}

func sampleNames(samples []engine.PodSample) []string {
	var names []string
	for _, s := range samples {
		names = append(names, s.Name)
	}
	return names
}

// A pod that accepts and never answers costs its own read only: the real
// engines around it are read, in the pods' order, and it is reported.
func TestReadPodsReadsTheOthersPastAPodThatNeverAnswers(t *testing.T) {
	addrs := map[string]string{"hole": blackhole(t)}
	for _, n := range []string{"good-0", "good-1"} {
		e := utils.StartCachetd(t, filepath.Join(".."), "-m", "64")
		addrs[n] = net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort))
	}
	pods, m := podsAt([]string{"good-0", "hole", "good-1"}, addrs)
	samples, failed := readPods(context.Background(), m, pods, ObserveParallelReads, ObserveDeadline)
	if got := sampleNames(samples); !slices.Equal(got, []string{"good-0", "good-1"}) {
		t.Errorf("read %v, want good-0 and good-1 (failed: %v)", got, failed)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "pod hole: ") {
		t.Errorf("failures %q, want the pod that never answers only", failed)
	}
}

// The observation's deadline bounds all reads together: with one read at a
// time and a deadline shorter than one pod's timeout, the pod that never
// answers holds the only slot until the deadline, and the pods after it are
// reported as not started instead of each waiting out its own timeout.
func TestReadPodsStopsAtTheObservationDeadline(t *testing.T) {
	const deadline = PodMetricsTimeout / 2
	e := utils.StartCachetd(t, filepath.Join(".."), "-m", "64")
	addrs := map[string]string{"good": net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort))}
	for _, n := range []string{"hole-0", "hole-1", "hole-2"} {
		addrs[n] = blackhole(t)
	}
	pods, m := podsAt([]string{"good", "hole-0", "hole-1", "hole-2"}, addrs)
	samples, failed := readPods(context.Background(), m, pods, 1, deadline)
	if got := sampleNames(samples); !slices.Equal(got, []string{"good"}) {
		t.Errorf("read %v, want good (failed: %v)", got, failed)
	}
	want := []string{"pod hole-0: ", "pod hole-1: not started", "pod hole-2: not started"}
	if len(failed) != len(want) {
		t.Fatalf("failures %q, want %q...", failed, want)
	}
	for i := range want {
		if !strings.HasPrefix(failed[i], want[i]) {
			t.Errorf("failure %q, want %q...", failed[i], want[i])
		}
	}
}

// What the reader refuses: a body over the 4 MiB the engine caps its
// /metrics at (never parsed cut short), and a redirect (the operator reads
// the pod's own address, nothing it is sent to). A body of exactly 4 MiB
// is read whole.
func TestHTTPPodMetricsRefusesOversizedBodiesAndRedirects(t *testing.T) {
	line := []byte("# a comment line of the metrics text format\n")
	body := func(n int) []byte { return bytes.Repeat(line, n/len(line)+1)[:n] }
	mux := http.NewServeMux()
	mux.HandleFunc("/limit/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body(podMetricsMaxBytes)) })
	mux.HandleFunc("/over/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body(podMetricsMaxBytes + 1)) })
	mux.HandleFunc("/moved/metrics", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/limit/metrics", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	read := func(path string) ([]byte, error) {
		// Addr is host:port; the path goes in front of /metrics
		m := HTTPPodMetrics{Addr: func(*corev1.Pod) string { return strings.TrimPrefix(srv.URL, "http://") + path }}
		return m.Read(context.Background(), &corev1.Pod{})
	}
	if b, err := read("/limit"); err != nil || len(b) != podMetricsMaxBytes {
		t.Errorf("a body of exactly %d bytes: %d bytes, %v", podMetricsMaxBytes, len(b), err)
	}
	if b, err := read("/over"); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a body of %d bytes was read (%d bytes) without an error: %v", podMetricsMaxBytes+1, len(b), err)
	}
	if b, err := read("/moved"); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("a redirect was followed (%d bytes): %v", len(b), err)
	}
}

// Through the operator on a real API server: of an Observed profile's two
// Ready pods, one accepts and never answers (what a NetworkPolicy dropping
// the operator's replies looks like). The observation still completes: the
// status holds the other pod's items and figures, and notes names the pod
// not read.
func TestObservedProfileReadsTheOtherPodsPastOneThatNeverAnswers(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	const keys = 800
	e := utils.StartCachetd(t, filepath.Join(".."), "-m", "64")
	if err := utils.MixedSizeLoad(net.JoinHostPort("127.0.0.1", strconv.Itoa(e.Port)), keys, 240, 2200, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	testEngines.Store(ns+"/part-0", blackhole(t))
	testEngines.Store(ns+"/part-1", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort)))
	createCache(t, ns, "part", func(c *cachev1alpha1.Cache) {
		c.Spec.Replicas = ptr.To(int32(2))
		c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{
			Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyManual,
			ObserveIntervalSeconds: ptr.To(int32(2)),
		}
	})
	c := getCache(t, ns, "part")
	createReadyPods(t, c, 2)
	var r *cachev1alpha1.Recommendation
	eventually(t, "an observation of the pod that answers", func() (bool, string) {
		r = getCache(t, ns, "part").Status.Recommendation
		return r != nil && r.ObservedItems > 0, fmt.Sprintf("%+v", r)
	})
	if r.ObservedItems != keys || len(r.Pods) != 1 || r.Pods[0].Name != "part-1" || len(r.ChunkSizes) == 0 {
		t.Errorf("the answering pod's items (%d) and figures are not all the observation holds: %+v", keys, r)
	}
	if !strings.Contains(r.Notes, "not read: pod part-0: ") || strings.Contains(r.Notes, "part-1") {
		t.Errorf("notes do not name the pod that never answers alone: %q", r.Notes)
	}
}

// spec.tls.metrics: the Observed reader goes HTTPS to a real cachetd
// serving its metrics port with -o metrics_tls, verifying the serving
// Secret's ca.crt and MetricsServerName, as the PodMonitor has Prometheus
// do. Another CA, another name, a Secret without ca.crt, and plain HTTP to
// the HTTPS port are each refused.
func TestObservedReaderVerifiesTheHTTPSMetricsPort(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := &cachev1alpha1.Cache{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: cachev1alpha1.CacheSpec{TLS: &cachev1alpha1.TLSSpec{SecretName: "certs", Metrics: true}}}
	ca, other := utils.NewTestCA(t), utils.NewTestCA(t)
	certPEM, keyPEM := ca.Issue(t, 2, TLSDNSNames(c, ""))
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := utils.StartCachetd(t, filepath.Join(".."), "-Z", "-o",
		"ssl_chain_cert="+filepath.Join(dir, "tls.crt")+",ssl_key="+filepath.Join(dir, "tls.key")+",metrics_tls")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort))
	secret := func(name string, data map[string][]byte) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
		if err := k8sClient.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	secret("certs", map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, TLSCAKey: ca.CertPEM})
	secret("other-ca", map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, TLSCAKey: other.CertPEM})
	secret("no-ca", map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM})
	r := &CacheReconciler{Client: k8sClient, Scheme: scheme, Engine: suiteEngine,
		PodMetrics: HTTPPodMetrics{Addr: func(*corev1.Pod) string { return addr }}}
	read := func(mutate func(c *cachev1alpha1.Cache)) ([]byte, error) {
		cc := c.DeepCopy()
		mutate(cc)
		m, err := r.podMetrics(ctx, cc)
		if err != nil {
			return nil, err
		}
		return m.Read(ctx, &corev1.Pod{})
	}
	body, err := read(func(*cachev1alpha1.Cache) {})
	if err != nil || !bytes.Contains(body, []byte("\nmemcached_up 1\n")) {
		t.Fatalf("HTTPS /metrics with the Secret's CA: %v\n%.300s", err, body)
	}
	if _, err := read(func(c *cachev1alpha1.Cache) { c.Spec.TLS.SecretName = "other-ca" }); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a CA that did not sign the engine's certificate: %v", err)
	}
	if _, err := read(func(c *cachev1alpha1.Cache) { c.Name = "elsewhere" }); err == nil ||
		!strings.Contains(err.Error(), "elsewhere."+ns+".svc") {
		t.Errorf("a server name the certificate does not carry: %v", err)
	}
	if _, err := read(func(c *cachev1alpha1.Cache) { c.Spec.TLS.SecretName = "no-ca" }); err == nil ||
		!strings.Contains(err.Error(), "no PEM certificate in ca.crt") {
		t.Errorf("a Secret without ca.crt: %v", err)
	}
	if body, err := read(func(c *cachev1alpha1.Cache) { c.Spec.TLS.Metrics = false }); err == nil {
		t.Errorf("plain HTTP to the HTTPS port was answered: %.200s", body)
	}
}
