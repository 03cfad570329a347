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

package utils

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The objects a cluster's storage and nodes would make, for suites that run
// without a kubelet, a scheduler or a volume provisioner (envtest): a local
// PersistentVolume pinned to a node, and a Node in a given Ready state.

// LocalPersistentVolume is a local volume (what kubernetes.io/no-provisioner
// classes hold) of size on node, pinned there by node affinity on
// kubernetes.io/hostname, and pre-bound to the claim namespace/claim.
func LocalPersistentVolume(name, node, class, size, namespace, claim string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/" + name}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: claim},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// NodeWithReady is a Node named name (hostname label included) whose Ready
// condition has had status since the given time. Status is a subresource:
// create the Node, then write its Status with the status client.
func NodeWithReady(name string, status corev1.ConditionStatus, since time.Time) (*corev1.Node, corev1.NodeStatus) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	return node, corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastHeartbeatTime: metav1.NewTime(since), LastTransitionTime: metav1.NewTime(since),
	}}}
}
