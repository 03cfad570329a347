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

// Package tuner is `cachet node-tuner`: one process per node (a DaemonSet)
// that reads the node (package host), the cache pods' exclusive CPUs (the
// kubelet's PodResources API) and their Caches' spec.nodeTuning, makes the
// plan (package plan), applies it through the journal (package journal),
// keeps irqbalance off it, and reports per pod in the pod's
// cache.cachet.dev/node-tuned annotation, which the operator folds into
// the Cache's NodeTuned condition.
//
// Concurrency: one loop goroutine runs every pass, so pods on a node are
// planned and applied one whole-node plan at a time; the metrics collector
// reads the last pass under its own lock.
package tuner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/nodetuner/host"
	"cachet.dev/cachet/internal/nodetuner/journal"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

// Reasons the tuner adds to the plan's (the NodeTuned condition's).
const (
	ReasonIrqbalanceConflict = "IrqbalanceConflict"
	ReasonManagedIRQ         = "ManagedIRQ"
	ReasonApplyFailed        = "ApplyFailed"
)

// Config is the tuner's command line.
type Config struct {
	NodeName        string
	HostRoot        string // the host's / ("/host" in the pod; proc/ and sys/ below it)
	PodResourcesDir string
	StateDir        string
	IrqbalanceRun   string // the host's /run/irqbalance
	// NetSysRoot is a sysfs of the node's network namespace, where the pod
	// veths are, when that is not the host's: the tuner runs with
	// hostNetwork, and the runtime mounts the container's own /sys in that
	// namespace, while a hostPath of /sys shows the host's. The two differ
	// when the kubelet itself runs in a network namespace (the local
	// cluster). "" means HostRoot's sys.
	NetSysRoot string
	DryRun     bool
	// AssumeStrategy, when set, treats every pod with exclusive CPUs as a
	// cache pod with this strategy and RPS on, without the API server: for
	// --dry-run on a node before any Cache exists.
	AssumeStrategy plan.Strategy
}

// PodStatus is what the tuner reports for one pod (the annotation's JSON).
type PodStatus struct {
	Pod      string `json:"-"`
	Status   string `json:"status"` // True or False
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	Strategy string `json:"strategy"`
	// Generation is the Cache's metadata.generation the status is for.
	Generation int64 `json:"generation"`
}

// Tuner runs passes.
type Tuner struct {
	cfg     Config
	client  client.Client // nil with AssumeStrategy
	journal *journal.Journal
	metrics *Metrics
}

// New opens the journal (unless dry-run) and returns a Tuner.
func New(cfg Config, c client.Client, m *Metrics) (*Tuner, error) {
	t := &Tuner{cfg: cfg, client: c, metrics: m}
	if !cfg.DryRun {
		j, err := journal.Open(cfg.StateDir, cfg.HostRoot)
		if err != nil {
			return nil, err
		}
		t.journal = j
	}
	return t, nil
}

// ExitAfterWriteEnv is the e2e's hook, set on the DaemonSet only by the e2e
// stage (the chart has no value for it): the tuner exits right after the
// first file it writes, between two writes of a pass, as a kill would.
// It does so once per state directory (a marker file there), so that the
// restarted tuner shows the journal converging.
const ExitAfterWriteEnv = "CACHET_NODETUNER_E2E_EXIT_AFTER_WRITE"

const exitedMarker = "e2e-exited-after-write"

func (t *Tuner) exitOnceAfterFirstWrite(logExit func()) {
	marker := filepath.Join(t.cfg.StateDir, exitedMarker)
	if _, err := os.Stat(marker); err == nil {
		return
	}
	t.journal.OnPoint(func(point string) error {
		if point != "after-write" {
			return nil
		}
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			return err
		}
		logExit()
		os.Exit(3)
		return nil
	})
}

type cachePod struct {
	pod        *corev1.Pod
	generation int64
}

