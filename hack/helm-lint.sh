#!/usr/bin/env bash
# Lints the Cachet chart and renders it with default and non-default values,
# asserting on what the renders contain: a chart that renders is not yet a
# chart that works, so each check below names a property users rely on
# (webhook certificates that follow the namespace and cluster domain, RBAC that
# equals controller-gen's, CRDs that survive uninstall, a schema that rejects
# typos...). When a cluster is reachable (KUBECONFIG, or the local cluster's
# kubeconfig) the default render is also validated by its API server with a
# server-side dry run; without one that step is reported as SKIPPED, not passed.
#
#   hack/helm-lint.sh            (make helm-lint builds bin/helm first)
#   HELM=/path/to/helm hack/helm-lint.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
HELM=${HELM:-$root/bin/helm}
KUBECTL=${KUBECTL:-$root/bin/k8s/kubectl}
chart="$root/charts/cachet"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x "$HELM" ] || { echo "helm-lint: $HELM not found; run 'make helm'" >&2; exit 1; }
export HELM_CACHE_HOME="$work/helm-cache" HELM_CONFIG_HOME="$work/helm-config" HELM_DATA_HOME="$work/helm-data"
# Offline renders assume the Kubernetes release the project runs (hack/tools/k8s),
# not the client library's default: a helm built with plain `go install` lacks
# the release ldflags and would otherwise claim v1.20.
kube_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$root/hack/tools/k8s/go.mod" 2>/dev/null || true)
kube_version=${kube_version:-v1.36.0}
helm_template() { "$HELM" template "$@" --kube-version "$kube_version"; }

passed=0 failed=0 skipped=0
ok()   { passed=$((passed + 1)); echo "  ok    $*"; }
bad()  { failed=$((failed + 1)); echo "  FAIL  $*"; }
skip() { skipped=$((skipped + 1)); echo "  SKIP  $*"; }
step() { echo "==> $*"; }

# render NAME ARGS...: helm template into $work/NAME.yaml; returns helm's status.
render() {
  local name=$1; shift
  helm_template cachet "$chart" "$@" >"$work/$name.yaml" 2>"$work/$name.err"
}
# has FILE REGEX DESCRIPTION / hasnt FILE REGEX DESCRIPTION
has()   { if grep -Eq -- "$2" "$work/$1.yaml"; then ok "$1: $3"; else bad "$1: $3 (no line matches /$2/)"; fi; }
hasnt() { if grep -Eq -- "$2" "$work/$1.yaml"; then bad "$1: $3 (found /$2/)"; else ok "$1: $3"; fi; }
# count FILE REGEX N DESCRIPTION
count() {
  local n; n=$(grep -Ec -- "$2" "$work/$1.yaml" || true)
  if [ "$n" -eq "$3" ]; then ok "$1: $4"; else bad "$1: $4 (expected $3 lines matching /$2/, got $n)"; fi
}
# kinds FILE: the "Kind/name" list of a render, one per line.
kinds() {
  awk '/^---/{k="";n=""} /^kind:/{k=$2} /^  name:/{if(n==""){n=$2}} k!=""&&n!=""{print k"/"n; k="";n=""}' "$work/$1.yaml" | sort
}
# must_fail NAME REGEX DESCRIPTION ARGS...: the render must fail with a message matching REGEX.
must_fail() {
  local name=$1 re=$2 what=$3; shift 3
  if render "$name" "$@"; then bad "$what: rendered although it must be refused"; return; fi
  if grep -Eq -- "$re" "$work/$name.err"; then ok "$what"; else bad "$what: refused, but without /$re/: $(head -c 400 "$work/$name.err")"; fi
}

# dashboard NAME CONFIGMAP NAMESPACE: the render holds the Grafana dashboard
# ConfigMap in NAMESPACE with the sidecar's label, and its data is the chart's
# dashboard file, byte for byte, as parseable JSON (a YAML block scalar that
# lost its indentation still renders, as something Grafana cannot load).
dashboard() {
  local name=$1 cm=$2 ns=$3 json="$work/$1.dashboard.json"
  awk -v cm="$cm" '/^---/{doc=""; grab=0} /^kind: ConfigMap$/{doc="cm"} doc=="cm"&&$0=="  name: " cm{doc="dash"}
       doc=="dash"&&/^  namespace:/{print $2 > "/dev/stderr"}
       grab&&!/^    /{grab=0} grab{print substr($0, 5)} doc=="dash"&&/^  cachet\.json: \|-$/{grab=1}' \
    "$work/$name.yaml" >"$json" 2>"$json.ns"
  if [ ! -s "$json" ]; then bad "$name: no dashboard ConfigMap $cm"; return; fi
  if [ "$(cat "$json.ns")" = "$ns" ]; then ok "$name: dashboard ConfigMap $cm in namespace $ns"; else bad "$name: dashboard ConfigMap in namespace '$(cat "$json.ns")', not $ns"; fi
  if python3 -m json.tool "$json" >/dev/null 2>"$json.err"; then ok "$name: dashboard JSON parses"; else bad "$name: dashboard JSON does not parse: $(head -c 300 "$json.err")"; fi
  if cmp -s "$json" "$chart/files/dashboards/cachet.json"; then ok "$name: dashboard is files/dashboards/cachet.json unchanged"; else bad "$name: dashboard differs from files/dashboards/cachet.json"; fi
  if awk -v cm="$cm" '/^---/{d=0} $0=="  name: " cm{d=1} d&&/^    grafana_dashboard: "1"$/{f=1} END{exit !f}' "$work/$name.yaml"; then
    ok "$name: labelled grafana_dashboard: \"1\" for Grafana's sidecar"
  else
    bad "$name: dashboard ConfigMap lacks the grafana_dashboard: \"1\" label"
  fi
}

step "chart files equal controller-gen output (hack/sync-chart.sh --check)"
if "$root/hack/sync-chart.sh" --check; then ok "generated CRDs, RBAC and webhooks are in sync"; else bad "chart is out of sync with config/"; fi

step "chart names the operator expects"
missing_flags=()
for flag in engine-image engine-metrics-port check-cpu-manager watch-namespaces metrics-cert-dir cluster-domain leader-elect leader-election-id health-probe-bind-address metrics-bind-address metrics-secure \
            enable-webhooks webhook-port webhook-cert-dir webhook-cert-mode webhook-secret-name webhook-service-name \
            mutating-webhook-configuration validating-webhook-configuration; do
  grep -q "\"$flag\"" "$root/main.go" 2>/dev/null || missing_flags+=("--$flag")
