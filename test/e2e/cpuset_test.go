//go:build e2e

package e2e

// Reads what the kernel and the kubelet actually gave a container, on the node
// itself: the container's cpuset cgroup (cgroup v1, cgroupfs driver), the
// affinity of every thread in it, and the static CPU manager's checkpoint.
// These are the sources of truth for "exclusive core"; the pod spec is not.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// cpuSet is a set of CPU ids, parsed from and printed in the kernel's list format.
type cpuSet map[int]bool

func parseCPUList(s string) (cpuSet, error) {
	set := cpuSet{}
	s = strings.TrimSpace(s)
	if s == "" {
		return set, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		for i := a; i <= b; i++ {
			set[i] = true
		}
	}
	return set, nil
}

func (s cpuSet) String() string {
	ids := make([]int, 0, len(s))
	for id := range s {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}

func (s cpuSet) equal(o cpuSet) bool {
	if len(s) != len(o) {
		return false
	}
	for id := range s {
		if !o[id] {
			return false
		}
	}
	return true
}

func (s cpuSet) intersects(o cpuSet) bool {
	for id := range s {
		if o[id] {
			return true
		}
	}
	return false
}

const cpusetRoot = "/sys/fs/cgroup/cpuset"

// containerCgroup finds the cpuset cgroup directory of a container: with the
// cgroupfs driver it is .../pod<UID>/<container id>, under kubepods/ for
// Guaranteed pods and kubepods/burstable/ or besteffort/ otherwise.
func containerCgroup(podUID, containerID string) (string, error) {
	want := filepath.Join("pod"+podUID, containerID)
	found := ""
	err := filepath.WalkDir(cpusetRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || found != "" {
			return nil //nolint:nilerr // an unreadable directory holds no container of ours
		}
		if strings.HasSuffix(path, string(filepath.Separator)+want) {
			found = path
			return fs.SkipAll
		}
		// Pod and container cgroups are at most a few levels down.
		if strings.Count(strings.TrimPrefix(path, cpusetRoot), string(filepath.Separator)) > 5 {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if found == "" {
		return "", fmt.Errorf("no cpuset cgroup for pod %s container %s under %s", podUID, containerID, cpusetRoot)
	}
	return found, nil
}

// containerCPUs returns the cgroup's cpuset.cpus and, for each thread in the
// cgroup, the CPUs the kernel lets it run on.
func containerCPUs(podUID, containerID string) (cgroupDir string, cpus cpuSet, threads map[string]cpuSet, err error) {
	dir, err := containerCgroup(podUID, containerID)
	if err != nil {
		return "", nil, nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus"))
	if err != nil {
		return dir, nil, nil, err
	}
	if cpus, err = parseCPUList(string(raw)); err != nil {
		return dir, nil, nil, err
	}
	tasks, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		return dir, cpus, nil, err
	}
	threads = map[string]cpuSet{}
	for _, tid := range strings.Fields(string(tasks)) {
		status, err := os.ReadFile(filepath.Join("/proc", tid, "status"))
		if err != nil {
			continue // the thread exited between the two reads
		}
		name := ""
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				set, err := parseCPUList(v)
				if err != nil {
					return dir, cpus, nil, err
				}
				threads[tid+"("+name+")"] = set
			}
		}
	}
	return dir, cpus, threads, nil
}

// cpuManagerState is the kubelet's static CPU manager checkpoint.
type cpuManagerState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func readCPUManagerState(kubeletDir string) (*cpuManagerState, error) {
	raw, err := os.ReadFile(filepath.Join(kubeletDir, "cpu_manager_state"))
	if err != nil {
		return nil, err
	}
	var st cpuManagerState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("decoding cpu_manager_state: %w", err)
	}
	return &st, nil
}
