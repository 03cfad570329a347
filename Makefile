# Cachet: a Kubernetes operator (api/, controllers/, main.go) and the cachetd
# cache engine (engine/). Kubebuilder's target names are kept so that users of
# kubebuilder projects find what they expect; the project's own targets follow.

VERSION ?= 0.1.0
# Images carry a localhost/ prefix: nothing here is ever pulled from a registry,
# and a miss must fail locally rather than reach out to the network.
IMG ?= localhost/cachet-operator:$(VERSION)
ENGINE_IMG ?= localhost/cachetd:$(VERSION)

# Heavy build outputs are cached by version outside the clone so that reruns
# and fresh clones on the same machine skip them; nothing relies on it existing.
CACHET_CACHE ?= $(HOME)/.cache/cachet
export CACHET_CACHE

LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

GOBIN ?= $(shell go env GOPATH)/bin

# One Go build configuration for tests, tools run from the tree and the
# operator image (hack/images.sh builds it CGO_ENABLED=0 -trimpath): with the
# same settings the image build reuses every package `make test` compiled, so
# a cold `make check` compiles the operator's dependencies once, not twice.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -trimpath
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

## Tool versions
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.2
CRD_REF_DOCS_VERSION ?= v0.3.0
HELM_VERSION ?= v3.19.0

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CRD_REF_DOCS ?= $(LOCALBIN)/crd-ref-docs
HELM ?= $(LOCALBIN)/helm
KUBECTL ?= $(LOCALBIN)/k8s/kubectl
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
GOLANGCI_LINT_VERSION ?= v2.15.0
ENVTEST_ASSETS ?= $(LOCALBIN)/envtest
# The oldest Kubernetes the chart allows (kubeVersion in charts/cachet/Chart.yaml):
# envtest runs there too, so a CRD rule or API field it lacks fails here first.
ENVTEST_FLOOR_ASSETS ?= $(LOCALBIN)/envtest-floor

.PHONY: all
all: build engine

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen api-docs ## Generate CRDs, RBAC and webhook configurations from the markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	hack/sync-chart.sh

.PHONY: api-docs
api-docs: crd-ref-docs ## Generate docs/api-reference.md from the API's Go types and markers.
	$(CRD_REF_DOCS) --source-path=api --config=hack/api-docs.yaml --renderer=markdown --output-path=docs/api-reference.md

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

# envtest's 20 s default start bound is tight when two test packages each start
# an etcd and a kube-apiserver at once on a slow 2-CPU machine.
ENVTEST_START_TIMEOUT ?= 2m
# prometheus-operator's CRDs (PodMonitor, PrometheusRule) for the envtests, from
# its Go module: the version hack/tools/prometheus-operator pins, which
# hack/helm-lint.sh and hack/prometheus-stack.sh use too.
PROMETHEUS_OPERATOR_VERSION ?= $(shell awk '$$1=="require" && $$2=="github.com/prometheus-operator/prometheus-operator" {print $$3}' hack/tools/prometheus-operator/go.mod)
PROMETHEUS_OPERATOR_CRDS = $$(cd /tmp && GOFLAGS= go mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | awk -F'"' '/"Dir"/{print $$4}')/example/prometheus-operator-crd
# cert-manager's CRDs (deploy/crds/ of its main module, at the version
# hack/tools/cert-manager pins), which envtest installs to check the
# Certificate the operator builds.
CERT_MANAGER_VERSION ?= $(shell awk '$$1=="require" && $$2=="github.com/cert-manager/cert-manager" {print $$3}' hack/tools/cert-manager/go.mod)
CERT_MANAGER_CRDS = $$(cd /tmp && GOFLAGS= go mod download -json github.com/cert-manager/cert-manager@$(CERT_MANAGER_VERSION) | awk -F'"' '/"Dir"/{print $$4}')/deploy/crds
.PHONY: test
test: test-current test-floor ## Run unit and envtest tests against a real kube-apiserver and etcd: the current release and the floor.

.PHONY: test-current
test-current: manifests generate fmt vet envtest kustomize ## Unit tests and envtest on the current kube-apiserver.
	@# test/promql runs every shipped PromQL query against Debian's Prometheus
	@# scraping a real cachetd.
	$(MAKE) -s -C engine all
	@echo "==> envtest on kube-apiserver $$(cat $(LOCALBIN)/k8s/VERSION) (current)"
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" KUSTOMIZE="$(KUSTOMIZE)" PROMETHEUS_OPERATOR_CRDS="$(PROMETHEUS_OPERATOR_CRDS)" CERT_MANAGER_CRDS="$(CERT_MANAGER_CRDS)" \
	KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$(ENVTEST_START_TIMEOUT) KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT=$(ENVTEST_START_TIMEOUT) \
	go test $$(go list ./... | grep -v /test/e2e) -coverprofile cover.out

