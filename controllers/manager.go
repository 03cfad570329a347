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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// CacheOptions limit the manager's informers to the objects the operator
// manages: cache pods (read only to explain a Cache's status), their extstore
// claims, and the owned
// kinds carrying its managed-by label. Caching every ConfigMap, Service and
// pod of a big cluster would cost memory for nothing; the rare look-up of an
// object without the label (a name conflict) goes to the API server directly.
// With namespaces, every informer (Caches included) watches only those
// namespaces, which is what lets the operator run with Roles alone. An
// optional kind (a PodMonitor) gets an informer only when servedOptional says
// the cluster serves it.
func CacheOptions(servedOptional map[string]bool, namespaces ...string) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{cachev1alpha1.LabelManagedBy: managerName})}
	cachePods := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{
		cachev1alpha1.LabelName:      cachev1alpha1.LabelNameValue,
		cachev1alpha1.LabelComponent: cachev1alpha1.LabelComponentCache,
	})}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: cachePods,
		// The StatefulSet labels each extstore claim with its pods' selector.
		&corev1.PersistentVolumeClaim{}: cachePods,
	}
	for _, k := range watchedKinds(servedOptional) {
		byObject[k.object] = managed
	}
	opts := cache.Options{ByObject: byObject}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
