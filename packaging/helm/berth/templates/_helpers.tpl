{{/* The release's full name, at most 63 characters minus the longest suffix. */}}
{{- define "berth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "berth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (list $ "supervisor"). */}}
{{- define "berth.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The supervisor pods' selector as a label-selector string. */}}
{{- define "berth.supervisorSelector" -}}
app.kubernetes.io/name={{ .Chart.Name }},app.kubernetes.io/instance={{ .Release.Name }},app.kubernetes.io/component=supervisor
{{- end -}}

{{/* The computers' namespace. */}}
{{- define "berth.computersNamespace" -}}
{{- default .Release.Namespace .Values.computers.namespace -}}
{{- end -}}

{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "berth.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "berth.secretName" -}}
{{- default (include "berth.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "berth.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{/*
One base64 value of the chart's Secret: (list $ key given generated). The
value already in the Secret wins, so that generated values survive
upgrades; then the given one; then the generated one.
*/}}
{{- define "berth.secretData" -}}
{{- $ := index . 0 -}}
{{- $key := index . 1 -}}
{{- $existing := lookup "v1" "Secret" $.Release.Namespace (include "berth.fullname" $) -}}
{{- if and $existing (hasKey ($existing.data | default dict) $key) -}}
{{- index $existing.data $key -}}
{{- else if index . 2 -}}
{{- index . 2 | b64enc -}}
{{- else -}}
{{- index . 3 | b64enc -}}
{{- end -}}
{{- end -}}

{{/* Checks of values that would make a release that cannot run. */}}
{{- define "berth.validate" -}}
{{- $pg := .Values.postgresql -}}
{{- if and $pg.url $pg.bundled.enabled -}}
{{- fail "postgresql.url and postgresql.bundled.enabled are exclusive: set one" -}}
{{- end -}}
{{- if and (not .Values.secrets.existingSecret) (not $pg.url) (not $pg.bundled.enabled) -}}
{{- fail "no state store: set postgresql.url (a postgres:// URL), postgresql.bundled.enabled=true, or secrets.existingSecret with a database-url key" -}}
{{- end -}}
{{- if and $pg.url (not (or (hasPrefix "postgres://" $pg.url) (hasPrefix "postgresql://" $pg.url))) -}}
{{- fail "postgresql.url: want a postgres:// URL" -}}
{{- end -}}
{{- if lt (int .Values.supervisor.replicas) 1 -}}
{{- fail "supervisor.replicas: want at least 1" -}}
{{- end -}}
{{- if not (has .Values.computers.reach (list "pod-ip" "port-forward")) -}}
{{- fail "computers.reach: want pod-ip or port-forward" -}}
{{- end -}}
{{- if ne (empty .Values.computers.apiServer.host) (empty (toString .Values.computers.apiServer.port)) -}}
{{- fail "computers.apiServer: set host and port together" -}}
{{- end -}}
{{- range $k, $v := dict "supervisorToken" .Values.secrets.supervisorToken "turnSecret" .Values.secrets.turnSecret "relayToken" .Values.secrets.relayToken -}}
{{- if and $v (lt (len $v) 16) -}}
{{- fail (printf "secrets.%s: want at least 16 characters" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The security context of every Berth container. */}}
{{- define "berth.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}
