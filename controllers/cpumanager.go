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

// Whether a node's kubelet really gives Guaranteed pods exclusive cores is
// written nowhere in the API but in the kubelet's own configuration, which
// the kubelet serves at /configz and the API server proxies. Reading it needs
// the nodes/proxy permission, which also reaches the rest of the kubelet's
// API, so the check is opt-in (--check-cpu-manager; chart value
// operator.checkCPUManager) and documented as such.

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// NodeCPUPolicy is one node's CPU manager policy, or why it is unknown.
type NodeCPUPolicy struct {
	Policy string
	Err    string
}

// CPUManagerChecker tells a node's CPU manager policy.
type CPUManagerChecker interface {
	Policy(ctx context.Context, node string) NodeCPUPolicy
}

// KubeletConfigz reads cpuManagerPolicy from each kubelet's /configz through
// the API server's node proxy, remembering each answer for TTL.
type KubeletConfigz struct {
	REST rest.Interface // a core/v1 REST client
	TTL  time.Duration

	mu   sync.Mutex
	seen map[string]configzAnswer
}

type configzAnswer struct {
	at  time.Time
	pol NodeCPUPolicy
}

// Policy implements CPUManagerChecker.
func (k *KubeletConfigz) Policy(ctx context.Context, node string) NodeCPUPolicy {
	k.mu.Lock()
	if a, ok := k.seen[node]; ok && time.Since(a.at) < k.TTL {
		k.mu.Unlock()
		return a.pol
	}
	k.mu.Unlock()
	pol := k.read(ctx, node)
	k.mu.Lock()
	if k.seen == nil {
		k.seen = map[string]configzAnswer{}
	}
	k.seen[node] = configzAnswer{at: time.Now(), pol: pol}
	k.mu.Unlock()
	return pol
}

func (k *KubeletConfigz) read(ctx context.Context, node string) NodeCPUPolicy {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := k.REST.Get().AbsPath("/api/v1/nodes", node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		return NodeCPUPolicy{Err: fmt.Sprintf("kubelet /configz: %v", err)}
	}
	var cz struct {
		KubeletConfig struct {
			CPUManagerPolicy string `json:"cpuManagerPolicy"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil {
		return NodeCPUPolicy{Err: fmt.Sprintf("kubelet /configz: %v", err)}
	}
	if cz.KubeletConfig.CPUManagerPolicy == "" {
		cz.KubeletConfig.CPUManagerPolicy = "none" // the kubelet's default
	}
	return NodeCPUPolicy{Policy: cz.KubeletConfig.CPUManagerPolicy}
}
