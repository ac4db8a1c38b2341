{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "ckptbench.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "ckptbench.fullname" -}}
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

{{- define "ckptbench.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object of the release carries, whatever its component. */}}
{{- define "ckptbench.commonLabels" -}}
helm.sh/chart: {{ include "ckptbench.chart" . }}
app.kubernetes.io/name: {{ include "ckptbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels. app.kubernetes.io/component keeps the operator apart from benchmark pods,
which carry app.kubernetes.io/name: ckptbench too. */}}
{{- define "ckptbench.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ckptbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of the operator's own objects. */}}
{{- define "ckptbench.labels" -}}
{{ include "ckptbench.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "ckptbench.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ckptbench.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ckptbench.operatorImage" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "ckptbench.workloadImage" -}}
{{- printf "%s:%s" .Values.workload.image.repository (default .Chart.AppVersion .Values.workload.image.tag) }}
{{- end }}

{{/* The namespaces the operator watches, as a JSON list (empty when it watches all of them).
fromJsonArray turns it back into a list where a template needs one. */}}
{{- define "ckptbench.watchedNamespaces" -}}
{{- if .Values.watch.allNamespaces }}
{{- list | toJson }}
{{- else if .Values.watch.namespaces }}
{{- .Values.watch.namespaces | uniq | toJson }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/* Namespaces that get per-namespace objects (LocalQueue, workload ServiceAccount): the
watched ones, or the release namespace when the operator watches the whole cluster. */}}
{{- define "ckptbench.benchmarkNamespaces" -}}
{{- if .Values.watch.allNamespaces }}
{{- list .Release.Namespace | toJson }}
{{- else }}
{{- include "ckptbench.watchedNamespaces" . }}
{{- end }}
{{- end }}

{{/* The operator's namespaced permissions: exactly what it calls, no wildcards. */}}
{{- define "ckptbench.rbacRules" -}}
# create and delete: a CheckpointBenchmarkSweep's cells run as child benchmarks.
- apiGroups: ["ckptbench.dev"]
  resources: ["checkpointbenchmarks"]
  verbs: ["get", "list", "watch", "patch", "update", "create", "delete"]
- apiGroups: ["ckptbench.dev"]
  resources: ["checkpointbenchmarks/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["ckptbench.dev"]
  resources: ["checkpointbenchmarksweeps"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ckptbench.dev"]
  resources: ["checkpointbenchmarksweeps/status"]
  verbs: ["get", "patch", "update"]
# create and delete: a DataLoadingBenchmarkSweep's cells run as child benchmarks.
- apiGroups: ["ckptbench.dev"]
  resources: ["dataloadingbenchmarks"]
  verbs: ["get", "list", "watch", "patch", "update", "create", "delete"]
- apiGroups: ["ckptbench.dev"]
  resources: ["dataloadingbenchmarks/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["ckptbench.dev"]
  resources: ["dataloadingbenchmarksweeps"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["ckptbench.dev"]
  resources: ["dataloadingbenchmarksweeps/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch", "create"]
# Read-only: the results come from the pods' termination messages.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Whether an optional object is rendered, from its `enabled` value and whether the cluster serves
its API: (list <enabled> <served>). `auto`: where the API is served, so an install on a cluster
without the Prometheus Operator or Kueue goes through (NOTES.txt says what was skipped) instead of
failing at apply time; `true`: always, for `helm template` in a GitOps pipeline that knows nothing
of the cluster's APIs (it sees only what --api-versions names); `false`: never. toString: the
value is a boolean or the string "auto", and Go templates' eq refuses to compare the two types.
*/}}
{{- define "ckptbench.renders" -}}
{{- $enabled := toString (index . 0) }}
{{- if or (eq $enabled "true") (and (eq $enabled "auto") (index . 1)) }}true{{ end }}
{{- end }}

{{/* Whether an optional object is wanted at all (`auto` or `true`). */}}
{{- define "ckptbench.wanted" -}}
{{- if ne (toString .) "false" }}true{{ end }}
{{- end }}

{{/*
kopf's peering object of the replicas: read, watched, and patched with each replica's keep-alive.
A KopfPeering in each watched namespace, or the ClusterKopfPeering when cluster-wide.
*/}}
{{- define "ckptbench.peeringRule" -}}
- apiGroups: ["kopf.dev"]
  resources: [{{ if .Values.watch.allNamespaces }}"clusterkopfpeerings"{{ else }}"kopfpeerings"{{ end }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}

{{/*
Whether the cluster serves an optional API the chart can create objects of.
*/}}
{{- define "ckptbench.hasServiceMonitor" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end }}
{{- end }}

{{- define "ckptbench.hasPrometheusRule" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}true{{ end }}
{{- end }}

{{- define "ckptbench.hasKueue" -}}
{{- $api := .Capabilities.APIVersions }}
{{- if and ($api.Has "kueue.x-k8s.io/v1beta2/ResourceFlavor") ($api.Has "kueue.x-k8s.io/v1beta2/ClusterQueue") ($api.Has "kueue.x-k8s.io/v1beta2/LocalQueue") }}true{{ end }}
{{- end }}

{{/* The API server's ValidatingAdmissionPolicy (Kubernetes 1.30+): the allow-lists at admission. */}}
{{- define "ckptbench.hasAdmissionPolicy" -}}
{{- $api := .Capabilities.APIVersions }}
{{- if and ($api.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") ($api.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding") }}true{{ end }}
{{- end }}
