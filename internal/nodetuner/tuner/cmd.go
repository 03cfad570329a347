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

// The `cachet node-tuner` command line: flags, the pass loop, the metrics
// endpoint. main.go hands it os.Args after the subcommand's name.
//
// Concurrency: the loop runs passes one after another on one goroutine;
// the HTTP server serves metrics on its own.
package tuner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

// Main runs `cachet node-tuner ARGS` and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("node-tuner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var interval time.Duration
	var metricsAddr, assume string
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "This node's name (default $NODE_NAME).")
	fs.StringVar(&cfg.HostRoot, "host-root", "/", "Where the host's / is mounted; proc/ and sys/ are read and written below it.")
	fs.StringVar(&cfg.PodResourcesDir, "pod-resources-dir", "/var/lib/kubelet/pod-resources", "The kubelet's pod-resources directory (its kubelet.sock is dialled on each pass).")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/cachet/node-tuner", "Where the journal of replaced values lives; keep it on the host so a new tuner pod can revert.")
	fs.StringVar(&cfg.IrqbalanceRun, "irqbalance-run-dir", "/run/irqbalance", "The host's irqbalance runtime directory (its irqbalancePID.sock).")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "Print the plan for this node once and change nothing.")
	fs.StringVar(&assume, "assume-strategy", "", "Without the API server: treat every pod with exclusive CPUs as a cache pod with this irqStrategy (with --dry-run, to see a node's plan before any Cache exists).")
	fs.DurationVar(&interval, "interval", 10*time.Second, "Time between passes (each pass re-reads the pods and converges the node).")
	fs.StringVar(&cfg.NetSysRoot, "net-sys-root", "", "Where a sysfs of the node's network namespace (the pod veths) is, or is mounted if the directory is empty (an emptyDir in the DaemonSet, which runs with hostNetwork): the host-root's sys shows the host's namespace. Default: the host-root's sys.")
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8095", "Address of the Prometheus /metrics endpoint; \"0\" disables it.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if assume != "" {
		cfg.AssumeStrategy = plan.Strategy(assume)
	}
	log := func(format string, a ...any) {
		_, _ = fmt.Fprintf(stderr, time.Now().UTC().Format(time.RFC3339)+" "+format+"\n", a...)
	}

	var c client.Client
	if cfg.AssumeStrategy == "" {
		if cfg.NodeName == "" {
			_, _ = fmt.Fprintln(stderr, "node-tuner: --node-name (or $NODE_NAME) is required")
			return 2
		}
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 1
		}
		if err := cachev1alpha1.AddToScheme(scheme); err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 1
		}
		restConfig, err := ctrl.GetConfig()
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "node-tuner:", err)
			return 1
		}
		if c, err = client.New(restConfig, client.Options{Scheme: scheme}); err != nil {
			_, _ = fmt.Fprintln(stderr, "node-tuner:", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if cfg.NetSysRoot != "" && !cfg.DryRun {
		if err := MountNetSysfs(cfg.NetSysRoot); err != nil {
			_, _ = fmt.Fprintln(stderr, "node-tuner:", err)
			return 1
		}
	}
	metrics := NewMetrics(cfg.HostRoot+"/proc", cfg.HostRoot+"/sys")
	t, err := New(cfg, c, metrics)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "node-tuner:", err)
		return 1
	}
	if os.Getenv(ExitAfterWriteEnv) == "1" && !cfg.DryRun {
		t.exitOnceAfterFirstWrite(func() { log("%s: exiting after the first write of this pass", ExitAfterWriteEnv) })
	}
	if cfg.DryRun {
		p, _, err := t.Pass(ctx)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "node-tuner:", err)
			return 1
		}
		_, _ = fmt.Fprint(stdout, p.String())
		return 0
	}
	if metricsAddr != "0" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		srv := &http.Server{Addr: metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log("metrics: %v", err)
			}
		}()
		defer func() { _ = srv.Shutdown(context.Background()) }()
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := ""
	for {
		_, st, err := t.Pass(ctx)
		switch {
		case err != nil:
			log("pass: %v", err)
		default:
			if s := fmt.Sprint(st); s != last {
				for _, p := range st {
					log("pod %s: %s %s (%s): %s", p.Pod, p.Status, p.Reason, p.Strategy, p.Message)
				}
				if len(st) == 0 {
					log("no cache pod with exclusive CPUs on this node: every journaled value is back")
				}
				last = s
			}
		}
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
	}
}
