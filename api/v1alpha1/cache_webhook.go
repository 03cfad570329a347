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

package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var cachelog = logf.Log.WithName("cache-webhook")

// MaxNameLength leaves room in 63-character labels and names for the
// StatefulSet's "-<ordinal>" pods and "-<revision>" hashes.
const MaxNameLength = 52

// DefaultingPath is where the API server sends Caches to be defaulted (the
// mutating webhook marker below).
const DefaultingPath = "/mutate-cache-cachet-dev-v1alpha1-cache"

// SetupCacheWebhookWithManager registers the defaulting and validating
// webhooks. engineImage is written into spec.image when a Cache names none.
func SetupCacheWebhookWithManager(mgr ctrl.Manager, engineImage string) error {
	mgr.GetWebhookServer().Register(DefaultingPath, &admission.Webhook{
		Handler: &CacheDefaulting{Defaulter: &CacheDefaulter{EngineImage: engineImage}},
	})
	return ctrl.NewWebhookManagedBy(mgr, &Cache{}).
		WithValidator(&CacheValidator{}).
		Complete()
}

// CacheDefaulting is the mutating webhook. It patches only what Default
// changed (spec.image), instead of controller-runtime's decode, default and
// re-encode round trip, which rewrote what the user wrote: every quantity in
// canonical form (64.5Mi became 66048Ki, 0.3Gi 322122547200m), a missing
// spec.memory as 0 (so the user read "must be at least 8Mi" instead of
// "Required value"). It is also the first to see a value of the wrong type,
// so it names that field and echoes the value instead of a Go decode error.
type CacheDefaulting struct {
	Defaulter *CacheDefaulter
}

// Handle defaults one admission request.
func (h *CacheDefaulting) Handle(ctx context.Context, req admission.Request) admission.Response {
	var object map[string]any
	if err := json.Unmarshal(req.Object.Raw, &object); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	spec, hasSpec := object["spec"].(map[string]any)
	var c Cache
	if err := json.Unmarshal(req.Object.Raw, &c); err != nil {
		errs := undecodableFields(field.NewPath("spec"), reflect.TypeFor[CacheSpec](), spec)
		if len(errs) == 0 {
			// Not a field the spec walk knows: the schema names it.
			return admission.Allowed("")
		}
		name, _ := object["metadata"].(map[string]any)["name"].(string)
		status := apierrors.NewInvalid(schema.GroupKind{Group: GroupVersion.Group, Kind: "Cache"}, name, errs).ErrStatus
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
	}
	if !hasSpec {
		return admission.Allowed("") // the schema says spec is required
	}
	image := c.Spec.Image
	if err := h.Defaulter.Default(ctx, &c); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if c.Spec.Image == image {
		return admission.Allowed("")
	}
	return admission.Patched("", jsonpatch.NewOperation("add", "/spec/image", c.Spec.Image))
}

// undecodableFields names every value under p that does not decode into its
// Go type t, echoing the value as the user wrote it. The walk follows t, so
// it knows every field of the API without a list of its own.
func undecodableFields(p *field.Path, t reflect.Type, v any) field.ErrorList {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	if !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		var errs field.ErrorList
		switch obj, list := asObject(v), asList(v); {
		case t.Kind() == reflect.Struct && obj != nil:
			for i := range t.NumField() {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name != "" && name != "-" {
					errs = append(errs, undecodableFields(p.Child(name), f.Type, obj[name])...)
				}
			}
			return errs
		case t.Kind() == reflect.Map && obj != nil:
			for k, e := range obj {
				errs = append(errs, undecodableFields(p.Key(k), t.Elem(), e)...)
			}
			return errs
		case t.Kind() == reflect.Slice && list != nil:
			for i, e := range list {
				errs = append(errs, undecodableFields(p.Index(i), t.Elem(), e)...)
			}
			return errs
		}
	}
	raw, err := json.Marshal(v)
	if err == nil && json.Unmarshal(raw, reflect.New(t).Interface()) == nil {
		return nil
	}
	return field.ErrorList{field.Invalid(p, v, expectedForm(t))}
}

func asObject(v any) map[string]any { m, _ := v.(map[string]any); return m }
func asList(v any) []any            { l, _ := v.([]any); return l }

