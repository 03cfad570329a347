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

// Command manager runs the Cachet operator: the Cache controller, its
// admission webhooks and, when asked, the rotation of their serving
// certificate. "manager node-tuner" runs the node tuner instead (one per
// node, from the chart's DaemonSet; internal/nodetuner).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/controllers"
	"cachet.dev/cachet/internal/engine"
	"cachet.dev/cachet/internal/nodetuner/tuner"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1alpha1.AddToScheme(scheme))
	utilruntime.Must(monitoringv1.AddToScheme(scheme))
}

// Webhook certificate modes.
const (
	certModeCertManager = "cert-manager" // cert-manager writes the Secret mounted at --webhook-cert-dir and injects the CA
	certModeSelfSigned  = "self-signed"  // the operator makes, rotates and injects its own CA and serving certificate
)

// The self-signed mode's rotator keeps its CA and certificate in one Secret
// of the operator's namespace ("system" is rewritten by kustomize and the chart).
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;list;watch;update;patch

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node-tuner" {
		os.Exit(tuner.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	var (
		metricsAddr, probeAddr                  string
		secureMetrics, enableHTTP2, leaderElect bool
		enableWebhooks                          bool
		webhookPort                             int
		webhookCertDir, webhookCertMode         string
		webhookSecret, webhookService           string
		mutatingConfig, validatingConfig        string
		namespace, leaderElectionID             string
		engineImage, clusterDomain              string
		watchNamespaces, metricsCertDir         string
		engineMetricsPort                       int
		checkCPUManager                         bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address of the metrics endpoint (HTTPS unless --metrics-secure=false). \"0\" disables it.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, allowing only callers authorized by a SubjectAccessReview.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderElectionID, "leader-election-id", "cachet-operator.cache.cachet.dev", "Name of the Lease used for leader election, in the operator's namespace.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "Serve webhooks and metrics over HTTP/2 as well (off by default: CVE-2023-44487 / CVE-2023-39325).")
	flag.BoolVar(&enableWebhooks, "enable-webhooks", true, "Serve the defaulting and validating admission webhooks.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding the webhook serving certificate (tls.crt, tls.key).")
	flag.StringVar(&webhookCertMode, "webhook-cert-mode", certModeCertManager, "Where the webhook certificate comes from: cert-manager or self-signed.")
	flag.StringVar(&webhookSecret, "webhook-secret-name", "cachet-webhook-server-cert", "self-signed mode: the Secret that keeps the CA and serving certificate.")
	flag.StringVar(&webhookService, "webhook-service-name", "cachet-webhook-service", "self-signed mode: the webhook Service, named in the certificate.")
	flag.StringVar(&mutatingConfig, "mutating-webhook-configuration", "cachet-mutating-webhook-configuration", "self-signed mode: the MutatingWebhookConfiguration to inject the CA into.")
	flag.StringVar(&validatingConfig, "validating-webhook-configuration", "cachet-validating-webhook-configuration", "self-signed mode: the ValidatingWebhookConfiguration to inject the CA into.")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The operator's namespace (default $POD_NAMESPACE, then the service account's namespace).")
	flag.StringVar(&engineImage, "engine-image", "localhost/cachetd:0.1.0", "Engine image written into Caches that name none.")
	flag.StringVar(&clusterDomain, "cluster-domain", "cluster.local", "Cluster DNS domain, used in the pods' names in status.endpoints and in self-signed certificates.")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose Caches the operator manages; empty: all namespaces. With a list, Roles in those namespaces are all the operator needs.")
	flag.IntVar(&engineMetricsPort, "engine-metrics-port", engine.DefaultMetricsPort, "Port on which cachetd serves GET /healthz and /metrics (-o metrics_port); the readiness probe is /healthz there, liveness is cachet-probe on the data port. 0: engines older than metrics_port, both probes cachet-probe.")
	flag.BoolVar(&checkCPUManager, "check-cpu-manager", false, "Read each node's kubelet /configz (nodes/proxy permission) to report whether dedicated-CPU pods really get exclusive cores (condition CoresExclusive).")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint (e.g. the webhook certificate's); empty: a self-signed certificate.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	if webhookCertMode != certModeCertManager && webhookCertMode != certModeSelfSigned {
		setupLog.Error(fmt.Errorf("--webhook-cert-mode=%q", webhookCertMode), "must be cert-manager or self-signed")
		os.Exit(2)
	}
	if namespace == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			namespace = strings.TrimSpace(string(b))
		}
	}

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsTLS := tlsOpts
	if metricsCertDir != "" {
		// Read lazily: in self-signed mode the certificate reaches the
		// directory only after the rotator has made it, and the metrics
		// server must not fail to start meanwhile.
		files := &certFiles{dir: metricsCertDir}
		metricsTLS = append(append([]func(*tls.Config){}, tlsOpts...), func(c *tls.Config) { c.GetCertificate = files.get })
	}
	metricsOptions := metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: metricsTLS}
	if secureMetrics {
		metricsOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	restConfig := ctrl.GetConfigOrDie()
	// A hanging aggregated API (an adapter that stopped answering) must not
	// hold a reconcile for the client's default 32 s.
	discoveryConfig := rest.CopyConfig(restConfig)
	discoveryConfig.Timeout = 5 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(discoveryConfig)
	if err != nil {
		setupLog.Error(err, "unable to create a discovery client")
		os.Exit(1)
	}
	// Which optional kinds (prometheus-operator's) exist decides what the
	// manager can watch; ones installed later are found by each reconcile.
	apis := &controllers.DiscoveryChecker{Discovery: dc, TTL: 30 * time.Second}
	servedOptional := controllers.OptionalKindsServed(apis)

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOptions,
		WebhookServer:          webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: webhookCertDir, TLSOpts: tlsOpts}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       leaderElectionID,
		// Stepping down on SIGTERM lets the next leader start at once.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(servedOptional, splitList(watchNamespaces)...),
	})
	if err != nil {
		setupLog.Error(err, "unable to create manager")
		os.Exit(1)
	}

	// In self-signed mode the webhooks may only be served once the rotator
	// has written the certificate; everything else starts right away.
	certsReady := make(chan struct{})
	if enableWebhooks && webhookCertMode == certModeSelfSigned {
		if namespace == "" {
			setupLog.Error(nil, "self-signed webhook certificates need --namespace or POD_NAMESPACE")
			os.Exit(2)
		}
		svc := fmt.Sprintf("%s.%s.svc", webhookService, namespace)
		if err := rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      types.NamespacedName{Namespace: namespace, Name: webhookSecret},
			CertDir:        webhookCertDir,
			CAName:         "cachet-webhook-ca",
			CAOrganization: "cachet",
			DNSName:        svc,
			ExtraDNSNames:  []string{svc + "." + clusterDomain, webhookService + "." + namespace},
			IsReady:        certsReady,
			Webhooks: []rotator.WebhookInfo{
				{Name: mutatingConfig, Type: rotator.Mutating},
				{Name: validatingConfig, Type: rotator.Validating},
			},
			RequireLeaderElection: false, // every replica serves webhooks, so every replica needs the certificate
		}); err != nil {
			setupLog.Error(err, "unable to set up certificate rotation")
			os.Exit(1)
		}
		// Copy the certificate to disk at once, rather than waiting up to a
		// minute and a half for the kubelet to refresh a Secret volume.
		if err := mgr.Add(&certFileWriter{
			reader: mgr.GetAPIReader(),
			secret: types.NamespacedName{Namespace: namespace, Name: webhookSecret},
			dir:    webhookCertDir,
		}); err != nil {
			setupLog.Error(err, "unable to set up the certificate writer")
			os.Exit(1)
		}
	} else {
		close(certsReady)
	}

	reconciler := &controllers.CacheReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Scheme:         mgr.GetScheme(),
		Recorder:       mgr.GetEventRecorder("cachet-operator"),
		EngineImage:    engineImage,
		Engine:         engine.Options{MetricsPort: int32(engineMetricsPort)},
		ClusterDomain:  clusterDomain,
		APIs:           apis,
		ServedOptional: servedOptional,
	}
	if checkCPUManager {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			setupLog.Error(err, "unable to create a client for the kubelet check")
			os.Exit(1)
		}
		reconciler.CPUManager = &controllers.KubeletConfigz{REST: cs.CoreV1().RESTClient(), TTL: 5 * time.Minute}
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "Cache")
		os.Exit(1)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	readyCheck := healthz.Ping
	if enableWebhooks {
		// The webhook server is created (and so started) only once the
		// certificate exists: it reads tls.crt when it starts.
		readyCheck = func(req *http.Request) error {
			select {
			case <-certsReady:
			default:
				return fmt.Errorf("webhook certificate not ready yet")
			}
			return mgr.GetWebhookServer().StartedChecker()(req)
		}
		go func() {
			<-certsReady
			if err := cachev1alpha1.SetupCacheWebhookWithManager(mgr, engineImage); err != nil {
				setupLog.Error(err, "unable to create webhook", "webhook", "Cache")
				os.Exit(1)
			}
			setupLog.Info("webhooks registered", "certMode", webhookCertMode)
		}()
	}
	if err := mgr.AddReadyzCheck("readyz", readyCheck); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting manager", "engineImage", engineImage, "clusterDomain", clusterDomain, "webhooks", enableWebhooks, "certMode", webhookCertMode,
		"watchNamespaces", watchNamespaces, "engineMetricsPort", engineMetricsPort, "checkCPUManager", checkCPUManager)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// splitList reads a comma-separated flag into its non-empty elements.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// certFiles serves the key pair in dir, reloading it when tls.crt changes.