.PHONY: test-floor
test-floor: manifests generate envtest-floor kustomize ## envtest on the chart's floor kube-apiserver (hack/tools/k8s-floor).
	@echo "==> envtest on kube-apiserver $$(cat $(LOCALBIN)/k8s-floor/VERSION) (the chart's floor)"
	KUBEBUILDER_ASSETS="$(ENVTEST_FLOOR_ASSETS)" KUSTOMIZE="$(KUSTOMIZE)" PROMETHEUS_OPERATOR_CRDS="$(PROMETHEUS_OPERATOR_CRDS)" CERT_MANAGER_CRDS="$(CERT_MANAGER_CRDS)" \
	KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=$(ENVTEST_START_TIMEOUT) KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT=$(ENVTEST_START_TIMEOUT) \
	go test -count=1 . ./controllers/...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint with the committed .golangci.yml.
	$(GOLANGCI_LINT) run ./...

.PHONY: test-e2e
test-e2e: ## Run the end-to-end suite on KUBECONFIG's cluster, or on the local cluster when none is given.
	hack/e2e.sh

.PHONY: test-e2e-monitoring
test-e2e-monitoring: ## The e2e suite with stage 15 (make check runs this): prometheus-operator, Prometheus and prometheus-adapter in the local cluster scale an autoscaled Cache out and in (built from the module proxy, cached by version).
	E2E_MONITORING=1 hack/e2e.sh

.PHONY: k8s-background
k8s-background: ## Start building envtest's and the local cluster's Kubernetes binaries in the background (cached by version; their users wait for them).
	@hack/build-k8s.sh --background

.PHONY: security-stack-background
security-stack-background: ## Start building the NetworkPolicy enforcer and fetching cert-manager's CRDs in the background (cached by version; hack/security-stack.sh).
	@hack/security-stack.sh --background kube-network-policies cert-manager-crds

.PHONY: prometheus-stack-background
prometheus-stack-background: ## Start building the Prometheus stack's binaries in the background (cached by version; stage 15 and make up wait for them).
	@hack/prometheus-stack.sh --background operator prometheus-config-reloader adapter prometheus

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	go build -o $(LOCALBIN)/manager main.go

.PHONY: run
run: manifests generate fmt vet ## Run the controller from your host against KUBECONFIG's cluster (webhooks off: the API server cannot reach your host).
	go run ./main.go --engine-image=$(ENGINE_IMG) --enable-webhooks=false --metrics-bind-address=0

.PHONY: docker-build
docker-build: ## Build both images with Docker (for users who have a Docker engine).
	docker build --target operator -t $(IMG) .
	docker build --target engine -t $(ENGINE_IMG) .

.PHONY: docker-push
docker-push: ## Push both images with Docker.
	docker push $(IMG)
	docker push $(ENGINE_IMG)

.PHONY: images
images: ## Build both images without a daemon (buildah over host-built static binaries).
	hack/images.sh build

.PHONY: load-images
load-images: ## Import both images into the local cluster's containerd.
	hack/images.sh load

.PHONY: build-installer
build-installer: manifests generate kustomize ## Write dist/install.yaml: CRDs and the operator in one file.
	mkdir -p dist
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	cd config/nodetuner && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default > dist/install.yaml

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install the CRDs into KUBECONFIG's cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRDs from KUBECONFIG's cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator with kustomize (config/default).
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove what deploy applied.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

##@ Engine

.PHONY: engine
engine: ## Build cachetd and its tools.
	$(MAKE) -C engine

.PHONY: test-engine
test-engine: ## Engine unit, sanitizer, concurrency, conformance and fuzz-smoke tests.
	$(MAKE) -C engine check

.PHONY: fuzz-engine
fuzz-engine: ## Fuzz the request parser (FUZZ_SECONDS=300 by default).
	$(MAKE) -C engine fuzz

.PHONY: bench-engine
bench-engine: ## Benchmark cachetd against memcached 1.6.45 and 1.6.18 side by side (W1-W4 and the W2 variants, seed 003; BENCH_QUICK=1: ~5 min).
	$(MAKE) -C engine bench

.PHONY: bench-profiles
bench-profiles: ## Workload profiles vs memcached 1.6.45 side by side: seed 003 with the operator's derived classes, then the engine's part (mover by gain vs age, the miss-ratio curve vs separate runs, bimodal and log-normal mixes; BENCH_QUICK=1: ~7 min).
	$(MAKE) -s -C engine all
	hack/bench-profiles.sh
	$(MAKE) -C engine bench-profiles

.PHONY: bench-extstore
bench-extstore: ## Extstore (values on local disk) side by side: cachetd, memcached 1.6.45 and 1.6.18 vs fio (root; BENCH_QUICK=1: ~3 min). Exits 1 if a server refuses the ext_* flags.
	$(MAKE) -C engine bench-extstore

.PHONY: bench-tuning
bench-tuning: ## Node tuner on vs off on the local cluster: p50/p99/p999 of gets at fixed rates through the pod's veth (root; ~4 min; docs/benchmarks.md).
	hack/bench/tuning.sh

