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

// Loopback ports for the servers a test starts. A port free when picked can
// be taken before the server binds it (anything on this shared machine that
// binds or connects may get it as its ephemeral port), and a server process
// cannot be handed a listener; so, as the engine's conftest does, a server
// that exits saying its address is in use is started again on new ports.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreePorts returns n distinct loopback TCP ports free right now: every
// listener stays open until all are picked, so no two are the same.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Server is a process a test started on ports it listens on.
type Server struct {
	Cmd   *exec.Cmd
	Ports []int
	out   *syncBuffer
	done  chan struct{}
	once  sync.Once
}

// Output is what the process wrote to stdout and stderr so far.
func (s *Server) Output() string { return s.out.String() }

// Stop interrupts the process (servers stop cleanly on SIGINT) and waits for
// it, killing it if it does not exit; a second call does nothing.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.Cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.Cmd.Process.Kill()
			<-s.done
		}
	})
}

// startAttempts bounds the restarts on ports taken by someone else.
const startAttempts = 5

// serverWaitDelay bounds how long Stop waits for the server's output pipes
// once the process has exited.
const serverWaitDelay = 5 * time.Second

// StartServer starts the command cmd builds for n ports from FreePorts and
// waits (at most a minute) until its process listens on every one of them.
// A process that exits with "address already in use" in its output lost a
// port between the pick and its bind: it is started again on new ports.
// The process is stopped when the test ends, and its output logged if the
// test failed.
func StartServer(t testing.TB, n int, cmd func(ports []int) *exec.Cmd) *Server {
	t.Helper()
	for attempt := 1; attempt <= startAttempts; attempt++ {
		s := &Server{Ports: FreePorts(t, n), out: &syncBuffer{}, done: make(chan struct{})}
		s.Cmd = cmd(s.Ports)
		s.Cmd.Stdout, s.Cmd.Stderr = s.out, s.out
		// the output goes through pipes copied by goroutines Wait waits for:
		// a child the server forked that keeps them open would block Wait,
		// and so Stop, forever; after the process exits, give up on the
		// pipes after this long
		s.Cmd.WaitDelay = serverWaitDelay
		if err := s.Cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", s.Cmd.Path, err)
		}
		go func() { _ = s.Cmd.Wait(); close(s.done) }()
		name := filepath.Base(s.Cmd.Path)
		switch s.waitListening(time.Minute) {
		case listening:
			t.Cleanup(func() {
				s.Stop()
				if t.Failed() {
					t.Logf("%s output:\n%s", name, lastLines(s.Output(), 30))
				}
			})
			return s
		case exited:
			if !strings.Contains(strings.ToLower(s.Output()), "address already in use") {
				t.Fatalf("%s exited before listening on %v (%v):\n%s", name, s.Ports, s.Cmd.ProcessState, lastLines(s.Output(), 30))
			}
			t.Logf("%s lost one of ports %v before it bound it (attempt %d): starting it on new ports", name, s.Ports, attempt)
		case stillStarting:
			s.Stop()
			t.Fatalf("%s did not listen on %v within a minute:\n%s", name, s.Ports, lastLines(s.Output(), 30))
		}
	}
	t.Fatalf("no server started: its ports were taken before the bind %d times", startAttempts)
	return nil
}

type startState int

const (
	stillStarting startState = iota
	listening
	exited
)

// waitListening waits until the process listens on all its ports or exits.
func (s *Server) waitListening(limit time.Duration) startState {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return exited
		case <-time.After(20 * time.Millisecond):
		}
		if listensOnAll(s.Cmd.Process.Pid, s.Ports) {
			return listening
		}
	}
	return stillStarting
}

// listensOnAll tells whether process pid itself holds a listening TCP socket
// on each of the loopback ports: a connection alone could reach whoever took
// a port from it. It looks at pid only, not its children: the command must
// be the server itself, not a wrapper (a shell, timeout, sudo) that starts
// it, whose sockets would never be found.
func listensOnAll(pid int, ports []int) bool {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	listening := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if port, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				listening[int(port)] = true
			}
		}
	}
	for _, p := range ports {
		if !listening[p] {
			return false
		}
	}
	return true
}

// syncBuffer is the process's output, written by exec's copying goroutines
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
