//go:build e2e

package e2e

// Traffic to the cache only ever goes to 127.0.0.1 through `kubectl
// port-forward`, on ports 24000-24999 that belong to this suite.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var nextPort atomic.Int32

func init() { nextPort.Store(24000) }

// freeLocalPort hands out the next port of the suite's range that is not in use.
func freeLocalPort(t *testing.T) int {
	t.Helper()
	for {
		p := int(nextPort.Add(1))
		if p > 24999 {
			t.Fatal("ran out of the suite's ports 24000-24999")
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
}

// portForward runs `kubectl port-forward` to target (pod/NAME or svc/NAME) and
// returns the local address once kubectl says it is forwarding. The process is
// stopped when the test ends.
func (c *cluster) portForward(t *testing.T, ns, target string, remotePort int) string {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freeLocalPort(t)
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, c.kubectl, "port-forward", "-n", ns, target,
			"--address", "127.0.0.1", fmt.Sprintf("%d:%d", port, remotePort))
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("starting kubectl port-forward: %v", err)
		}
		ready := make(chan struct{})
		var errText strings.Builder
		go func() {
			sc := bufio.NewScanner(stdout)
			signalled := false
			for sc.Scan() {
				if !signalled && strings.Contains(sc.Text(), "Forwarding from 127.0.0.1") {
					close(ready)
					signalled = true
				}
			}
		}()
		errDone := make(chan struct{})
		go func() { b, _ := io.ReadAll(stderr); errText.Write(b); close(errDone) }()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-ready:
			t.Cleanup(func() { cancel(); <-exited }) //nolint:errcheck // a cancelled port-forward exits with an error that says nothing
			return fmt.Sprintf("127.0.0.1:%d", port)
		case err := <-exited:
			<-errDone
			cancel()
			lastErr = fmt.Errorf("kubectl port-forward %s exited: %w: %s", target, err, strings.TrimSpace(errText.String()))
		case <-time.After(30 * time.Second):
			cancel()
			<-exited //nolint:errcheck // killed by the timeout above
			lastErr = fmt.Errorf("kubectl port-forward %s did not start forwarding within 30s", target)
		}
		t.Logf("port-forward attempt %d failed: %v", attempt+1, lastErr)
		time.Sleep(2 * time.Second)
	}
	t.Fatal(lastErr)
	return ""
}

// memcachedCommand sends one text-protocol command and reads the reply up to
// the line that ends it (END, or the first line for single-line replies).
func memcachedCommand(addr, command string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", command); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return lines, fmt.Errorf("reading reply to %q after %d lines: %w", command, len(lines), err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "END" {
			return lines, nil
		}
		if strings.HasPrefix(line, "ERROR") || strings.HasPrefix(line, "CLIENT_ERROR") || strings.HasPrefix(line, "SERVER_ERROR") {
			return lines, fmt.Errorf("%q answered %q", command, line)
		}
		lines = append(lines, line)
	}
}

// statsSettings returns `stats settings` as a map.
func statsSettings(addr string) (map[string]string, error) {
	lines, err := memcachedCommand(addr, "stats settings")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range lines {
		f := strings.SplitN(l, " ", 3)
		if len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("stats settings returned no STAT lines: %q", lines)
	}
	return out, nil
}