.PHONY: bench-soak
bench-soak: ## TSan concurrent checker for SOAK_SECONDS (default 600); fails on any wrong value or sanitizer report.
	$(MAKE) -C engine bench-soak

.PHONY: bench-differential
bench-differential: ## Differential test against memcached 1.6.45 for DIFF_SECONDS (default 300; CACHET_DIFF_SEEDS, CACHET_DIFF_REQUESTS).
	$(MAKE) -C engine bench-differential

.PHONY: dashboard-demo
dashboard-demo: ## Redraw docs/img/dashboard.png: cachetd under load, scraped by Debian's Prometheus, drawn from the chart's dashboard (~3 min, 127.0.0.1 only).
	hack/dashboard-demo.sh

##@ Cluster

.PHONY: cluster-up
cluster-up: ## Bring up the local single-node Kubernetes built from source.
	hack/local-cluster.sh up

.PHONY: cluster-down
cluster-down: ## Tear the local cluster down.
	hack/local-cluster.sh down

.PHONY: kind-up
kind-up: ## For users with Docker: a kind cluster with the static CPU manager.
	kind create cluster --name cachet --config hack/kind-config.yaml

.PHONY: helm-lint
helm-lint: helm ## Lint the chart and render it with default and non-default values.
	hack/helm-lint.sh

.PHONY: up
up: ## Install what is missing, build, bring up a cluster, install the chart and show a Cache serving.
	hack/up.sh

.PHONY: down
down: ## Undo 'make up'.
	hack/up.sh down

.PHONY: deps
deps: ## Install the Debian packages the build and tests need (idempotent).
	hack/install-deps.sh

.PHONY: verify-generated
verify-generated: manifests generate ## Fail when committed generated files (CRDs, RBAC, webhooks, DeepCopy, chart copies) are stale.
	@git diff --exit-code --stat -- api config charts docs/api-reference.md || \
	  { echo "generated files differ from the committed ones: run 'make manifests generate' and commit them"; exit 1; }

.PHONY: check
# The Prometheus stack's cold builds (10-17 min on two cores) start first and
# run beside the engine tests, which leave a core idle much of the time; the
# e2e's stage 15 waits for them. The floor's envtest runs last: its
# kube-apiserver is the background chain's last build, so it compiles in the
# time the e2e spends waiting on pods instead of holding up the current envtest.
check: deps k8s-background prometheus-stack-background security-stack-background verify-generated lint test-engine test-current helm-lint test-e2e-monitoring test-floor ## Run every test, e2e included (CI runs this).

##@ Dependencies

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen.
$(CONTROLLER_GEN): | $(LOCALBIN)
	hack/go-tool.sh $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_TOOLS_VERSION)

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize.
$(KUSTOMIZE): | $(LOCALBIN)
	hack/go-tool.sh $(KUSTOMIZE) sigs.k8s.io/kustomize/kustomize/v5 $(KUSTOMIZE_VERSION)

.PHONY: crd-ref-docs
crd-ref-docs: $(CRD_REF_DOCS) ## Build crd-ref-docs.
$(CRD_REF_DOCS): | $(LOCALBIN)
	hack/go-tool.sh $(CRD_REF_DOCS) github.com/elastic/crd-ref-docs $(CRD_REF_DOCS_VERSION)

.PHONY: helm
helm: $(HELM) ## Build helm.
$(HELM): | $(LOCALBIN)
	hack/go-tool.sh $(HELM) helm.sh/helm/v3/cmd/helm $(HELM_VERSION)

.PHONY: envtest
envtest: ## Build kube-apiserver from the module proxy and link it with Debian's etcd for envtest.
	hack/build-k8s.sh kube-apiserver
	mkdir -p $(ENVTEST_ASSETS)
	ln -sf $(LOCALBIN)/k8s/kube-apiserver $(ENVTEST_ASSETS)/kube-apiserver
	ln -sf $$(command -v etcd) $(ENVTEST_ASSETS)/etcd
	ln -sf $(LOCALBIN)/k8s/kubectl $(ENVTEST_ASSETS)/kubectl 2>/dev/null || true

.PHONY: envtest-floor
envtest-floor: ## The same for the oldest supported Kubernetes (hack/tools/k8s-floor).
	K8S_RELEASE=floor hack/build-k8s.sh kube-apiserver
	mkdir -p $(ENVTEST_FLOOR_ASSETS)
	ln -sf $(LOCALBIN)/k8s-floor/kube-apiserver $(ENVTEST_FLOOR_ASSETS)/kube-apiserver
	ln -sf $$(command -v etcd) $(ENVTEST_FLOOR_ASSETS)/etcd

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint.
$(GOLANGCI_LINT): | $(LOCALBIN)
	hack/go-tool.sh $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint $(GOLANGCI_LINT_VERSION)
