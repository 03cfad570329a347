//go:build e2e

package e2e

// Stage 15: the real metrics chain. The Prometheus stack of
// hack/monitoring-stack.sh (Prometheus, prometheus-operator, the config
// reloader, all built from the Go module proxy) must be running; this stage adds prometheus-adapter
// through the chart (helm upgrade of the suite's release), then a Cache with
// spec.monitoring and spec.autoscaling: its PodMonitor is scraped, its
// young-eviction rate reaches the custom metrics API, load through a
// port-forward makes the HPA scale the Cache out through /scale, and with the
// load stopped it scales back in. Every query of the dashboard and of the
// Cache's PrometheusRule is run against that Prometheus while the load runs.

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"cachet.dev/cachet/test/utils"
)

const autoscaledCache = "autoscaled"

func (s *suite) metricsAutoscale(t *testing.T) {
	c := s.c
	monNS := env("E2E_MONITORING_NS", "cachet-monitoring")
	adapterImg := env("E2E_ADAPTER_IMAGE", "localhost/cachet-prometheus-adapter:v0.12.0")
	c.dumpOnFailure(t, autoscaledCache)
	t.Cleanup(func() {
		if t.Failed() {
			for _, args := range [][]string{
				{"get", "hpa,podmonitor,prometheusrule", "-n", c.cacheNS, "-o", "wide"},
				{"describe", "hpa", "-n", c.cacheNS},
				{"get", "pods", "-n", c.systemNS, "-o", "wide"},
				{"logs", "-n", c.systemNS, "-l", "app.kubernetes.io/component=metrics-adapter", "--tail=40"},
				{"get", "apiservice", "v1beta2.custom.metrics.k8s.io", "-o", "yaml"},
			} {
				out, err := c.k(args...)
				t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrEmpty(err))
			}
		}
	})

	// The stack is a prerequisite this stage does not install: say what is missing.
	if _, err := c.k("get", "crd", "podmonitors.monitoring.coreos.com"); err != nil {
		t.Fatalf("prometheus-operator's CRDs are not installed (hack/monitoring-stack.sh up): %v", err)
	}
	if _, err := c.k("get", "svc", "prometheus-operated", "-n", monNS); err != nil {
		t.Fatalf("no Prometheus in namespace %s (hack/monitoring-stack.sh up): %v", monNS, err)
	}
	repo, tag := adapterImg[:strings.LastIndex(adapterImg, ":")], adapterImg[strings.LastIndex(adapterImg, ":")+1:]

	// prometheus-adapter from the chart, with a rate window of six scrapes and a
	// short relist, so that the test does not wait minutes for the HPA to see.
	start := time.Now()
	_, err := c.helmRun(5*time.Minute, "upgrade", c.release, c.chart, "-n", c.systemNS, "--reuse-values", "--wait", "--timeout", "4m",
		"--set", "metricsAdapter.install=true",
		"--set", "metricsAdapter.prometheusURL=http://prometheus-operated."+monNS+".svc:9090",
		"--set", "metricsAdapter.image.repository="+repo, "--set", "metricsAdapter.image.tag="+tag,
		"--set", "metricsAdapter.relistInterval=10s",
		"--set", "metricsAdapter.rules.rateWindow=30s",
		"--set", "metricsAdapter.resources.requests.cpu=10m")
	if err != nil {
		t.Fatalf("helm upgrade with metricsAdapter.install=true: %v", err)
	}
	t.Logf("helm upgrade (adapter) returned after %s", time.Since(start).Round(100*time.Millisecond))
	eventually(t, 2*time.Minute, 2*time.Second, "APIService v1beta2.custom.metrics.k8s.io Available", func() (bool, string) {
		a, err := c.getJSON("apiservice", "v1beta2.custom.metrics.k8s.io")
		if err != nil {
			return false, err.Error()
		}
		cond := condition(a, "Available")
		if cond == nil {
			return false, "no Available condition"
		}
		return cond.str("status") == "True", cond.str("status") + " " + cond.str("reason") + ": " + cond.str("message")
	})

	manifest := fmt.Sprintf(`apiVersion: cache.cachet.dev/v1alpha1
kind: Cache
metadata:
  name: %s
spec:
  replicas: 1
  memory: 8Mi
  cpu: 0
  dedicatedCPUs: false
  monitoring:
    interval: 5s
  autoscaling:
    minReplicas: 1
    maxReplicas: 2
    targets:
      youngEvictionsPerSecond: "2"
    behavior:
      scaleUp:
        stabilizationWindowSeconds: 0
        policies: [{type: Pods, value: 1, periodSeconds: 5}]
      scaleDown:
        stabilizationWindowSeconds: 30
        policies: [{type: Pods, value: 1, periodSeconds: 5}]
`, autoscaledCache)
	if _, err := c.kIn(manifest, "apply", "-n", c.cacheNS, "-f", "-"); err != nil {
		t.Fatal(err)
	}
	s.waitCacheReady(t, autoscaledCache, 1, 3*time.Minute)
	podName := autoscaledCache + "-0"

	eventually(t, time.Minute, 2*time.Second, "the Cache's PodMonitor, PrometheusRule and HPA exist", func() (bool, string) {
		out, err := c.k("get", "podmonitor,prometheusrule,hpa", "-n", c.cacheNS, "-o", "name")
		if err != nil {
			return false, err.Error()
		}
		return strings.Count(out, "\n") >= 3, out
	})

	prom := "http://" + c.portForward(t, monNS, "svc/prometheus-operated", 9090)
	upQuery := fmt.Sprintf(`up{namespace=%q,cache=%q} == 1`, c.cacheNS, autoscaledCache)
	eventually(t, 2*time.Minute, 2*time.Second, "Prometheus scrapes the Cache's pod: "+upQuery, func() (bool, string) {
		r, err := utils.PromQuery(prom, upQuery)
		if err != nil {
			return false, err.Error()
		}
		return len(r.Data.Result) == 1 && strings.Contains(string(r.Data.Result[0]), podName), fmt.Sprint(r.Results())
	})
	eventually(t, time.Minute, 2*time.Second, "the Cache's Monitoring condition True", func() (bool, string) {
		cache, err := s.getCache(autoscaledCache)
		if err != nil {
			return false, err.Error()
		}
		m := condition(cache, "Monitoring")
		return m != nil && m.str("status") == "True", describeConditions(cache)
	})
	// The Cache's rules are loaded by this Prometheus (the operator put them in
	// a PrometheusRule, prometheus-operator into the config, the reloader into
	// the running Prometheus), and evaluate without error.
	eventually(t, 2*time.Minute, 2*time.Second, "Prometheus evaluates the Cache's alerting rules", func() (bool, string) {
		// The rule group prometheus-operator made from the Cache's PrometheusRule.
		_, ok, state := utils.RulesLoaded(prom, func(file string) bool { return strings.Contains(file, c.cacheNS+"-") })
		return ok, state
	})

	metricPath := fmt.Sprintf("/apis/custom.metrics.k8s.io/v1beta2/namespaces/%s/pods/*/cachet_evictions_young_per_second", c.cacheNS)
	eventually(t, 2*time.Minute, 3*time.Second, "the custom metrics API serves "+metricPath+" for "+podName, func() (bool, string) {
		out, err := c.k("get", "--raw", metricPath)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, `"name":"`+podName+`"`), out
	})

	// Load: 2000-byte values over 8000 keys (16 MB) through the 8 MiB cache,
	// each read right after its store and another read half the set away, so
	// the engine evicts items read seconds ago: young evictions. Through a
	// port-forward to 127.0.0.1, bounded in operations and time, until the
	// HPA has scaled out (then the dashboard's queries run under that load).
	addr := c.portForward(t, c.cacheNS, "pod/"+podName, memcachePort)
	stop := make(chan struct{})
	done := make(chan error, 1)
	var ops atomic.Int64
	go func() { done <- youngEvictionLoad(addr, stop, &ops, 8*time.Minute, 5_000_000) }()
	loadStopped := false
	stopLoad := func() {
		if !loadStopped {
			loadStopped = true
			close(stop)
			if err := <-done; err != nil {
				t.Errorf("load: %v", err)
			}
			t.Logf("load stopped after %d operations", ops.Load())
		}
	}
	t.Cleanup(stopLoad)

	scaleStart := time.Now()
	eventually(t, 5*time.Minute, 3*time.Second, "the HPA scales the Cache to 2 through /scale", func() (bool, string) {
		select {
		case err := <-done:
			loadStopped = true
			t.Fatalf("the load ended before the Cache scaled out (after %d operations): %v", ops.Load(), err)
		default:
		}
		cache, err := s.getCache(autoscaledCache)
		if err != nil {
			return false, err.Error()
		}
		hpa, _ := c.k("get", "hpa", "-n", c.cacheNS, "-o", "jsonpath={range .items[*]}{.status.currentMetrics}{\" desired=\"}{.status.desiredReplicas}{end}")
		return cache.num("spec", "replicas") == 2, fmt.Sprintf("spec.replicas=%d ops=%d hpa: %s", cache.num("spec", "replicas"), ops.Load(), hpa)
	})
	t.Logf("scaled out %s after the load began", time.Since(scaleStart).Round(time.Second))
	s.waitCacheReady(t, autoscaledCache, 2, 3*time.Minute)
	cache, err := s.getCache(autoscaledCache)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cache.list("status", "endpoints")); n != 2 {
		t.Fatalf("status.endpoints has %d entries after the scale-out, want 2: %s", n, cache.str("status", "endpoints"))
	}
	eventually(t, time.Minute, 2*time.Second, "an Event Scaling 1 -> 2 naming the HorizontalPodAutoscaler", func() (bool, string) {
		return hasEvent(c, autoscaledCache, "Scaling", "from 1 to 2", "HorizontalPodAutoscaler")
	})
	eventually(t, time.Minute, 2*time.Second, "the Cache's Autoscaling condition True", func() (bool, string) {
		cache, err := s.getCache(autoscaledCache)
		if err != nil {
			return false, err.Error()
		}
		a := condition(cache, "Autoscaling")
		return a != nil && a.str("status") == "True", describeConditions(cache)
	})

	// Every shipped query, with the load still on.
	queries := utils.DashboardQueries(t, c.repoRoot, c.cacheNS, autoscaledCache)
	rules, err := ruleSignals(c, autoscaledCache)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range rules {
		queries[k] = v
	}
	// A query made invalid or dataless by a moment without samples gets a few tries.
	var failures []string
	names := make([]string, 0, len(queries))
	for k := range queries {
		names = append(names, k)
	}
	sort.Strings(names)
	// This stage's Cache has no spec.extstore, so its engines serve no
	// extstore series; test/promql checks those queries against an engine
	// with an extstore file.
	extstore := regexp.MustCompile(`memcached_extstore_`)
	withData, empty := 0, 0
	for _, what := range names {
		q := queries[what]
		var r utils.PromResponse
		var qerr error
		for try := 0; try < 3; try++ {
			r, qerr = utils.PromQuery(prom, q)
			if qerr == nil && len(r.Data.Result) > 0 {
				break
			}
			time.Sleep(2 * time.Second)
		}
		switch {
		case qerr != nil:
			failures = append(failures, fmt.Sprintf("%s: invalid query %q: %v", what, q, qerr))
		case len(r.Data.Result) == 0 && extstore.MatchString(q):
			empty++
			t.Logf("%s: no data, as expected of a Cache without spec.extstore: %q", what, q)
		case len(r.Data.Result) == 0:
			failures = append(failures, fmt.Sprintf("%s: no data for %q", what, q))
		default:
			withData++
		}
	}
	t.Logf("%d queries (dashboard and PrometheusRule) against the cluster's Prometheus: %d with data, %d extstore ones empty", len(queries), withData, empty)
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) > 0 {
		t.FailNow()
	}

	stopLoad()
	inStart := time.Now()
	eventually(t, 5*time.Minute, 3*time.Second, "with the load stopped, the HPA scales the Cache back to 1", func() (bool, string) {
		cache, err := s.getCache(autoscaledCache)
		if err != nil {
			return false, err.Error()
		}
		hpa, _ := c.k("get", "hpa", "-n", c.cacheNS, "-o", "jsonpath={range .items[*]}{.status.currentMetrics}{\" desired=\"}{.status.desiredReplicas}{end}")
		return cache.num("spec", "replicas") == 1, fmt.Sprintf("spec.replicas=%d hpa: %s", cache.num("spec", "replicas"), hpa)
	})
	t.Logf("scaled in %s after the load stopped", time.Since(inStart).Round(time.Second))
	s.waitCacheReady(t, autoscaledCache, 1, 3*time.Minute)
	eventually(t, time.Minute, 2*time.Second, "an Event Scaling 2 -> 1 naming the HorizontalPodAutoscaler", func() (bool, string) {
		return hasEvent(c, autoscaledCache, "Scaling", "from 2 to 1", "HorizontalPodAutoscaler")
	})
	c.mustK(t, "delete", cacheGroupResource, autoscaledCache, "-n", c.cacheNS, "--wait=true", "--timeout=120s")
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// youngEvictionLoad runs until stop, maxTime or maxOps, whichever comes first;
// it returns an error only for a failure that is not a cache miss.
func youngEvictionLoad(addr string, stop <-chan struct{}, ops *atomic.Int64, maxTime time.Duration, maxOps int64) error {
	mc := memcache.New(addr)
	mc.Timeout = 3 * time.Second
	value := make([]byte, 2000)
	deadline := time.Now().Add(maxTime)
	const keys = 8000
	for i := 0; ; i = (i + 1) % keys {
		select {
		case <-stop:
			return nil
		default:
		}
		if time.Now().After(deadline) || ops.Load() >= maxOps {
			return fmt.Errorf("bound reached (%d operations, %s) before the test stopped the load", ops.Load(), maxTime)
		}
		k := "k" + strconv.Itoa(i)
		if err := mc.Set(&memcache.Item{Key: k, Value: value}); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
		if _, err := mc.Get(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return fmt.Errorf("get %s: %w", k, err)
		}
		if _, err := mc.Get("k" + strconv.Itoa((i+keys/2)%keys)); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return err
		}
		ops.Add(3)
	}
}

