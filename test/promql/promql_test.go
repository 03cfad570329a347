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

// Package promql checks every query Cachet ships (the alerts the operator
// writes into each Cache's PrometheusRule, the operator's own gauges the
// chart's alerts read, and every panel of the Grafana dashboard) against a
// real Prometheus (Debian's) scraping a real cachetd under real traffic, all
// on 127.0.0.1. A query that is valid PromQL but names a metric or label the
// engine does not serve returns nothing, and fails here. The series carry
// the labels the operator's PodMonitor gives them (namespace, pod,
// container, cache); that the PodMonitor does so is tested with the builder.
// Two engines serve the Cache's two pods: web-0 in memory alone, so that
// the traffic evicts items read moments ago, and web-1 with an extstore
// file, so that the extstore series exist and move.
package promql

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/controllers"
	"cachet.dev/cachet/internal/engine"
	"cachet.dev/cachet/test/utils"
)

const (
	namespace = "prod"
	cacheName = "web"
	podName   = "web-0"
	// extstorePod is the pod whose engine keeps cold values on disk.
	extstorePod = "web-1"
)

func binary(t *testing.T, env, fallback string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = fallback
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (set %s; 'make test-promql' builds cachetd, hack/install-deps.sh installs Prometheus)", p, err, env)
	}
	return p
}

// testCache is the Cache whose rules are checked: with a hit-ratio target,
// so that every alert the operator can write is there.
func testCache() *cachev1alpha1.Cache {
	return &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: cacheName, Namespace: namespace},
		Spec: cachev1alpha1.CacheSpec{
			Memory:     resource.MustParse("8Mi"),
			Monitoring: &cachev1alpha1.MonitoringSpec{HitRatioAlertBelow: ptr.To(resource.MustParse("0.9"))},
		},
	}
}

// ruleFile is the Cache's PrometheusRule as a Prometheus rule file: loading
// it is Prometheus' own check of every expression.
func ruleFile(t *testing.T, c *cachev1alpha1.Cache) string {
	t.Helper()
	rule := controllers.PrometheusRule(c, controllers.BuildOptions{Engine: controllersEngine})
	b, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// traffic drives stores and reads through a working set larger than the
// cache, re-reading each key soon after it is stored, so that the engine
// evicts items read moments ago (young evictions) and answers both hits and
// misses. Bounded in operations and time.
func traffic(t *testing.T, addr string) {
	t.Helper()
	mc := memcache.New(addr)
	mc.Timeout = 2 * time.Second
	value := make([]byte, 2000)
	deadline := time.Now().Add(20 * time.Second)
	const keys = 8000 // 16 MB of values through an 8 MB cache
	for round := 0; round < 3 && time.Now().Before(deadline); round++ {
		for i := 0; i < keys && time.Now().Before(deadline); i++ {
			k := "k" + strconv.Itoa(i)
			if err := mc.Set(&memcache.Item{Key: k, Value: value}); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
			if _, err := mc.Get(k); err != nil {
				t.Fatalf("get %s right after its set: %v", k, err)
			}
			if _, err := mc.Get("k" + strconv.Itoa((i+keys/2)%keys)); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				t.Fatal(err)
			}
		}
	}
}

// extstoreTraffic stores more values than the engine's memory holds, so that
// it writes the cold ones to its extstore file, then reads them all, so that
// it reads some back from disk. A miss is allowed: what the engine keeps is
// its business here, only that the extstore series move.
func extstoreTraffic(t *testing.T, addr string) {
	t.Helper()
	mc := memcache.New(addr)
	mc.Timeout = 2 * time.Second
	value := make([]byte, 2000)
	const keys = 12000 // 24 MB of values through 16 MB of memory
	for i := 0; i < keys; i++ {
		if err := mc.Set(&memcache.Item{Key: "x" + strconv.Itoa(i), Value: value}); err != nil {
			t.Fatalf("set x%d: %v", i, err)
		}
	}
	for i := 0; i < keys; i++ {
		if _, err := mc.Get("x" + strconv.Itoa(i)); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			t.Fatalf("get x%d: %v", i, err)
		}
	}
}

var controllersEngine = engine.Options{MetricsPort: engine.DefaultMetricsPort}