// expectedForm says, in a user's terms, what a value of Go type t looks like.
func expectedForm(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[resource.Quantity]():
		return "must be a quantity such as 64Mi, 1Gi or 512"
	case reflect.TypeFor[metav1.Duration]():
		return "must be a duration such as 90s, 5m or 1h30m"
	case reflect.TypeFor[intstr.IntOrString]():
		return "must be a whole number or a percentage such as 1 or 25%"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "must be a whole number such as 2, written without quotes or units"
	case reflect.Bool:
		return "must be true or false"
	case reflect.String:
		return "must be a string"
	case reflect.Slice:
		return "must be a list"
	case reflect.Struct, reflect.Map:
		return "must be an object"
	}
	return "must be a " + t.String()
}

// +kubebuilder:webhook:path=/mutate-cache-cachet-dev-v1alpha1-cache,mutating=true,failurePolicy=fail,sideEffects=None,groups=cache.cachet.dev,resources=caches,verbs=create;update,versions=v1alpha1,name=mcache-v1alpha1.kb.io,admissionReviewVersions=v1

// CacheDefaulter fills in what the schema cannot default: the engine image,
// which comes from the operator's --engine-image flag.
type CacheDefaulter struct {
	EngineImage string
}

var _ admission.Defaulter[*Cache] = &CacheDefaulter{}

// Default writes the operator's engine image into caches that name none.
// Persisting it (rather than resolving it at every reconcile) means an
// operator upgrade never restarts, and so empties, existing caches.
func (d *CacheDefaulter) Default(_ context.Context, c *Cache) error {
	if c.Spec.Image == "" {
		c.Spec.Image = d.EngineImage
		cachelog.V(1).Info("defaulted image", "cache", c.Name, "image", c.Spec.Image)
	}
	return nil
}

// +kubebuilder:webhook:path=/validate-cache-cachet-dev-v1alpha1-cache,mutating=false,failurePolicy=fail,sideEffects=None,groups=cache.cachet.dev,resources=caches,verbs=create;update,versions=v1alpha1,name=vcache-v1alpha1.kb.io,admissionReviewVersions=v1

// CacheValidator checks the rules the schema's markers and CEL cannot express,
// and repeats the CEL quantity rules (memory in whole MiB, maxItemSize bounds)
// as a second line with the exact limit in the message.
type CacheValidator struct{}

var _ admission.Validator[*Cache] = &CacheValidator{}

// ValidateCreate validates a new Cache.
func (v *CacheValidator) ValidateCreate(_ context.Context, c *Cache) (admission.Warnings, error) {
	return validateCache(c)
}

// ValidateUpdate validates a changed Cache. Every field may change: the
// operator rolls the pods to the new spec. A change that reaches the pod
// template is warned about, because every replaced pod starts empty.
func (v *CacheValidator) ValidateUpdate(_ context.Context, old, c *Cache) (admission.Warnings, error) {
	warnings, err := validateCache(c)
	if w := RestartWarning(old, c); w != "" {
		warnings = append(warnings, w)
	}
	return warnings, err
}

// RestartWarning says, when an update changes a field that reaches the pod
// template, that every pod will be replaced and start empty.
func RestartWarning(old, c *Cache) string {
	before, after := old.Spec.PodTemplateSpec(), c.Spec.PodTemplateSpec()
	if before.Image == "" || after.Image == "" {
		before.Image, after.Image = "", "" // the defaulter fills an empty image; that is not a change
	}
	if equality.Semantic.DeepEqual(before, after) {
		return ""
	}
	var changed []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"image", before.Image == after.Image},
		{"memory", before.Memory.Cmp(after.Memory) == 0},
		{"cpu", equality.Semantic.DeepEqual(before.CPU, after.CPU)},
		{"dedicatedCPUs", equality.Semantic.DeepEqual(before.DedicatedCPUs, after.DedicatedCPUs)},
		{"engine", equality.Semantic.DeepEqual(before.Engine, after.Engine)},
		{"placement", equality.Semantic.DeepEqual(before.Placement, after.Placement)},
		{"extstore", equality.Semantic.DeepEqual(before.Extstore, after.Extstore)},
	} {
		if !f.same {
			changed = append(changed, "spec."+f.name)
		}
	}
	how := "one at a time (RollingUpdate)"
	if c.Spec.UpdateStrategy.Type == OnDeleteStrategy {
		how = "as you delete them (OnDelete)"
	}
	return fmt.Sprintf("changing %s restarts every pod of this Cache, %s: each restarted pod starts with an empty cache", strings.Join(changed, ", "), how)
}

// ValidateDelete allows every deletion.
func (v *CacheValidator) ValidateDelete(_ context.Context, _ *Cache) (admission.Warnings, error) {
	return nil, nil
}

