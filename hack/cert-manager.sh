#!/usr/bin/env bash
# cert-manager on the local cluster (hack/local-cluster.sh), from real parts
# only and with nothing pulled: the pinned release's controllers (SelfSigned
# and CA issuers, Certificates, CertificateRequests) and its CA injector, in
# the one binary hack/security-stack.sh builds from the Go module proxy
# (hack/tools/cert-manager/, cached by version and the glue's hash), in an
# image built by hack/images.sh and imported into the instance's containerd;
# its CRDs from the same release's deploy/crds/. Namespace cert-manager, one
# replica (the glue has no leader election), ClusterIssuers' Secrets in
# cert-manager (--cluster-resource-namespace), each Certificate the owner of
# its Secret (--enable-certificate-owner-ref), so that deleting a Certificate
# (helm uninstall, a deleted Cache) leaves no key behind.
# cert-manager's admission webhook runs in the same process (--webhook-port),
# behind a Service and webhook configurations like upstream's, its CA
# injected from the Secret it keeps (inject-ca-from-secret).
#
#   hack/cert-manager.sh up     # idempotent; returns once the webhook
#                               # refuses an invalid Certificate and a
#                               # SelfSigned ClusterIssuer turns Ready (the
#                               # controllers run and their RBAC suffices)
#   hack/cert-manager.sh down   # removes the Deployment, its RBAC and the CRDs
#                               # (and with them every cert-manager object)
#
# CACHET_CLUSTER picks the local instance (default main); KUBECONFIG is that
# instance's. make test-e2e (hack/e2e.sh) runs `up` on the tests' instance.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CACHET_CLUSTER=${CACHET_CLUSTER:-main}
set -a
eval "$(hack/local-cluster.sh env)"
set +a
ns=cert-manager
kubectl="$root/bin/k8s/kubectl"
t0=$SECONDS
log() { printf '==> [cert-manager +%ds] %s\n' $((SECONDS - t0)) "$*"; }
die() { printf 'cert-manager: %s\n' "$*" >&2; exit 1; }

# The node every pod of the local cluster's first node runs on: two-node e2e
# stages stop the second one.
node=cachet-node

manifests() { # image
  cat <<YAML
apiVersion: v1
kind: Namespace
# As upstream's chart: cert-manager's own namespace is not validated by its
# webhook, so the webhook's bootstrap never waits on itself.
metadata: {name: $ns, labels: {cert-manager.io/disable-validation: "true"}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: cert-manager, namespace: $ns}
---
# What these controllers and the CA injector touch (upstream's controller,
# cainjector and approver ClusterRoles, minus ACME, ingress and Gateway).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cachet-cert-manager}
rules:
- apiGroups: [cert-manager.io]
  resources: [certificates, certificaterequests, issuers, clusterissuers]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [cert-manager.io]
  resources: [certificates/status, certificaterequests/status, issuers/status, clusterissuers/status, certificates/finalizers, certificaterequests/finalizers]
  verbs: [update, patch]
- apiGroups: [cert-manager.io]
  resources: [signers]
  verbs: [approve]
  resourceNames: ["issuers.cert-manager.io/*", "clusterissuers.cert-manager.io/*"]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations]
  verbs: [get, list, watch, update, patch]
- apiGroups: [apiregistration.k8s.io]
  resources: [apiservices]
  verbs: [get, list, watch, update, patch]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch, update, patch]
# The webhook's approval check asks who may approve for an issuer.
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cachet-cert-manager}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cachet-cert-manager}
subjects: [{kind: ServiceAccount, name: cert-manager, namespace: $ns}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cert-manager, namespace: $ns, labels: {app: cert-manager}}
spec:
  replicas: 1
  # One process per cluster at any time: no leader election in the glue.
  strategy: {type: Recreate}
  selector: {matchLabels: {app: cert-manager}}
  template:
    metadata: {labels: {app: cert-manager}}
    spec:
      serviceAccountName: cert-manager
      nodeSelector: {kubernetes.io/hostname: $node}
      securityContext: {runAsNonRoot: true, runAsUser: 65534, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: cert-manager
        image: $1
        imagePullPolicy: IfNotPresent
        args: ["--cluster-resource-namespace=$ns", "--enable-certificate-owner-ref", "--webhook-port=6443", "--webhook-namespace=$ns", "-v=2"]
        ports: [{name: https, containerPort: 6443}, {name: healthcheck, containerPort: 6080}]
        readinessProbe: {httpGet: {path: /healthz, port: healthcheck}, periodSeconds: 2}
        # Tiny: the node's cache pods want whole CPUs.
        resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 512Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: cert-manager-webhook, namespace: $ns}
spec:
  selector: {app: cert-manager}
  ports: [{name: https, port: 443, targetPort: https}]
---
# Upstream's two webhook configurations (its chart's webhook templates).
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: cert-manager-webhook
  annotations: {cert-manager.io/inject-ca-from-secret: $ns/cert-manager-webhook-ca}
