//go:build tools

// Package tools records the enforcer's command so go mod tidy keeps its
// dependencies in go.sum.
package tools

import _ "sigs.k8s.io/kube-network-policies/cmd"
