//go:build tools

// Package tools keeps the Prometheus module required.
package tools

import _ "github.com/prometheus/prometheus/discovery/kubernetes"