webhooks:
- name: webhook.cert-manager.io
  rules: [{apiGroups: [cert-manager.io], apiVersions: [v1], operations: [CREATE], resources: [certificaterequests]}]
  admissionReviewVersions: [v1]
  matchPolicy: Equivalent
  timeoutSeconds: 30
  failurePolicy: Fail
  sideEffects: None
  clientConfig: {service: {name: cert-manager-webhook, namespace: $ns, path: /mutate}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: cert-manager-webhook
  annotations: {cert-manager.io/inject-ca-from-secret: $ns/cert-manager-webhook-ca}
webhooks:
- name: webhook.cert-manager.io
  namespaceSelector: {matchExpressions: [{key: cert-manager.io/disable-validation, operator: NotIn, values: ["true"]}]}
  rules: [{apiGroups: [cert-manager.io, acme.cert-manager.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: ["*/*"]}]
  admissionReviewVersions: [v1]
  matchPolicy: Equivalent
  timeoutSeconds: 30
  failurePolicy: Fail
  sideEffects: None
  clientConfig: {service: {name: cert-manager-webhook, namespace: $ns, path: /validate}}
YAML
}

# A Certificate that cert-manager's CRD schema admits and only its webhook
# refuses (it names no subject at all).
invalid_certificate() {
  cat <<YAML
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: cachet-webhook-probe, namespace: default}
spec: {secretName: cachet-webhook-probe, issuerRef: {name: none}}
YAML
}

# The webhook answers once the API server reaches its Service and trusts its
# certificate (the CA injector has copied the CA from its Secret): until
# then a dry-run create fails with "failed calling webhook".
webhook_refuses() {
  local out
  out=$(invalid_certificate | "$kubectl" create --dry-run=server -f - 2>&1) && return 1
  grep -q 'admission webhook "webhook.cert-manager.io" denied the request' <<<"$out" || { echo "$out" | tail -1 >&2; return 1; }
}

# A ClusterIssuer that turns Ready only when the issuers controller runs and
# may write its status: the glue has no health endpoint, so this is the
# readiness check.
probe_issuer() {
  cat <<YAML
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: cachet-cert-manager-probe}
spec: {selfSigned: {}}
YAML
}

diagnose() {
  "$kubectl" get pods -n "$ns" -o wide || true
  "$kubectl" get events -n "$ns" --sort-by=.lastTimestamp | tail -20 || true
  "$kubectl" logs -n "$ns" deploy/cert-manager --tail=40 || true
}

up() {
  [ -x "$kubectl" ] || nice hack/build-k8s.sh kubectl
  "$kubectl" get --raw /readyz >/dev/null || die "the cluster $CACHET_CLUSTER does not answer (hack/local-cluster.sh up)"
  log "image (hack/images.sh build cert-manager; the binary is cached)"
  nice hack/images.sh build cert-manager
  hack/images.sh load cert-manager
  local image crds
  image=$(hack/images.sh list | awk '$1=="cert-manager" {print $2}')
  crds=$(hack/security-stack.sh cert-manager-crds | awk '$1=="cert-manager-crds" {print $2}')
  [ -d "$crds" ] || die "no CRDs from hack/security-stack.sh cert-manager-crds"
  # Server-side: the CRDs are larger than client-side apply's annotation allows.
  log "CRDs ($crds)"
  "$kubectl" apply --server-side --force-conflicts -f "$crds" >/dev/null
  local out
  # kubectl wait logs its own cancelled watches on stderr: shown only on failure.
  out=$("$kubectl" wait --for=condition=Established --timeout=60s -f "$crds" 2>&1) || die "cert-manager's CRDs not established: $out"
  log "controllers, CA injector and webhook ($image) in namespace $ns"
  manifests "$image" | "$kubectl" apply -f - >/dev/null
  "$kubectl" rollout status -n "$ns" deploy/cert-manager --timeout=120s || { diagnose; die "cert-manager did not start"; }
  local start=$SECONDS
  until webhook_refuses 2>/dev/null; do
    [ $((SECONDS - start)) -lt 90 ] || { webhook_refuses || true; diagnose; die "cert-manager's webhook did not refuse an invalid Certificate within 90s"; }
    sleep 1
  done
  log "the webhook refuses an invalid Certificate ($((SECONDS - start))s)"
  # the probe issuer goes whether the wait succeeds or dies
  trap 'probe_issuer | "$kubectl" delete --ignore-not-found -f - >/dev/null || true' EXIT
  probe_issuer | "$kubectl" apply -f - >/dev/null
  out=$("$kubectl" wait --for=condition=Ready --timeout=90s clusterissuer/cachet-cert-manager-probe 2>&1) \
    || { diagnose; die "a SelfSigned ClusterIssuer did not turn Ready: $out"; }
  probe_issuer | "$kubectl" delete -f - >/dev/null
  trap - EXIT
  log "up"
}

down() {
  [ -x "$kubectl" ] || die "no kubectl at $kubectl"
  manifests unused | "$kubectl" delete --ignore-not-found --wait=true --timeout=120s -f - >/dev/null || true
  local crds
  crds=$(hack/security-stack.sh cert-manager-crds | awk '$1=="cert-manager-crds" {print $2}')
  "$kubectl" delete --ignore-not-found --wait=true --timeout=120s -f "$crds" >/dev/null || true
  log "down"
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  *) die "usage: $0 up|down" ;;
esac
