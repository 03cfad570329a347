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

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1 "k8s.io/api/networking/v1"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

var nsCounter int

// newNamespace gives each test its own namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	nsCounter++
	name := fmt.Sprintf("t%d-%s", nsCounter, strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-")))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.TrimRight(name, "-")
	if err := k8sClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func createCache(t *testing.T, ns, name string, mutate ...func(*cachev1alpha1.Cache)) *cachev1alpha1.Cache {
	t.Helper()
	c := &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi")},
	}
	for _, m := range mutate {
		m(c)
	}
	if err := k8sClient.Create(context.Background(), c); err != nil {
		t.Fatalf("creating cache: %v", err)
	}
	return c
}

// mustRefuse creates a Cache of 64Mi changed by mutate, and fails the test
// unless the API server refuses it as Invalid with every fragment of want.
func mustRefuse(t *testing.T, ns, name string, mutate func(*cachev1alpha1.Cache), want ...string) {
	t.Helper()
	c := &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi")},
	}
	mutate(c)
	err := k8sClient.Create(context.Background(), c)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

func getCache(t *testing.T, ns, name string) *cachev1alpha1.Cache {
	t.Helper()
	c := &cachev1alpha1.Cache{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// updateCache changes a Cache the way kubectl edit does: read, change,
// write, and start over when the operator's status update got in between.
func updateCache(ns, name string, mutate func(*cachev1alpha1.Cache)) (*cachev1alpha1.Cache, error) {
	c := &cachev1alpha1.Cache{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, c); err != nil {
			return err
		}
		mutate(c)
		return k8sClient.Update(context.Background(), c)
	})
	return c, err
}

func controlledBy(obj client.Object, c *cachev1alpha1.Cache) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == c.UID && ref.Kind == "Cache" && ref.APIVersion == "cache.cachet.dev/v1alpha1" && ptr.Deref(ref.BlockOwnerDeletion, false)
}