func TestEveryShippedQueryReturnsData(t *testing.T) {
	prometheusBin := binary(t, "PROMETHEUS", "/usr/bin/prometheus")
	c := testCache()

	plain := utils.StartCachetd(t, filepath.Join("..", ".."), "-U", "0", "-m", "8", "-t", "1")
	memcachedPort, metricsPort := plain.Port, plain.MetricsPort
	// The extstore options the operator writes (internal/engine), with the
	// file in the test's directory: on the disk, since tmpfs refuses the
	// engine's O_DIRECT reads.
	ext := utils.StartCachetd(t, filepath.Join("..", ".."), "-U", "0", "-m", "16", "-t", "1",
		"-o", "ext_path="+filepath.Join(t.TempDir(), "extstore")+":64M,ext_page_size=4,ext_wbuf_size=4,ext_threads=1,ext_item_size=512")
	extPort, extMetricsPort := ext.Port, ext.MetricsPort

	// The operator's own gauges, served from its real registry as its
	// metrics endpoint does, for a Cache with one of two shards Ready.
	controllers.RecordCacheMetrics(c, cachev1alpha1.CacheStatus{ReadyReplicas: 1,
		Endpoints: []cachev1alpha1.CacheEndpoint{{Pod: podName}, {Pod: extstorePod, Restarts: 1}}})
	opListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opServer := &http.Server{Handler: promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = opServer.Serve(opListener) }()
	t.Cleanup(func() { _ = opServer.Close() })

	dir := t.TempDir()
	rules := ruleFile(t, c)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: cache-pods
    static_configs:
      - targets: ["127.0.0.1:%d"]
        labels: {namespace: %q, pod: %q, container: cachetd, %s: %q}
      - targets: ["127.0.0.1:%d"]
        labels: {namespace: %q, pod: %q, container: cachetd, %s: %q}
  - job_name: operator
    honor_labels: true
    static_configs:
      - targets: [%q]
`, rules, metricsPort, namespace, podName, controllers.CacheLabel, cacheName,
		extMetricsPort, namespace, extstorePod, controllers.CacheLabel, cacheName, opListener.Addr().String())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	prometheus := utils.StartServer(t, 1, func(ports []int) *exec.Cmd {
		return exec.Command(prometheusBin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(ports[0]))
	})
	base := "http://127.0.0.1:" + strconv.Itoa(prometheus.Ports[0])

	utils.Eventually(t, 60*time.Second, 500*time.Millisecond, "Prometheus scrapes every target", func() (bool, string) {
		r, err := utils.PromQuery(base, `count(up == 1)`)
		if err != nil {
			return false, err.Error()
		}
		return len(r.Data.Result) == 1 && strings.Contains(string(r.Data.Result[0]), `"3"`), fmt.Sprint(r.Results())
	})
	// Every alert of the Cache's rule file is loaded and evaluates without
	// error: a rule file Prometheus refused, or an alert missing from it,
	// fails here.
	utils.Eventually(t, 60*time.Second, 500*time.Millisecond, "Prometheus evaluates every alert of the Cache's rules", func() (bool, string) {
		names, ok, state := utils.RulesLoaded(base, func(file string) bool { return file == rules })
		for _, a := range controllers.CacheAlerts(c) {
			ok = ok && slices.Contains(names, a.Name)
		}
		return ok, state
	})

	traffic(t, "127.0.0.1:"+strconv.Itoa(memcachedPort))
	extstoreTraffic(t, "127.0.0.1:"+strconv.Itoa(extPort))

	queries := map[string]string{}
	for _, a := range controllers.CacheAlerts(c) {
		queries["alert "+a.Name+" ("+a.Severity+")"] = a.Signal
	}
	for _, g := range []string{"cachet_cache_replicas_ready", "cachet_cache_replicas_desired", "cachet_cache_engine_restarts", "cachet_cache_engine_oom_killed"} {
		queries["operator gauge "+g] = fmt.Sprintf(`%s{namespace=%q,cache=%q}`, g, namespace, cacheName)
	}
	for what, q := range utils.DashboardQueries(t, filepath.Join("..", ".."), namespace, cacheName) {
		queries[what] = q
	}
	for _, m := range []string{controllers.YoungEvictionsMetric, controllers.MissRatioMetric} {
		queries["custom metric "+m] = adapterQuery(t, m)
	}
	// The traffic must have produced the pressure the young-eviction signals
	// are about, or the checks below would prove nothing for them.
	if r, err := utils.PromQuery(base, fmt.Sprintf(`sum(cachet_evictions_young_total{namespace=%q}) > 0`, namespace)); err != nil || len(r.Data.Result) == 0 {
		t.Fatalf("no young evictions after the traffic (%v): the test load is wrong", err)
	}
	utils.Eventually(t, 30*time.Second, 500*time.Millisecond, "values written to the extstore file and read back", func() (bool, string) {
		r, err := utils.PromQuery(base, fmt.Sprintf(`memcached_extstore_bytes_written_total{pod=%q} > 0 and on(pod) memcached_extstore_bytes_read_total > 0`, extstorePod))
		return err == nil && len(r.Data.Result) == 1, fmt.Sprint(r.Results(), err)
	})

	// The chart's operator alerts: valid PromQL over the series checked
	// above (they hold comparisons, so no data is their quiet state).
	for i, expr := range chartAlertExprs(t) {
		if _, err := utils.PromQuery(base, expr); err != nil {
			t.Errorf("chart alert %d: invalid query %q: %v", i, expr, err)
		}
	}

	for what, q := range queries {
		if _, err := utils.PromQuery(base, q); err != nil {
			t.Errorf("%s: invalid query %q: %v", what, q, err)
		}
	}
	// Rates need two samples after the traffic: each query gets them.
	utils.Eventually(t, 60*time.Second, time.Second, "every shipped query returns data", func() (bool, string) {
		var empty []string
		for what, q := range queries {
			if r, err := utils.PromQuery(base, q); err != nil || len(r.Data.Result) == 0 {
				empty = append(empty, fmt.Sprintf("%s: %q", what, q))
			}
		}
		slices.Sort(empty)
		return len(empty) == 0, fmt.Sprintf("%d of %d without data: %s", len(empty), len(queries), strings.Join(empty, "; "))
	})
	t.Logf("%d queries checked against Prometheus", len(queries))
}

// adapterQuery is the query prometheus-adapter runs for a custom metric of
// one pod, from the chart's adapter rules (the cachet.adapterConfig template,
// at the chart's default rate window), with its template filled in as the
// adapter fills it.
func adapterQuery(t *testing.T, metric string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "charts", "cachet", "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\{\{- define "cachet.adapterConfig" -\}\}\n(.*?)\{\{- end \}\}`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no cachet.adapterConfig template in the chart's _helpers.tpl")
	}
	window := regexp.MustCompile(`(?m)^    rateWindow: (\S+)`).FindSubmatch(mustRead(t, filepath.Join("..", "..", "charts", "cachet", "values.yaml")))
	if window == nil {
		t.Fatal("no metricsAdapter.rules.rateWindow in values.yaml")
	}
	text := regexp.MustCompile(`\{\{- \$w := [^}]*\}\}\n?`).ReplaceAllString(string(m[1]), "")
	text = strings.ReplaceAll(text, "{{ $w }}", string(window[1]))
	var config struct {
		Rules []struct {
			Name struct {
				Matches string `json:"matches"`
				As      string `json:"as"`
			} `json:"name"`
			MetricsQuery string `json:"metricsQuery"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(text), &config); err != nil {
		t.Fatalf("the chart's adapter rules: %v", err)
	}
	for _, r := range config.Rules {
		if r.Name.As == metric {
			return strings.NewReplacer(
				"<<.Series>>", strings.Trim(r.Name.Matches, "^$"),
				"<<.LabelMatchers>>", fmt.Sprintf(`namespace=%q,pod=%q`, namespace, podName),
				"<<.GroupBy>>", "pod",
			).Replace(r.MetricsQuery)
		}
	}
	t.Fatalf("the chart's adapter rules define no %s", metric)
	return ""
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chartAlertExprs are the expressions of the chart's PrometheusRule for the
// operator's metrics.
func chartAlertExprs(t *testing.T) []string {
	t.Helper()
	b := mustRead(t, filepath.Join("..", "..", "charts", "cachet", "templates", "metrics", "prometheusrule.yaml"))
	var exprs []string
	for _, m := range regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllSubmatch(b, -1) {
		exprs = append(exprs, string(m[1]))
	}
	if len(exprs) < 4 {
		t.Fatalf("%d alert expressions in the chart's PrometheusRule, want at least 4", len(exprs))
	}
	return exprs
}
