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

// irqbalance moves interrupts every 10 s and would undo the plan. When it
// runs, the tuner bans the pods' exclusive CPUs and the interrupts the plan
// placed through irqbalance's own runtime socket ("settings cpus",
// "settings ban irqs"), so that nothing has to restart it through systemd
// (whose start limit CRI-O's hook keeps hitting). Without the socket the
// conflict is reported: IRQBALANCE_BANNED_CPULIST in its environment file
// is the operator's to set, and needs a restart the tuner will not do.
//
// Concurrency: called from the tuner's one loop.
package tuner

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/cpuset"
)

// Irqbalance is what the tuner found of irqbalance on the node.
type Irqbalance struct {
	PID    int    // 0: not running
	Socket string // its runtime socket, "" if not found
}

// FindIrqbalance looks for a running irqbalance in procRoot (the host's
// /proc) and its socket under runDir (the host's /run/irqbalance).
func FindIrqbalance(procRoot, runDir string) Irqbalance {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return Irqbalance{}
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "irqbalance" {
			continue
		}
		ib := Irqbalance{PID: pid}
		sock := filepath.Join(runDir, fmt.Sprintf("irqbalance%d.sock", pid))
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			ib.Socket = sock
		}
		return ib
	}
	return Irqbalance{}
}

// Ban tells irqbalance to keep off cpus and to leave irqs alone. Each
// setting replaces irqbalance's previous one, so the tuner always sends the
// whole node's sets.
func (ib Irqbalance) Ban(cpus cpuset.CPUSet, irqs []int) error {
	if ib.Socket == "" {
		return fmt.Errorf("irqbalance (pid %d) runs without a runtime socket the tuner can reach", ib.PID)
	}
	sort.Ints(irqs)
	ids := make([]string, len(irqs))
	for i, n := range irqs {
		ids[i] = strconv.Itoa(n)
	}
	cpuList := cpus.String()
	if cpuList == "" {
		cpuList = "NULL" // irqbalance's word for "ban none"
	}
	irqList := strings.Join(ids, " ")
	if irqList == "" {
		irqList = "NULL"
	}
	for _, cmd := range []string{"settings cpus " + cpuList, "settings ban irqs " + irqList} {
		if err := ib.send(cmd); err != nil {
			return err
		}
	}
	return nil
}

func (ib Irqbalance) send(cmd string) error {
	conn, err := net.DialTimeout("unix", ib.Socket, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	// irqbalance drops a command that carries no SCM_CREDENTIALS of uid 0.
	creds := syscall.UnixCredentials(&syscall.Ucred{Pid: int32(os.Getpid()), Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())})
	_, _, err = conn.(*net.UnixConn).WriteMsgUnix([]byte(cmd), creds, nil)
	return err
}
