//go:build e2e

package e2e

// cert-manager on the cluster (hack/cert-manager.sh on the local one: its
// controllers and CA injector, built from the module proxy), seen from both
// sides: the operator's own webhooks serve a certificate cert-manager issued
// and whose CA its injector put into the webhook configurations (stage 1),
// and stage 21's Cache takes its serving certificate from a cert-manager CA
// Issuer through spec.tls.issuerRef, served to a verifying client and renewed
// under an open connection.

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// webhookCertFromCertManager checks what stage 1 installed with
// certManager.enabled=true: both webhook configurations carry the chart's
// inject-ca-from annotation and a caBundle equal to the CA of the Secret
// cert-manager wrote for that Certificate, and the webhook itself (not the
// CRD's schema) refuses an invalid Cache and admits a valid one.
func (s *suite) webhookCertFromCertManager(t *testing.T) {
	c := s.c
	hook := "" // the validating webhook's name
	for _, kind := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
		configs, err := c.items(kind, "-l", "app.kubernetes.io/instance="+c.release)
		if err != nil || len(configs) != 1 {
			t.Fatalf("%s of release %s: %d, %v", kind, c.release, len(configs), err)
		}
		cfg := configs[0]
		from := cfg.strMap("metadata", "annotations")["cert-manager.io/inject-ca-from"]
		certNS, certName, ok := strings.Cut(from, "/")
		if !ok {
			t.Fatalf("%s %s has no cert-manager.io/inject-ca-from annotation (%q)", kind, cfg.str("metadata", "name"), from)
		}
		cert, err := c.getJSON("certificates.cert-manager.io", certName, "-n", certNS)
		if err != nil {
			t.Fatal(err)
		}
		if cd := condition(cert, "Ready"); cd == nil || cd.str("status") != "True" {
			t.Fatalf("Certificate %s is not Ready: %s", from, describeConditions(cert))
		}
		ca := s.secretKey(t, certNS, cert.str("spec", "secretName"), "ca.crt")
		for _, wh := range cfg.list("webhooks") {
			if kind == "validatingwebhookconfigurations" {
				hook = wh.str("name")
			}
			bundle, err := base64.StdEncoding.DecodeString(wh.str("clientConfig", "caBundle"))
			if err != nil || len(ca) == 0 || string(bundle) != string(ca) {
				t.Errorf("%s %s webhook %s: caBundle (%d bytes) is not the ca.crt of Secret %s/%s (%d bytes): the CA injector did not inject it",
					kind, cfg.str("metadata", "name"), wh.str("name"), len(bundle), certNS, cert.str("spec", "secretName"), len(ca))
			}
		}
		t.Logf("%s %s: caBundle injected from Certificate %s (cert-manager)", kind, cfg.str("metadata", "name"), from)
	}
	// Only the validating webhook knows this rule (the schema and CEL cannot
	// express it). kubectl prints an Invalid answer the same way whoever gave
	// it, so the API server's own count of the webhook's rejections says who.
	rejections := func() (int, error) {
		return s.apiserverCount("apiserver_admission_webhook_rejection_count", `name="`+hook+`"`, `type="validating"`)
	}
	before, err := rejections()
	if err != nil {
		t.Fatal(err)
	}
	invalid := fmt.Sprintf("apiVersion: cache.cachet.dev/v1alpha1\nkind: Cache\nmetadata:\n  name: e2e-webhook-invalid\n  namespace: %s\n"+
		"spec:\n  memory: 64Mi\n  placement:\n    podLabels:\n      app.kubernetes.io/instance: other\n", c.cacheNS)
	_, err = c.kIn(invalid, "create", "--dry-run=server", "-f", "-")
	after, merr := rejections()
	if merr != nil {
		t.Fatal(merr)
	}
	if err == nil || !strings.Contains(err.Error(), "spec.placement.podLabels") || after != before+1 {
		t.Errorf("an invalid Cache (reserved pod label): %v; the API server counts %d -> %d rejections by webhook %s; want one, naming the field", err, before, after, hook)
	} else {
		t.Logf("invalid Cache refused by webhook %s (the API server's rejections of it %d -> %d): %s", hook, before, after, strings.Join(strings.Fields(err.Error()), " "))
	}
	// and a valid one passes the webhook: admitted by it, not around it
	admissions := func() (int, error) {
		return s.apiserverCount("apiserver_admission_webhook_admission_duration_seconds_count",
			`name="`+hook+`"`, `type="validating"`, `rejected="false"`)
	}
	before, err = admissions()
	if err != nil {
		t.Fatal(err)
	}
	valid := fmt.Sprintf("apiVersion: cache.cachet.dev/v1alpha1\nkind: Cache\nmetadata:\n  name: e2e-webhook-valid\n  namespace: %s\n"+
		"spec:\n  memory: 64Mi\n", c.cacheNS)
	_, err = c.kIn(valid, "create", "--dry-run=server", "-f", "-")
	after, merr = admissions()
	if merr != nil {
		t.Fatal(merr)
	}
	if err != nil || after <= before {
		t.Errorf("a valid Cache: %v; the API server counts %d -> %d admissions by webhook %s; want it admitted by the webhook", err, before, after, hook)
	} else {
		t.Logf("valid Cache admitted by webhook %s (the API server's admissions by it %d -> %d)", hook, before, after)
	}
}

