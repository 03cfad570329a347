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

// An Observed workload profile (issue 23): every observation interval the
// operator reads each Ready pod's /metrics itself (no Prometheus in between),
// and engine.RecommendObserved turns the samples into
// status.recommendation and the apply: Auto decision. The decision's state
// lives in status.recommendation, written before the StatefulSet is built
// from it, so a roll never starts from classes the status does not hold.
// Reads run inside Reconcile, ObserveParallelReads pods at a time, each
// bounded by PodMetricsTimeout and all by ObserveDeadline, so that pods the
// operator cannot reach (a NetworkPolicy) hold the one reconcile worker for
// ObserveDeadline at most, however many replicas there are. Each read
// writes only its own slot of the results.

package controllers

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

const (
	// DefaultObserveInterval is spec.workloadProfile.observeIntervalSeconds'
	// default.
	DefaultObserveInterval = 300 * time.Second
	// PodMetricsTimeout bounds one pod's read.
	PodMetricsTimeout = 3 * time.Second
	// ObserveDeadline bounds one observation's reads, all pods together;
	// pods not read by then are reported and left out.
	ObserveDeadline = 10 * time.Second
	// ObserveParallelReads is how many pods are read at once: 1000
	// replicas read in about 63 rounds of one round trip each.
	ObserveParallelReads = 16
	// podMetricsMaxBytes bounds what is read of one pod's /metrics (the
	// engine caps its body at 4 MiB); a larger body is refused rather than
	// parsed cut short.
	podMetricsMaxBytes = 4 << 20
)

// Event reasons of an Observed profile.
const (
	ReasonProfileApplied     = "ProfileApplied"
	ReasonProfileNotApplied  = "ProfileNotApplied"
	ReasonProfileRecommended = "ProfileRecommended"
)

// PodMetrics reads a cache pod's engine /metrics.
type PodMetrics interface {
	Read(ctx context.Context, pod *corev1.Pod) ([]byte, error)
}

// HTTPPodMetrics reads GET /metrics from the pod's IP at Port, or from
// Addr(pod) when set (host:port; tests run real engines on 127.0.0.1);
// over HTTPS with TLS when set (spec.tls.metrics: the serving Secret's CA
// and MetricsServerName, see podMetrics).
type HTTPPodMetrics struct {
	Port int32
	Addr func(pod *corev1.Pod) string
	TLS  *tls.Config
}

// podMetricsClient reads the pods directly: no proxy from the environment
// (pod IPs are cluster-internal), no redirects (a 3xx is an error like any
// status but 200), no idle connections kept between observations minutes
// apart.
var podMetricsClient = podMetricsHTTPClient(nil)

// podMetricsHTTPClient is that client, verifying HTTPS with tlsConfig when
// set (a client per Cache's CA: no connection is kept to share anyway).
func podMetricsHTTPClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{Timeout: PodMetricsTimeout}).DialContext,
			DisableKeepAlives:      true,
			ResponseHeaderTimeout:  PodMetricsTimeout,
			TLSHandshakeTimeout:    PodMetricsTimeout,
			TLSClientConfig:        tlsConfig,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       PodMetricsTimeout,
	}
}

// Read implements PodMetrics.
func (h HTTPPodMetrics) Read(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(h.Port)))
	if h.Addr != nil {
		addr = h.Addr(pod)
	}
	ctx, cancel := context.WithTimeout(ctx, PodMetricsTimeout)
	defer cancel()
	scheme, hc := "http", podMetricsClient
	if h.TLS != nil {
		scheme, hc = "https", podMetricsHTTPClient(h.TLS)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, podMetricsMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > podMetricsMaxBytes {
		return nil, fmt.Errorf("GET /metrics: body over %d bytes", podMetricsMaxBytes)
	}
	return body, nil
}

// readPods reads and parses the pods' metrics, parallel at a time, all
// within deadline: the samples of the pods read, in the pods' order, and
// why each other pod was not.
func readPods(ctx context.Context, m PodMetrics, pods []*corev1.Pod, parallel int, deadline time.Duration) ([]engine.PodSample, []string) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	samples := make([]engine.PodSample, len(pods))
	errs := make([]error, len(pods))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, pod := range pods {
		acquired := false
		select {
		case slots <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		// a slot freed by the read the deadline ended is no start
		if ctx.Err() != nil {
			if acquired {
				<-slots
			}
			errs[i] = fmt.Errorf("not started within the observation's %s", deadline)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			body, err := m.Read(ctx, pod)
			if err == nil {
				samples[i], err = engine.ParsePodMetrics(pod.Name, bytes.NewReader(body))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	var read []engine.PodSample
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("pod %s: %v", pods[i].Name, err))
			continue
		}
		read = append(read, samples[i])
	}
	return read, failed
}

// EngineSpec is the spec the engine runs: with an Observed apply: Auto
// profile, the classes status.recommendation applied.
func EngineSpec(c *cachev1alpha1.Cache) *cachev1alpha1.CacheSpec {
	return engine.WithObservedClasses(&c.Spec, c.Status.Recommendation)
}