func TestCreateBuildsEveryOwnedObject(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	created := createCache(t, ns, "web", func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(2)) })

	// Admission defaulted what the schema and the webhook own.
	c := getCache(t, ns, "web")
	if c.Spec.Image != testEngineImage {
		t.Errorf("webhook did not default spec.image: %q", c.Spec.Image)
	}
	if c.Spec.CPUs() != 1 || !c.Spec.IsDedicatedCPUs() || c.Spec.CPU == nil || c.Spec.DedicatedCPUs == nil ||
		ptr.Deref(c.Spec.Engine.MaxConnections, 0) != 1024 || c.Spec.Service.Port != 11211 ||
		c.Spec.UpdateStrategy.Type != cachev1alpha1.RollingUpdateStrategy || c.Spec.PodDisruptionBudget.MaxUnavailable.IntValue() != 1 {
		t.Errorf("schema defaults missing: %+v", c.Spec)
	}

	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key("web"), sts)
		return err == nil, fmt.Sprint(err)
	})
	want := StatefulSet(c, BuildOptions{Image: testEngineImage, Engine: suiteCurrent})
	ctr := sts.Spec.Template.Spec.Containers[0]
	if *sts.Spec.Replicas != 2 || sts.Spec.ServiceName != "web-headless" || ctr.Image != testEngineImage ||
		!slices.Equal(ctr.Command, want.Spec.Template.Spec.Containers[0].Command) ||
		!ctr.Resources.Limits.Memory().Equal(*want.Spec.Template.Spec.Containers[0].Resources.Limits.Memory()) ||
		ctr.Resources.Limits.Cpu().Value() != 1 || !ctr.Resources.Requests.Cpu().Equal(*ctr.Resources.Limits.Cpu()) {
		t.Errorf("StatefulSet differs from the builder: %+v", sts.Spec)
	}
	if !*ctr.SecurityContext.ReadOnlyRootFilesystem || !*sts.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Error("pod is not non-root with a read-only root filesystem")
	}

	cm := &corev1.ConfigMap{}
	if err := k8sClient.Get(ctx, key(ConfigMapOfPod(&sts.Spec.Template.Spec)), cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["args"] != "-p\n11211\n-t\n1\n-m\n64\n-c\n1024\n-I\n1m\n-f\n1.25\n-n\n48\n-o\nconn_buffer_limit=4m,sock_sndbuf=64k,sock_rcvbuf=16k,metrics_port=9150\n" || cm.Immutable == nil || !*cm.Immutable {
		t.Errorf("args file = %q immutable %v", cm.Data["args"], cm.Immutable)
	}
	if sts.Spec.Template.Annotations[ConfigHashAnnotation] != engine.ConfigHash(cm.Data["args"]) || cm.Name != "web-config-"+engine.ConfigHash(cm.Data["args"]) {
		t.Error("pod template hash does not match the ConfigMap")
	}
	headless, clientSvc := &corev1.Service{}, &corev1.Service{}
	if err := k8sClient.Get(ctx, key("web-headless"), headless); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Get(ctx, key("web"), clientSvc); err != nil {
		t.Fatal(err)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || clientSvc.Spec.ClusterIP == corev1.ClusterIPNone || clientSvc.Spec.Ports[0].Port != 11211 {
		t.Errorf("services: headless %q client %q", headless.Spec.ClusterIP, clientSvc.Spec.ClusterIP)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	if err := k8sClient.Get(ctx, key("web"), pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	for _, obj := range []client.Object{sts, cm, headless, clientSvc, pdb} {
		if !controlledBy(obj, created) {
			t.Errorf("%T %s lacks a controller owner reference to the Cache: %+v", obj, obj.GetName(), obj.GetOwnerReferences())
		}
		if obj.GetLabels()["app.kubernetes.io/managed-by"] != "cachet-operator" || obj.GetLabels()["app.kubernetes.io/instance"] != "web" {
			t.Errorf("%T %s labels %v", obj, obj.GetName(), obj.GetLabels())
		}
	}

	// Status is written even before any pod exists (NodeTuned is Unknown
	// TunerPending then).
	eventually(t, "status written", func() (bool, string) {
		c = getCache(t, ns, "web")
		return len(c.Status.Conditions) == 6 && len(c.Status.Endpoints) == 2, fmt.Sprintf("%+v", c.Status)
	})
	if c.Status.Endpoints[1].Host != "web-1.web-headless."+ns+".svc.cluster.test" || c.Status.Selector == "" ||
		!slices.Equal(c.Status.EngineArgs, EngineArgs(c, BuildOptions{Engine: suiteCurrent})) || c.Status.Image != testEngineImage {
		t.Errorf("status: %+v", c.Status)
	}
	eventually(t, "a Created event", func() (bool, string) {
		evs := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "web" && e.Reason == "Created" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// Idempotence: reconciling an unchanged Cache again writes nothing. The
	// reconciler is called directly so that the check does not depend on when
	// the manager's own reconciles happen.
	before := sts.ResourceVersion
	direct := &CacheReconciler{Client: k8sClient, Scheme: scheme, Recorder: testRecorder, EngineImage: testEngineImage, ClusterDomain: "cluster.test", Engine: suiteEngine}
	for range 2 {
		if _, err := direct.Reconcile(ctx, ctrl.Request{NamespacedName: key("web")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8sClient.Get(ctx, key("web"), sts); err != nil {
		t.Fatal(err)
	}
	if sts.ResourceVersion != before {
		t.Errorf("re-applying an unchanged spec rewrote the StatefulSet (%s -> %s)", before, sts.ResourceVersion)
	}

	// Someone deletes an owned object: it comes back.
	if err := k8sClient.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PDB recreated", func() (bool, string) {
		p := &policyv1.PodDisruptionBudget{}
		err := k8sClient.Get(ctx, key("web"), p)
		return err == nil && p.UID != pdb.UID, fmt.Sprint(err)
	})

	// After all these reconciles the creation was announced once.
	evs := &eventsv1.EventList{}
	if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	announced := 0
	for _, e := range evs.Items {
		if e.Regarding.Name == "web" && e.Reason == "Created" {
			announced++
			if e.Series != nil {
				announced += int(e.Series.Count)
			}
		}
	}
	if announced != 1 {
		t.Errorf("%d Created events for one creation", announced)
	}
}

// podFromTemplate creates the pod the StatefulSet controller would create
// from the live StatefulSet's template (envtest runs no such controller).
func podFromTemplate(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
		t.Fatal(err)
	}
	tpl := sts.Spec.Template
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: tpl.Labels, Annotations: tpl.Annotations},
		Spec:       *tpl.Spec.DeepCopy(),
	}
	if err := k8sClient.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func argsOf(t *testing.T, ns, configMap string) (string, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: configMap}, cm)
	return cm.Data[ArgsFileKey], err
}

// Defect 1, on a real API server: with OnDelete, a memory change must not
// reach a pod that has not been replaced. Before the fix every pod mounted
// one ConfigMap that the operator rewrote at once, so a restart of the old
// pod ran -m 96 inside its 48Mi-sized limit. Now the old pod's ConfigMap is
// immutable and stays until no pod can need it, status.revisions reports the
// arguments each pod runs (read from what it mounts), and the old ConfigMap
// is deleted once the last pod using it is gone.
func TestSpecChangeGetsANewRevisionAndOldPodsKeepTheirs(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "roll", func(c *cachev1alpha1.Cache) {
		c.Spec.Memory = resource.MustParse("48Mi")
		c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy
	})
	sts := &appsv1.StatefulSet{}
	key := types.NamespacedName{Namespace: ns, Name: "roll"}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, sts)
		return err == nil, fmt.Sprint(err)
	})
	oldHash, oldCM := sts.Spec.Template.Annotations[ConfigHashAnnotation], ConfigMapOfPod(&sts.Spec.Template.Spec)
	oldLimit := sts.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().DeepCopy()
	oldPod := podFromTemplate(t, ns, "roll")
	setSTSStatus(t, ns, "roll", appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentRevision: "r1", UpdateRevision: "r1"})

	c, err := updateCache(ns, "roll", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("96Mi") })
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := engine.ArgsFile(EngineArgs(c, BuildOptions{Engine: suiteCurrent}))
	eventually(t, "StatefulSet follows the new spec", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, sts); err != nil {
			return false, err.Error()
		}
		h := sts.Spec.Template.Annotations[ConfigHashAnnotation]
		return h == engine.ConfigHash(wantArgs) && h != oldHash, h
	})
	if lim := sts.Spec.Template.Spec.Containers[0].Resources.Limits.Memory(); lim.Cmp(oldLimit) <= 0 || lim.Value() != engine.MemoryLimitBytes(&c.Spec, suiteCurrent) {
		t.Errorf("memory limit %s did not follow (was %s)", lim, &oldLimit)
	}
	newCM := ConfigMapOfPod(&sts.Spec.Template.Spec)
	if got, err := argsOf(t, ns, newCM); err != nil || got != wantArgs || !strings.Contains(got, "-m\n96\n") {
		t.Errorf("new revision's ConfigMap %s: %q (%v)", newCM, got, err)
	}
	// The pod that was not replaced still mounts its own, unchanged arguments.
	if ConfigMapOfPod(&oldPod.Spec) != oldCM || oldCM == newCM {
		t.Fatalf("old pod mounts %s, old revision %s, new %s", ConfigMapOfPod(&oldPod.Spec), oldCM, newCM)
	}
	setSTSStatus(t, ns, "roll", appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 0, CurrentRevision: "r1", UpdateRevision: "r2"})
	eventually(t, "status reports what each pod runs", func() (bool, string) {
		c := getCache(t, ns, "roll")
		st := c.Status
		ok := st.ConfigHash == engine.ConfigHash(wantArgs) && slices.Contains(st.EngineArgs, "96") &&
			len(st.Revisions) == 1 && st.Revisions[0].ConfigHash == oldHash && slices.Equal(st.Revisions[0].Pods, []string{"roll-0"}) &&
			strings.Join(st.Revisions[0].EngineArgs, " ") == strings.Join(engine.ParseArgsFile(strings.Replace(wantArgs, "-m\n96", "-m\n48", 1)), " ") &&
			condOf(c, "Progressing").Reason == ReasonUpdatePendingDelete
		return ok, fmt.Sprintf("hash %s revisions %+v progressing %+v", st.ConfigHash, st.Revisions, condOf(c, "Progressing"))
	})
	if got, err := argsOf(t, ns, oldCM); err != nil || !strings.Contains(got, "-m\n48\n") {
		t.Fatalf("the old pod's ConfigMap %s changed or went away while it runs: %q (%v)", oldCM, got, err)
	}

	// The old pod is deleted and replaced from the new template: the old
	// ConfigMap is garbage-collected, the status shows one revision.
	if err := k8sClient.Delete(ctx, oldPod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old pod gone", func() (bool, string) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(oldPod), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	podFromTemplate(t, ns, "roll")
	setSTSStatus(t, ns, "roll", appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentRevision: "r2", UpdateRevision: "r2"})
	eventually(t, "old revision's ConfigMap garbage-collected", func() (bool, string) {
		_, err := argsOf(t, ns, oldCM)
		st := getCache(t, ns, "roll").Status
		return apierrors.IsNotFound(err) && len(st.Revisions) == 1 && st.Revisions[0].ConfigHash == engine.ConfigHash(wantArgs),
			fmt.Sprintf("get %s: %v; revisions %+v", oldCM, err, st.Revisions)
	})
	if _, err := argsOf(t, ns, newCM); err != nil {
		t.Fatalf("the current revision's ConfigMap went away: %v", err)
	}
}

