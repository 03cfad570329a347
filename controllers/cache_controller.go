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
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

// CacheReconciler turns each Cache into the objects of ownedKinds and
// reports what the pods do.
type CacheReconciler struct {
	client.Client
	// APIReader reads around the informers, which only hold labelled objects.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	// EngineImage is used for a new StatefulSet when a Cache names no image
	// (webhooks disabled). An existing StatefulSet keeps its image.
	EngineImage string
	// Engine shapes every engine's arguments (e.g. the metrics port).
	Engine engine.Options
	// ClusterDomain completes the pods' DNS names in status.endpoints.
	ClusterDomain string
	// CPUManager, when set, tells which nodes give exclusive cores.
	CPUManager CPUManagerChecker
	// MaxBackoff caps the retry delay after a failed apply (default 5 min).
	MaxBackoff time.Duration
	// APIs says which optional APIs (prometheus-operator's kinds, the
	// metrics APIs) the cluster serves; nil: none.
	APIs APIChecker
	// ServedOptional are the optional kinds served when the manager started,
	// by resource: those are watched and read from the informers; the rest
	// are read from the API server when they appear later.
	ServedOptional map[string]bool
	// RecheckAPIs is how often a Cache that wants an optional API the
	// cluster lacks (or a kind the manager does not watch) is reconciled
	// again (default 5 min), so that installing prometheus-operator or an
	// adapter later is noticed without an operator restart.
	RecheckAPIs time.Duration
	// RecheckSecrets is how soon the user's Secrets of spec.auth (and a
	// missing spec.tls Secret) are read again: they carry no label of ours,
	// so no informer sees them change. Default SecretRecheck.
	RecheckSecrets time.Duration
	// PodMetrics reads a pod's engine /metrics for an Observed workload
	// profile; nil: HTTP to the pod's IP at Engine.MetricsPort.
	PodMetrics PodMetrics
}

// serves reports whether the cluster serves an optional group/version (all
// non-optional ones are served).
func (r *CacheReconciler) serves(groupVersion, resource string) bool {
	if groupVersion == "" {
		return true
	}
	return r.APIs != nil && r.APIs.Serves(groupVersion, resource)
}

// reader reads obj's kind from the informers when the manager watches it,
// else from the API server: an optional kind that appeared after the
// operator started has no informer, and reading it through the cached client
// would start an unfiltered one.
func (r *CacheReconciler) reader(obj client.Object) client.Reader {
	for _, k := range ownedKinds {
		if k.optionalAPI != "" && reflect.TypeOf(k.object) == reflect.TypeOf(obj) && !r.ServedOptional[k.resource] && r.APIReader != nil {
			return r.APIReader
		}
	}
	return r.Client
}

// errNotOurs marks an object that exists under an owned object's name but is
// controlled by someone else: the operator must not take it over.
var errNotOurs = errors.New("exists and is not controlled by this Cache")

// applyFailed is returned from Reconcile after the failure was written to
// status, so that the work queue retries with exponential backoff: the cause
// (a conflicting object, a policy webhook, a quota) may go away without any
// event the operator watches.
type applyFailed struct{ reason, msg string }

func (e *applyFailed) Error() string { return e.reason + ": " + e.msg }

// requeueSoon retries after a write conflict or a replaced StatefulSet, which
// resolve by themselves.
const requeueSoon = time.Second

// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches/status,verbs=get;update
// Owner references with blockOwnerDeletion need update on the owner's
// finalizers where the OwnerReferencesPermissionEnforcement admission plugin runs.
// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile applies the owned objects and recomputes the status.
func (r *CacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &cachev1alpha1.Cache{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			forgetCacheMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		forgetCacheMetrics(c.Namespace, c.Name)
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}
	return r.reconcileCache(ctx, c)
}

// getAround reads obj from the informer and, when it is not there, from the
// API server: the informer may not have seen an object created a moment ago,
// and holds no object without the operator's label.
func (r *CacheReconciler) getAround(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	err := r.reader(obj).Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, obj)
	}
	return err
}

