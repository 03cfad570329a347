//go:build tools

// Package tools makes 'go mod tidy' keep what the floor kube-apiserver needs.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
