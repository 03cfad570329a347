//go:build tools

// Package tools records the prometheus-operator commands this module builds,
// so that 'go mod tidy' keeps their dependencies.
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