// issuerSays is what the Cache's cert-manager issuer says of itself when it
// is not Ready, as "; the Issuer says REASON: MESSAGE", or "" when it is
// Ready or cannot be read. The Certificate's own message often names only
// the symptom ("Issuing certificate as Secret does not exist"); the issuer's
// names the cause (a missing CA key pair, an ACME account refused). It is
// read once per reconcile through the API reader, so no informer watches
// every issuer in the cluster; an external issuer's group is not read.
func (r *CacheReconciler) issuerSays(ctx context.Context, c *cachev1alpha1.Cache) string {
	ref := c.Spec.TLS.IssuerRef
	if r.APIReader == nil || (ref.Group != "" && ref.Group != "cert-manager.io") {
		return ""
	}
	kind, key := ref.Kind, types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}
	if kind == "" {
		kind = "Issuer"
	}
	if kind == "ClusterIssuer" {
		key.Namespace = ""
	}
	issuer := certManagerKind(kind)
	if err := r.APIReader.Get(ctx, key, issuer); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("; the %s %s does not exist", kind, ref.Name)
		}
		// e.g. Forbidden for a ClusterIssuer when the chart watches some
		// namespaces only (its rules are Roles there): the Certificate's
		// message is all the condition can say
		logf.FromContext(ctx).V(1).Info("cannot read the Cache's issuer", "kind", kind, "name", ref.Name, "error", err.Error())
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(issuer.Object, "status", "conditions")
	for _, cd := range conds {
		if m, _ := cd.(map[string]any); m["type"] == "Ready" && m["status"] != "True" {
			return fmt.Sprintf("; the %s says %v: %v", kind, m["reason"], m["message"])
		}
	}
	return ""
}

// maxConditionMessage is metav1.Condition's limit on a message: a longer one
// makes the API server refuse the whole status write.
const maxConditionMessage = 32768

// conditionMessage cuts a message quoted from other objects (cert-manager
// writes its own, of any length) to what a Condition takes, on a UTF-8
// boundary.
func conditionMessage(msg string) string {
	if len(msg) <= maxConditionMessage {
		return msg
	}
	const more = " [cut]"
	cut := maxConditionMessage - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// SecretRecheck is RecheckSecrets' default.
const SecretRecheck = 30 * time.Second

func (r *CacheReconciler) recheckSecrets() time.Duration {
	if r.RecheckSecrets > 0 {
		return r.RecheckSecrets
	}
	return SecretRecheck
}

// renderAuthFile reads spec.auth's Secret (not the operator's, so through
// the API server, not the label-filtered cache) into opts.AuthFile. It
// returns why it could not, for the AuthReady condition; "" when it could
// or spec.auth is unset.
func (r *CacheReconciler) renderAuthFile(ctx context.Context, c *cachev1alpha1.Cache, opts *BuildOptions) *podProblem {
	if c.Spec.Auth == nil {
		return nil
	}
	users := &corev1.Secret{}
	if err := r.getAround(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.Auth.SecretRef.Name}, users); err != nil {
		return &podProblem{ReasonSecretMissing, fmt.Sprintf("spec.auth.secretRef: Secret %s: %v", c.Spec.Auth.SecretRef.Name, err)}
	}
	file, err := RenderAuthFile(users.Data)
	if err != nil {
		return &podProblem{ReasonInvalidUser, fmt.Sprintf("spec.auth.secretRef: Secret %s is not rendered (the last valid authfile stays): %v", users.Name, err)}
	}
	opts.AuthFile = file
	return nil
}

// observeTLS says what keeps spec.tls's certificate from the pods: no
// cert-manager, a Certificate cert-manager has not issued (its issuer not
// Ready), or no Secret to mount; or, with spec.tls.metrics, what keeps
// scrapers from verifying it: no ca.crt in the Secret (the pods still run
// and serve the data port, Prometheus's and the Observed profile's reads of
// the metrics port fail). nil when the Secret is there.
func (r *CacheReconciler) observeTLS(ctx context.Context, c *cachev1alpha1.Cache) *podProblem {
	t := c.Spec.TLS
	if t == nil {
		return nil
	}
	if t.IssuerRef != nil {
		if !r.serves(CertManagerAPI, "certificates") {
			return &podProblem{ReasonNoCertManager, "spec.tls.issuerRef needs cert-manager, and the cluster does not serve " + CertManagerAPI + " certificates: install cert-manager or bring a Secret with spec.tls.secretName"}
		}
		cert := certificateObject()
		if err := r.getAround(ctx, types.NamespacedName{Namespace: c.Namespace, Name: CertificateName(c)}, cert); err == nil {
			conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Ready" && m["status"] != "True" {
					msg := fmt.Sprintf("Certificate %s is not Ready (issuer %s %s): %v%s", CertificateName(c), t.IssuerRef.Kind, t.IssuerRef.Name, m["message"], r.issuerSays(ctx, c))
					return &podProblem{ReasonIssuerNotReady, conditionMessage(msg)}
				}
			}
		}
	}
	secrets := []string{TLSSecretName(c)}
	if t.ClientAuth == "Require" && t.ClientCA != nil {
		secrets = append(secrets, t.ClientCA.Name)
	}
	var serving *corev1.Secret
	for _, name := range secrets {
		secret := &corev1.Secret{}
		if err := r.getAround(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, secret); err != nil {
			return &podProblem{ReasonSecretMissing, fmt.Sprintf("Secret %s: %v; the pods cannot start without it", name, err)}
		}
		if serving == nil {
			serving = secret
		}
	}
	if engine.MetricsTLS(engine.ForSpec(&c.Spec, r.Engine)) && !x509.NewCertPool().AppendCertsFromPEM(serving.Data[TLSCAKey]) {
		return &podProblem{ReasonSecretMissingCA, fmt.Sprintf("spec.tls.metrics needs %s in Secret %s for scrapers to verify the metrics port: "+
			"the pods serve, but Prometheus and the Observed profile cannot read their metrics; add the issuing CA's certificate as %s", TLSCAKey, serving.Name, TLSCAKey)}
	}
	return nil
}