done
if [ ${#missing_flags[@]} -eq 0 ]; then ok "every flag the chart passes is defined in main.go"
else bad "chart passes flags main.go does not define: ${missing_flags[*]}"; fi

step "helm lint --strict"
lint_sets=(
  ""
  "certManager.enabled=true,certManager.skipAPICheck=true"
  "serviceMonitor.enabled=true,metrics.secure=false,clusterDomain=example.org"
  "webhook.enabled=false,metrics.enabled=false,crds.install=false,tests.enabled=false,serviceAccount.create=false,serviceAccount.name=existing-sa,operator.leaderElection.enabled=false"
  "metricsAdapter.install=true,metricsAdapter.prometheusURL=http://prometheus-operated.monitoring.svc:9090"
)
for s in "${lint_sets[@]}"; do
  args=(); [ -z "$s" ] || args=(--set "$s")
  if "$HELM" lint --strict "$chart" --kube-version "$kube_version" --namespace cachet-system "${args[@]}" >"$work/lint.out" 2>&1; then
    ok "lint ${s:-(default values)}"
  else
    bad "lint ${s:-(default values)}"; sed 's/^/        /' "$work/lint.out"
  fi
done

step "default values (namespace cachet-system)"
if render default --namespace cachet-system; then
  ok "renders"
  kinds default >"$work/default.kinds"
  for k in CustomResourceDefinition/caches.cache.cachet.dev ServiceAccount/cachet-operator \
           ClusterRole/cachet-manager-role ClusterRoleBinding/cachet-manager-rolebinding \
           Role/cachet-leader-election-role Lease/cachet-operator.cache.cachet.dev \
           Role/cachet-cert-rotation-role ClusterRole/cachet-cert-rotation-role \
           ClusterRole/cachet-metrics-auth-role ClusterRole/cachet-metrics-reader \
           Secret/cachet-webhook-server-cert Service/cachet-webhook-service Service/cachet-metrics-service \
           Deployment/cachet-operator MutatingWebhookConfiguration/cachet-mutating-webhook-configuration \
           ValidatingWebhookConfiguration/cachet-validating-webhook-configuration \
           Pod/cachet-test-cache-connection NetworkPolicy/cachet-operator ConfigMap/cachet-adapter-rules \
           DaemonSet/cachet-node-tuner ServiceAccount/cachet-node-tuner ClusterRole/cachet-node-tuner \
           ClusterRoleBinding/cachet-node-tuner; do
    if grep -qx "$k" "$work/default.kinds"; then ok "default: renders $k"; else bad "default: missing $k"; fi
  done
  for k in Certificate Issuer ServiceMonitor PodDisruptionBudget; do
    if grep -q "^$k/" "$work/default.kinds"; then bad "default: renders $k"; else ok "default: no $k (opt-in, or pointless with one replica)"; fi
  done
  # Operator pod hardening, checked on the Deployment alone.
  render deployment --namespace cachet-system --show-only templates/manager/deployment.yaml
  has deployment '^            readOnlyRootFilesystem: true' "read-only root filesystem"
  has deployment '^        runAsNonRoot: true' "pod runs as non-root"
  has deployment '^            runAsNonRoot: true' "container runs as non-root"
  has deployment '^            allowPrivilegeEscalation: false' "no privilege escalation"
  has deployment '^              - ALL$' "drops ALL capabilities"
  has deployment '^          type: RuntimeDefault' "seccomp RuntimeDefault"
  has deployment '^              memory: 256Mi' "memory limit set"
  # The node tuner: privileged, host network, the mounts docs/node-tuning.md lists, least RBAC.
  render tuner --namespace cachet-system --show-only templates/nodetuner/daemonset.yaml
  has tuner '^      hostNetwork: true' "node tuner on the host network"
  has tuner '^            privileged: true' "node tuner privileged"
  has tuner 'command: \["/manager", "node-tuner"\]' "node tuner is the operator binary's subcommand"
  has tuner 'path: /var/lib/kubelet/pod-resources, type: Directory' "pod-resources mounted as a directory"
  has tuner 'path: /var/lib/cachet/node-tuner, type: DirectoryOrCreate' "journal in a hostPath"
  has tuner 'verbs: \[get, list, watch, patch\]' "pods: read, and patch for the node-tuned annotation"
  has tuner 'verbs: \[get, list, watch\]$' "caches: read only"
  count tuner 'verbs:' 2 "two rules, nothing else"
  render notuner --namespace cachet-system --set nodeTuner.enabled=false
  hasnt notuner 'name: cachet-node-tuner' "nodeTuner.enabled=false renders no tuner"
  has default 'image: localhost/cachet-operator:0\.1\.0$' "operator image follows appVersion"
  has default 'imagePullPolicy: IfNotPresent' "IfNotPresent pull policy"
  has default '- --engine-image=localhost/cachetd:0\.1\.0$' "engine image flag"
  has default '- --leader-elect=true$' "leader election on"
  has default '- --leader-election-id=cachet-operator\.cache\.cachet\.dev$' "operator elects on the Lease the chart creates"
  has default '- --webhook-cert-mode=self-signed$' "self-signed certificates by default"
  has default '- --webhook-secret-name=cachet-webhook-server-cert$' "secret name passed to the operator"
  has default '- --cluster-domain=cluster\.local$' "cluster domain passed to the operator"
  has default '- --zap-log-level=info$' "log level flag"
  has default 'path: /healthz' "liveness probe on /healthz"
  has default 'path: /readyz' "readiness probe on /readyz"
  has default 'fieldPath: metadata\.namespace' "POD_NAMESPACE from the downward API"
  # Webhooks: generated paths, this release's Service and namespace, no caBundle from Helm.
  has default 'path: /mutate-cache-cachet-dev-v1alpha1-cache' "mutating webhook path from controller-gen"
  has default 'path: /validate-cache-cachet-dev-v1alpha1-cache' "validating webhook path from controller-gen"
  count default '^ +name: cachet-webhook-service$' 3 "both webhooks and the Service use the release's webhook Service"
  count default '^ +namespace: system$' 0 "no kustomize placeholder namespace leaks into the chart"
  hasnt default 'caBundle' "Helm never renders caBundle (upgrades keep the injected CA)"
  hasnt default 'cert-manager.io/inject-ca-from' "no cainjector annotation without cert-manager"
  has default 'helm.sh/resource-policy: keep' "CRD kept on uninstall by default"
  has default '- --engine-metrics-port=9150$' "engine metrics port (and so the HTTP probes) on by default"
  has default '- --check-cpu-manager=false$' "kubelet check off by default"
  hasnt default 'nodes/proxy' "no nodes/proxy permission unless operator.checkCPUManager"
  has default '- --metrics-cert-dir=/tmp/k8s-webhook-server/serving-certs$' "metrics served with the webhook certificate"
  if grep -q 'READY 1/1' "$chart/templates/NOTES.txt"; then bad "default: NOTES promise a READY 1/1 column the Cache does not print"; else ok "default: NOTES describe the READY column as it is"; fi
  if grep -q '^kubeVersion: ">=1.30.0-0"$' "$chart/Chart.yaml"; then ok "kubeVersion floor 1.30 (CEL quantities 1.29, preStop sleep 1.30)"; else bad "kubeVersion floor is not 1.30: $(grep kubeVersion "$chart/Chart.yaml")"; fi
  # RBAC equals controller-gen's: the manager ClusterRole's rules are the
  # generated ClusterRole's rules, byte for byte, minus the webhook-configuration
  # rule that cert_rotation.yaml grants by name.
  helm_template cachet "$chart" --namespace cachet-system --show-only templates/rbac/manager_role.yaml >"$work/manager-role.yaml"
  awk '/^---/{doc=""} /^kind: ClusterRole$/{doc="cr"} doc=="cr"&&/^rules:/{r=1;next} /^---/{r=0}
       r&&/^- /{if(blk!=""&&blk!~/admissionregistration/)printf "%s",blk; blk=""} r{blk=blk $0 "\n"}
       END{if(blk!=""&&blk!~/admissionregistration/)printf "%s",blk}' "$chart/files/rbac/role.yaml" >"$work/rules.want"
  awk '/^kind: ClusterRole$/{c=1} c&&/^rules:/{r=1;next} r&&/^---/{exit} r' "$work/manager-role.yaml" | sed 's/^  //' >"$work/rules.got"
  if [ -s "$work/rules.want" ] && diff -u "$work/rules.want" "$work/rules.got" >"$work/rules.diff"; then
    ok "default: manager ClusterRole rules equal controller-gen's ($(grep -c '^- ' "$work/rules.want") rules)"
  else
    bad "default: manager ClusterRole rules differ from controller-gen's:"; sed 's/^/        /' "$work/rules.diff"
  fi
  # Secrets are in the manager role on purpose since spec.auth and spec.tls:
  # it reads the users' Secrets and writes each Cache's derived authfile
  # (docs/security.md), exactly as controller-gen's rule above says. The
  # webhook configurations stay name-scoped in cert_rotation.yaml.
  if grep -q 'webhookconfigurations' "$work/manager-role.yaml"; then
    bad "default: cert-rotation permissions leaked into the manager role (they belong to cert_rotation.yaml, name-scoped)"
  else
    ok "default: cert-rotation permissions are not in the manager role"
  fi
  has default 'resourceNames: \["cachet-webhook-server-cert"\]' "Secret writes limited to the release's Secret"
  has default 'resourceNames: \["cachet-mutating-webhook-configuration"\]' "webhook writes limited by name"
  # helm test pod: reaches the Cache without cluster DNS.
  has default '"\$\(CACHE_SAMPLE_SERVICE_HOST\)"' "helm test uses the injected Service host variable"
  has default '"--set-get"' "helm test does a set/get round trip"
  dashboard default cachet-dashboard cachet-system
else
  bad "default values do not render: $(cat "$work/default.err")"
fi

step "cert-manager, custom namespace and cluster domain, ServiceMonitor, tuned resources"
if render full --namespace team-a \
     --api-versions cert-manager.io/v1 --api-versions monitoring.coreos.com/v1/ServiceMonitor \
     --set certManager.enabled=true,clusterDomain=example.org,serviceMonitor.enabled=true \
     --set serviceMonitor.labels.release=prom,operator.replicas=2,operator.logLevel=debug \
     --set operator.resources.requests.cpu=50m,operator.resources.limits.memory=512Mi \
     --set engine.image=localhost/cachetd:9.9.9,crds.keep=false,tests.cache.namespace=caches \
     --set dashboard.namespace=caches,dashboard.labels.team=ops,dashboard.annotations.grafana_folder=Caches; then
  ok "renders"
  has full 'kind: Issuer' "self-signed Issuer"
  has full 'kind: Certificate' "Certificate"
  hasnt full '^[[:space:]]+$' "no whitespace-only lines (clean YAML lists for cert-manager and GitOps diffs)"
  has full '^ +- cachet-webhook-service\.team-a\.svc$' "certificate names the release namespace"
  has full '^ +- cachet-webhook-service\.team-a\.svc\.example\.org$' "certificate names the cluster domain"
  hasnt full 'cluster\.local' "no hard-coded cluster.local anywhere"
  count full 'cert-manager.io/inject-ca-from: team-a/cachet-serving-cert' 2 "both webhook configurations ask cainjector for the CA"
  has full '- --webhook-cert-mode=cert-manager$' "operator told cert-manager supplies the certificate"
  has full '- --cluster-domain=example\.org$' "operator told the cluster domain"
  if kinds full | grep -q '^Secret/cachet-webhook-server-cert$'; then bad "full: the chart renders the webhook Secret although cert-manager writes it"; else ok "full: no chart webhook Secret (cert-manager writes it)"; fi
  hasnt full 'cert-rotation' "no self-signed rotation RBAC with cert-manager"
  has full 'kind: ServiceMonitor' "ServiceMonitor when its API exists"
  has full '^ +release: prom$' "ServiceMonitor extra labels"
  has full '^  replicas: 2$' "operator replicas"
  has full '^kind: PodDisruptionBudget$' "PDB keeps a webhook replica through drains when replicas > 1"
  has full '- --zap-log-level=debug$' "log level"
  has full 'cpu: 50m' "resources override"
  has full 'memory: 512Mi' "resources override"
  has full '- --engine-image=localhost/cachetd:9\.9\.9$' "engine image override"
  hasnt full 'helm.sh/resource-policy' "crds.keep=false drops the keep policy"
  if helm_template cachet "$chart" --namespace team-a --set tests.cache.namespace=caches \
       --show-only templates/tests/test-cache-connection.yaml >"$work/test-pod.yaml" 2>&1 &&
     grep -q '^  namespace: caches$' "$work/test-pod.yaml" && grep -q 'CACHE_SAMPLE_SERVICE_HOST' "$work/test-pod.yaml"; then
    ok "full: helm test pod runs in the Cache's namespace, so the Service variable exists there"
  else
    bad "full: helm test pod not placed in the Cache's namespace: $(cat "$work/test-pod.yaml")"
  fi
  has full 'namespace: team-a' "objects land in the release namespace"
  dashboard full cachet-dashboard caches
  has full '^    team: ops$' "dashboard extra labels"
  has full '^    grafana_folder: Caches$' "dashboard annotations (the sidecar's folder annotation)"
else
  bad "does not render: $(cat "$work/full.err")"
fi

step "ServiceMonitor authenticates with a token Secret and verifies TLS (no bearerTokenFile, no insecureSkipVerify)"
if render monitor --namespace cachet-system --api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PrometheusRule \
     --set serviceMonitor.enabled=true,prometheusRule.enabled=true,operator.checkCPUManager=true; then
  ok "renders"
  hasnt monitor 'bearerTokenFile' "no deprecated bearerTokenFile"
  hasnt monitor 'insecureSkipVerify' "TLS is verified"
  has monitor 'name: cachet-metrics-scraper-token$' "credentials from the scraper's token Secret"
  has monitor 'type: kubernetes.io/service-account-token' "token Secret for the scraper ServiceAccount"
  has monitor 'key: ca.crt$' "CA from the webhook certificate's Secret"
  has monitor 'serverName: cachet-webhook-service\.cachet-system\.svc$' "server name the certificate carries"
  has monitor 'alert: CachetDedicatedCoresNotExclusive' "PrometheusRule alerts on shared cores"
  has monitor '- nodes/proxy|resources: \["nodes/proxy"\]' "nodes/proxy granted when checkCPUManager"
  has monitor '- --check-cpu-manager=true$' "operator told to check kubelets"
else
  bad "does not render: $(cat "$work/monitor.err")"
fi

step "watch-namespaces: Roles only"
if render nsmode --namespace ops --api-versions cert-manager.io/v1 \
     --set 'watchNamespaces={team-a,team-b}' --set certManager.enabled=true,metrics.secure=false; then
  ok "renders"
  count nsmode '^kind: Role$' 3 "manager Role in each of the 2 watched namespaces, plus leader election"
  count nsmode '^kind: RoleBinding$' 3 "bound in each"
  has nsmode '- --watch-namespaces=team-a,team-b$' "operator told the namespaces"
  # (The node tuner's own ServiceAccount is bound cluster-wide: it reads the
  # cache pods of its node in every namespace.)
  if awk '/^kind: ClusterRoleBinding$/{k=1} k&&/^  - kind: ServiceAccount$/{getline; print; k=0}' "$work/nsmode.yaml" | grep -v 'name: cachet-node-tuner$' | grep -q .; then
    bad "nsmode: a ClusterRoleBinding still binds the operator's ServiceAccount"
  else
    ok "nsmode: no ClusterRoleBinding for the operator"
  fi
else
  bad "does not render: $(cat "$work/nsmode.err")"
fi
must_fail nsself 'certManager.enabled=true' "watch-namespaces with self-signed certificates is refused with the fix" --set 'watchNamespaces={a}' --set metrics.secure=false
must_fail nsmetrics 'metrics.secure=false' "watch-namespaces with authenticated metrics is refused with the fix" --set 'watchNamespaces={a}' --set webhook.enabled=false

step "another release name, an existing ClusterIssuer"
if helm_template prod "$chart" --namespace payments --api-versions cert-manager.io/v1 \
     --set certManager.enabled=true,certManager.issuerRef.kind=ClusterIssuer,certManager.issuerRef.name=corp-ca \
     >"$work/prod.yaml" 2>"$work/prod.err"; then
  ok "renders"
  hasnt prod '^kind: Issuer$' "no chart Issuer when issuerRef is given"
  has prod '^ +kind: ClusterIssuer$' "Certificate uses the given ClusterIssuer"
  has prod '^ +name: corp-ca$' "issuer name"
  has prod '^ +- prod-cachet-webhook-service\.payments\.svc$' "certificate follows the release name and namespace"
  has prod '^  name: prod-cachet-operator$' "objects prefixed by <release>-cachet"
  has prod '- --leader-election-id=prod-cachet-operator\.cache\.cachet\.dev$' "per-release Lease"
  has prod '- --webhook-service-name=prod-cachet-webhook-service$' "operator told the release's Service name"
  dashboard prod prod-cachet-dashboard payments
else
  bad "does not render: $(cat "$work/prod.err")"
fi

step "optional parts switched off"
if render minimal --namespace ops \
     --set webhook.enabled=false,metrics.enabled=false,crds.install=false,tests.enabled=false,dashboard.enabled=false,nodeTuner.enabled=false \
     --set serviceAccount.create=false,serviceAccount.name=existing-sa,operator.leaderElection.enabled=false; then
  ok "renders"
  for k in CustomResourceDefinition MutatingWebhookConfiguration ValidatingWebhookConfiguration Secret Lease ServiceAccount Pod DaemonSet; do
    hasnt minimal "^kind: $k\$" "no $k"
  done
  has minimal '- --enable-webhooks=false$' "operator told webhooks are off"
  has minimal '- --metrics-bind-address=0$' "metrics disabled in the operator"
  has minimal 'serviceAccountName: existing-sa' "existing ServiceAccount used"
  hasnt minimal 'grafana_dashboard' "no dashboard ConfigMap"
else
  bad "does not render: $(cat "$work/minimal.err")"
fi

step "extstore StorageClass: off by default, local volumes when on"
hasnt default '^kind: StorageClass$' "default: no StorageClass"
if render sc --set extstoreStorageClass.create=true,extstoreStorageClass.name=fast-local,extstoreStorageClass.keep=true; then
  count sc '^kind: StorageClass$' 1 "one StorageClass"
  has sc '^  name: fast-local$' "named as asked"
  has sc '^provisioner: kubernetes.io/no-provisioner$' "local volumes: no provisioner"
  has sc '^volumeBindingMode: WaitForFirstConsumer$' "binds once the pod's node is chosen"
  has sc 'helm.sh/resource-policy: keep' "kept on uninstall when asked"
else
  bad "does not render: $(cat "$work/sc.err")"
fi
must_fail sc-reclaim 'reclaimPolicy' "an unknown extstoreStorageClass.reclaimPolicy is refused" --set extstoreStorageClass.create=true,extstoreStorageClass.reclaimPolicy=Recycle

step "ServiceMonitor requested on a cluster without the Prometheus Operator"
if render nomon --set serviceMonitor.enabled=true; then
  hasnt nomon 'kind: ServiceMonitor' "skipped instead of breaking the install"
else
  bad "does not render: $(cat "$work/nomon.err")"
fi

step "prometheus-adapter rules (default) and the optional adapter install"
# adapter_config RENDER: the config.yaml of the rules ConfigMap in a render.
adapter_config() {
  awk '/^kind: ConfigMap$/{cm=1} /^---/{cm=0; inblk=0} cm&&/^  name: .*-adapter-rules$/{named=1}
       named&&/^  config\.yaml: \|$/{inblk=1; next} inblk&&/^    /{sub(/^    /,""); print; next} inblk{inblk=0; named=0}' "$work/$1.yaml"
}
# promql_check CONFIG DESCRIPTION: every seriesQuery and metricsQuery of an
# adapter config, as recording rules through promtool. The templates'
# <<.Series>>, <<.LabelMatchers>> and <<.GroupBy>> are filled in the way the
# adapter fills them for one pod, which promtool cannot do.
promql_check() {
  local config=$1 what=$2 rules="$work/adapter-promql.rules.yaml" n=0
  {
    echo "groups:"
    echo "  - name: adapter-queries"
    echo "    rules:"
    local line series="" query
    while IFS= read -r line; do
      case $line in
        *'seriesQuery: '*)
          query=$(sed -E "s/^[^']*'//; s/'[[:space:]]*\$//" <<<"$line")
          series=${query%%\{*}
          n=$((n + 1))
          printf '      - record: adapter_series_query_%d\n        expr: %s\n' "$n" "'$query'" ;;
        *'metricsQuery: '*)
          query=$(sed -E "s/^[^']*'//; s/'[[:space:]]*\$//" <<<"$line")
          query=${query//'<<.Series>>'/$series}
          query=${query//'<<.LabelMatchers>>'/'namespace="x",pod="y"'}
          query=${query//'<<.GroupBy>>'/pod}
          n=$((n + 1))
          printf '      - record: adapter_metrics_query_%d\n        expr: %s\n' "$n" "'$query'" ;;
      esac
    done <"$config"
  } >"$rules"
  if [ "$n" -lt 2 ]; then bad "$what: no queries found in the adapter config"; return 1; fi
  if grep -q '<<' "$rules"; then bad "$what: a placeholder the check does not know is left: $(grep -o '<<[^>]*>>' "$rules" | sort -u | tr '\n' ' ')"; return 1; fi
  if promtool check rules "$rules" >"$work/promtool.out" 2>&1; then
    ok "$what: promtool accepts all $n queries"
  else
    bad "$what: promtool rejects a query:"; sed 's/^/        /' "$work/promtool.out"; return 1
  fi
}
if render adapter-rules --namespace cachet-system --show-only templates/metrics/adapter-rules.yaml; then
  ok "default: renders the ConfigMap cachet-adapter-rules"
  adapter_config adapter-rules >"$work/adapter-config.yaml"
  has adapter-rules "seriesQuery: 'cachet_evictions_young_total\{namespace!=\"\",pod!=\"\"\}'" "young evictions from their counter, per namespace and pod"
  has adapter-rules 'as: cachet_evictions_young_per_second$' "served as the name the operator's HPA asks for"
  has adapter-rules 'as: cachet_get_miss_ratio$' "miss ratio served as the name the operator's HPA asks for"
  has adapter-rules 'clamp_min\(sum\(rate\(<<\.Series>>\{<<\.LabelMatchers>>,command="get"\}\[2m\]\)\) by \(<<\.GroupBy>>\), 1e-9\)' "an idle pod's miss ratio is 0, not NaN"
  count adapter-rules 'namespace: \{resource: namespace\}' 2 "both rules map the namespace label"
  count adapter-rules 'pod: \{resource: pod\}' 2 "both rules map the pod label"
  hasnt default 'kind: APIService' "no adapter or APIService unless metricsAdapter.install"
  if command -v promtool >/dev/null; then
    promql_check "$work/adapter-config.yaml" "adapter rules"
    # The check itself must be able to fail: a query with a missing parenthesis.
    sed -E '0,/metricsQuery: .sum\(rate/s//metricsQuery: '"'"'sum(rate(/' "$work/adapter-config.yaml" >"$work/adapter-config-broken.yaml"
    if cmp -s "$work/adapter-config.yaml" "$work/adapter-config-broken.yaml"; then
      bad "adapter rules: could not break a query to test the check"
    else
      before=$failed
      promql_check "$work/adapter-config-broken.yaml" "a broken query (must be refused)" >"$work/broken.out" || true
      if [ "$failed" -gt "$before" ]; then failed=$before; ok "adapter rules: the promtool check refuses an unbalanced query"
      else bad "adapter rules: the promtool check passed a broken query"; fi
    fi
  else
    bad "promtool not installed (Debian's prometheus package; hack/install-deps.sh)"
  fi
  # The README's copy for users with their own adapter is the rendered config.
  awk '/<!-- adapter-rules:begin -->/{f=1; next} /<!-- adapter-rules:end -->/{f=0} f&&!/^```/' "$chart/README.md" >"$work/readme-rules.yaml"
  if [ -s "$work/readme-rules.yaml" ] && diff -u "$work/readme-rules.yaml" "$work/adapter-config.yaml" >"$work/readme-rules.diff"; then
    ok "README's adapter rules equal the chart's"
  else
    bad "README's adapter rules (between adapter-rules:begin/end) differ from the rendered config.yaml:"; sed 's/^/        /' "$work/readme-rules.diff"
  fi
else
  bad "adapter rules ConfigMap does not render: $(cat "$work/adapter-rules.err")"
fi
if render adapter --namespace monitoring --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://prometheus-operated.monitoring.svc:9090; then
  ok "install=true renders"
  kinds adapter >"$work/adapter.kinds"
  for k in ConfigMap/cachet-adapter-rules ServiceAccount/cachet-metrics-adapter Deployment/cachet-metrics-adapter Service/cachet-metrics-adapter \
           APIService/v1beta2.custom.metrics.k8s.io ClusterRoleBinding/cachet-metrics-adapter-auth-delegator \
           RoleBinding/cachet-metrics-adapter-auth-reader ClusterRole/cachet-metrics-adapter-resource-reader \
           ClusterRoleBinding/cachet-metrics-adapter-resource-reader ClusterRole/cachet-metrics-adapter-custom-metrics-reader \
           ClusterRoleBinding/cachet-metrics-adapter-hpa-custom-metrics; do
    if grep -qx "$k" "$work/adapter.kinds"; then ok "adapter: renders $k"; else bad "adapter: missing $k"; fi
  done
  render adapter-deploy --namespace monitoring --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://prometheus-operated.monitoring.svc:9090 \
    --show-only templates/metrics/adapter.yaml
  has adapter-deploy '- --prometheus-url=http://prometheus-operated\.monitoring\.svc:9090$' "adapter told where Prometheus is"
  has adapter-deploy '- --config=/etc/adapter/config.yaml$' "adapter reads the rules ConfigMap"
  has adapter-deploy '^              mountPath: /etc/adapter$' "rules mounted where --config points"
  has adapter-deploy '^            name: cachet-adapter-rules$' "from the chart's ConfigMap"
  has adapter-deploy '- --secure-port=6443$' "serves on 6443"
  has adapter-deploy '- --cert-dir=/tmp/cert$' "self-signs into a writable directory"
  has adapter-deploy '^              mountPath: /tmp$' "emptyDir for the certificate on a read-only root"
  has adapter-deploy '- --metrics-relist-interval=30s$' "relist interval"
  has adapter-deploy 'checksum/config: [0-9a-f]{64}$' "a rule change rolls the adapter"
  has adapter-deploy '^            readOnlyRootFilesystem: true' "read-only root filesystem"
  has adapter-deploy '^        runAsNonRoot: true' "pod runs as non-root"
  has adapter-deploy '^            allowPrivilegeEscalation: false' "no privilege escalation"
  has adapter-deploy '^              - ALL$' "drops ALL capabilities"
  has adapter-deploy '^          type: RuntimeDefault' "seccomp RuntimeDefault"
  has adapter-deploy '^  insecureSkipTLSVerify: true$' "no CA to pin for a self-signed adapter"
  has adapter-deploy '^  groupPriorityMinimum: 100$' "groupPriorityMinimum"
  has adapter-deploy '^  versionPriority: 200$' "versionPriority"
  has adapter-deploy '^    namespace: monitoring$' "APIService points at the release namespace's Service"
  hasnt adapter '^[[:space:]]+$' "no whitespace-only lines"
  has adapter '^  namespace: kube-system$' "front-proxy CA reader bound in kube-system"
  has adapter '^  name: system:auth-delegator$' "auth-delegator for TokenReviews and SubjectAccessReviews"
  has adapter '^    name: horizontal-pod-autoscaler$' "HPA controller may read custom.metrics.k8s.io"
else
  bad "install=true does not render: $(cat "$work/adapter.err")"
fi
if render adapter-ca --namespace monitoring --set metricsAdapter.install=true,metricsAdapter.prometheusURL=https://prom:9090 \
     --set metricsAdapter.tlsSecretName=adapter-tls,metricsAdapter.apiService.caBundle=Q0EK --show-only templates/metrics/adapter.yaml; then
  has adapter-ca '^  caBundle: Q0EK$' "caBundle when the adapter serves a known certificate"
  hasnt adapter-ca 'insecureSkipTLSVerify' "and TLS is then verified"
  has adapter-ca '- --tls-cert-file=/etc/adapter-tls/tls\.crt$' "adapter serves the Secret's certificate"
  hasnt adapter-ca 'cert-dir' "no self-signed certificate then"
else
  bad "adapter with a TLS Secret does not render: $(cat "$work/adapter-ca.err")"
fi
if render adapter-unregistered --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://p:9090,metricsAdapter.apiService.create=false; then
  hasnt adapter-unregistered 'kind: APIService' "apiService.create=false leaves the custom metrics API alone"
  has adapter-unregistered '^kind: Deployment$' "but still runs the adapter"
else
  bad "apiService.create=false does not render: $(cat "$work/adapter-unregistered.err")"
fi
must_fail adapter-nourl 'metricsAdapter\.prometheusURL is required when metricsAdapter\.install=true' "install=true without prometheusURL is refused with the fix" --set metricsAdapter.install=true
must_fail adapter-norules 'metricsAdapter\.rules\.enabled=true' "install=true without the rules is refused" --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://p:9090,metricsAdapter.rules.enabled=false
must_fail adapter-badurl 'prometheusURL' "a prometheusURL that is not http(s) is refused" --set metricsAdapter.install=true,metricsAdapter.prometheusURL=prometheus:9090
must_fail adapter-window 'rateWindow' "an invalid rateWindow is refused" --set metricsAdapter.rules.rateWindow=2min
must_fail adapter-noca 'caBundle' "a TLS Secret without its CA is refused" --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://p:9090,metricsAdapter.tlsSecretName=adapter-tls

step "bad values are refused with a clear message"
must_fail typo 'additional properties .?enabeld.? not allowed|enabeld' "misspelt key certManager.enabeld" --set certManager.enabeld=true
must_fail policy 'failurePolicy' "unknown webhook.failurePolicy" --set webhook.failurePolicy=Sometimes
must_fail domain 'clusterDomain' "invalid clusterDomain" --set clusterDomain=Cluster_Local
must_fail port 'port' "out-of-range metrics.port" --set metrics.port=70000
must_fail loglevel 'logLevel' "unknown operator.logLevel" --set operator.logLevel=verbose
must_fail nocm 'cert-manager.io/v1' "cert-manager requested on a cluster that lacks it" --set certManager.enabled=true
must_fail nosa 'serviceAccount.name is required' "serviceAccount.create=false without a name" --set serviceAccount.create=false
must_fail dashns 'dashboard/namespace' "invalid dashboard.namespace" --set dashboard.namespace=Grafana_NS
must_fail dashtypo "additional properties .?enabeld.? not allowed" "misspelt key dashboard.enabeld" --set dashboard.enabeld=true

step "the dashboard's queries are valid PromQL, each scoped to one Cache's pods (promtool check rules)"
if ! command -v promtool >/dev/null; then
  skip "promtool missing (hack/install-deps.sh installs Debian's prometheus)"
elif python3 "$root/hack/draw-dashboard.py" --promql-rules "$work/dashboard-rules.yaml" >"$work/dashboard-rules.log" 2>&1 &&
     promtool check rules "$work/dashboard-rules.yaml" >>"$work/dashboard-rules.log" 2>&1; then
  ok "$(grep -c 'record:' "$work/dashboard-rules.yaml") dashboard queries parse and filter by namespace, cache and pod"
else
  bad "dashboard queries:"; sed 's/^/        /' "$work/dashboard-rules.log"
fi

step "RBAC drift guard: a generated rule the chart does not grant must stop the render"
cp -r "$chart" "$work/drift-chart"
if [ -f "$work/drift-chart/files/rbac/role.yaml" ]; then
  # Add a 'delete' verb to the generated Secret rule, as a marker change would.
  awk '{print} /^  - secrets$/{s=1} s&&/^  verbs:$/{print "  - delete"; s=0}' \
    "$chart/files/rbac/role.yaml" >"$work/drift-chart/files/rbac/role.yaml"
  if grep -q '^  - delete$' "$work/drift-chart/files/rbac/role.yaml" && grep -q secrets "$work/drift-chart/files/rbac/role.yaml"; then
    if helm_template cachet "$work/drift-chart" >/dev/null 2>"$work/drift.err"; then
      bad "a generated 'delete secrets' rule was silently dropped"
    elif grep -q 'does not grant' "$work/drift.err"; then ok "unknown generated permission refused"
    else bad "refused for another reason: $(head -c 300 "$work/drift.err")"; fi
  else
    skip "generated role has no Secret rule to mutate"
  fi
else
  bad "files/rbac/role.yaml missing"
fi

# ---------------------------------------------------------------------------
# A throwaway kube-apiserver + etcd (the envtest binaries, or built from the
# module proxy and cached) validates every render against the real API schemas
# and admission, including cert-manager's and the Prometheus Operator's CRDs
# from their Go modules, and runs the chart's install/upgrade/uninstall
# lifecycle: nothing there needs nodes or controllers. HELM_LINT_SERVER=0 skips
# it (reported as SKIP). Ports 25000-25009 on 127.0.0.1 (the chart helper's range).
# ---------------------------------------------------------------------------
step "API server validation and install/upgrade/uninstall lifecycle (throwaway kube-apiserver)"
server_checks() {
  local apiserver="" etcd kubectl="$KUBECTL" token port_etcd=25001 port_peer=25002 port_api=25003
  for c in "$root/bin/envtest/kube-apiserver" "$root/bin/k8s/kube-apiserver"; do
    [ -x "$c" ] && { apiserver=$c; break; }
  done
  if [ -z "$apiserver" ] || [ ! -x "$kubectl" ]; then
    echo "  building kube-apiserver/kubectl (cached by version; shared with envtest and the local cluster)"
    "$root/hack/build-k8s.sh" kube-apiserver kubectl >"$work/build-k8s.log" 2>&1 || { bad "could not build kube-apiserver/kubectl: $(tail -5 "$work/build-k8s.log")"; return; }
    apiserver="$root/bin/k8s/kube-apiserver"; kubectl="$root/bin/k8s/kubectl"
  fi
  etcd=$(command -v etcd || true)
  [ -n "$etcd" ] || { bad "etcd not installed (hack/install-deps.sh installs etcd-server)"; return; }

  mkdir -p "$work/server"
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "$token,helm-lint,helm-lint,system:masters" >"$work/server/tokens.csv"
  openssl genrsa -out "$work/server/sa.key" 2048 2>/dev/null
  "$etcd" --name helm-lint --data-dir "$work/server/etcd" \
    --listen-client-urls "http://127.0.0.1:$port_etcd" --advertise-client-urls "http://127.0.0.1:$port_etcd" \
    --listen-peer-urls "http://127.0.0.1:$port_peer" --initial-advertise-peer-urls "http://127.0.0.1:$port_peer" \
    --initial-cluster "helm-lint=http://127.0.0.1:$port_peer" >"$work/server/etcd.log" 2>&1 &
  server_pids=($!)
  "$apiserver" --etcd-servers "http://127.0.0.1:$port_etcd" --bind-address 127.0.0.1 --secure-port "$port_api" \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none --cert-dir "$work/server/certs" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC --token-auth-file "$work/server/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$work/server/sa.key" \
    --service-account-signing-key-file "$work/server/sa.key" \
    --allow-privileged=true >"$work/server/apiserver.log" 2>&1 &  # as kubeadm, kind and hack/local-cluster.sh: the node tuner is privileged
  server_pids+=($!)
  cat >"$work/server/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: lint, cluster: {server: "https://127.0.0.1:$port_api", insecure-skip-tls-verify: true}}]
users: [{name: lint, user: {token: "$token"}}]
contexts: [{name: lint, context: {cluster: lint, user: lint}}]
current-context: lint
KCFG
  local KUBECONFIG="$work/server/kubeconfig"; export KUBECONFIG
  local i
  for i in $(seq 1 60); do
    "$kubectl" get --raw /readyz >/dev/null 2>&1 && break
    sleep 1
  done
  if ! "$kubectl" get --raw /readyz >/dev/null 2>&1; then
    bad "throwaway kube-apiserver did not become ready in 60 s: $(tail -5 "$work/server/apiserver.log")"; return
  fi
  ok "kube-apiserver $("$kubectl" version -o json 2>/dev/null | grep -m1 -o '"gitVersion": *"[^"]*"' | cut -d'"' -f4) ready"
  local k="$kubectl"
  # No controller-manager runs here, so create what it would: namespaces'
  # default ServiceAccounts (Pod admission insists on them).
  for ns in cachet-system team-a caches payments monitoring; do
    "$k" create namespace "$ns" >/dev/null && "$k" -n "$ns" create serviceaccount default >/dev/null
    # The restricted Pod Security Standard: the test Pod is refused and the
    # Deployment warned about if either asks for more.
    "$k" label namespace "$ns" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null
  done

  # Third-party CRDs the optional parts use, from their Go modules (module proxy only).
  local cm_dir pm_dir
  cm_dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" 2>/dev/null | awk -F'"' '/"Dir"/{print $4}')
  pm_dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" 2>/dev/null | awk -F'"' '/"Dir"/{print $4}')
  if [ -n "$cm_dir" ] && "$k" apply --server-side -f "$cm_dir/deploy/crds/cert-manager.io_certificates.yaml" -f "$cm_dir/deploy/crds/cert-manager.io_issuers.yaml" >/dev/null &&
     [ -n "$pm_dir" ] && "$k" apply --server-side -f "$pm_dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" >/dev/null &&
     "$k" wait --for condition=Established --timeout 60s crd/certificates.cert-manager.io crd/issuers.cert-manager.io crd/servicemonitors.monitoring.coreos.com >/dev/null; then
    ok "cert-manager $CERT_MANAGER_VERSION and prometheus-operator $PROMETHEUS_OPERATOR_VERSION CRDs installed from their Go modules"
  else
    bad "could not install the cert-manager / ServiceMonitor CRDs"
  fi

  # Every render variant, as the API server sees it (schemas, admission, RBAC escalation checks).
  local v
  for v in default full prod adapter; do
    if "$k" apply --dry-run=server -f "$work/$v.yaml" >"$work/$v.dry" 2>&1; then
      ok "$v: API server accepts all $(grep -c 'server dry run' "$work/$v.dry") objects (server-side dry run)"
      # The node tuner alone is privileged with hostNetwork (it writes the
      # host's /proc/irq and /sys/class/net): its namespace must allow that.
      if grep -i 'violate PodSecurity' "$work/$v.dry" | grep -v 'container "node-tuner"' | grep -q .; then
        bad "$v: pods violate the restricted Pod Security Standard:"; grep -i 'violate' "$work/$v.dry" | grep -v 'container "node-tuner"' | sed 's/^/        /'
      else
        ok "$v: every pod but the node tuner (operator, test, adapter) passes the restricted Pod Security Standard"
      fi
    else
      bad "$v: API server rejected the render:"; sed 's/^/        /' "$work/$v.dry"
    fi
  done

  # Lifecycle with the real helm client against the real API server.
  local h=("$HELM" --kubeconfig "$KUBECONFIG" -n cachet-system)
  if "${h[@]}" install cachet "$chart" >"$work/install.log" 2>&1; then
    ok "helm install"
  else
    bad "helm install: $(cat "$work/install.log")"; return
  fi
  # Act as the operator would: fill the Secret and inject a CA, then upgrade
  # with a changed CRD and check that Helm updated the CRD but kept both.
  "$k" -n cachet-system patch secret cachet-webhook-server-cert --type merge -p '{"data":{"ca.crt":"T1BFUkFUT1I="}}' >/dev/null ||
    bad "could not write the Secret as the operator would"
  "$k" patch mutatingwebhookconfiguration cachet-mutating-webhook-configuration --type json \
    -p '[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"T1BFUkFUT1I="}]' >/dev/null ||
    bad "could not inject a caBundle as the operator would"
  cp -r "$chart" "$work/upgrade-chart"
  local crd_file; crd_file=$(ls "$work/upgrade-chart/files/crds/"*.yaml | head -1)
  sed -i '0,/^    categories:$/s//    categories:\n    - cachet-lint-upgrade/' "$crd_file"
  if "${h[@]}" upgrade cachet "$work/upgrade-chart" >"$work/upgrade.log" 2>&1; then ok "helm upgrade"; else bad "helm upgrade: $(cat "$work/upgrade.log")"; fi
  if "$k" get crd caches.cache.cachet.dev -o jsonpath='{.spec.names.categories}' | grep -q cachet-lint-upgrade; then
    ok "helm upgrade updated the CRD (templates/, not crds/)"
  else
    bad "helm upgrade did not update the CRD"
  fi
  if [ "$("$k" get mutatingwebhookconfiguration cachet-mutating-webhook-configuration -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" = T1BFUkFUT1I= ]; then
    ok "helm upgrade kept the injected caBundle"
  else
    bad "helm upgrade wiped the injected caBundle"
  fi
  if [ "$("$k" -n cachet-system get secret cachet-webhook-server-cert -o jsonpath='{.data.ca\.crt}')" = T1BFUkFUT1I= ]; then
    ok "helm upgrade kept the operator's certificate Secret data"
  else
    bad "helm upgrade wiped the operator's certificate Secret"
  fi
  # Default uninstall keeps the CRD; crds.keep=false removes everything.
  "${h[@]}" uninstall cachet >"$work/uninstall.log" 2>&1 || bad "helm uninstall: $(cat "$work/uninstall.log")"
  if "$k" get crd caches.cache.cachet.dev >/dev/null 2>&1; then ok "uninstall kept the CRD (crds.keep=true)"; else bad "uninstall deleted the CRD despite crds.keep=true"; fi
  if "${h[@]}" install cachet "$chart" --set crds.keep=false >"$work/install2.log" 2>&1; then
    ok "reinstall adopts the kept CRD"
  else
    bad "reinstall after uninstall failed: $(cat "$work/install2.log")"; return
  fi
  "${h[@]}" uninstall cachet >"$work/uninstall2.log" 2>&1 || bad "helm uninstall: $(cat "$work/uninstall2.log")"
  "$k" wait --for=delete crd/caches.cache.cachet.dev --timeout=60s >/dev/null 2>&1 || true
  local left
  left=$( { "$k" get crd caches.cache.cachet.dev -o name 2>/dev/null
            "$k" get clusterroles,clusterrolebindings,mutatingwebhookconfigurations,validatingwebhookconfigurations -l app.kubernetes.io/instance=cachet -o name 2>/dev/null
            "$k" -n cachet-system get all,secrets,configmaps,roles,rolebindings,leases,serviceaccounts -l app.kubernetes.io/instance=cachet -o name 2>/dev/null
            "$k" -n cachet-system get lease cachet-operator.cache.cachet.dev -o name 2>/dev/null; } | sort -u | tr '\n' ' ' || true)
  if [ -z "$left" ]; then ok "uninstall with crds.keep=false leaves nothing behind"; else bad "left behind after uninstall: $left"; fi

  # The chart's adapter takes the custom metrics APIService only if nobody
  # else has it. Last, because the registered APIService has no adapter
  # behind it here and makes discovery report that group unavailable.
  local ha=("$HELM" --kubeconfig "$KUBECONFIG" -n monitoring)
  local adapter_set=(--set crds.install=false,webhook.enabled=false,metrics.enabled=false,tests.enabled=false
                     --set metricsAdapter.install=true,metricsAdapter.prometheusURL=http://prometheus-operated.monitoring.svc:9090)
  if "${ha[@]}" install adapter "$chart" "${adapter_set[@]}" >"$work/adapter-install.log" 2>&1; then
    ok "helm install with metricsAdapter.install=true registers $("$k" get apiservice v1beta2.custom.metrics.k8s.io -o jsonpath='{.metadata.name} -> {.spec.service.namespace}/{.spec.service.name}' 2>/dev/null)"
    if "${ha[@]}" upgrade adapter "$chart" "${adapter_set[@]}" >"$work/adapter-upgrade.log" 2>&1; then
      ok "helm upgrade keeps its own APIService"
    else
      bad "helm upgrade refused the release's own APIService: $(tail -3 "$work/adapter-upgrade.log")"
    fi
    if "$HELM" --kubeconfig "$KUBECONFIG" -n payments install other "$chart" "${adapter_set[@]}" >"$work/adapter-clash.log" 2>&1; then
      bad "a second release took over another release's custom metrics APIService"
    elif grep -q 'already exists.*does not own it' "$work/adapter-clash.log"; then
      ok "a second release refuses to take over the custom metrics APIService, with the fix"
    else
      bad "second adapter release failed for another reason: $(tail -3 "$work/adapter-clash.log")"
    fi
    "${ha[@]}" uninstall adapter >"$work/adapter-uninstall.log" 2>&1 || bad "helm uninstall adapter: $(cat "$work/adapter-uninstall.log")"
    if "$k" get apiservice v1beta2.custom.metrics.k8s.io >/dev/null 2>&1; then
      bad "uninstall left the custom metrics APIService behind"
    else
      ok "uninstall removes the custom metrics APIService"
    fi
  else
    bad "helm install with metricsAdapter.install=true: $(tail -5 "$work/adapter-install.log")"
  fi
}
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.21.2}
# The CRDs of the prometheus-operator release hack/prometheus-stack.sh builds.
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-$(awk '$1=="require" && $2=="github.com/prometheus-operator/prometheus-operator" {print $3}' "$root/hack/tools/prometheus-operator/go.mod" 2>/dev/null)}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
server_pids=()
# Stops what server_checks started, newest first (the API server before its
# etcd), by recorded PID; a process that ignores SIGTERM for 10 s is killed.
stop_server() {
  local i p n
  for ((i = ${#server_pids[@]} - 1; i >= 0; i--)); do
    p=${server_pids[$i]}
    kill "$p" 2>/dev/null || continue
    for n in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  server_pids=()
}
trap 'stop_server; rm -rf "$work"' EXIT
if [ "${HELM_LINT_SERVER:-1}" = 0 ]; then
  skip "HELM_LINT_SERVER=0: no API server validation or lifecycle test"
else
  server_checks
  stop_server
fi

echo "helm-lint: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
