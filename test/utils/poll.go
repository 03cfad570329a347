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

// Package utils holds what the envtest suites, the manager's own test, the
// PromQL test and the e2e suite share: one bounded poll that fails with the
// last state it saw (or, for a caller with a fallback, reports it), and a
// free loopback port.
package utils

import (
	"testing"
	"time"
)

// Eventually polls cond every interval until it reports done or timeout has
// passed; then it fails the test with what cond last described. The bound
// only keeps a broken run from hanging: tests assert behaviour, never how
// long it took. Each new state is logged once, so a slow wait explains itself.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	if done, state := Poll(t, timeout, interval, what, cond); !done {
		t.Fatalf("gave up after %s waiting for %s; last state: %s", timeout, what, state)
	}
}

// Poll is Eventually for a caller that has something left to try when the
// wait runs out: it reports whether cond was done within timeout and the
// state cond last described, and fails nothing.
func Poll(t testing.TB, timeout, interval time.Duration, what string, cond func() (done bool, state string)) (bool, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		done, state := cond()
		if done {
			return true, state
		}
		if state != last {
			t.Logf("waiting for %s: %s", what, state)
			last = state
		}
		if time.Now().After(deadline) {
			return false, state
		}
		time.Sleep(interval)
	}
}
