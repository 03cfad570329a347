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
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
// the extra args, waits until it listens on both, and stops it when the test
// ends.
func StartCachetd(t testing.TB, root string, args ...string) RunningEngine {
	t.Helper()
	binary := Cachetd(t, root)
	s := StartServer(t, 2, func(ports []int) *exec.Cmd {
		return exec.Command(binary, append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(ports[0]),
			"-o", "metrics_port=" + strconv.Itoa(ports[1])}, args...)...)
	})
	return RunningEngine{Port: s.Ports[0], MetricsPort: s.Ports[1]}
}

// MixedSizeLoad stores keys items on the memcached server at addr, the even
// ones with values of small bytes, the odd ones of large (two size modes),
// each after a GET that misses it, then reads every key twice: the engine's
// size histogram gets two modes and its miss-ratio curve 3 x keys GETs. It
// gives up at the deadline.
func MixedSizeLoad(addr string, keys, small, large int, deadline time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(deadline)); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	reply := func() error { // up to END (a GET) or STORED (a set)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return err
			}
			switch line {
			case "END\r\n", "STORED\r\n":
				return nil
			}
			if strings.HasPrefix(line, "SERVER_ERROR") || strings.HasPrefix(line, "CLIENT_ERROR") || line == "ERROR\r\n" {
				return fmt.Errorf("%s: %s", addr, strings.TrimSpace(line))
			}
		}
	}
	values := map[int]string{small: strings.Repeat("s", small), large: strings.Repeat("l", large)}
	for i := 0; i < keys; i++ {
		size := small
		if i%2 == 1 {
			size = large
		}
		if _, err := fmt.Fprintf(conn, "get key%06d\r\n", i); err != nil {
			return err
		}
		if err := reply(); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(conn, "set key%06d 0 0 %d\r\n%s\r\n", i, size, values[size]); err != nil {
			return err
		}
		if err := reply(); err != nil {
			return err
		}
	}
	for r := 0; r < 2; r++ {
		for i := 0; i < keys; i++ {
			if _, err := fmt.Fprintf(conn, "get key%06d\r\n", i); err != nil {
				return err
			}
			if err := reply(); err != nil {
				return err
			}
		}
	}
	return nil
}

// MixedSizeLoadKeyBytes is the length of MixedSizeLoad's keys.
const MixedSizeLoadKeyBytes = len("key000000")
