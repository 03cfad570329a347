// Command coredns is CoreDNS with only the plugins the local cluster's DNS uses
// (hack/cluster/coredns.yaml): kubernetes, cache, errors, health, ready, reload.
// The stock build links every plugin, cloud SDKs included, which roughly triples
// the cold build and the image for nothing this cluster runs.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
