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
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"testing"
)

// listenerEnv makes this test binary a server: it listens on the ports it
// is given, as cachetd, Prometheus or the manager do, until interrupted.
const listenerEnv = "CACHET_UTILS_TEST_LISTEN"

func TestMain(m *testing.M) {
	if os.Getenv(listenerEnv) == "1" {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt)
		for _, p := range os.Args[1:] {
			l, err := net.Listen("tcp", "127.0.0.1:"+p)
			if err != nil {
				fmt.Fprintln(os.Stderr, err) // "... bind: address already in use"
				os.Exit(1)
			}
			defer func() { _ = l.Close() }()
		}
		<-stop
		return
	}
	os.Exit(m.Run())
}

func listener(ports []int) *exec.Cmd {
	args := make([]string, len(ports))
	for i, p := range ports {
		args[i] = strconv.Itoa(p)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), listenerEnv+"=1")
	return cmd
}

func TestFreePortsAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	for _, p := range FreePorts(t, 64) {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// The race FreePort left to every caller: between the pick and the server's
// bind, someone else takes the port. Here that happens for certain on the
// first start (the test binds the second port itself); the server must come
// up on new ports, listening itself, not report the thief's socket as ours.
func TestStartServerSurvivesAPortTakenBeforeTheBind(t *testing.T) {
	starts := 0
	var stolen net.Listener
	s := StartServer(t, 2, func(ports []int) *exec.Cmd {
		starts++
		if starts == 1 {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[1]))
			if err != nil {
				t.Fatal(err)
			}
			stolen = l
		}
		return listener(ports)
	})
	defer func() { _ = stolen.Close() }()
	if starts != 2 {
		t.Errorf("%d starts, want 2 (the first lost its port)", starts)
	}
	stolenPort := stolen.Addr().(*net.TCPAddr).Port
	for _, p := range s.Ports {
		if p == stolenPort {
			t.Errorf("the server was handed the taken port %d", p)
		}
	}
	if !listensOnAll(s.Cmd.Process.Pid, s.Ports) {
		t.Errorf("the server does not listen on %v", s.Ports)
	}
	if listensOnAll(s.Cmd.Process.Pid, []int{stolenPort}) {
		t.Errorf("port %d counted as the server's while another process holds it", stolenPort)
	}
}