func validateCache(c *Cache) (admission.Warnings, error) {
	errs, warnings := ValidateCacheSpec(c)
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(schema.GroupKind{Group: GroupVersion.Group, Kind: "Cache"}, c.Name, errs)
}

// ValidateCacheSpec returns every rule a Cache breaks, each naming its field,
// plus warnings for legal but probably unintended settings.
func ValidateCacheSpec(c *Cache) (field.ErrorList, admission.Warnings) {
	errs := validateName(c)
	errs = append(errs, validateEngine(c)...)
	errs = append(errs, validatePlacement(c)...)
	serviceErrs, serviceWarnings := validateService(c)
	errs = append(errs, serviceErrs...)
	warnings := append(disruptionWarnings(c), serviceWarnings...)
	return errs, warnings
}

func validateName(c *Cache) field.ErrorList {
	var errs field.ErrorList
	name := field.NewPath("metadata", "name")
	if len(c.Name) > MaxNameLength {
		errs = append(errs, field.TooLong(name, c.Name, MaxNameLength))
	}
	for _, msg := range validation.IsDNS1035Label(c.Name) {
		errs = append(errs, field.Invalid(name, c.Name, "must be usable as a Service name: "+msg))
	}
	return errs
}

// validateEngine checks memory, the item size and the slab classes against
// each other, as cachetd does when it starts.
func validateEngine(c *Cache) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	mem := c.Spec.Memory.Value()
	const mib = 1 << 20
	if mem%mib != 0 {
		errs = append(errs, field.Invalid(spec.Child("memory"), c.Spec.Memory.String(),
			"must be a whole number of MiB (e.g. 64Mi, 1Gi): cachetd's -m counts mebibytes"))
	}

	engine := spec.Child("engine")
	itemMax := int64(1 << 20)
	if q := c.Spec.Engine.MaxItemSize; q != nil {
		itemMax = q.Value()
		p := engine.Child("maxItemSize")
		switch {
		case itemMax < 1<<10:
			errs = append(errs, field.Invalid(p, q.String(), "must be at least 1Ki"))
		case itemMax > 128<<20:
			errs = append(errs, field.Invalid(p, q.String(), "must be at most 128Mi, cachetd's largest item"))
		case itemMax > mem/2:
			errs = append(errs, field.Invalid(p, q.String(),
				fmt.Sprintf("must be at most half of spec.memory (%s): the engine needs room for at least two items of the largest size",
					resource.NewQuantity(mem/2, resource.BinarySI).String())))
		}
	} else if itemMax > mem/2 && mem >= mib {
		errs = append(errs, field.Invalid(spec.Child("memory"), c.Spec.Memory.String(),
			"must be at least twice spec.engine.maxItemSize (default 1Mi): set a smaller spec.engine.maxItemSize"))
	}

	if gf := c.Spec.Engine.GrowthFactor; gf != nil {
		f, err := strconv.ParseFloat(*gf, 64)
		if err != nil || f <= 1.0 || f > 4.0 {
			errs = append(errs, field.Invalid(engine.Child("growthFactor"), *gf,
				"must be a decimal number greater than 1.0 and at most 4.0 (e.g. \"1.25\"): each slab class grows by this factor"))
		}
	}

	for i, size := range c.Spec.Engine.ChunkSizes {
		p := engine.Child("chunkSizes").Index(i)
		if size%8 != 0 {
			errs = append(errs, field.Invalid(p, size, "must be a multiple of 8: items are 8-byte aligned"))
		}
		if int64(size) > itemMax {
			errs = append(errs, field.Invalid(p, size,
				fmt.Sprintf("must be at most spec.engine.maxItemSize (%d bytes): no item is larger", itemMax)))
		}
		if chunkMax := SlabChunkMax(mem); int64(size) > chunkMax {
			errs = append(errs, field.Invalid(p, size,
				fmt.Sprintf("must be at most %d bytes at this spec.memory, half of the engine's slab page: larger values are chained from chunks of that size", chunkMax)))
		}
	}
	if p := c.Spec.WorkloadProfile; p != nil {
		for i, b := range p.ValueSizes {
			if int64(b.Bytes) > itemMax {
				errs = append(errs, field.Invalid(spec.Child("workloadProfile", "valueSizes").Index(i).Child("bytes"), b.Bytes,
					fmt.Sprintf("must be at most spec.engine.maxItemSize (%d bytes): the engine refuses larger values", itemMax)))
			}
		}
	}
	return errs
}

