// The admission webhook of cert-manager: upstream's server and admission
// chain (internal/webhook.NewCertManagerWebhookServer: the CertificateRequest
// identity mutation, the approval check against SubjectAccessReviews, and
// the validation of every cert-manager.io and acme.cert-manager.io resource),
// serving with a certificate from upstream's dynamic CA, which it keeps in a
// Secret that the CA injector copies into the webhook configurations
// (cert-manager.io/inject-ca-from-secret), as upstream's cmd/webhook does with
// its defaults. Off unless --webhook-port is given, so a process without a
// Service and webhook configurations in front of it serves nothing.
//
// Concurrency: the server's own goroutines; it shares nothing with the
// controllers but the process.
package main

import (
	"context"
	"time"

	"github.com/cert-manager/cert-manager/internal/apis/config/shared"
	config "github.com/cert-manager/cert-manager/internal/apis/config/webhook"
	cmwebhook "github.com/cert-manager/cert-manager/internal/webhook"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// webhookOptions are the few of upstream's webhook settings the local
// cluster needs; the rest keep upstream's defaults.
type webhookOptions struct {
	port        int    // the serving port; 0: no webhook
	healthzPort int    // upstream's 6080
	namespace   string // of the Service and of the dynamic CA's Secret
	service     string // the Service name the serving certificate is for
	caSecret    string // the dynamic CA's Secret (upstream: <release>-webhook-ca)
}

func runWebhook(ctx context.Context, kubeconfig string, o webhookOptions) error {
	srv, err := cmwebhook.NewCertManagerWebhookServer(logf.Log.WithName("webhook"), config.WebhookConfiguration{
		SecurePort:  int32(o.port),
		HealthzPort: int32(o.healthzPort),
		KubeConfig:  kubeconfig,
		// controller-runtime's "0": no metrics listener (the controllers
		// serve none either).
		MetricsListenAddress: "0",
		TLSConfig: shared.TLSConfig{Dynamic: shared.DynamicServingConfig{
			SecretNamespace: o.namespace,
			SecretName:      o.caSecret,
			DNSNames:        []string{o.service, o.service + "." + o.namespace, o.service + "." + o.namespace + ".svc"},
			LeafDuration:    7 * 24 * time.Hour, // upstream's default
		}},
	})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}