// apiserverCount is the sum of the API server's counter metric over the
// series that carry every one of labels (`name="value"`).
func (s *suite) apiserverCount(metric string, labels ...string) (int, error) {
	out, err := s.c.k("get", "--raw", "/metrics")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, metric+"{") && !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %w", line, err)
			}
			n += int(v)
		}
	}
	return n, nil
}

// secretKey is one key of a Secret's data, decoded.
func (s *suite) secretKey(t *testing.T, ns, name, key string) []byte {
	t.Helper()
	secret, err := s.c.getJSON("secret", name, "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(secret.str("data", key))
	if err != nil {
		t.Fatalf("Secret %s/%s key %s: %v", ns, name, key, err)
	}
	return b
}

// leafCert is the first certificate of a PEM chain.
func leafCert(chain []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(chain)
	if block == nil {
		return nil, fmt.Errorf("no PEM block in %d bytes", len(chain))
	}
	return x509.ParseCertificate(block.Bytes)
}

// cmChain is stage 21's issuers: a SelfSigned ClusterIssuer signs a CA
// Certificate whose Secret a CA Issuer signs with; and a CA Issuer on a
// Secret that does not exist, which cert-manager never makes Ready.
func cmChain(ns string) string {
	return fmt.Sprintf(`apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: cachet-e2e-selfsigned}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: e2e-ca, namespace: %[1]s}
spec:
  isCA: true
  commonName: cachet-e2e cert-manager CA
  secretName: e2e-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {kind: ClusterIssuer, name: cachet-e2e-selfsigned, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: e2e-ca, namespace: %[1]s}
spec: {ca: {secretName: e2e-ca}}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: e2e-ca-without-secret, namespace: %[1]s}
spec: {ca: {secretName: e2e-no-such-secret}}
`, ns)
}

// forceRenewal does what `cmctl renew` does: it sets the Certificate's
// Issuing condition True (reason ManuallyTriggered) in its status, which
// cert-manager's issuing controllers take as an order to issue now.
func (s *suite) forceRenewal(t *testing.T, name string) {
	t.Helper()
	cert, err := s.c.getJSON("certificates.cert-manager.io", name, "-n", s.c.cacheNS)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`[{"op":"add","path":"/status/conditions/-","value":{"type":"Issuing","status":"True","reason":"ManuallyTriggered",`+
		`"message":"Certificate re-issuance manually triggered","lastTransitionTime":%q,"observedGeneration":%d}}]`,
		time.Now().UTC().Format(time.RFC3339), cert.num("metadata", "generation"))
	s.c.mustK(t, "patch", "certificates.cert-manager.io", name, "-n", s.c.cacheNS, "--subresource=status", "--type=json", "-p", patch)
}

