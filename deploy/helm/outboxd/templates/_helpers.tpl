{{/* The objects' name: the release name, with -outboxd unless it already holds outboxd. */}}
{{- define "outboxd.fullname" -}}
{{- if contains "outboxd" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-outboxd" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "outboxd.selectorLabels" -}}
app.kubernetes.io/name: outboxd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outboxd.labels" -}}
{{ include "outboxd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "outboxd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
outboxd.yaml: the values' config with the keys the chart owns. The password is never in it,
only the reference ${OUTBOXD_MYSQL_PASSWORD}, which outboxd expands from the environment the
Deployment fills from the Secret.
*/}}
{{- define "outboxd.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $src := get $cfg "source" | default dict -}}
{{- if or (hasKey $src "password") (hasKey $src "password_file") -}}
{{- fail "config.source.password and config.source.password_file are set by the chart: put the password in the Secret named by database.passwordSecret" -}}
{{- end -}}
{{- if hasKey $cfg "ha" -}}
{{- fail "config.ha is set by the chart: use ha.enabled" -}}
{{- end -}}
{{- if .Values.ha.enabled -}}
{{- $ck := get $cfg "checkpoint" | default dict -}}
{{- if ne (get $ck "store" | default "file") "mysql" -}}
{{- fail "ha.enabled needs config.checkpoint.store: mysql (the lock and the checkpoint row live on the primary)" -}}
{{- end -}}
{{- end -}}
{{- $_ := set $src "password" "${OUTBOXD_MYSQL_PASSWORD}" -}}
{{- $_ := set $cfg "source" $src -}}
{{- $admin := get $cfg "admin" | default dict -}}
{{- $_ := set $admin "listen" (printf "0.0.0.0:%d" (int .Values.admin.port)) -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- if .Values.ha.enabled -}}
{{- $_ := set $cfg "ha" (dict "enabled" true) -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