// Pass reads, plans, applies and reports once.
func (t *Tuner) Pass(ctx context.Context) (plan.Plan, []PodStatus, error) {
	procRoot, sysRoot := filepath.Join(t.cfg.HostRoot, "proc"), filepath.Join(t.cfg.HostRoot, "sys")
	node, err := host.Read(procRoot, sysRoot)
	if err != nil {
		return plan.Plan{}, nil, fmt.Errorf("read node: %w", err)
	}
	cpus, alloc, err := ReadPodResources(ctx, t.cfg.PodResourcesDir)
	if err != nil {
		return plan.Plan{}, nil, err
	}
	netSys := sysRoot
	if t.cfg.NetSysRoot != "" && filepath.Clean(t.cfg.NetSysRoot) != filepath.Clean(sysRoot) {
		netSys = t.cfg.NetSysRoot
		links, err := host.ReadLinks(procRoot, netSys)
		if err != nil {
			return plan.Plan{}, nil, fmt.Errorf("read the node's network namespace: %w", err)
		}
		for name, l := range links {
			if _, ok := node.Links[name]; !ok && len(l.IRQs) == 0 {
				node.Links[name] = l
			}
		}
	}
	in := plan.Inputs{Node: node, Allocatable: alloc}
	caches := map[string]cachePod{}
	if t.cfg.AssumeStrategy != "" {
		for key, set := range cpus {
			if !set.IsEmpty() {
				in.Pods = append(in.Pods, plan.Pod{Key: key, Exclusive: set, Strategy: t.cfg.AssumeStrategy, RPS: true})
			}
		}
	} else if in.Pods, caches, err = t.cachePods(ctx, cpus, procRoot, netSys); err != nil {
		return plan.Plan{}, nil, err
	}
	for key, set := range cpus {
		if _, isCache := caches[key]; !isCache && t.cfg.AssumeStrategy == "" {
			in.OtherExclusive = in.OtherExclusive.Union(set)
		}
	}
	p := plan.Make(in)
	if netSys != sysRoot {
		if err := vethsInNetns(&p, in.Pods, t.cfg.HostRoot, netSys); err != nil {
			return plan.Plan{}, nil, err
		}
	}
	dropAbsentSysctl(&p, t.cfg.HostRoot)
	if t.cfg.DryRun {
		return p, statuses(p, nil, nil, caches), nil
	}

	// irqbalance first: a pass it runs between two of our writes would
	// move what we placed.
	var conflict error
	if ib := FindIrqbalance(procRoot, t.cfg.IrqbalanceRun); ib.PID != 0 {
		banned := cpuset.New()
		for _, r := range p.Pods {
			if r.Reason == plan.ReasonTuned {
				banned = banned.Union(r.Workers)
			}
		}
		conflict = ib.Ban(banned, plannedIRQs(p))
	}
	res, err := t.journal.Apply(p.Writes)
	if err != nil {
		return p, nil, fmt.Errorf("journal: %w", err)
	}
	st := statuses(p, &res, conflict, caches)
	if t.metrics != nil {
		workers := map[string]cpuset.CPUSet{}
		for _, r := range p.Pods {
			if r.Reason == plan.ReasonTuned {
				workers[r.Key] = r.Workers.Difference(r.IRQCPUs)
			}
		}
		t.metrics.SetPass(workers, st)
	}
	if t.client != nil {
		for _, s := range st {
			if err := t.annotate(ctx, caches[s.Pod].pod, s); err != nil {
				return p, st, err
			}
		}
	}
	return p, st, nil
}

// cachePods are the node's running cache pods, with their Cache's tuning.
func (t *Tuner) cachePods(ctx context.Context, cpus PodCPUs, procRoot, sysRoot string) ([]plan.Pod, map[string]cachePod, error) {
	var list corev1.PodList
	if err := t.client.List(ctx, &list,
		client.MatchingLabels{cachev1alpha1.LabelName: cachev1alpha1.LabelNameValue, cachev1alpha1.LabelComponent: cachev1alpha1.LabelComponentCache},
		client.MatchingFields{"spec.nodeName": t.cfg.NodeName}); err != nil {
		return nil, nil, fmt.Errorf("list cache pods on %s: %w", t.cfg.NodeName, err)
	}
	var pods []plan.Pod
	caches := map[string]cachePod{}
	for i := range list.Items {
		pod := &list.Items[i]
		key := pod.Namespace + "/" + pod.Name
		if _, active := cpus[key]; !active || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		var cache cachev1alpha1.Cache
		if err := t.client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[cachev1alpha1.LabelInstance]}, &cache); apierrors.IsNotFound(err) {
			continue // its Cache is gone: the pod is going too
		} else if err != nil {
			// An API server that is slow or restarting says nothing about
			// the Cache: planning without the pod would revert its tuning
			// and the next pass would re-apply it (interrupts flapping
			// onto its workers), so this pass applies nothing.
			return nil, nil, fmt.Errorf("get Cache of %s: %w", key, err)
		}
		veth := ""
		if ip := net.ParseIP(pod.Status.PodIP); ip != nil {
			veth, _ = FindVeth(filepath.Join(procRoot, "net"), sysRoot, ip)
		}
		pods = append(pods, plan.Pod{Key: key, Exclusive: cpus[key], Strategy: plan.Strategy(cache.Spec.NodeTuning.Strategy()),
			RPS: cache.Spec.NodeTuning.RPSEnabled(), Veth: veth})
		caches[key] = cachePod{pod: pod, generation: cache.Generation}
	}
	return pods, caches, nil
}