func TestScaleSubresource(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "scaled")
	eventually(t, "status selector", func() (bool, string) {
		c = getCache(t, ns, "scaled")
		return c.Status.Selector != "", ""
	})

	scale := &autoscalingv1.Scale{}
	if err := k8sClient.SubResource("scale").Get(ctx, c, scale); err != nil {
		t.Fatalf("reading the scale subresource: %v", err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Selector != c.Status.Selector {
		t.Fatalf("scale = %+v, selector want %q", scale, c.Status.Selector)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // as kubectl scale does
		if err := k8sClient.SubResource("scale").Get(ctx, c, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = 3
		return k8sClient.SubResource("scale").Update(ctx, c, client.WithSubResourceBody(scale))
	})
	if err != nil {
		t.Fatalf("scaling through the subresource: %v", err)
	}
	if got := getCache(t, ns, "scaled").Spec.DesiredReplicas(); got != 3 {
		t.Fatalf("spec.replicas = %d after scaling to 3", got)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet scaled", func() (bool, string) {
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "scaled"}, sts); err != nil {
			return false, err.Error()
		}
		return *sts.Spec.Replicas == 3, fmt.Sprint(*sts.Spec.Replicas)
	})
	eventually(t, "three endpoints", func() (bool, string) {
		c = getCache(t, ns, "scaled")
		return len(c.Status.Endpoints) == 3, fmt.Sprint(c.Status.Endpoints)
	})
}