// EngineImageFor is the image of the pod template: spec.image, else the image
// the existing StatefulSet already runs (so an operator upgrade with a new
// --engine-image never restarts a Cache that named none), else the operator's.
func EngineImageFor(c *cachev1alpha1.Cache, existing *appsv1.StatefulSet, operatorDefault string) string {
	if c.Spec.Image != "" {
		return c.Spec.Image
	}
	if existing != nil {
		for _, ctr := range existing.Spec.Template.Spec.Containers {
			if ctr.Name == EngineContainerName && ctr.Image != "" {
				return ctr.Image
			}
		}
	}
	return operatorDefault
}

// EngineOptionsFor are the engine options for a pod template of image.
// Arguments that need a newer cachetd than every one of this API version
// (today -o sock_sndbuf and sock_rcvbuf, which an older cachetd refuses
// with exit 64) are given to the operator's own engine image
// (--engine-image), which it ships with them, and to an image whose
// existing pod template already runs them (running: the arguments of the
// existing StatefulSet when it runs the same image), so that an operator
// upgrade takes nothing away from a Cache it leaves on its image. A Cache
// pinned to any other image keeps arguments it understands, and a limit
// without their term.
func EngineOptionsFor(base engine.Options, image, operatorImage string, running []string) engine.Options {
	base.SocketBuffers = image == operatorImage ||
		slices.ContainsFunc(running, func(a string) bool { return strings.Contains(a, "sock_sndbuf=") })
	return base
}

