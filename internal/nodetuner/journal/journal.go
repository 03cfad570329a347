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

// Package journal applies a node tuning plan to a host root and can always
// take it back: before a file is first changed, the value it replaces is
// recorded in a state directory, and whatever the journal holds that the
// current plan no longer wants is written back byte for byte and forgotten.
//
// Apply converges from any state a killed tuner can leave: the journal file
// is replaced atomically (write, fsync, rename, fsync the directory), an
// entry is saved before its file is written, and it is dropped only after
// the original is back. Re-running Apply with the same plan, or with an
// empty one, after a crash at any point ends where an uninterrupted run
// would have.
//
// Concurrency: a Journal serializes every Apply with its mutex, so pods on
// one node are applied one plan at a time and never fight over a file.
// Processes sharing a state directory (the old and new tuner of a
// DaemonSet surge update, a manual run beside the DaemonSet's) serialize
// each Apply on an exclusive flock of journal.lock there, the second one
// waiting for the first's pass, and each Apply re-reads the journal under
// that lock: a journal read before another process's pass would take the
// values that pass wrote for originals, and a revert would keep them.
package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"cachet.dev/cachet/internal/nodetuner/plan"
)

// Entry is one file the tuner changed: what was there before.
type Entry struct {
	Original string `json:"original"`
	Owner    string `json:"owner,omitempty"` // pod key, "" for the node's shared queues
}

// state is the journal file.
type state struct {
	Entries map[string]Entry `json:"entries"`
	// Refused are writes the kernel refused with EIO (managed interrupts):
	// path -> the value refused. They are not retried while the plan wants
	// the same value.
	Refused map[string]string `json:"refused,omitempty"`
}

// Result says what one Apply did.
type Result struct {
	Written   []string
	Unchanged []string // already held the planned value
	Restored  []string
	// Refused: managed interrupts (EIO) and the owner that wanted them.
	Refused map[string]string
	// Effective is each written IRQ's effective_affinity_list, read back.
	Effective map[string]string
	Errors    []error
}

// Journal is one node's record of changed files.
type Journal struct {
	mu    sync.Mutex
	file  string
	root  string
	st    state
	crash func(point string) error // tests stop Apply here, as a kill would
	// write puts a value in a file; tests make it refuse with EIO as the
	// kernel does for a managed interrupt, which a fake tree cannot.
	write func(path, value string) error
}

const (
	fileName = "journal.json"
	lockName = "journal.lock"
)

// Open loads (or starts) the journal in stateDir for files under root ("/"
// on the host, a fake tree in tests).
func Open(stateDir, root string) (*Journal, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	j := &Journal{file: filepath.Join(stateDir, fileName), root: root, write: writeFile}
	unlock, err := j.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := j.load(); err != nil {
		return nil, err
	}
	return j, nil
}

// lock takes the state directory's exclusive flock, waiting for another
// process's pass to end. The kernel drops it when the process dies, so a
// killed tuner never leaves it held.
func (j *Journal) lock() (unlock func(), err error) {
	path := filepath.Join(filepath.Dir(j.file), lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// load reads the journal file, which another process may have changed
// since this one last read it; the caller holds the lock.
func (j *Journal) load() error {
	st := state{}
	raw, err := os.ReadFile(j.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("journal %s: %w", j.file, err)
		}
	}
	if st.Entries == nil {
		st.Entries = map[string]Entry{}
	}
	if st.Refused == nil {
		st.Refused = map[string]string{}
	}
	j.st = st
	return nil
}

// Entries returns a copy of what the journal holds.
func (j *Journal) Entries() map[string]Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]Entry, len(j.st.Entries))
	for k, v := range j.st.Entries {
		out[k] = v
	}
	return out
}

// OnPoint makes fn run at each crash point of Apply ("after-journal",
// "after-write", "after-restore"); an error from fn stops Apply there.
// Unit tests stop it as a kill would; the e2e kills the real process.
func (j *Journal) OnPoint(fn func(point string) error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.crash = fn
}

func (j *Journal) point(name string) error {
	if j.crash != nil {
		return j.crash(name)
	}
	return nil
}

