//go:build e2e

package e2e

// Stage 19: the data plane's TLS and authentication (spec.tls.secretName,
// spec.auth.secretRef) seen by a real client, and both Secrets rotated under
// a live pod. The certificate is issued here (crypto/x509):
// spec.tls.secretName is the path that needs no cert-manager; stage 21
// (certmanager_test.go) takes spec.tls.issuerRef's.
//
// Every connection goes to 127.0.0.1 through `kubectl port-forward`; the
// client verifies the server's certificate against the test's CA under the
// Service's and the pod's DNS names, so the SANs are checked, not skipped.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"cachet.dev/cachet/test/utils"
)

// applySecret creates or replaces a Secret's data (a rotation is the same
// apply with new data, as cert-manager or a user would do it).
func (s *suite) applySecret(t *testing.T, name, typ string, data map[string][]byte) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: %s\ndata:\n", name, s.c.cacheNS, typ)
	for k, v := range data {
		fmt.Fprintf(&b, "  %s: %s\n", k, base64.StdEncoding.EncodeToString(v))
	}
	if _, err := s.c.kIn(b.String(), "apply", "-f", "-"); err != nil {
		t.Fatalf("applying Secret %s: %v", name, err)
	}
}

// memcacheSession is one client connection speaking the text protocol.
type memcacheSession struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialTLS connects through addr with TLS, verifying the server's certificate
// against pool under serverName, and returns the session and the serial of the
// certificate the server presented.
func dialTLS(addr, serverName string, pool *x509.CertPool) (*memcacheSession, *big.Int, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	tc := c.(*tls.Conn)
	return &memcacheSession{conn: c, r: bufio.NewReader(c)}, tc.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// tlsMemcacheClient is gomemcache dialling every connection through addr with
// TLS, verified against pool under serverName; with a password, each
// connection authenticates as e2eUser before use.
func tlsMemcacheClient(addr, serverName string, pool *x509.CertPool, password string) *memcache.Client {
	mc := memcache.New(addr)
	mc.Timeout = 10 * time.Second
	mc.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		m, _, err := dialTLS(address, serverName, pool)
		if err != nil {
			return nil, err
		}
		if password != "" {
			if reply, err := m.authenticate(password); err != nil || reply != "STORED" {
				m.close()
				return nil, replyError("auth", reply, err)
			}
		}
		_ = m.conn.SetDeadline(time.Time{})
		return m.conn, nil
	}
	return mc
}

// line sends one request (and its data block, if any) and reads one reply line.
func (m *memcacheSession) line(request string, data []byte) (string, error) {
	_ = m.conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := request + "\r\n"
	if data != nil {
		msg += string(data) + "\r\n"
	}
	if _, err := io.WriteString(m.conn, msg); err != nil {
		return "", err
	}
	l, err := m.r.ReadString('\n')
	return strings.TrimRight(l, "\r\n"), err
}

// e2eUser is stage 18's one user of spec.auth.
const e2eUser = "e2e-user"

// authenticate is memcached's ASCII auth (-Y) as e2eUser: the first command is
// a set whose data is "user password"; STORED means accepted.
func (m *memcacheSession) authenticate(password string) (string, error) {
	return m.line("set auth 0 0 "+fmt.Sprint(len(e2eUser)+1+len(password)), []byte(e2eUser+" "+password))
}

// roundTrip stores key=value and reads it back on this connection.
func (m *memcacheSession) roundTrip(key, value string) error {
	if reply, err := m.line(fmt.Sprintf("set %s 0 0 %d", key, len(value)), []byte(value)); err != nil || reply != "STORED" {
		return replyError("set "+key, reply, err)
	}
	want := fmt.Sprintf("VALUE %s 0 %d", key, len(value))
	if reply, err := m.line("get "+key, nil); err != nil || reply != want {
		return replyError(fmt.Sprintf("get %s (want %q)", key, want), reply, err)
	}
	for _, w := range []string{value, "END"} {
		l, err := m.r.ReadString('\n')
		if err != nil || strings.TrimRight(l, "\r\n") != w {
			return replyError(fmt.Sprintf("get %s (want %q)", key, w), l, err)
		}
	}
	return nil
}

// replyError says what went wrong with a request: the connection's error, or
// the reply that was not the one expected.
func replyError(request, reply string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", request, err)
	}
	return fmt.Errorf("%s: answered %q", request, strings.TrimRight(reply, "\r\n"))
}

// stat reads one counter of `stats` on this (authenticated) connection.
func (m *memcacheSession) stat(name string) (string, error) {
	reply, err := m.line("stats", nil)
	value := ""
	for err == nil && reply != "END" {
		if f := strings.Fields(reply); len(f) == 3 && f[0] == "STAT" && f[1] == name {
			value = f[2]
		} else if !strings.HasPrefix(reply, "STAT ") {
			return "", fmt.Errorf("stats answered %q", reply)
		}
		var l string
		l, err = m.r.ReadString('\n')
		reply = strings.TrimRight(l, "\r\n")
	}
	if value == "" && err == nil {
		err = fmt.Errorf("stats has no %s", name)
	}
	return value, err
}