// runningArgs are the arguments the existing StatefulSet's pod template runs
// when it runs image; nil when there is none or it runs another image.
func (r *CacheReconciler) runningArgs(ctx context.Context, existing *appsv1.StatefulSet, image string) ([]string, error) {
	if existing == nil || EngineImageFor(&cachev1alpha1.Cache{}, existing, "") != image {
		return nil, nil
	}
	name := ConfigMapOfPod(&existing.Spec.Template.Spec)
	if name == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.getAround(ctx, types.NamespacedName{Namespace: existing.Namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return engine.ParseArgsFile(cm.Data[ArgsFileKey]), nil
}

func (r *CacheReconciler) reconcileCache(ctx context.Context, c *cachev1alpha1.Cache) (ctrl.Result, error) {
	prevSTS := &appsv1.StatefulSet{}
	if err := r.getAround(ctx, types.NamespacedName{Namespace: c.Namespace, Name: StatefulSetName(c)}, prevSTS); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		prevSTS = nil
	}
	image := EngineImageFor(c, prevSTS, r.EngineImage)
	running, err := r.runningArgs(ctx, prevSTS, image)
	if err != nil {
		return ctrl.Result{}, err
	}
	opts := BuildOptions{Engine: EngineOptionsFor(r.Engine, image, r.EngineImage, running), Image: image, ClusterDomain: r.ClusterDomain}
	c.Status.Recommendation = engine.AdoptRunningClasses(&c.Spec, c.Status.Recommendation, running)
	authProblem := r.renderAuthFile(ctx, c, &opts)
	// before the owned objects: an apply's classes are in status first
	observeAgain, conflict, err := r.observeProfile(ctx, c, prevSTS)
	if err != nil {
		return ctrl.Result{}, err
	}
	if conflict {
		return ctrl.Result{RequeueAfter: requeueSoon}, nil
	}

	a, done, err := r.applyOwned(ctx, c, prevSTS, opts)
	if done != nil || err != nil {
		return ptr.Deref(done, ctrl.Result{}), err
	}
	sts, recheck, auxFailures := a.sts, a.recheck, a.auxFailures
	if a.stsPending {
		return ctrl.Result{}, nil
	}
	r.recordSpecEvents(c, prevSTS, sts, opts)

	live := &liveState{}
	liveSTS := &appsv1.StatefulSet{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(sts), liveSTS); err == nil {
		live.statefulSet = liveSTS
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(SelectorLabels(c))); err != nil {
		return ctrl.Result{}, err
	}
	live.pods = pods.Items
	configs, err := r.prune(ctx, c, opts, live)
	if err != nil {
		return ctrl.Result{}, err
	}
	claims, err := r.reconcileClaims(ctx, c, live, sts)
	if err != nil {
		return ctrl.Result{}, err
	}

	obs := Observed{StatefulSet: live.statefulSet, Pods: live.pods, Now: time.Now(), ConfigMaps: configs, Image: opts.Image, Options: opts,
		APIs: map[string]bool{}, AuxFailures: auxFailures, AuthProblem: authProblem, TLSProblem: r.observeTLS(ctx, c),
		Claims: claims.claims, ClaimsLost: claims.lost, ExtstoreCheckErr: claims.checkErr, ClaimsWithoutClass: claims.withoutClass}
	missingAPI, err := r.observeAroundTheCache(ctx, c, &obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	recheck = recheck || missingAPI
	result := ctrl.Result{}
	if recheck {
		result.RequeueAfter = r.recheckAPIs()
	}
	if len(auxFailures) > 0 && result.RequeueAfter > time.Minute {
		result.RequeueAfter = time.Minute // a refusal may be lifted without any event we watch
	}
	// a volume's NotReady node reaches the node-loss timeout; nodes are not watched
	requeueBy(&result, claims.requeueAfter)
	if c.Spec.Auth != nil || obs.TLSProblem != nil {
		requeueBy(&result, r.recheckSecrets()) // a rotated spec.auth Secret, or a TLS Secret that appears
	}
	// a pod's grace for the tuner's first report ends with no event
	requeueBy(&result, NodeTunerRecheckAfter(c, obs))
	requeueBy(&result, observeAgain) // the next observation of an Observed profile
	status := ComputeStatus(c, obs, r.ClusterDomain)
	RecordCacheMetrics(c, status)
	if equality.Semantic.DeepEqual(c.Status, status) {
		return result, nil
	}
	previous := c.Status
	c.Status = status
	if err := r.Status().Update(ctx, c); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: requeueSoon}, nil
		}
		return ctrl.Result{}, err
	}
	// Only a transition that was stored is news, so a retried update never
	// repeats an Event.
	r.recordConditionEvents(c, previous, status)
	r.recordRestartEvents(c, previous, status)
	return result, nil
}

// requeueBy makes result come back within w at the latest (w > 0).
func requeueBy(result *ctrl.Result, w time.Duration) {
	if w > 0 && (result.RequeueAfter == 0 || w < result.RequeueAfter) {
		result.RequeueAfter = w
	}
}

// observeAroundTheCache adds to obs what the status reports beyond the
// Cache's own objects: the metrics APIs its autoscaler reads, the
// prometheus-operator kinds its monitoring needs, the autoscaler itself and
// the CPU manager policy of its pods' nodes. missingAPI says an API it needs
// is not served yet, so the operator looks again later.
func (r *CacheReconciler) observeAroundTheCache(ctx context.Context, c *cachev1alpha1.Cache, obs *Observed) (missingAPI bool, err error) {
	for _, gv := range metricsAPIsNeeded(c) {
		obs.APIs[gv] = r.serves(gv, "")
		missingAPI = missingAPI || !obs.APIs[gv]
	}
	if c.Spec.Monitoring.IsEnabled() {
		for _, k := range ownedKinds {
			if k.optionalAPI == MonitoringAPI && !r.serves(k.optionalAPI, k.resource) {
				obs.MissingMonitoringKinds = append(obs.MissingMonitoringKinds, k.resource)
			}
		}
	}
	if c.Spec.Autoscaling != nil {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: HPAName(c)}, hpa); err == nil {
			obs.HPA = hpa
		} else if !apierrors.IsNotFound(err) {
			return missingAPI, err
		}
	}
	if r.CPUManager != nil && c.Spec.IsDedicatedCPUs() {
		obs.NodePolicies = map[string]NodeCPUPolicy{}
		for _, p := range obs.Pods {
			if n := p.Spec.NodeName; n != "" {
				if _, done := obs.NodePolicies[n]; !done {
					obs.NodePolicies[n] = r.CPUManager.Policy(ctx, n)
				}
			}
		}
	}
	return missingAPI, nil
}