// validatePlacement keeps the operator's own labels and annotations on the
// pods, and the rest valid keys and values.
func validatePlacement(c *Cache) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	placement := spec.Child("placement")
	for _, l := range ReservedPodLabels {
		if _, ok := c.Spec.Placement.PodLabels[l]; ok {
			errs = append(errs, field.Forbidden(placement.Child("podLabels").Key(l),
				"is set by the operator to select the cache's pods and cannot be overridden"))
		}
	}
	if _, ok := c.Spec.Placement.PodAnnotations[ConfigHashAnnotation]; ok {
		errs = append(errs, field.Forbidden(placement.Child("podAnnotations").Key(ConfigHashAnnotation),
			"is set by the operator to roll pods when the engine configuration changes"))
	}
	for _, a := range []struct {
		path *field.Path
		keys map[string]string
	}{{placement.Child("podAnnotations"), c.Spec.Placement.PodAnnotations}, {spec.Child("service", "annotations"), c.Spec.Service.Annotations}} {
		for k := range a.keys {
			for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
				errs = append(errs, field.Invalid(a.path.Key(k), k, "must be a valid annotation key: "+msg))
			}
		}
	}
	for k := range c.Spec.Placement.PodLabels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(placement.Child("podLabels").Key(k), k, msg))
		}
	}
	for k, v := range c.Spec.Placement.PodLabels {
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(placement.Child("podLabels").Key(k), v, msg))
		}
	}
	return errs
}

// disruptionWarnings are legal settings that probably do not do what was
// meant: workers sharing exclusive cores, a budget that blocks every drain.
func disruptionWarnings(c *Cache) admission.Warnings {
	var warnings admission.Warnings
	if t := c.Spec.Engine.Threads; t != nil && c.Spec.IsDedicatedCPUs() && *t > c.Spec.CPUs() {
		warnings = append(warnings, fmt.Sprintf("spec.engine.threads (%d) exceeds spec.cpu (%d): several workers will share each exclusive core", *t, c.Spec.CPUs()))
	}
	if m := c.Spec.PodDisruptionBudget.MaxUnavailable; m != nil && allowsNoDisruption(m.String()) {
		warnings = append(warnings, fmt.Sprintf("spec.podDisruptionBudget.maxUnavailable is %s: node drains will block until the Cache is deleted or the budget changed", m.String()))
	}
	return warnings
}

// validateService checks the load balancer's source ranges, and warns about
// a load balancer open to anyone (the protocol has no authentication).
func validateService(c *Cache) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warnings admission.Warnings
	svc := field.NewPath("spec", "service")
	for i, r := range c.Spec.Service.LoadBalancerSourceRanges {
		if _, err := netip.ParsePrefix(strings.TrimSpace(r)); err != nil {
			errs = append(errs, field.Invalid(svc.Child("loadBalancerSourceRanges").Index(i), r, "must be a CIDR such as 10.0.0.0/8"))
		}
	}
	switch {
	case c.Spec.Service.Type == corev1.ServiceTypeLoadBalancer && len(c.Spec.Service.LoadBalancerSourceRanges) == 0:
		warnings = append(warnings, "spec.service.type is LoadBalancer with no spec.service.loadBalancerSourceRanges: the memcached protocol has no authentication, so anyone who reaches the load balancer can read and change the cache; list the client CIDRs")
	case c.Spec.Service.Type != corev1.ServiceTypeLoadBalancer && len(c.Spec.Service.LoadBalancerSourceRanges) > 0:
		warnings = append(warnings, "spec.service.loadBalancerSourceRanges only applies to spec.service.type LoadBalancer; it is ignored")
	}
	return errs, warnings
}

// allowsNoDisruption reports a maxUnavailable of zero, as a number or a
// percentage ("0", "0%", "00%").
// SlabChunkMax is the engine's largest slab chunk for an item memory of mem
// bytes (engine/src/settings.c settings_slab_chunk_max: 1 MiB pages, halved
// down to 64 KiB until the memory holds 64, and half a page). The engine
// refuses larger chunkSizes; internal/engine/contract_test.go keeps the two
// in agreement.
func SlabChunkMax(mem int64) int64 {
	page := int64(1 << 20)
	for page > 64<<10 && mem/page < 64 {
		page >>= 1
	}
	return page / 2
}

func allowsNoDisruption(v string) bool {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), "%"))
	return err == nil && n == 0
}