func hasEvent(c *cluster, cache, reason string, contains ...string) (bool, string) {
	evs, err := c.items("events", "-n", c.cacheNS, "--field-selector", "involvedObject.name="+cache+",reason="+reason)
	if err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, e := range evs {
		msg := e.str("message")
		seen = append(seen, msg)
		ok := true
		for _, s := range contains {
			ok = ok && strings.Contains(msg, s)
		}
		if ok {
			return true, msg
		}
	}
	return false, fmt.Sprintf("%s events: %q", reason, seen)
}

// comparison is the threshold an alert's expression ends with; what comes
// before it is the signal, which must return data while the Cache runs.
var comparison = regexp.MustCompile(`\s*(==|!=|>=|<=|>|<)\s*[0-9.eE+-]+$`)

// ruleSignals reads the Cache's PrometheusRule from the cluster, as the
// operator wrote it, and returns each alert's signal.
func ruleSignals(c *cluster, cache string) (map[string]string, error) {
	rules, err := c.items("prometheusrule", "-n", c.cacheNS)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, pr := range rules {
		if !strings.Contains(pr.str("metadata", "name"), cache) {
			continue
		}
		for _, g := range pr.list("spec", "groups") {
			for i, r := range g.list("rules") {
				expr := r.str("expr")
				sig := comparison.ReplaceAllString(expr, "")
				if sig == expr {
					return nil, fmt.Errorf("alert %s: no threshold at the end of %q", r.str("alert"), expr)
				}
				out[fmt.Sprintf("rule %s #%d (%s)", r.str("alert"), i, r.str("labels", "severity"))] = sig
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PrometheusRule for Cache %s in %s", cache, c.cacheNS)
	}
	return out, nil
}