// applied is what writing the owned objects did and found.
type applied struct {
	// sts is the desired StatefulSet.
	sts *appsv1.StatefulSet
	// stsPending: the StatefulSet is being replaced; the new one comes once
	// the old one is gone.
	stsPending bool
	// recheck: something wanted depends on an API that may appear later.
	recheck bool
	// auxFailures holds, by resource, why a monitoring or autoscaling
	// object was refused: those never hold the Cache back.
	auxFailures map[string]string
}

// stop ends the reconcile with an apply failure's result.
func (a applied) stop(res ctrl.Result, err error) (applied, *ctrl.Result, error) {
	return a, &res, err
}

// applyOwned writes every owned object the Cache wants. A non-nil result
// (or an error) ends the reconcile with it: a refused object, a StatefulSet
// being replaced, a conflict to retry.
func (r *CacheReconciler) applyOwned(ctx context.Context, c *cachev1alpha1.Cache, prevSTS *appsv1.StatefulSet, opts BuildOptions) (applied, *ctrl.Result, error) {
	a := applied{stsPending: prevSTS != nil && prevSTS.DeletionTimestamp != nil, auxFailures: map[string]string{}}
	for _, kind := range ownedKinds {
		wanted := kind.build(c, opts)
		if kind.optionalAPI != "" && len(wanted) > 0 {
			if !r.serves(kind.optionalAPI, kind.resource) || !r.ServedOptional[kind.resource] {
				a.recheck = true
			}
			if !r.serves(kind.optionalAPI, kind.resource) {
				continue // the Monitoring condition says what is missing
			}
		}
		for _, obj := range wanted {
			if s, ok := obj.(*appsv1.StatefulSet); ok {
				a.sts = s
				if a.stsPending {
					// Being replaced (or deleted by someone): wait until it is
					// gone, then create the new one; its deletion brings us back.
					continue
				}
				if prevSTS != nil {
					if differ, how := claimTemplatesDiffer(prevSTS, s); differ {
						// Claim templates cannot change in place: seen before
						// the API server refuses, so the Cache says what changed.
						if err := r.replaceStatefulSet(ctx, c, prevSTS, how, true); err != nil {
							return a, &ctrl.Result{}, err
						}
						return a, &ctrl.Result{RequeueAfter: requeueSoon}, nil
					}
				}
			}
			err := r.apply(ctx, c, obj)
			if err == nil {
				continue
			}
			kindName := obj.GetObjectKind().GroupVersionKind().Kind
			if kind.auxiliary {
				a.auxFailures[kind.resource] = fmt.Sprintf("the API server refused %s %s: %v", kindName, obj.GetName(), err)
				a.recheck = true
				continue
			}
			switch {
			case errors.Is(err, errNotOurs):
				return a.stop(r.applyFailure(ctx, c, ReasonNameConflict, fmt.Sprintf("%v: delete or rename it, or rename the Cache", err)))
			case obj == client.Object(a.sts) && prevSTS != nil && isImmutableStatefulSetChange(err):
				// An immutable StatefulSet field changed (e.g. after an
				// operator upgrade). Replace the StatefulSet but orphan its
				// pods: the new one adopts them and rolls them one by one.
				if derr := r.replaceStatefulSet(ctx, c, prevSTS, "has immutable fields that changed ("+err.Error()+")", false); derr != nil {
					return a, &ctrl.Result{}, derr
				}
				return a, &ctrl.Result{RequeueAfter: requeueSoon}, nil
			case apierrors.IsConflict(err):
				return a, &ctrl.Result{RequeueAfter: requeueSoon}, nil
			case apierrors.IsInvalid(err):
				// The API server refused what the spec asks for (e.g. a
				// malformed toleration the CRD schema cannot check).
				return a.stop(r.applyFailure(ctx, c, ReasonInvalidSpec,
					fmt.Sprintf("the API server refused the %s built from this spec: %v; fix the spec and the operator retries", kindName, err)))
			default:
				// Anything else the API server said no to: an admission
				// webhook or policy, a quota, missing permissions. The pods
				// may still serve, but they no longer follow the spec.
				return a.stop(r.applyFailure(ctx, c, ReasonApplyFailed,
					fmt.Sprintf("the API server refused %s %s: %v; the operator retries with backoff", kindName, obj.GetName(), err)))
			}
		}
	}
	return a, nil, nil
}

func (r *CacheReconciler) recheckAPIs() time.Duration {
	if r.RecheckAPIs > 0 {
		return r.RecheckAPIs
	}
	return 5 * time.Minute
}

