{{/* The chart's name, or nameOverride. */}}
{{- define "goodput.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every resource's name: fullnameOverride, else <release>-<name>, or the
release name alone when it already contains the chart name. */}}
{{- define "goodput.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "goodput.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels that select the operator's pods. */}}
{{- define "goodput.selectorLabels" -}}
app.kubernetes.io/name: {{ include "goodput.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels of every object the chart renders. */}}
{{- define "goodput.labels" -}}
helm.sh/chart: {{ include "goodput.chart" . }}
{{ include "goodput.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: goodput
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "goodput.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "goodput.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: repository@digest when a digest is set, else repository:tag with
the tag defaulting to appVersion. The operator passes the same reference to everything it
creates. */}}
{{- define "goodput.image" -}}
{{- $repo := required "image.repository is required" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag: `latest` is refused; give a release tag or a digest" -}}
{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* The Lease's name. */}}
{{- define "goodput.leaseName" -}}
{{- default (include "goodput.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{/* The operator's rules on what it reconciles, in every watched namespace. Shared by the
ClusterRole (cluster-wide mode) and the per-namespace Role (namespaced mode); the chart's
README gives the reason for each verb. */}}
{{- define "goodput.controllerRules" -}}
# CapacityBenchmarks: the controllers' list+watch and a fresh get at each reconcile; a
# ServingPlan creates its revalidation benchmark and deletes the older one it replaces.
- apiGroups: ["goodput.dev"]
  resources: ["capacitybenchmarks"]
  verbs: ["get", "list", "watch", "create", "delete"]
# ServingPlans: the plan controller's list+watch, and a fresh get at each reconcile.
- apiGroups: ["goodput.dev"]
  resources: ["servingplans"]
  verbs: ["get", "list", "watch"]
# Status is written with a replace (PUT) on /status, guarded by resourceVersion.
- apiGroups: ["goodput.dev"]
  resources: ["capacitybenchmarks/status", "servingplans/status"]
  verbs: ["update"]
# Point Jobs: watched (owned), read, server-side applied, deleted on a retry or a new spec.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Point and result ConfigMaps: watched (owned), read, applied, the merged report merged in,
# deleted on a retry. `update` is never sent by the operator: it is held because the
# operator creates the loadgen Role granting get/patch/update on result ConfigMaps, and
# RBAC lets it create a Role only with permissions it holds itself.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# A simulated target's Deployment: watched (owned), applied, deleted once no longer needed.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# Services: the simulated target's (watched, applied, deleted) and a Service target's (get).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A target's ready endpoints and metrics addresses.
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
# A point's pods: whether they started and why one failed.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
{{- if .Values.failureTests.deletePods }}
# Failure tests (spec.failureTest): the KillReplica fault deletes a ready pod of the target.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["delete"]
{{- end }}
# The loadgen pods' identity, applied per point: ServiceAccount, Role, RoleBinding.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "patch"]
# A plan's target workload (planTargets, any kind with /scale, found through discovery):
# read for what it runs and its readiness; its /scale read and patched in apply mode.
{{- range .Values.planTargets }}
- apiGroups: [{{ .apiGroup | quote }}]
  resources: [{{ .resource | quote }}]
  verbs: ["get"]
- apiGroups: [{{ .apiGroup | quote }}]
  resources: [{{ printf "%s/scale" .resource | quote }}]
  verbs: ["get", "patch"]
{{- end }}
# The HPA or KEDA ScaledObject that scales a plan's target: found by a list, its minimum
# (minReplicas, minReplicaCount) raised with a merge patch instead of the target's /scale.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "patch"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list", "patch"]
# Events on benchmarks and plans (created, then patched as a series when repeated).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- with .Values.gitopsCredentialsSecrets }}
# The credentials of ServingPlans' spec.gitops (a token, SSH or GitHub App key): get on
# these Secrets by name, and no other Secret.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/* Read access to a target Service in another namespace (namespaced mode). */}}
{{- define "goodput.targetRules" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
{{- end -}}
