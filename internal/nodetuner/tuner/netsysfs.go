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

// A writable sysfs of the node's network namespace, where the pod veths
// are. A hostPath of /sys shows the host's devices (sysfs shows the
// network namespace of whoever mounted it), and the container runtime
// mounts the container's own /sys read-only for a hostNetwork pod, even a
// privileged one. So the tuner mounts a sysfs of its own, from inside the
// node's network namespace (hostNetwork), on an empty directory, and makes
// it writable.
//
// Concurrency: called once at start, before the first pass.

package tuner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MountNetSysfs mounts sysfs on dir unless dir already holds one.
func MountNetSysfs(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "class", "net")); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
	if err := syscall.Mount("sysfs", dir, "sysfs", flags, ""); err != nil {
		return fmt.Errorf("mount sysfs on %s: %w", dir, err)
	}
	// One network namespace has one sysfs superblock, shared by every
	// mount of it. The runtime created it read-only for the first
	// hostNetwork container, so this mount is read-only too until the
	// superblock is remounted writable. Every other mount keeps its own
	// read-only flag.
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Flags&stReadOnly != 0 {
		if err := syscall.Mount("sysfs", dir, "sysfs", syscall.MS_REMOUNT|flags, ""); err != nil {
			return fmt.Errorf("remount the sysfs on %s writable: %w", dir, err)
		}
	}
	return nil
}

const stReadOnly = 0x1 // ST_RDONLY in statfs(2)'s f_flags