// prune deletes owned objects the Cache no longer wants (old revisions'
// ConfigMaps once no pod can need them, a NetworkPolicy the spec dropped),
// and returns the arguments files of the ConfigMaps that remain, by name.
func (r *CacheReconciler) prune(ctx context.Context, c *cachev1alpha1.Cache, opts BuildOptions, live *liveState) (map[string][]string, error) {
	configs := map[string][]string{}
	for _, kind := range ownedKinds {
		if !kind.prune || !r.serves(kind.optionalAPI, kind.resource) {
			continue
		}
		wanted := map[string]bool{}
		for _, obj := range kind.build(c, opts) {
			wanted[obj.GetName()] = true
		}
		list := kind.list.DeepCopyObject().(client.ObjectList)
		if err := r.reader(kind.object).List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels(Labels(c))); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			obj := item.(client.Object)
			if owner := metav1.GetControllerOf(obj); owner == nil || owner.UID != c.UID {
				continue
			}
			if kind.prune && !wanted[obj.GetName()] && (kind.keep == nil || !kind.keep(obj, live)) {
				if err := r.Delete(ctx, obj, client.Preconditions{UID: ptrTo(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
					return nil, err
				}
				logf.FromContext(ctx).Info("deleted an object the Cache no longer uses", "kind", fmt.Sprintf("%T", obj), "name", obj.GetName())
				continue
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				configs[cm.Name] = engine.ParseArgsFile(cm.Data[ArgsFileKey])
			}
		}
	}
	return configs, nil
}

func ptrTo[T any](v T) *T { return &v }

// apply server-side applies obj with the Cache as its controller. Applying
// the full desired object every time is idempotent, and fields that other
// controllers or people own (e.g. a Service's clusterIP) are left alone.
func (r *CacheReconciler) apply(ctx context.Context, c *cachev1alpha1.Cache, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	switch err := r.getAround(ctx, client.ObjectKeyFromObject(obj), existing); {
	case err == nil:
		if owner := metav1.GetControllerOf(existing); owner == nil || owner.UID != c.UID {
			return fmt.Errorf("%s %s/%s %w", obj.GetObjectKind().GroupVersionKind().Kind, existing.GetNamespace(), existing.GetName(), errNotOurs)
		}
		if cm, ok := existing.(*corev1.ConfigMap); ok && cm.Immutable != nil && *cm.Immutable {
			return nil // named after its content's hash: it already holds what we would write
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	if err := controllerutil.SetControllerReference(c, obj, r.Scheme); err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	if claims, ok, _ := unstructured.NestedSlice(u, "spec", "volumeClaimTemplates"); ok {
		// A claim template's empty status and null timestamp are not ours
		// to apply: the API server fills them, and owning them would make
		// every apply look like a change of an immutable field.
		for _, claim := range claims {
			if m, ok := claim.(map[string]any); ok {
				delete(m, "status")
				unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
			}
		}
		if err := unstructured.SetNestedSlice(u, claims, "spec", "volumeClaimTemplates"); err != nil {
			return err
		}
	}
	return r.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner(managerName), client.ForceOwnership)
}

// isImmutableStatefulSetChange recognises the API server's refusal to change
// a StatefulSet field other than the few it allows to change.
func isImmutableStatefulSetChange(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == metav1.CauseType(field.ErrorTypeForbidden) && cause.Field == "spec" &&
			strings.Contains(cause.Message, "updates to statefulset spec for fields other than") {
			return true
		}
	}
	return false
}

// applyFailure reports, where kubectl shows it, why the owned objects could
// not be written (Degraded and not Ready, with the API server's message),
// emits a Warning when the problem is new, and returns an error so that the
// work queue retries with backoff.
func (r *CacheReconciler) applyFailure(ctx context.Context, c *cachev1alpha1.Cache, reason, msg string) (ctrl.Result, error) {
	prev := meta.FindStatusCondition(c.Status.Conditions, cachev1alpha1.ConditionDegraded)
	isNew := prev == nil || prev.Status != metav1.ConditionTrue || prev.Reason != reason || prev.Message != msg
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: cachev1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason,
		Message: msg, ObservedGeneration: c.Generation,
	})
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: cachev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
		Message: msg, ObservedGeneration: c.Generation,
	})
	c.Status.ObservedGeneration = c.Generation
	if err := r.Status().Update(ctx, c); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: requeueSoon}, nil
		}
		return ctrl.Result{}, err
	}
	if isNew {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, reason, "Apply", "%s", msg)
	}
	return ctrl.Result{}, &applyFailed{reason: reason, msg: msg}
}