// setSTSStatus plays the StatefulSet controller.
func setSTSStatus(t *testing.T, ns, name string, s appsv1.StatefulSetStatus) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
			return err
		}
		s.ObservedGeneration = sts.Generation
		sts.Status = s
		return k8sClient.Status().Update(context.Background(), sts)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func condOf(c *cachev1alpha1.Cache, typ string) metav1.Condition {
	if cond := meta.FindStatusCondition(c.Status.Conditions, typ); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

func TestStatusFollowsTheStatefulSetAndPods(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "st", func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(2)) })
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "st"}, &appsv1.StatefulSet{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "not Ready before pods exist", func() (bool, string) {
		c := getCache(t, ns, "st")
		r := condOf(c, "Ready")
		return r.Status == metav1.ConditionFalse && condOf(c, "Progressing").Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c.Status.Conditions)
	})

	setSTSStatus(t, ns, "st", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"})
	eventually(t, "Ready once the StatefulSet reports all pods ready", func() (bool, string) {
		c := getCache(t, ns, "st")
		r := condOf(c, "Ready")
		return r.Status == metav1.ConditionTrue && r.Reason == ReasonAllPodsReady && c.Status.ReadyReplicas == 2 &&
			condOf(c, "Progressing").Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c.Status)
	})

	// What `kubectl get cch` prints: the API server's table for the CRD's
	// printer columns.
	raw, err := kubernetes.NewForConfigOrDie(cfg).RESTClient().Get().
		AbsPath("/apis/cache.cachet.dev/v1alpha1/namespaces", ns, "caches").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(raw, table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if !slices.Equal(cols, []string{"Name", "Ready", "Replicas", "Memory", "CPUs", "Age"}) || len(table.Rows) != 1 {
		t.Fatalf("kubectl get columns %v, %d rows", cols, len(table.Rows))
	}
	cell := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cell[c.Name] = table.Rows[0].Cells[i]
	}
	if got := fmt.Sprintf("%v %v %v %v %v %v %v", cell["Name"], cell["Ready"], cell["Replicas"], cell["Memory"], cell["CPUs"], cell["Available"], cell["Dedicated"]); got != "st True 2 64Mi 1 2 true" {
		t.Errorf("kubectl get -o wide row %s", got)
	}

	// A pod the scheduler cannot place: its message reaches the Cache.
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "st-1", Namespace: ns, Labels: SelectorLabels(getCache(t, ns, "st"))},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cachetd", Image: testEngineImage}}},
	}
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient cpu.", LastTransitionTime: metav1.Now(),
	}}
	if err := k8sClient.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	setSTSStatus(t, ns, "st", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 2, AvailableReplicas: 1, CurrentRevision: "r1", UpdateRevision: "r1"})
	eventually(t, "Degraded with the scheduler's words", func() (bool, string) {
		c := getCache(t, ns, "st")
		d := condOf(c, "Degraded")
		return d.Status == metav1.ConditionTrue && d.Reason == ReasonPodUnschedulable &&
			strings.Contains(d.Message, "st-1") && strings.Contains(d.Message, "Insufficient cpu") &&
			condOf(c, "Ready").Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c.Status.Conditions)
	})
	eventually(t, "a Warning event for the degradation", func() (bool, string) {
		evs := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "st" && e.Reason == ReasonPodUnschedulable && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// The pod gets scheduled and Ready: the Cache recovers.
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
	}
	if err := k8sClient.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	setSTSStatus(t, ns, "st", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"})
	eventually(t, "recovered", func() (bool, string) {
		c := getCache(t, ns, "st")
		return condOf(c, "Degraded").Status == metav1.ConditionFalse && condOf(c, "Ready").Status == metav1.ConditionTrue &&
			c.Status.Endpoints[1].Ready, fmt.Sprintf("%+v", c.Status)
	})

	// A spec change makes the old StatefulSet status stale: not Ready until the
	// StatefulSet controller has caught up.
	if _, err := updateCache(ns, "st", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("96Mi") }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Progressing after a spec change", func() (bool, string) {
		c := getCache(t, ns, "st")
		return c.Status.ObservedGeneration == c.Generation && condOf(c, "Progressing").Status == metav1.ConditionTrue &&
			condOf(c, "Ready").Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c.Status.Conditions)
	})
	setSTSStatus(t, ns, "st", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 1, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"})
	eventually(t, "rolling update reported", func() (bool, string) {
		p := condOf(getCache(t, ns, "st"), "Progressing")
		return p.Reason == ReasonRollingUpdate && strings.Contains(p.Message, "1 of 2"), fmt.Sprintf("%+v", p)
	})
}

