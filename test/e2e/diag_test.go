//go:build e2e

package e2e

// What a person needs to see when a step fails: the operator's logs, the Cache's
// events and conditions, and the pods. It goes to the test log and to files
// under the artifacts folder, so CI output and a local rerun both carry it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dumpOnFailure registers a cleanup that prints diagnostics when the (sub)test
// failed. Each stage calls it, so the dump sits next to the failing step.
func (c *cluster) dumpOnFailure(t *testing.T, caches ...string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		c.dump(t, caches...)
	})
}

func (c *cluster) dump(t *testing.T, caches ...string) {
	var b strings.Builder
	section := func(title string, args ...string) {
		out, err := c.k(args...)
		fmt.Fprintf(&b, "\n===== %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(error: %v)\n", err)
		}
	}
	section("operator pods", "get", "pods", "-n", c.systemNS, "-o", "wide")
	section("operator logs", "logs", "-n", c.systemNS, "-l", "app.kubernetes.io/instance="+c.release, "--all-containers", "--tail=300", "--prefix")
	section("operator logs (previous container, if it restarted)", "logs", "-n", c.systemNS, "-l", "app.kubernetes.io/instance="+c.release, "--all-containers", "--tail=100", "--previous")
	section("caches", "get", "caches.cache.cachet.dev", "-n", c.cacheNS, "-o", "wide")
	for _, name := range caches {
		section("cache "+name, "get", "caches.cache.cachet.dev", name, "-n", c.cacheNS, "-o", "yaml")
		section("events of cache "+name, "get", "events", "-n", c.cacheNS, "--field-selector", "involvedObject.kind=Cache,involvedObject.name="+name, "--sort-by=.lastTimestamp")
	}
	section("all events in the cache namespace", "get", "events", "-n", c.cacheNS, "--sort-by=.lastTimestamp")
	section("pods", "get", "pods", "-n", c.cacheNS, "-o", "wide")
	section("statefulsets", "get", "statefulsets", "-n", c.cacheNS, "-o", "wide")
	section("describe pods", "describe", "pods", "-n", c.cacheNS)
	text := b.String()
	t.Log(text)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".diag.txt"
	if err := os.WriteFile(filepath.Join(c.artifacts, name), []byte(text), 0o644); err == nil {
		t.Logf("diagnostics written to %s", filepath.Join(c.artifacts, name))
	}
}