// recordSpecEvents notes what this reconcile set in motion.
func (r *CacheReconciler) recordSpecEvents(c *cachev1alpha1.Cache, prev, next *appsv1.StatefulSet, opts BuildOptions) {
	if prev == nil {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Created", "Apply",
			"created StatefulSet %s with %d pod(s), engine arguments %v", next.Name, *next.Spec.Replicas, EngineArgs(c, opts))
		return
	}
	if prev.Spec.Replicas != nil && *prev.Spec.Replicas != *next.Spec.Replicas {
		r.recordScaleEvents(c, *prev.Spec.Replicas, *next.Spec.Replicas)
	}
	oldHash := prev.Spec.Template.Annotations[ConfigHashAnnotation]
	newHash := next.Spec.Template.Annotations[ConfigHashAnnotation]
	if oldHash != newHash {
		how := "rolling pods one at a time; each restarted pod starts empty"
		if c.Spec.UpdateStrategy.Type == cachev1alpha1.OnDeleteStrategy {
			how = "pods take it when deleted (OnDelete); until then each keeps its own arguments"
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ConfigChanged", "Apply",
			"engine configuration %s -> %s, %s: %v", oldHash, newHash, how, EngineArgs(c, opts))
	}
}

// recordScaleEvents says what a scale costs: a scale-in drops the keys of
// the shards it removes (each pod is its own shard, with no copy elsewhere),
// and a scale by hand of an autoscaled Cache lasts only until the
// autoscaler's next evaluation.
func (r *CacheReconciler) recordScaleEvents(c *cachev1alpha1.Cache, from, to int32) {
	msg := fmt.Sprintf("scaling from %d to %d pod(s)", from, to)
	if c.Spec.Autoscaling != nil {
		msg += fmt.Sprintf(" (HorizontalPodAutoscaler %s scales this Cache)", HPAName(c))
	}
	if to < from {
		removed := make([]string, 0, from-to)
		for i := to; i < from; i++ {
			removed = append(removed, fmt.Sprintf("%s-%d", StatefulSetName(c), i))
		}
		msg += fmt.Sprintf(": the keys of shard(s) %s are dropped with their pods, and clients that re-hash them onto the remaining pods miss until they are set again",
			strings.Join(removed, ", "))
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, ReasonScaling, "Apply", "%s", msg)
	if a := c.Spec.Autoscaling; a != nil {
		if who := replicasWriter(c); who != "" && who != autoscalerManager {
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonScaledOutsideAutoscaler, "Apply",
				"%s set spec.replicas to %d, but HorizontalPodAutoscaler %s manages it (from %d to %d pods) and sets it back at its next evaluation: change spec.autoscaling.minReplicas or maxReplicas instead, or remove spec.autoscaling to scale by hand",
				who, to, HPAName(c), ptr.Deref(a.MinReplicas, 1), a.MaxReplicas)
		}
	}
}

// autoscalerManager is the field manager of the HorizontalPodAutoscaler's
// writes: it runs in kube-controller-manager.
const autoscalerManager = "kube-controller-manager"