// Defect 4: a name conflict stayed stuck: the conflicting object carries no
// operator label, so its deletion reached no informer, and the reconciler did
// not retry. It now retries with backoff and recovers once the object goes.
func TestNameConflictIsReportedNotTakenOverAndClears(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mine-headless", Namespace: ns, Annotations: map[string]string{"keep": "me"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := k8sClient.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	createCache(t, ns, "mine")
	eventually(t, "conflict reported", func() (bool, string) {
		c := getCache(t, ns, "mine")
		d := condOf(c, "Degraded")
		return d.Status == metav1.ConditionTrue && d.Reason == "NameConflict" && strings.Contains(d.Message, "mine-headless") &&
			condOf(c, "Ready").Status == metav1.ConditionFalse, fmt.Sprintf("%+v", d)
	})
	svc := &corev1.Service{}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(foreign), svc); err != nil {
		t.Fatal(err)
	}
	if svc.Annotations["keep"] != "me" || len(svc.OwnerReferences) != 0 || svc.Spec.Ports[0].Port != 80 {
		t.Fatalf("someone else's Service was modified: %+v", svc)
	}
	if err := k8sClient.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Cache takes the freed name and the conflict clears", func() (bool, string) {
		c := getCache(t, ns, "mine")
		got := &corev1.Service{}
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(foreign), got)
		return err == nil && controlledBy(got, c) && condOf(c, "Degraded").Reason != ReasonNameConflict,
			fmt.Sprintf("service err=%v degraded=%+v", err, condOf(c, "Degraded"))
	})
}