// vethsInNetns points the plan's veth writes at the node's network
// namespace's sysfs. The journal keeps paths relative to HostRoot, so
// the path says how to get there from HostRoot ("../sys/class/net/...").
func vethsInNetns(p *plan.Plan, pods []plan.Pod, hostRoot, netSys string) error {
	rel, err := filepath.Rel(hostRoot, netSys)
	if err != nil {
		return err
	}
	for _, pod := range pods {
		if pod.Veth == "" {
			continue
		}
		prefix := "sys/class/net/" + pod.Veth + "/"
		for i := range p.Writes {
			if rest, ok := strings.CutPrefix(p.Writes[i].Path, prefix); ok {
				p.Writes[i].Path = filepath.Join(rel, "class/net", pod.Veth, rest)
			}
		}
	}
	return nil
}

// sockFlowSysctl is global, but the kernel shows it only in the host's
// network namespace: a tuner whose node network is another namespace
// cannot see it. RPS works without it; only RFS's flow table stays as the
// host has it, and the plan says so.
const sockFlowSysctl = "proc/sys/net/core/rps_sock_flow_entries"

func dropAbsentSysctl(p *plan.Plan, hostRoot string) {
	if _, err := os.Stat(filepath.Join(hostRoot, sockFlowSysctl)); err == nil {
		return
	}
	kept := p.Writes[:0]
	for _, w := range p.Writes {
		if w.Path == sockFlowSysctl {
			p.Notes = append(p.Notes, "net.core.rps_sock_flow_entries is not visible in this network namespace (only the host's): RFS keeps the host's flow table size")
			continue
		}
		kept = append(kept, w)
	}
	p.Writes = kept
}

func plannedIRQs(p plan.Plan) []int {
	var irqs []int
	for _, w := range p.Writes {
		if rest, ok := strings.CutPrefix(w.Path, "proc/irq/"); ok {
			if n, err := strconv.Atoi(strings.SplitN(rest, "/", 2)[0]); err == nil {
				irqs = append(irqs, n)
			}
		}
	}
	return irqs
}

// statuses turn the plan and what applying it did into one status per pod.
func statuses(p plan.Plan, res *journal.Result, conflict error, caches map[string]cachePod) []PodStatus {
	refused := map[string][]string{}
	var failed []string
	if res != nil {
		for path, owner := range res.Refused {
			refused[owner] = append(refused[owner], path)
		}
		for _, e := range res.Errors {
			failed = append(failed, e.Error())
		}
	}
	var out []PodStatus
	for _, r := range p.Pods {
		s := PodStatus{Pod: r.Key, Status: "True", Reason: r.Reason, Strategy: string(r.Strategy), Generation: caches[r.Key].generation}
		s.Message = r.Why
		if len(r.Queues) > 0 {
			s.Message += fmt.Sprintf("; queues %s, their interrupts on CPUs %s of the pod's %s", strings.Join(r.Queues, " "), r.IRQCPUs, r.Workers)
		}
		switch {
		case r.Reason == plan.ReasonNotRequested:
		case r.Reason != plan.ReasonTuned:
			s.Status = "False"
		case conflict != nil:
			s.Status, s.Reason = "False", ReasonIrqbalanceConflict
			s.Message = "irqbalance runs and would move the interrupts back: " + conflict.Error()
		case len(refused[r.Key]) > 0:
			sort.Strings(refused[r.Key])
			s.Status, s.Reason = "False", ReasonManagedIRQ
			s.Message = "the kernel manages these interrupts' affinity (EIO), left where they are: " + strings.Join(refused[r.Key], ", ")
		case len(failed) > 0:
			s.Status, s.Reason = "False", ReasonApplyFailed
			s.Message = strings.Join(failed, "; ")
		}
		out = append(out, s)
	}
	return out
}

func (t *Tuner) annotate(ctx context.Context, pod *corev1.Pod, s PodStatus) error {
	if pod == nil {
		return nil
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if pod.Annotations[cachev1alpha1.NodeTunedAnnotation] == string(raw) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{cachev1alpha1.NodeTunedAnnotation: string(raw)}}})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(t.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}