// replicasWriter is the field manager that last wrote spec.replicas, from
// the Cache's managed fields (kubectl scale, an apply, or the autoscaler).
func replicasWriter(c *cachev1alpha1.Cache) string {
	var who string
	var when time.Time
	for _, mf := range c.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]any `json:"f:spec"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:replicas"]; !ok {
			continue
		}
		if t := mf.Time; who == "" || (t != nil && !t.Time.Before(when)) {
			who = mf.Manager
			if t != nil {
				when = t.Time
			}
		}
	}
	return who
}

// recordConditionEvents emits an Event when the Cache becomes Ready or stops
// being Ready, and when it becomes Degraded (a Warning), recovers, or its
// problem changes; when dedicated cores turn out not to be exclusive; and as
// the node tuner applies, fails or is asked to revert (nodeTunedEvent).
func (r *CacheReconciler) recordConditionEvents(c *cachev1alpha1.Cache, prev, next cachev1alpha1.CacheStatus) {
	statusOf := func(st cachev1alpha1.CacheStatus, t string) (metav1.ConditionStatus, string) {
		if cond := meta.FindStatusCondition(st.Conditions, t); cond != nil {
			return cond.Status, cond.Reason
		}
		return metav1.ConditionFalse, "" // absent reads as False: a new Cache is neither Ready nor Degraded
	}
	for _, t := range []string{cachev1alpha1.ConditionReady, cachev1alpha1.ConditionDegraded, cachev1alpha1.ConditionCoresExclusive,
		cachev1alpha1.ConditionMonitoring, cachev1alpha1.ConditionAutoscaling} {
		oldStatus, oldReason := statusOf(prev, t)
		cur := meta.FindStatusCondition(next.Conditions, t)
		if cur == nil {
			continue
		}
		changed := cur.Status != oldStatus
		if t == cachev1alpha1.ConditionDegraded && cur.Status == metav1.ConditionTrue && cur.Reason != oldReason {
			changed = true // a different problem
		}
		if t == cachev1alpha1.ConditionMonitoring || t == cachev1alpha1.ConditionAutoscaling {
			// Absent is news here too: turning monitoring on in a cluster
			// without prometheus-operator deserves a Warning at once.
			old := meta.FindStatusCondition(prev.Conditions, t)
			changed = old == nil || old.Status != cur.Status || old.Reason != cur.Reason
		}
		if t == cachev1alpha1.ConditionCoresExclusive {
			// Only the discovery that cores are shared is news.
			changed = cur.Status == metav1.ConditionFalse && (oldStatus != metav1.ConditionFalse || cur.Reason != oldReason)
		}
		// StatefulSetPending lasts until the StatefulSet controller reads the
		// new spec, a moment; the next state is the news.
		if !changed || cur.Reason == ReasonStatefulSetPending {
			continue
		}
		// Planned work (a roll, a scale) also makes a Cache not Ready; only
		// problems are Warnings. Shared cores asked for (NotDedicated) are
		// the spec's choice, not a problem: a Warning for every such Cache
		// would be noise to whoever alerts on Warnings.
		kind := corev1.EventTypeNormal
		if (t == cachev1alpha1.ConditionDegraded && cur.Status == metav1.ConditionTrue) ||
			(t == cachev1alpha1.ConditionCoresExclusive && cur.Reason != ReasonNotDedicated) ||
			((t == cachev1alpha1.ConditionMonitoring || t == cachev1alpha1.ConditionAutoscaling) && cur.Status == metav1.ConditionFalse) {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(c, nil, kind, cur.Reason, "Observe", "%s=%s: %s", t, cur.Status, cur.Message)
	}
	if kind, reason, note, ok := nodeTunedEvent(prev.Conditions, next.Conditions); ok {
		r.Recorder.Eventf(c, nil, kind, reason, "Observe", "%s", note)
	}
}

// recordRestartEvents emits a Warning for each pod whose engine restarted
// since the last stored status: every restart empties that shard.
func (r *CacheReconciler) recordRestartEvents(c *cachev1alpha1.Cache, prev, next cachev1alpha1.CacheStatus) {
	before := map[string]int32{}
	for _, ep := range prev.Endpoints {
		before[ep.Pod] = ep.Restarts
	}
	for _, ep := range next.Endpoints {
		if ep.Restarts <= before[ep.Pod] {
			continue
		}
		why := "unknown"
		if ep.LastTermination != nil {
			why = fmt.Sprintf("%s, exit code %d", ep.LastTermination.Reason, ep.LastTermination.ExitCode)
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonEngineRestarted, "Observe",
			"pod %s restarted its engine (%d restart(s), last: %s): that shard is empty again", ep.Pod, ep.Restarts, why)
	}
}

// podToCache maps a cache pod to the Cache named by its instance label.
func podToCache(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	if l[cachev1alpha1.LabelName] != cachev1alpha1.LabelNameValue || l[cachev1alpha1.LabelComponent] != cachev1alpha1.LabelComponentCache || l[cachev1alpha1.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l[cachev1alpha1.LabelInstance]}}}
}

// SetupWithManager watches Caches, every owned kind, and the cache pods
// (owned by the StatefulSet, so mapped back through their labels). Failed
// applies retry with exponential backoff from 1 s up to MaxBackoff: an object
// in the way, a policy webhook's refusal or a quota may go away without an
// event the operator sees.
func (r *CacheReconciler) SetupWithManager(mgr ctrl.Manager) error {
	maxBackoff := r.MaxBackoff
	if maxBackoff == 0 {
		maxBackoff = 5 * time.Minute
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&cachev1alpha1.Cache{}).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, maxBackoff),
		})
	for _, k := range watchedKinds(r.ServedOptional) {
		if k.watchFilter != nil {
			b = b.Owns(k.object, builder.WithPredicates(k.watchFilter))
			continue
		}
		b = b.Owns(k.object)
	}
	return b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToCache)).
		// Extstore claims are the StatefulSet's, labelled like its pods.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(podToCache)).
		Named("cache").
		Complete(r)
}
