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

package utils

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Cachetd is the engine binary: $CACHETD, or engine/build/cachetd of this
// checkout, root being the repository's root relative to the test's package
// (make test-current builds it first). Missing, the test fails: what needs
// the engine is not checked without it.
func Cachetd(t testing.TB, root string) string {
	t.Helper()
	path := os.Getenv("CACHETD")
	if path == "" {
		// go test runs in the package's directory; runtime.Caller would give
		// a module path, not a file, under make's -trimpath.
		path = filepath.Join(root, "engine", "build", "cachetd")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no engine binary at %s (run `make -C engine all`, or set CACHETD): %v", path, err)
	}
	return path
}

// RunningEngine is a cachetd a test started on 127.0.0.1.
type RunningEngine struct {
	Port, MetricsPort int
}

// StartCachetd runs cachetd on free loopback ports (data and metrics) with
// the extra args, waits until it accepts, and stops it when the test ends.
func StartCachetd(t testing.TB, root string, args ...string) RunningEngine {
	t.Helper()
	e := RunningEngine{Port: FreePort(t), MetricsPort: FreePort(t)}
	cmd := exec.Command(Cachetd(t, root), append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(e.Port),
		"-o", "metrics_port=" + strconv.Itoa(e.MetricsPort)}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	Eventually(t, 10*time.Second, 20*time.Millisecond, "cachetd accepts", func() (bool, string) {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(e.Port)))
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, ""
	})
	return e
}
