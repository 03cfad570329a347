{{/*
Names. Every object name derives from cachet.fullname so two releases in one
namespace never collide, and the operator is told each name through a flag
rather than assuming a default.
*/}}
{{- define "cachet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cachet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "cachet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object of the release, without a component. */}}
{{- define "cachet.commonLabels" -}}
helm.sh/chart: {{ include "cachet.chart" . }}
app.kubernetes.io/name: {{ include "cachet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cachet
{{- end }}

{{- define "cachet.labels" -}}
{{ include "cachet.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's own pods; distinct from the cache pods the operator creates
(those carry component=cache), so Services never select the wrong pods. */}}
{{- define "cachet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cachet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "cachet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-operator" (include "cachet.fullname" .)) .Values.serviceAccount.name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cachet.operatorImage" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) }}
{{- end }}

{{- define "cachet.engineImage" -}}
{{- default (printf "localhost/cachetd:%s" .Chart.AppVersion) .Values.engine.image }}
{{- end }}

{{- define "cachet.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "cachet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cachet.webhookSecretName" -}}
{{- printf "%s-webhook-server-cert" (include "cachet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cachet.mutatingWebhookName" -}}
{{- printf "%s-mutating-webhook-configuration" (include "cachet.fullname" .) }}
{{- end }}

{{- define "cachet.validatingWebhookName" -}}
{{- printf "%s-validating-webhook-configuration" (include "cachet.fullname" .) }}
{{- end }}

{{- define "cachet.metricsServiceName" -}}
{{- printf "%s-metrics-service" (include "cachet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cachet.certificateName" -}}
{{- printf "%s-serving-cert" (include "cachet.fullname" .) }}
{{- end }}

{{/*
DNS names the webhook certificate must carry. Both the short in-cluster form
(what the API server dials: <svc>.<ns>.svc) and the fully qualified one built
from .Values.clusterDomain, so neither a namespace change nor a cluster that is
not cluster.local breaks the TLS handshake.
*/}}
{{- define "cachet.webhookDNSNames" -}}
{{- $svc := include "cachet.webhookServiceName" . -}}
- {{ printf "%s.%s.svc" $svc .Release.Namespace }}
- {{ printf "%s.%s.svc.%s" $svc .Release.Namespace (trimSuffix "." .Values.clusterDomain) }}
{{- end }}

{{/* Whether cert-manager objects may be rendered; fails early, with the fix,
when cert-manager is requested but the cluster cannot serve it. */}}
{{- define "cachet.certManagerReady" -}}
{{- if and .Values.webhook.enabled .Values.certManager.enabled }}
{{- if not (or .Values.certManager.skipAPICheck (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}
{{- fail "certManager.enabled=true but this cluster does not serve cert-manager.io/v1. Install cert-manager first, or set certManager.enabled=false so the operator provisions and rotates its own webhook certificate (or certManager.skipAPICheck=true if cert-manager is being installed alongside)." }}
{{- end }}
{{- true }}
{{- end }}
{{- end }}

{{/*
Parses a multi-document YAML file copied from controller-gen's output (see
hack/sync-chart.sh) into {"docs": [...]}. Templates build objects from these
parsed documents instead of hand-copied YAML, so CRDs, RBAC rules and webhook
paths cannot drift from the Go markers.
*/}}
{{- define "cachet.generatedDocs" -}}
{{- $ctx := index . 0 }}
{{- $path := index . 1 }}
{{- $raw := $ctx.Files.Get $path }}
{{- if not $raw }}
{{- fail (printf "%s is missing from the chart: run `make manifests` (controller-gen + hack/sync-chart.sh)" $path) }}
{{- end }}
{{- $docs := list }}
{{- range regexSplit "(?m)^---[ \t]*$" $raw -1 }}
{{- if regexMatch "(?m)^kind:" . }}
{{- $doc := fromYaml . }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "%s: %s" $path $doc.Error) }}
{{- end }}
{{- $docs = append $docs $doc }}
{{- end }}
{{- end }}
{{- toJson (dict "docs" $docs) }}
{{- end }}

{{/* The leader-election Lease, one per release (passed as --leader-election-id);
release "cachet" gets the operator's default name. The chart pre-creates it,
see rbac/leader_election.yaml. */}}
{{- define "cachet.leaderElectionID" -}}
{{- printf "%s-operator.cache.cachet.dev" (include "cachet.fullname" .) }}
{{- end }}

{{/* prometheus-adapter's objects carry their own component, so the operator's
Services and NetworkPolicy never select the adapter's pods. */}}
{{- define "cachet.adapterName" -}}
{{- printf "%s-metrics-adapter" (include "cachet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cachet.adapterLabels" -}}
{{ include "cachet.commonLabels" . }}
app.kubernetes.io/component: metrics-adapter
{{- end }}

{{- define "cachet.adapterSelectorLabels" -}}
app.kubernetes.io/name: {{ include "cachet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: metrics-adapter
{{- end }}

{{/*
prometheus-adapter's config.yaml: the custom metrics the operator's HPAs ask
for, per pod. The README carries the same block for users with their own
adapter; hack/helm-lint.sh fails when the two differ.
- cachet_evictions_young_per_second: the rate of evictions of items still in
  use, the signal that a Cache is too small.
- cachet_get_miss_ratio: get misses over all gets. The denominator is clamped
  so an idle pod reads 0 rather than NaN (0/0), which the HPA would reject.
*/}}
{{- define "cachet.adapterConfig" -}}
{{- $w := .Values.metricsAdapter.rules.rateWindow -}}
rules:
  - seriesQuery: 'cachet_evictions_young_total{namespace!="",pod!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: ^cachet_evictions_young_total$
      as: cachet_evictions_young_per_second
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[{{ $w }}])) by (<<.GroupBy>>)'
  - seriesQuery: 'memcached_commands_total{command="get",namespace!="",pod!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        pod: {resource: pod}
    name:
      matches: ^memcached_commands_total$
      as: cachet_get_miss_ratio
    metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>,command="get",status="miss"}[{{ $w }}])) by (<<.GroupBy>>) / clamp_min(sum(rate(<<.Series>>{<<.LabelMatchers>>,command="get"}[{{ $w }}])) by (<<.GroupBy>>), 1e-9)'
{{- end }}
