// Command metrics-check serves a prometheus-adapter config the way the adapter
// does, minus the Kubernetes API server in front: it loads the config with the
// adapter's loader, discovers series in a real Prometheus with the adapter's
// series registry, and asks the adapter's custom metrics provider for each
// requested metric of each pod, which runs the same PromQL the adapter runs
// when an HPA asks custom.metrics.k8s.io. A config that does not load, a rule
// that names no series, or a metric without a value fails the command.
//
//	metrics-check -config config.yaml -prometheus-url http://127.0.0.1:9090 \
//	  -namespace cachet -pods cachet-0,cachet-1 \
//	  -metrics cachet_evictions_young_per_second,cachet_get_miss_ratio
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	prom "sigs.k8s.io/prometheus-adapter/pkg/client"
	adaptercfg "sigs.k8s.io/prometheus-adapter/pkg/config"
	customprovider "sigs.k8s.io/prometheus-adapter/pkg/custom-provider"
	"sigs.k8s.io/prometheus-adapter/pkg/naming"
)

func main() {
	configPath := flag.String("config", "", "prometheus-adapter config file (the chart's config.yaml)")
	prometheusURL := flag.String("prometheus-url", "http://127.0.0.1:9090", "Prometheus to query")
	namespace := flag.String("namespace", "", "namespace label of the pods")
	pods := flag.String("pods", "", "comma-separated pod names to ask for")
	metrics := flag.String("metrics", "", "comma-separated custom metric names that must have a value for every pod")
	wait := flag.Duration("wait", 30*time.Second, "how long discovery may take before the metrics count as missing")
	flag.Parse()
	if *configPath == "" || *namespace == "" || *pods == "" || *metrics == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*configPath, *prometheusURL, *namespace, strings.Split(*pods, ","), strings.Split(*metrics, ","), *wait); err != nil {
		fmt.Fprintln(os.Stderr, "metrics-check:", err)
		os.Exit(1)
	}
}

// podMapper knows the only resources the rules map labels to; the adapter
// gets the same from the API server's discovery.
func podMapper() apimeta.RESTMapper {
	m := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion})
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), apimeta.RESTScopeNamespace)
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), apimeta.RESTScopeRoot)
	return m
}

func run(configPath, prometheusURL, namespace string, pods, metrics []string, wait time.Duration) error {
	cfg, err := adaptercfg.FromFile(configPath)
	if err != nil {
		return err
	}
	mapper := podMapper()
	namers, err := naming.NamersFromConfig(cfg.Rules, mapper)
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	fmt.Printf("config: %d rules loaded by the adapter's loader\n", len(namers))
	base, err := url.Parse(prometheusURL)
	if err != nil {
		return err
	}
	client := prom.NewClient(&http.Client{Timeout: 10 * time.Second}, base, nil, "GET")
	// The provider never touches the Kubernetes client for GetMetricByName;
	// only label selectors (GetMetricBySelector) list pods through it.
	metricsProvider, lister := customprovider.NewPrometheusProvider(mapper, nil, client, namers, 2*time.Second, 10*time.Minute)
	stop := make(chan struct{})
	defer close(stop)
	lister.RunUntil(stop)

	want := map[string]bool{}
	for _, m := range metrics {
		want[m] = false
	}
	deadline := time.Now().Add(wait)
	for {
		for _, info := range metricsProvider.ListAllMetrics() {
			if _, ok := want[info.Metric]; ok && info.GroupResource.Resource == "pods" {
				want[info.Metric] = true
			}
		}
		var missing []string
		for m, found := range want {
			if !found {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s the adapter's discovery has no pods metric %v (is Prometheus scraping series with namespace and pod labels?)", wait, missing)
		}
		time.Sleep(time.Second)
	}
	fmt.Printf("discovery: %v listed for pods\n", metrics)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var failed []string
	for _, m := range metrics {
		info := provider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: m}
		for _, pod := range pods {
			v, err := metricsProvider.GetMetricByName(ctx, types.NamespacedName{Namespace: namespace, Name: pod}, info, labels.Everything())
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s %s/%s: %v", m, namespace, pod, err))
				continue
			}
			fmt.Printf("value: %s %s/%s = %s (%g)\n", m, namespace, pod, v.Value.String(), v.Value.AsApproximateFloat64())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("no value for:\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}
