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

// PodResources reads the exclusive CPUs of every container on the node from
// the kubelet's PodResources API (v1 List and GetAllocatableResources).
//
// It dials the socket in the mounted pod-resources directory on every call:
// the kubelet recreates the socket when it restarts, and a directory mount
// sees the new one where a mount of the old socket file would not.
//
// Concurrency: each call has its own connection; safe from any goroutine.
package tuner

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"
)

// SocketName is the kubelet's socket in its pod-resources directory.
const SocketName = "kubelet.sock"

// PodCPUs are the exclusive CPUs of a pod's containers, by namespace/name.
type PodCPUs map[string]cpuset.CPUSet

// ReadPodResources returns every pod's exclusive CPUs and the node's
// allocatable CPUs. Pods without exclusive CPUs are present with an empty
// set (the kubelet lists every active pod).
func ReadPodResources(ctx context.Context, dir string) (PodCPUs, cpuset.CPUSet, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, cpuset.New(), err
	}
	defer func() { _ = conn.Close() }()
	cl := podresourcesv1.NewPodResourcesListerClient(conn)
	list, err := cl.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, cpuset.New(), fmt.Errorf("kubelet PodResources List: %w", err)
	}
	pods := PodCPUs{}
	for _, p := range list.GetPodResources() {
		set := cpuset.New()
		for _, c := range p.GetContainers() {
			set = set.Union(toSet(c.GetCpuIds()))
		}
		pods[p.GetNamespace()+"/"+p.GetName()] = set
	}
	alloc, err := cl.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, cpuset.New(), fmt.Errorf("kubelet PodResources GetAllocatableResources: %w", err)
	}
	return pods, toSet(alloc.GetCpuIds()), nil
}

func toSet(ids []int64) cpuset.CPUSet {
	ints := make([]int, len(ids))
	for i, id := range ids {
		ints[i] = int(id)
	}
	return cpuset.New(ints...)
}