// tlsCertManager: a Cache with spec.tls.issuerRef to a cert-manager CA Issuer
// turns TLSReady, serves gomemcache over TLS verified against that CA under a
// name the operator put into the Certificate, refuses plaintext, and takes a
// forced renewal (new key, new serial) without a restart while a connection
// opened before it keeps working. A Cache whose issuer is not Ready says so:
// TLSReady False, IssuerNotReady.
func (s *suite) tlsCertManager(t *testing.T) {
	c := s.c
	if !c.certManager {
		t.Skip("the cluster runs no cert-manager (hack/e2e.sh deploys it on the local cluster; E2E_CERT_MANAGER=1)")
	}
	const name, stuck = "e2e-cm", "e2e-cm-stuck"
	ns := c.cacheNS
	c.dumpOnFailure(t, name, stuck)
	chain := cmChain(ns)
	if _, err := c.kIn(chain, "apply", "-f", "-"); err != nil {
		t.Fatalf("the issuers: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.kIn(chain, "delete", "--ignore-not-found", "-f", "-")
		_, _ = c.k("delete", "secret", "e2e-ca", "-n", ns, "--ignore-not-found")
	})
	// A Certificate asked of an Issuer that is not Ready yet waits for the
	// issuer's next change; waiting here keeps the stage from measuring that.
	eventually(t, time.Minute, time.Second, "the CA Issuer e2e-ca Ready", func() (bool, string) {
		issuer, err := c.getJSON("issuers.cert-manager.io", "e2e-ca", "-n", ns)
		if err != nil {
			return false, err.Error()
		}
		cd := condition(issuer, "Ready")
		return cd != nil && cd.str("status") == "True", describeConditions(issuer)
	})
	spec := "  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n  tls: {issuerRef: {name: %s, kind: Issuer}}\n"
	s.applyCache(t, name, fmt.Sprintf(spec, "e2e-ca"))
	defer s.deleteCache(t, name)
	s.applyCache(t, stuck, fmt.Sprintf(spec, "e2e-ca-without-secret"))
	defer s.deleteCache(t, stuck)

	eventually(t, 2*time.Minute, time.Second, "Cache "+stuck+" TLSReady False IssuerNotReady", func() (bool, string) {
		cache, err := s.getCache(stuck)
		if err != nil {
			return false, err.Error()
		}
		cd := condition(cache, "TLSReady")
		return cd != nil && cd.str("status") == "False" && cd.str("reason") == "IssuerNotReady", describeConditions(cache)
	})
	if cache, err := s.getCache(stuck); err == nil {
		t.Logf("Cache %s, issuer not Ready: TLSReady False IssuerNotReady: %s", stuck, condition(cache, "TLSReady").str("message"))
	}

	pods := s.waitCacheReady(t, name, 1, 3*time.Minute)
	restarts := containerStatus(pods[0], engineContainer).num("restartCount")
	cache, err := s.getCache(name)
	if err != nil {
		t.Fatal(err)
	}
	if cd := condition(cache, "TLSReady"); cd == nil || cd.str("status") != "True" {
		t.Fatalf("TLSReady is not True: %s", describeConditions(cache))
	}
	certName := name + "-tls"
	cert, err := c.getJSON("certificates.cert-manager.io", certName, "-n", ns)
	if err != nil {
		t.Fatalf("the Certificate the operator owns for %s: %v", name, err)
	}
	secretName := cert.str("spec", "secretName")
	serverName := fmt.Sprintf("%s.%s.svc", name, ns)
	var sans []string
	names, _ := cert.get("spec", "dnsNames").([]any)
	for _, n := range names {
		sans = append(sans, fmt.Sprint(n))
	}
	if !slices.Contains(sans, serverName) {
		t.Fatalf("Certificate %s names %v, not the client Service %s", certName, sans, serverName)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.secretKey(t, ns, "e2e-ca", "tls.crt")) {
		t.Fatal("no CA certificate in Secret e2e-ca")
	}
	// cert-manager's mutating webhook writes who asked for a CertificateRequest
	// into it (spec.username, as upstream's identity plugin); nothing else does.
	requests, err := c.items("certificaterequests.cert-manager.io", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, cr := range requests {
		if !strings.HasPrefix(cr.str("metadata", "name"), certName+"-") {
			continue
		}
		seen++
		if u := cr.str("spec", "username"); u == "" {
			t.Errorf("CertificateRequest %s has no spec.username: cert-manager's webhook did not see it", cr.str("metadata", "name"))
		} else {
			t.Logf("CertificateRequest %s: spec.username %s (set by cert-manager's webhook)", cr.str("metadata", "name"), u)
		}
	}
	if seen == 0 {
		t.Errorf("no CertificateRequest of %s in %s", certName, ns)
	}
	issuedCert, err := leafCert(s.secretKey(t, ns, secretName, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	issued := issuedCert.SerialNumber

	addr := c.portForward(t, ns, "svc/"+name, memcachePort)
	checkPlaintextRefused(t, addr)
	sess, served, err := dialTLS(addr, serverName, pool)
	if err != nil {
		t.Fatalf("TLS handshake verified against the cert-manager CA as %s: %v", serverName, err)
	}
	defer sess.close()
	if served.Cmp(issued) != 0 {
		t.Errorf("the server presented serial %s, Secret %s holds %s", served, secretName, issued)
	}
	if err := sess.roundTrip("held-over-renewal", "before-renewal"); err != nil {
		t.Fatal(err)
	}
	setGetClient(t, tlsMemcacheClient(addr, serverName, pool, ""), addr, "e2e-cm")

	s.forceRenewal(t, certName)
	renewal := time.Now()
	var renewedCert *x509.Certificate
	eventually(t, time.Minute, time.Second, "cert-manager to write a renewed certificate into Secret "+secretName, func() (bool, string) {
		secret, err := c.getJSON("secret", secretName, "-n", ns)
		if err != nil {
			return false, err.Error()
		}
		chain, err := base64.StdEncoding.DecodeString(secret.str("data", "tls.crt"))
		if err != nil {
			return false, err.Error()
		}
		if renewedCert, err = leafCert(chain); err != nil {
			return false, err.Error()
		}
		return renewedCert.SerialNumber.Cmp(issued) != 0, "serial " + renewedCert.SerialNumber.String()
	})
	renewed := renewedCert.SerialNumber
	// the operator's Certificate asks for privateKey.rotationPolicy Always
	if bytes.Equal(renewedCert.RawSubjectPublicKeyInfo, issuedCert.RawSubjectPublicKeyInfo) {
		t.Errorf("the renewed certificate (serial %s) has the public key of the first (serial %s): rotationPolicy Always wants a new key", renewed, issued)
	}
	t.Logf("renewed: serial %s -> %s, new public key", issued, renewed)
	waitServedSerial(t, 2*time.Minute, addr, serverName, pool, renewed)
	t.Logf("a new connection got the renewed certificate %s after the forced renewal", time.Since(renewal).Round(time.Second))
	if err := sess.roundTrip("held-over-renewal", "after-renewal"); err != nil {
		t.Errorf("the connection opened before the renewal: %v", err)
	}
	s.checkSamePod(t, name, pods[0], restarts, "the renewal")
}
