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

// The integration tests run the real reconciler and webhooks against a real
// kube-apiserver and etcd (envtest; `make envtest` builds the apiserver from
// the module proxy). No kube-controller-manager runs, so the tests play the
// StatefulSet controller themselves by writing StatefulSet and pod status,
// and check owner references rather than garbage collection.

package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
	"cachet.dev/cachet/test/utils"
)

const testEngineImage = "localhost/cachetd:envtest"

// suiteEngine is how the suite's operator shapes engines: as the real one
// does by default, with a metrics port.
var suiteEngine = engine.Options{MetricsPort: engine.DefaultMetricsPort}

// suiteCurrent shapes the engine of a Cache that runs the suite operator's
// own image (every Cache the defaulting webhook fills in): with the options
// only that engine understands.
var suiteCurrent = EngineOptionsFor(suiteEngine, testEngineImage, testEngineImage, nil)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
	// testRecorder is the manager's event recorder, for direct reconciles.
	testRecorder recorder.EventRecorder
	// warnings collects admission warnings seen by k8sClient.
	warnings warningCollector
)

type warningCollector struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningCollector) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningCollector) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// integration reports whether the envtest binaries are available; unit tests
// run without them, integration tests fail (never skip) without them.
func integration() bool { return os.Getenv("KUBEBUILDER_ASSETS") != "" }

func run(m *testing.M) int {
	if !integration() {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: integration tests will FAIL. Run them with 'make test' (which builds kube-apiserver and links etcd).")
		return m.Run()
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1alpha1.AddToScheme(scheme))
	utilruntime.Must(monitoringv1.AddToScheme(scheme))
	// tests remove the CRDs they install (installCRDsFrom)
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))

	root := filepath.Join("..")
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
		BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"),
	}
	var err error
	cfg, err = testEnv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()

	clientCfg := rest.CopyConfig(cfg)
	clientCfg.WarningHandler = &warnings
	k8sClient, err = client.New(clientCfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		return 1
	}

	wh := testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
		// prometheus-operator's CRDs are installed by a test, after start:
		// the operator must find them without a watch.
		Cache: CacheOptions(nil),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 1
	}
	testRecorder = mgr.GetEventRecorder("cachet-operator")
	if err := (&CacheReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: testRecorder,
		EngineImage: testEngineImage, ClusterDomain: "cluster.test", Engine: suiteEngine,
		// Short enough that tests see a retry after the cause went away.
		MaxBackoff: 4 * time.Second,
		APIs:       &DiscoveryChecker{Discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg), TTL: 500 * time.Millisecond},
		// Short enough that tests see CRDs installed after the start.
		RecheckAPIs:    2 * time.Second,
		RecheckSecrets: 2 * time.Second,
		PodMetrics:     HTTPPodMetrics{Port: suiteEngine.MetricsPort, Addr: testEngineAddr},
	}).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "controller: %v\n", err)
		return 1
	}
	if err := cachev1alpha1.SetupCacheWebhookWithManager(mgr, testEngineImage); err != nil {
		fmt.Fprintf(os.Stderr, "webhook: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()

	// Wait until the webhook server accepts TLS connections, so that the first
	// create does not race its start.
	addr := net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only probing that the local server is up
		if err != nil {
			return false, nil //nolint:nilerr // not up yet: keep polling
		}
		_ = conn.Close()
		return true, nil
	}); err != nil {
		fmt.Fprintf(os.Stderr, "webhook server never came up on %s: %v\n", addr, err)
		return 1
	}
	return m.Run()
}

// needIntegration fails a test that needs the API server when it is absent:
// a skipped integration test must never pass for a tested one.
func needIntegration(t *testing.T) {
	t.Helper()
	if !integration() {
		t.Fatal("KUBEBUILDER_ASSETS is not set; run 'make test'")
	}
}

// eventually polls cond until it holds (test/utils.Eventually with the
// envtest suite's bounds).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	utils.Eventually(t, 60*time.Second, 100*time.Millisecond, what, cond)
}
