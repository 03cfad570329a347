// Command cachet-controller runs cert-manager's own controllers for
// Certificates, CertificateRequests and the SelfSigned and CA issuers, from
// the pinned release's pkg/controller, and its CA injector (cainjector.go),
// so the local cluster and envtest have a real cert-manager although its
// cmd/controller and cmd/cainjector are not on the module proxy.
// It is glue only: the controllers, their informers and their clients are
// upstream's; this file does what upstream's cmd/controller/app does for them
// (build one ContextFactory, construct the registered controllers, start the
// shared informers, run) with upstream's defaults, minus what the e2e does
// not use: ACME, Vault, Venafi, the ingress and Gateway shims, the
// CertificateSigningRequest controllers, leader election, the metrics and
// health servers. cert-manager's webhook runs in the same process when
// --webhook-port is given (webhook.go).
//
// Concurrency: every controller runs its own workers against the shared
// informer caches; one process per cluster (no leader election, so never run
// two replicas).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cert-manager/cert-manager/internal/kube"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // registers the CA issuer with the issuers controllers
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // registers the SelfSigned issuer
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

// controllers are upstream's default set restricted to the SelfSigned and CA
// issuers: the names each package registers itself under in its init().
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	crapprover.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	logf.InitLogs()
	ctrl.SetLogger(klog.NewKlogr())
	// A flag set of our own: controller-runtime's init() already defines
	// --kubeconfig on the global one.
	flags := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	klog.InitFlags(flags)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	namespace := flags.String("namespace", "", "namespace to watch; empty: all")
	clusterResourceNamespace := flags.String("cluster-resource-namespace", "kube-system",
		"namespace of the Secrets that ClusterIssuers refer to (upstream's default)")
	workers := flags.Int("concurrent-workers", 5, "workers per controller (upstream's default)")
	// Upstream's flag of the same name, off by default as there. On, the
	// Secret of a deleted Certificate goes with it (garbage collection), so
	// uninstalling whatever made the Certificate leaves no key behind.
	ownerRef := flags.Bool("enable-certificate-owner-ref", false,
		"make each Certificate the owner of its Secret, so deleting the Certificate deletes the Secret")
	var webhook webhookOptions
	flags.IntVar(&webhook.port, "webhook-port", 0, "serve cert-manager's admission webhook on this port (upstream's 6443); 0: no webhook")
	flags.IntVar(&webhook.healthzPort, "webhook-healthz-port", 6080, "the webhook's /healthz and /livez port")
	flags.StringVar(&webhook.namespace, "webhook-namespace", "cert-manager", "namespace of the webhook's Service and of its CA Secret")
	flags.StringVar(&webhook.service, "webhook-service", "cert-manager-webhook", "name of the webhook's Service (its serving certificate's DNS names)")
	flags.StringVar(&webhook.caSecret, "webhook-ca-secret", "cert-manager-webhook-ca", "Secret holding the webhook's own CA, made and rotated by the webhook")
	_ = flags.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log)
	if err := run(ctx, *kubeconfig, *namespace, *clusterResourceNamespace, *workers, *ownerRef, webhook); err != nil {
		logf.Log.Error(err, "cachet-controller stopped")
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.FlushLogs()
}

func run(ctx context.Context, kubeconfig, namespace, clusterResourceNamespace string, workers int, ownerRef bool, webhook webhookOptions) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig: kubeconfig,
		Namespace:  namespace,
		// upstream's defaults (internal/apis/config/controller/v1alpha1/defaults.go)
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef:                           ownerRef,
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	injectorConfig, err := kube.BuildClientConfig("", kubeconfig)
	if err != nil {
		return err
	}
	group, ctx := errgroup.WithContext(ctx)
	group.Go(func() error {
		return runCAInjector(ctx, util.RestConfigWithUserAgent(injectorConfig, "cainjector"), namespace)
	})
	if webhook.port != 0 {
		group.Go(func() error { return runWebhook(ctx, kubeconfig, webhook) })
	}
	for _, name := range controllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered by the linked cert-manager packages", name)
		}
		controller, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		logf.Log.Info("starting controller", "controller", name)
		group.Go(func() error { return controller.Run(workers, ctx) })
	}
	// The constructors above asked the shared factories for their informers;
	// starting the factories now starts exactly those.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	return group.Wait()
}