// save replaces the journal file atomically and durably.
func (j *Journal) save() error {
	raw, err := json.MarshalIndent(j.st, "", " ")
	if err != nil {
		return err
	}
	tmp := j.file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := j.point("before-rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, j.file); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(j.file))
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// writeFile writes like `echo value > file` on sysfs/procfs: one write of
// the whole value, no create, no truncate-then-write of a regular file's
// tail (tests' fake trees are regular files, so truncate there).
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// Apply makes the files say what p wants and puts back everything else the
// journal changed. An error from the state directory stops it (nothing is
// written that is not journaled first); errors on single files are
// collected in the Result and the rest goes on.
func (j *Journal) Apply(writes []plan.Write) (Result, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	res := Result{Refused: map[string]string{}, Effective: map[string]string{}}
	unlock, err := j.lock()
	if err != nil {
		return res, err
	}
	defer unlock()
	if err := j.load(); err != nil {
		return res, err
	}
	want := map[string]plan.Write{}
	for _, w := range writes {
		want[w.Path] = w
	}

	// Revert first, so that a file moving from one owner to another, or a
	// pod leaving, never leaves two plans' values mixed.
	var gone []string
	for path := range j.st.Entries {
		if _, ok := want[path]; !ok {
			gone = append(gone, path)
		}
	}
	sort.Strings(gone)
	for _, path := range gone {
		e := j.st.Entries[path]
		if err := j.write(filepath.Join(j.root, path), e.Original); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// A vanished file (veth gone with its pod) has nothing to restore.
			res.Errors = append(res.Errors, fmt.Errorf("restore %s: %w", path, err))
			continue
		}
		if err := j.point("after-restore"); err != nil {
			return res, err
		}
		delete(j.st.Entries, path)
		delete(j.st.Refused, path)
		if err := j.save(); err != nil {
			return res, err
		}
		res.Restored = append(res.Restored, path)
	}
	for path := range j.st.Refused {
		if w, ok := want[path]; !ok || w.Value != j.st.Refused[path] {
			delete(j.st.Refused, path)
		}
	}

	for _, w := range writes {
		full := filepath.Join(j.root, w.Path)
		if v, ok := j.st.Refused[w.Path]; ok && v == w.Value {
			res.Refused[w.Path] = w.Owner
			continue
		}
		e, known := j.st.Entries[w.Path]
		if !known {
			raw, err := os.ReadFile(full)
			if err != nil {
				res.Errors = append(res.Errors, fmt.Errorf("read %s: %w", w.Path, err))
				continue
			}
			e = Entry{Original: string(raw)}
		}
		if !known || e.Owner != w.Owner {
			e.Owner = w.Owner
			j.st.Entries[w.Path] = e
			if err := j.save(); err != nil {
				return res, err
			}
		}
		if err := j.point("after-journal"); err != nil {
			return res, err
		}
		if cur, err := os.ReadFile(full); err == nil && strings.TrimSpace(string(cur)) == w.Value {
			res.Unchanged = append(res.Unchanged, w.Path)
			j.readBack(w.Path, &res)
			continue
		}
		if err := j.write(full, w.Value); err != nil {
			if errors.Is(err, syscall.EIO) {
				// A managed interrupt: the kernel owns its affinity.
				j.st.Refused[w.Path] = w.Value
				res.Refused[w.Path] = w.Owner
				if err := j.save(); err != nil {
					return res, err
				}
				continue
			}
			res.Errors = append(res.Errors, fmt.Errorf("write %s: %w", w.Path, err))
			continue
		}
		res.Written = append(res.Written, w.Path)
		j.readBack(w.Path, &res)
		if err := j.point("after-write"); err != nil {
			return res, err
		}
	}
	return res, nil
}

// readBack records an interrupt's effective affinity: what the kernel
// actually chose inside the mask (one CPU on x86).
func (j *Journal) readBack(path string, res *Result) {
	if !strings.HasSuffix(path, "/smp_affinity_list") {
		return
	}
	eff := strings.TrimSuffix(path, "smp_affinity_list") + "effective_affinity_list"
	if raw, err := os.ReadFile(filepath.Join(j.root, eff)); err == nil {
		res.Effective[path] = strings.TrimSpace(string(raw))
	}
}
