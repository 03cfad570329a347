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

package tuner

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"k8s.io/utils/cpuset"
)

// A listener that does what irqbalance's socket does: SO_PASSCRED, one
// command per connection, refused without root credentials.
func fakeIrqbalance(t *testing.T, path string) <-chan string {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	got := make(chan string, 8)
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			raw, _ := c.SyscallConn()
			_ = raw.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1) })
			buf, oob := make([]byte, 512), make([]byte, 128)
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			_ = c.Close()
			if err != nil {
				continue
			}
			msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
			if len(msgs) != 1 {
				got <- "no credentials"
				continue
			}
			cred, err := syscall.ParseUnixCredentials(&msgs[0])
			if err != nil || cred.Uid != 0 {
				got <- "not root"
				continue
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

func TestIrqbalanceBanThroughItsSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("irqbalance takes commands from root only")
	}
	proc, run := t.TempDir(), t.TempDir()
	pid := 4242
	if err := os.MkdirAll(filepath.Join(proc, strconv.Itoa(pid)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, strconv.Itoa(pid), "comm"), []byte("irqbalance\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ib := FindIrqbalance(proc, run); ib.PID != pid || ib.Socket != "" {
		t.Fatalf("found %+v, want pid %d without socket", ib, pid)
	}
	got := fakeIrqbalance(t, filepath.Join(run, "irqbalance4242.sock"))
	ib := FindIrqbalance(proc, run)
	if ib.Socket == "" {
		t.Fatal("socket not found")
	}
	if err := ib.Ban(cpuset.New(1, 2, 3, 17), []int{39, 38}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"settings cpus 1-3,17", "settings ban irqs 38 39"} {
		if g := <-got; g != want {
			t.Errorf("irqbalance got %q, want %q", g, want)
		}
	}
	if err := ib.Ban(cpuset.New(), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"settings cpus NULL", "settings ban irqs NULL"} {
		if g := <-got; g != want {
			t.Errorf("irqbalance got %q, want %q", g, want)
		}
	}
	if FindIrqbalance(t.TempDir(), run).PID != 0 {
		t.Error("found an irqbalance in an empty /proc")
	}
}
