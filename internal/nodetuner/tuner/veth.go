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

// Finding a pod's host-side veth from its IP, without entering its network
// namespace: a per-pod /32 route names the veth (ptp, calico, cilium
// legacy routing); on a bridge (the bridge CNI), the neighbour table gives
// the pod's MAC and the bridge's forwarding database the port it lives on.
//
// Concurrency: reads files only.
package tuner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FindVeth returns the host link that reaches ip directly, or "".
// procNet is the tuner's /proc/net (the host's: hostNetwork), sysRoot the
// host's /sys.
func FindVeth(procNet, sysRoot string, ip net.IP) (string, error) {
	if dev, err := routeDevice(filepath.Join(procNet, "route"), ip); err != nil || dev != "" {
		return dev, err
	}
	mac, dev, err := neighbour(filepath.Join(procNet, "arp"), ip)
	if err != nil || mac == nil {
		return "", err
	}
	return bridgePort(filepath.Join(sysRoot, "class/net", dev), mac)
}

// routeDevice finds a host route (mask 255.255.255.255) to ip.
func routeDevice(path string, ip net.IP) (string, error) {
	ip4 := ip.To4()
	if ip4 == nil {
		return "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	want := binary.LittleEndian.Uint32(ip4)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] == "Iface" {
			continue
		}
		dst, err1 := strconv.ParseUint(fields[1], 16, 32)
		mask, err2 := strconv.ParseUint(fields[7], 16, 32)
		if err1 == nil && err2 == nil && uint32(dst) == want && mask == 0xffffffff {
			return fields[0], nil
		}
	}
	return "", sc.Err()
}

func neighbour(path string, ip net.IP) (net.HardwareAddr, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[0] != ip.String() {
			continue
		}
		mac, err := net.ParseMAC(fields[3])
		if err != nil {
			return nil, "", err
		}
		return mac, fields[5], nil
	}
	return nil, "", sc.Err()
}

// bridgePort reads the bridge's forwarding database (brforward: struct
// __fdb_entry, 16 bytes each) and names the port that learned mac.
func bridgePort(bridgeDir string, mac net.HardwareAddr) (string, error) {
	raw, err := os.ReadFile(filepath.Join(bridgeDir, "brforward"))
	if os.IsNotExist(err) {
		return "", nil // not a bridge
	}
	if err != nil {
		return "", err
	}
	port := -1
	for off := 0; off+16 <= len(raw); off += 16 {
		e := raw[off : off+16]
		if net.HardwareAddr(e[0:6]).String() == mac.String() && e[7] == 0 {
			port = int(e[6]) | int(e[12])<<8
			break
		}
	}
	if port < 0 {
		return "", nil
	}
	ifs, err := os.ReadDir(filepath.Join(bridgeDir, "brif"))
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		s, err := os.ReadFile(filepath.Join(bridgeDir, "brif", i.Name(), "port_no"))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(s)), 0, 32)
		if err == nil && int(n) == port {
			return i.Name(), nil
		}
	}
	return "", fmt.Errorf("bridge port %d of %s has no brif entry", port, bridgeDir)
}
