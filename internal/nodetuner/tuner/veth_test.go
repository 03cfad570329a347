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
	"testing"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindVethByHostRoute(t *testing.T) {
	dir := t.TempDir()
	// 10.244.0.7/32 via cali1234 (little-endian hex, as the kernel prints).
	write(t, filepath.Join(dir, "net/route"), []byte("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+
		"eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"+
		"cali1234\t0700F40A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n"))
	got, err := FindVeth(filepath.Join(dir, "net"), dir, net.ParseIP("10.244.0.7"))
	if err != nil || got != "cali1234" {
		t.Errorf("got %q %v, want cali1234", got, err)
	}
}

func TestFindVethOnABridge(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "net/route"), []byte("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+
		"cni0\t0000F40A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"))
	write(t, filepath.Join(dir, "net/arp"), []byte("IP address       HW type     Flags       HW address            Mask     Device\n"+
		"10.244.0.9       0x1         0x2         0a:58:0a:f4:00:09     *        cni0\n"))
	// struct __fdb_entry: mac, port_no, is_local, ageing, port_hi, pad, unused.
	fdb := []byte{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x05, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x09, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	write(t, filepath.Join(dir, "class/net/cni0/brforward"), fdb)
	write(t, filepath.Join(dir, "class/net/cni0/brif/veth0aaa/port_no"), []byte("0x1\n"))
	write(t, filepath.Join(dir, "class/net/cni0/brif/veth0bbb/port_no"), []byte("0x2\n"))
	got, err := FindVeth(filepath.Join(dir, "net"), dir, net.ParseIP("10.244.0.9"))
	if err != nil || got != "veth0bbb" {
		t.Errorf("got %q %v, want veth0bbb", got, err)
	}
	got, err = FindVeth(filepath.Join(dir, "net"), dir, net.ParseIP("10.244.0.99"))
	if err != nil || got != "" {
		t.Errorf("unknown IP: got %q %v", got, err)
	}
}