func TestSpecTheAPIServerRefusesIsReported(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	// Neither the CRD nor the webhook checks the selectors of NetworkPolicy
	// peers; the API server refuses the NetworkPolicy that carries one whose
	// value is no label value. (A pod template field would not do: before
	// v1.31 or so the API server did not validate a StatefulSet's pod spec,
	// and the floor, v1.30, accepts it.)
	createCache(t, ns, "badtol", func(c *cachev1alpha1.Cache) {
		c.Spec.NetworkPolicy = &cachev1alpha1.NetworkPolicySpec{Clients: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "not a label value"}}},
		}}
	})
	eventually(t, "InvalidSpec reported", func() (bool, string) {
		c := getCache(t, ns, "badtol")
		d := condOf(c, "Degraded")
		return d.Status == metav1.ConditionTrue && d.Reason == ReasonInvalidSpec && strings.Contains(d.Message, "NetworkPolicy") &&
			strings.Contains(d.Message, "podSelector") && condOf(c, "Ready").Status == metav1.ConditionFalse, fmt.Sprintf("%+v", d)
	})
	// Fixing the spec recovers without any other nudge.
	if _, err := updateCache(ns, "badtol", func(c *cachev1alpha1.Cache) {
		c.Spec.NetworkPolicy.Clients[0].PodSelector.MatchLabels["app"] = "web"
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "StatefulSet created after the fix", func() (bool, string) {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "badtol"}, &appsv1.StatefulSet{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "Degraded cleared", func() (bool, string) {
		d := condOf(getCache(t, ns, "badtol"), "Degraded")
		return d.Reason != ReasonInvalidSpec, fmt.Sprintf("%+v", d)
	})
}

func TestImmutableStatefulSetChangeIsReplaced(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "imm")
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "imm"}, sts)
		return err == nil, fmt.Sprint(err)
	})
	// dryRunUpdate asks the API server to judge a change to the live
	// StatefulSet, reading it afresh when the operator wrote in between.
	dryRunUpdate := func(mutate func(*appsv1.StatefulSet)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &appsv1.StatefulSet{}
			if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "imm"}, cur); err != nil {
				return err
			}
			mutate(cur)
			return k8sClient.Update(ctx, cur, client.DryRunAll)
		})
	}
	err := dryRunUpdate(func(s *appsv1.StatefulSet) { s.Spec.ServiceName = "another" })
	if !isImmutableStatefulSetChange(err) {
		t.Fatalf("the API server's refusal was not recognised: %v", err)
	}
	// What an operator upgrade that changes an immutable field looks like: the
	// Cache's StatefulSet has an old serviceName. The operator replaces it,
	// deleting it with propagationPolicy Orphan so that its pods live on.
	// envtest runs no garbage collector, so this test removes the orphan
	// finalizer itself, as the collector would once the pods are released.
	old := StatefulSet(c, BuildOptions{Image: testEngineImage, Engine: suiteCurrent})
	old.Spec.ServiceName = "imm-legacy"
	old.Spec.Replicas = ptr.To(int32(2))
	old.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(c, cachev1alpha1.GroupVersion.WithKind("Cache"))}
	var legacyUID types.UID
	for legacyUID == "" { // race the operator, which re-creates it at once
		cur := &appsv1.StatefulSet{}
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "imm"}, cur)
		switch {
		case apierrors.IsNotFound(err):
			attempt := old.DeepCopy()
			if err := k8sClient.Create(ctx, attempt); err == nil {
				legacyUID = attempt.UID
			}
		case err != nil:
			t.Fatal(err)
		default:
			if err := k8sClient.Delete(ctx, cur, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "legacy StatefulSet replaced by a current one", func() (bool, string) {
		cur := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "imm"}, cur); err != nil {
			return false, err.Error()
		}
		if cur.UID == legacyUID {
			if cur.DeletionTimestamp != nil && slices.Contains(cur.Finalizers, metav1.FinalizerOrphanDependents) {
				cur.Finalizers = nil // play the garbage collector
				if err := k8sClient.Update(ctx, cur); err != nil && !apierrors.IsConflict(err) {
					return false, err.Error()
				}
			}
			return false, "legacy StatefulSet still there"
		}
		return cur.Spec.ServiceName == "imm-headless" && *cur.Spec.Replicas == 1, cur.Spec.ServiceName
	})

	err = dryRunUpdate(func(s *appsv1.StatefulSet) {
		s.Spec.Template.Labels["not a label key!"] = "x"
	})
	if !apierrors.IsInvalid(err) || isImmutableStatefulSetChange(err) {
		t.Fatalf("an invalid pod template must be Invalid but not an immutable-field change: %v", err)
	}
}