// podMetrics is the reader of c's pods: r.PodMetrics, else HTTP to the
// pods' IPs; with spec.tls.metrics an HTTP reader goes HTTPS, verifying
// the pods' certificate against the serving Secret's ca.crt and
// MetricsServerName, as the PodMonitor has Prometheus do.
func (r *CacheReconciler) podMetrics(ctx context.Context, c *cachev1alpha1.Cache) (PodMetrics, error) {
	m := r.PodMetrics
	if m == nil {
		m = HTTPPodMetrics{Port: r.Engine.MetricsPort}
	}
	h, isHTTP := m.(HTTPPodMetrics)
	if !isHTTP || !engine.MetricsTLS(engine.ForSpec(&c.Spec, r.Engine)) {
		return m, nil
	}
	secret := &corev1.Secret{}
	name := TLSSecretName(c)
	if err := r.getAround(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("the metrics port serves HTTPS: its CA, Secret %s: %w", name, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data[TLSCAKey]) {
		return nil, fmt.Errorf("the metrics port serves HTTPS: Secret %s has no PEM certificate in %s to verify it with", name, TLSCAKey)
	}
	h.TLS = &tls.Config{RootCAs: roots, ServerName: MetricsServerName(c), MinVersion: tls.VersionTLS12}
	return h, nil
}

// ObserveInterval is how often an Observed profile reads the pods.
func ObserveInterval(p *cachev1alpha1.WorkloadProfile) time.Duration {
	if p.ObserveIntervalSeconds != nil {
		return time.Duration(*p.ObserveIntervalSeconds) * time.Second
	}
	return DefaultObserveInterval
}

// settledForRoll: every desired pod is Ready and the StatefulSet is at rest
// on one revision, so rolling takes down one pod of a whole set (what the
// PodDisruptionBudget guards; the StatefulSet controller then rolls one pod
// at a time, waiting for each to be Ready).
func settledForRoll(c *cachev1alpha1.Cache, sts *appsv1.StatefulSet, pods []corev1.Pod) bool {
	if sts == nil || sts.Status.ObservedGeneration < sts.Generation || sts.Status.CurrentRevision != sts.Status.UpdateRevision {
		return false
	}
	ready := int32(0)
	for i := range pods {
		if podReady(&pods[i]) {
			ready++
		}
	}
	return ready >= c.Spec.DesiredReplicas() && sts.Status.ReadyReplicas >= c.Spec.DesiredReplicas()
}

// observeProfile reads the pods of an Observed profile when the interval
// has passed and stores the recommendation (and an apply's classes) in
// status. It says when to look again (0 without an Observed profile), and
// conflict when the status write lost a race (reconcile again soon).
func (r *CacheReconciler) observeProfile(ctx context.Context, c *cachev1alpha1.Cache, sts *appsv1.StatefulSet) (again time.Duration, conflict bool, err error) {
	p := c.Spec.WorkloadProfile
	if p == nil || p.Source != cachev1alpha1.ProfileSourceObserved {
		return 0, false, nil
	}
	interval := ObserveInterval(p)
	prev := c.Status.Recommendation
	now := time.Now()
	if prev != nil && prev.ObservedAt != nil {
		if since := now.Sub(prev.ObservedAt.Time); since >= 0 && since < interval {
			return interval - since, false, nil
		}
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(SelectorLabels(c))); err != nil {
		return 0, false, err
	}
	var samples []engine.PodSample
	var failed []string
	if r.PodMetrics == nil && r.Engine.MetricsPort <= 0 {
		failed = append(failed, "the engines serve no metrics port (operator flag --engine-metrics-port 0)")
	} else {
		var ready []*corev1.Pod
		for i := range pods.Items {
			if pod := &pods.Items[i]; podReady(pod) && pod.Status.PodIP != "" {
				ready = append(ready, pod)
			}
		}
		if m, err := r.podMetrics(ctx, c); err != nil {
			failed = append(failed, err.Error())
		} else {
			samples, failed = readPods(ctx, m, ready, ObserveParallelReads, ObserveDeadline)
		}
	}
	rec, d := engine.RecommendObserved(EngineSpec(c), prev, samples, settledForRoll(c, sts, pods.Items))
	if len(failed) > 0 {
		rec.Notes = strings.Trim(rec.Notes+"; not read: "+strings.Join(failed, "; "), "; ")
	}
	rec.ObservedAt = &metav1.Time{Time: now}
	c.Status.Recommendation = rec
	if err := r.Status().Update(ctx, c); err != nil {
		return 0, apierrors.IsConflict(err), ignoreConflict(err)
	}
	r.recordProfileEvent(c, prev, rec, d)
	return interval, false, nil
}

// recordProfileEvent says why an observation applied or did not: every
// apply, and a decision whose reason (the text before its figures) changed.
func (r *CacheReconciler) recordProfileEvent(c *cachev1alpha1.Cache, prev, rec *cachev1alpha1.Recommendation, d engine.Decision) {
	reason := ReasonProfileNotApplied
	switch {
	case d.Apply:
		reason = ReasonProfileApplied
	case c.Spec.WorkloadProfile.Apply != cachev1alpha1.ProfileApplyAuto:
		reason = ReasonProfileRecommended
	}
	head := func(s string) string { h, _, _ := strings.Cut(s, ":"); return h }
	if !d.Apply && prev != nil && head(prev.Decision) == head(rec.Decision) {
		return
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, reason, "ObserveProfile", "%s; classes %v", rec.Decision, rec.ChunkSizes)
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