func (m *memcacheSession) close() { _ = m.conn.Close() }

// plaintextRefused sends a plaintext command to a TLS-only port and returns
// what came back; the port must close the connection without a memcached reply.
func plaintextRefused(addr string) (reply string, closed bool, err error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "version\r\nget k\r\n"); err != nil {
		return "", true, nil
	}
	b, rerr := io.ReadAll(conn)
	var ne net.Error
	if errors.As(rerr, &ne) && ne.Timeout() {
		return string(b), false, nil
	}
	return string(b), true, nil
}

// checkPlaintextRefused fails the test unless a plaintext client of the TLS
// port through addr gets no memcached reply and is closed.
func checkPlaintextRefused(t *testing.T, addr string) {
	t.Helper()
	reply, closed, err := plaintextRefused(addr)
	if err != nil || !closed || strings.Contains(reply, "VERSION") || strings.Contains(reply, "END") {
		t.Errorf("plaintext client: reply %q closed=%v err=%v; want the connection closed with no memcached reply", reply, closed, err)
	} else {
		t.Logf("plaintext client refused: %d bytes (a TLS alert at most), then closed", len(reply))
	}
}

// tlsAuth: a Cache with spec.tls.secretName and spec.auth.secretRef serves a
// real client over TLS after a right password only, refuses plaintext and
// wrong passwords with memcached's errors, and takes both Secrets' rotation
// without a restart while an established connection keeps working.
func (s *suite) tlsAuth(t *testing.T) {
	c := s.c
	const name = "e2e-tls"
	certSecret, usersSecret := name+"-cert", name+"-users"
	c.dumpOnFailure(t, name)
	ns := c.cacheNS
	svcName := fmt.Sprintf("%s.%s.svc", name, ns)
	sans := []string{name, name + "." + ns, svcName, svcName + ".cluster.local",
		fmt.Sprintf("*.%s-headless.%s.svc", name, ns), fmt.Sprintf("*.%s-headless.%s.svc.cluster.local", name, ns)}
	ca := utils.NewTestCA(t)
	cert1, key1 := ca.Issue(t, 1001, sans)
	s.applySecret(t, certSecret, "kubernetes.io/tls", map[string][]byte{"tls.crt": cert1, "tls.key": key1, "ca.crt": ca.CertPEM})
	s.applySecret(t, usersSecret, "Opaque", map[string][]byte{e2eUser: []byte("first-password")})
	defer func() { _, _ = c.k("delete", "secret", certSecret, usersSecret, "-n", ns, "--ignore-not-found") }()

	s.applyCache(t, name, fmt.Sprintf("  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n"+
		"  tls: {secretName: %s}\n  auth: {secretRef: {name: %s}}\n", certSecret, usersSecret))
	defer s.deleteCache(t, name)
	// Ready needs the engine's /healthz, which does the TLS handshake and auth itself.
	pods := s.waitCacheReady(t, name, 1, 4*time.Minute)
	pod := pods[0]
	podName := pod.str("metadata", "name")
	restarts := containerStatus(pod, engineContainer).num("restartCount")

	cache, err := s.getCache(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range []string{"TLSReady", "AuthReady"} {
		if cd := condition(cache, cond); cd == nil || cd.str("status") != "True" {
			t.Errorf("condition %s is %v, want True (conditions: %s)", cond, cd, describeConditions(cache))
		}
	}
	for _, e := range cache.list("status", "endpoints") {
		if e.get("tls") != true {
			t.Errorf("status.endpoints entry %v does not say tls: true", e)
		}
	}

	addr := c.portForward(t, ns, "svc/"+name, memcachePort)

	// Plaintext on the TLS port gets no memcached reply and is closed.
	checkPlaintextRefused(t, addr)

	// TLS, verified under the Service's name: before auth every command is refused.
	sess, serial, err := dialTLS(addr, svcName, ca.Pool)
	if err != nil {
		t.Fatalf("TLS handshake verified as %s: %v", svcName, err)
	}
	if serial.Int64() != 1001 {
		t.Errorf("server presented serial %s, want 1001", serial)
	}
	if reply, err := sess.line("get k", nil); err != nil || reply != "CLIENT_ERROR unauthenticated" {
		t.Errorf("get before auth: %q %v, want CLIENT_ERROR unauthenticated", reply, err)
	}
	if reply, err := sess.authenticate("wrong-password"); err != nil || reply != "CLIENT_ERROR authentication failure" {
		t.Errorf("wrong password: %q %v, want CLIENT_ERROR authentication failure", reply, err)
	}
	if reply, err := sess.line("get k", nil); err != nil || reply != "CLIENT_ERROR unauthenticated" {
		t.Errorf("get after a wrong password: %q %v, want CLIENT_ERROR unauthenticated", reply, err)
	}
	if reply, err := sess.authenticate("first-password"); err != nil || reply != "STORED" {
		t.Fatalf("right password: %q %v, want STORED", reply, err)
	}
	if v, err := sess.stat("auth_errors"); err != nil || v == "0" {
		t.Errorf("stats auth_errors=%q (%v) after a wrong password, want it counted", v, err)
	}
	if err := sess.roundTrip("held", "before-rotation"); err != nil {
		t.Fatal(err)
	}
	defer sess.close()

	// A pod's own stable name is a SAN too (clients that hash keys connect per pod).
	podAddr := c.portForward(t, ns, "pod/"+podName, memcachePort)
	podHost := fmt.Sprintf("%s.%s-headless.%s.svc", podName, name, ns)
	if ps, _, err := dialTLS(podAddr, podHost, ca.Pool); err != nil {
		t.Errorf("TLS to pod %s verified as %s: %v", podName, podHost, err)
	} else {
		ps.close()
	}

	// A real memcached client: gomemcache over TLS, authenticating each
	// connection it opens before use.
	setGetClient(t, tlsMemcacheClient(addr, svcName, ca.Pool, "first-password"), addr, "e2e-tls")

	// Rotation: a new certificate (new key, serial 1002) and a new password.
	cert2, key2 := ca.Issue(t, 1002, sans)
	s.applySecret(t, certSecret, "kubernetes.io/tls", map[string][]byte{"tls.crt": cert2, "tls.key": key2, "ca.crt": ca.CertPEM})
	s.applySecret(t, usersSecret, "Opaque", map[string][]byte{e2eUser: []byte("second-password")})
	rotated := time.Now()
	// The kubelet refreshes Secret volumes within its sync period (about a
	// minute), the operator re-renders the authfile within 30 s of the user
	// Secret's change: bounded waits on what a new connection sees.
	waitServedSerial(t, 4*time.Minute, addr, svcName, ca.Pool, big.NewInt(1002))
	eventually(t, 4*time.Minute, 2*time.Second, "the rotated password accepted", func() (bool, string) {
		m, _, err := dialTLS(addr, svcName, ca.Pool)
		if err != nil {
			return false, err.Error()
		}
		defer m.close()
		reply, err := m.authenticate("second-password")
		return err == nil && reply == "STORED", fmt.Sprintf("%q %v", reply, err)
	})
	t.Logf("both rotations seen by new connections %s after the Secrets were applied", time.Since(rotated).Round(time.Second))
	if m, _, err := dialTLS(addr, svcName, ca.Pool); err != nil {
		t.Error(err)
	} else {
		if reply, err := m.authenticate("first-password"); err != nil || reply != "CLIENT_ERROR authentication failure" {
			t.Errorf("the old password after rotation: %q %v, want CLIENT_ERROR authentication failure", reply, err)
		}
		m.close()
	}
	// The connection opened before both rotations still serves (its session
	// and its authentication stay), and reads what it wrote before.
	if err := sess.roundTrip("held", "after-rotation"); err != nil {
		t.Errorf("the connection established before the rotation: %v", err)
	}

	s.checkSamePod(t, name, pod, restarts, "the rotation")
}

// waitServedSerial waits until a new TLS connection through addr, verified
// as serverName, gets the certificate with serial want (the kubelet refreshes
// a Secret volume within its sync period, the engine looks at the files at
// most once a second).
func waitServedSerial(t *testing.T, timeout time.Duration, addr, serverName string, pool *x509.CertPool, want *big.Int) {
	t.Helper()
	eventually(t, timeout, time.Second, "a new TLS connection to get the certificate with serial "+want.String(), func() (bool, string) {
		m, serial, err := dialTLS(addr, serverName, pool)
		if err != nil {
			return false, err.Error()
		}
		m.close()
		return serial.Cmp(want) == 0, "serial " + serial.String()
	})
}

// checkSamePod fails the test unless the Cache's one pod is still before
// (same UID) with its engine's restartCount unchanged since restarts.
func (s *suite) checkSamePod(t *testing.T, cache string, before obj, restarts int, during string) {
	t.Helper()
	pods, err := s.cachePods(cache)
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods of %s: %d, %v", cache, len(pods), err)
	}
	if pods[0].str("metadata", "uid") != before.str("metadata", "uid") {
		t.Errorf("pod %s was replaced during %s", before.str("metadata", "name"), during)
	}
	if r := containerStatus(pods[0], engineContainer).num("restartCount"); r != restarts {
		t.Errorf("engine container restartCount %d -> %d during %s, want no restart", restarts, r, during)
	}
}