func TestAdmissionRejectsInvalidCaches(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*cachev1alpha1.Cache)
		want   []string // every fragment must appear in the error
	}{
		// The next three are CEL rules in the CRD (they hold without the
		// webhook); "spec.<field> must" is the CEL message's own wording,
		// which the webhook's messages do not repeat.
		{"memory-not-mib", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("100M") }, []string{"spec.memory", "spec.memory must be a whole number of MiB"}},
		{"item-too-small", func(c *cachev1alpha1.Cache) { c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("512")) }, []string{"spec.engine.maxItemSize", "spec.engine.maxItemSize must be from 1Ki to 128Mi"}},
		{"memory-too-small", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("4Mi") }, []string{"spec.memory", "at least 8Mi"}},
		{"item-bigger-than-half", func(c *cachev1alpha1.Cache) { c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("48Mi")) }, []string{"spec.engine.maxItemSize", "spec.engine.maxItemSize must be at most half of spec.memory"}},
		{"cpu-zero-dedicated", func(c *cachev1alpha1.Cache) { c.Spec.CPU = ptr.To(int32(0)) }, []string{"spec.cpu", "at least 1 when spec.dedicatedCPUs"}},
		{"threads-below-cpu", func(c *cachev1alpha1.Cache) { c.Spec.CPU = ptr.To(int32(4)); c.Spec.Engine.Threads = ptr.To(int32(2)) }, []string{"spec.engine.threads", "at least spec.cpu"}},
		{"chunks-unsorted", func(c *cachev1alpha1.Cache) { c.Spec.Engine.ChunkSizes = []int32{128, 64} }, []string{"spec.engine.chunkSizes", "ascending"}},
		{"chunks-and-factor", func(c *cachev1alpha1.Cache) {
			c.Spec.Engine.ChunkSizes = []int32{64, 128}
			c.Spec.Engine.GrowthFactor = ptr.To("1.5")
		}, []string{"chunkSizes", "growthFactor"}},
		{"chunk-unaligned", func(c *cachev1alpha1.Cache) { c.Spec.Engine.ChunkSizes = []int32{64, 100} }, []string{"spec.engine.chunkSizes[1]", "multiple of 8"}},
		{"growth-factor-one", func(c *cachev1alpha1.Cache) { c.Spec.Engine.GrowthFactor = ptr.To("1.0") }, []string{"spec.engine.growthFactor", "greater than 1.0"}},
		{"reserved-pod-label", func(c *cachev1alpha1.Cache) {
			c.Spec.Placement.PodLabels = map[string]string{"app.kubernetes.io/instance": "other"}
		}, []string{"spec.placement.podLabels[app.kubernetes.io/instance]", "Forbidden"}},
		{"hash-annotation", func(c *cachev1alpha1.Cache) {
			c.Spec.Placement.PodAnnotations = map[string]string{ConfigHashAnnotation: "x"}
		}, []string{"spec.placement.podAnnotations", "Forbidden"}},
		{"bad-update-strategy", func(c *cachev1alpha1.Cache) { c.Spec.UpdateStrategy.Type = "Everything" }, []string{"spec.updateStrategy.type", "Unsupported value"}},
		{"bad-service-type", func(c *cachev1alpha1.Cache) { c.Spec.Service.Type = "ExternalName" }, []string{"spec.service.type", "Unsupported value"}},
		{"replicas-negative", func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(-1)) }, []string{"spec.replicas", "greater than or equal to 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { mustRefuse(t, ns, tc.name, tc.mutate, tc.want...) })
	}

	t.Run("bad-name", func(t *testing.T) {
		c := &cachev1alpha1.Cache{
			ObjectMeta: metav1.ObjectMeta{Name: "9-starts-with-a-digit", Namespace: ns},
			Spec:       cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi")},
		}
		err := k8sClient.Create(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), "metadata.name") || !strings.Contains(err.Error(), "Service name") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("update-is-validated-too", func(t *testing.T) {
		createCache(t, ns, "upd")
		_, err := updateCache(ns, "upd", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("1000000k") })
		if err == nil || !strings.Contains(err.Error(), "whole number of MiB") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("warnings", func(t *testing.T) {
		warnings.take()
		createCache(t, ns, "warned", func(c *cachev1alpha1.Cache) { c.Spec.Engine.Threads = ptr.To(int32(4)) })
		got := strings.Join(warnings.take(), "\n")
		if !strings.Contains(got, "spec.engine.threads (4) exceeds spec.cpu (1)") {
			t.Fatalf("warnings = %q", got)
		}
	})

	t.Run("explicit-image-kept", func(t *testing.T) {
		createCache(t, ns, "pinned", func(c *cachev1alpha1.Cache) { c.Spec.Image = "localhost/cachetd:9.9" })
		if img := getCache(t, ns, "pinned").Spec.Image; img != "localhost/cachetd:9.9" {
			t.Fatalf("image %q", img)
		}
	})

	t.Run("shared-cpu-zero", func(t *testing.T) {
		createCache(t, ns, "shared", func(c *cachev1alpha1.Cache) {
			c.Spec.CPU = ptr.To(int32(0))
			c.Spec.DedicatedCPUs = ptr.To(false)
		})
		c := getCache(t, ns, "shared")
		if c.Spec.CPU == nil || *c.Spec.CPU != 0 {
			t.Fatalf("cpu 0 was not kept through admission: %v", c.Spec.CPU)
		}
	})
}
