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

// Label and annotation keys the operator writes and selects by. They are part
// of the API: users select cache pods by them, the webhook refuses overrides,
// and the operator's informers filter on them.
const (
	// LabelName is app.kubernetes.io/name; LabelNameValue on every cache object.
	LabelName      = "app.kubernetes.io/name"
	LabelNameValue = "cachet"
	// LabelInstance names the Cache an object belongs to.
	LabelInstance = "app.kubernetes.io/instance"
	// LabelComponent is LabelComponentCache on every cache object.
	LabelComponent      = "app.kubernetes.io/component"
	LabelComponentCache = "cache"
	// LabelManagedBy is ManagerName on every object the operator owns; the
	// operator's informers only hold objects that carry it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagerName is the operator's field manager and managed-by value.
	ManagerName = "cachet-operator"

	// ConfigHashAnnotation is set by the operator on the pod template (and so
	// on every pod): the hash of the engine arguments that pod runs. Users
	// may not set it.
	ConfigHashAnnotation = "cache.cachet.dev/config-hash"
	// LabelConfigHash marks each immutable per-revision ConfigMap with the
	// hash of the arguments it holds.
	LabelConfigHash = "cache.cachet.dev/config-hash"
	// ExtstoreClaimAnnotation is set by the operator on the pod template of a
	// Cache with extstore: the class and size of its volume claim template,
	// so that a change of either replaces the pods (and with them, their
	// claims) even when the engine arguments stay the same.
	// NodeTunedAnnotation is set on a cache pod by the node tuner on its
	// node (never by the operator or users): JSON {"status","reason",
	// "message","strategy","generation"}, what the tuner did for that pod.
	// The operator folds it into the Cache's NodeTuned condition.
	NodeTunedAnnotation     = "cache.cachet.dev/node-tuned"
	ExtstoreClaimAnnotation = "cache.cachet.dev/extstore-claim"
)

// ReservedPodLabels select a Cache's pods; overriding one would orphan them.
var ReservedPodLabels = []string{LabelName, LabelInstance, LabelComponent, LabelManagedBy}
