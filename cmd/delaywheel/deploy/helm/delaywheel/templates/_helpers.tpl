{{/* The release's base name: the StatefulSet, the client Service, the pods' prefix. */}}
{{- define "delaywheel.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless Service: every pod's stable DNS name, ready or not. */}}
{{- define "delaywheel.headless" -}}
{{- printf "%s-headless" (include "delaywheel.fullname" .) -}}
{{- end -}}

{{/* The DNS suffix of the pods' names: <pod>.<this>. */}}
{{- define "delaywheel.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "delaywheel.headless" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The ConfigMap of the pods' cluster files and of the values fixed at creation. */}}
{{- define "delaywheel.clusterConfig" -}}
{{- printf "%s-cluster" (include "delaywheel.fullname" .) -}}
{{- end -}}

{{- define "delaywheel.tokenSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-token" (include "delaywheel.fullname" .)) -}}
{{- end -}}

{{- define "delaywheel.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "delaywheel.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "delaywheel.labels" -}}
{{ include "delaywheel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
delaywheel.checkValues fails the render on values that cannot work, and on
an upgrade that changes what is fixed when the cluster is created: groups
and initialMembers, recorded in the cluster ConfigMap at install (lookup
finds nothing under helm template or lint, where only the values are
checked). A new cluster needs its initialMembers pods.
*/}}
{{- define "delaywheel.checkValues" -}}
{{- $groups := int .Values.groups -}}
{{- if or (lt $groups 1) (gt $groups 256) -}}
{{- fail (printf "groups %d: want 1 to 256 Raft groups" $groups) -}}
{{- end -}}
{{- if lt (int .Values.initialMembers) 1 -}}
{{- fail (printf "initialMembers %d: want at least 1" (int .Values.initialMembers)) -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName: a kubernetes.io/tls Secret" -}}
{{- end -}}
{{- if and .Values.raftTLS.enabled (not .Values.raftTLS.secretName) -}}
{{- fail "raftTLS.enabled needs raftTLS.secretName: a Secret with tls.crt, tls.key and ca.crt" -}}
{{- end -}}
{{- $old := lookup "v1" "ConfigMap" .Release.Namespace (include "delaywheel.clusterConfig" .) -}}
{{- if $old -}}
{{- $data := $old.data | default dict -}}
{{- $was := get $data "groups" -}}
{{- if and $was (ne $was (toString $groups)) -}}
{{- fail (printf "groups is fixed when the cluster is created: this release's cluster runs --groups %s, so it cannot become %d (a node refuses a data dir made with another count); keep groups=%s, or install a new release and move the traffic" $was $groups $was) -}}
{{- end -}}
{{- $wasMembers := get $data "initialMembers" -}}
{{- if and $wasMembers (ne $wasMembers (toString (int .Values.initialMembers))) -}}
{{- fail (printf "initialMembers is fixed when the cluster is created: this release's cluster was created by %s nodes, so it cannot become %d; change the size with replicas" $wasMembers (int .Values.initialMembers)) -}}
{{- end -}}
{{- else if lt (int .Values.replicas) (int .Values.initialMembers) -}}
{{- fail (printf "replicas %d is below initialMembers %d: a new cluster starts with its initialMembers pods (set initialMembers=%d to start with fewer)" (int .Values.replicas) (int .Values.initialMembers) (int .Values.replicas)) -}}
{{- end -}}
{{- end -}}