type certFiles struct {
	dir   string
	mu    sync.Mutex
	mtime time.Time
	cert  *tls.Certificate
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	crt := filepath.Join(f.dir, corev1.TLSCertKey)
	st, err := os.Stat(crt)
	if err != nil {
		return nil, fmt.Errorf("no serving certificate yet: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert == nil || !st.ModTime().Equal(f.mtime) {
		pair, err := tls.LoadX509KeyPair(crt, filepath.Join(f.dir, corev1.TLSPrivateKeyKey))
		if err != nil {
			return nil, err
		}
		f.cert, f.mtime = &pair, st.ModTime()
	}
	return f.cert, nil
}

// certFileWriter copies the self-signed mode's Secret (filled and rotated by
// cert-controller) into the webhook certificate directory whenever it
// changes. With an emptyDir there, the webhook serves seconds after the
// rotator writes the Secret; with the Secret mounted read-only instead, the
// kubelet's volume refresh does the job and the writer stops at its first
// refused write.
type certFileWriter struct {
	reader client.Reader
	secret types.NamespacedName
	dir    string
}

// NeedLeaderElection: every replica serves webhooks, so each needs the files.
func (w *certFileWriter) NeedLeaderElection() bool { return false }

// Start polls the Secret: every second until the first certificate is on
// disk, then every minute (rotation happens weeks before expiry).
func (w *certFileWriter) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("cert-files")
	period := time.Second
	for {
		written, err := w.sync(ctx)
		switch {
		case errors.Is(err, syscall.EROFS) || errors.Is(err, os.ErrPermission):
			log.Info("certificate directory is not writable; relying on the Secret volume", "dir", w.dir)
			return nil
		case err != nil:
			log.V(1).Info("certificate not copied yet", "reason", err.Error())
		case written:
			log.Info("wrote the webhook certificate", "dir", w.dir)
			period = time.Minute
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// sync writes tls.key, then tls.crt, when the Secret holds a certificate that
// differs from the files. Each file is replaced by a rename, so the webhook
// server never reads half a file.
func (w *certFileWriter) sync(ctx context.Context) (bool, error) {
	s := &corev1.Secret{}
	if err := w.reader.Get(ctx, w.secret, s); err != nil {
		return false, err
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return false, fmt.Errorf("secret %s holds no certificate yet", w.secret)
	}
	if old, err := os.ReadFile(filepath.Join(w.dir, corev1.TLSCertKey)); err == nil && bytes.Equal(old, crt) {
		return false, nil
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{corev1.TLSPrivateKeyKey, key}, {corev1.TLSCertKey, crt}} {
		tmp := filepath.Join(w.dir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return false, err
		}
		if err := os.Rename(tmp, filepath.Join(w.dir, f.name)); err != nil {
			return false, err
		}
	}
	return true, nil
}
