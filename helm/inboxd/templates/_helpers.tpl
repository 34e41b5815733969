{{/*
Chart name, cut to the 63 characters a label value allows.
*/}}
{{- define "inboxd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full resource name: release name plus chart name, unless the release name
already contains the chart name.
*/}}
{{- define "inboxd.fullname" -}}
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

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "inboxd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "inboxd.labels" -}}
helm.sh/chart: {{ include "inboxd.chart" . }}
{{ include "inboxd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Labels that select the pods; never change them after a first install.
*/}}
{{- define "inboxd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "inboxd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount the pods run as.
*/}}
{{- define "inboxd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "inboxd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: repository with digest, or with tag (appVersion by default).
*/}}
{{- define "inboxd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
TCP port of config.http.listen ("host:port"). The probes need it.
*/}}
{{- define "inboxd.httpPort" -}}
{{- $listen := required "config.http.listen must be set (host:port): the probes use it" .Values.config.http.listen }}
{{- $port := regexFind "[0-9]+$" $listen }}
{{- if or (not $port) (eq $port "0") }}
{{- fail (printf "config.http.listen %q needs a fixed port" $listen) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
The effective inboxd config: values.config, with consumer defaulting to the
full name and servicebus.auth forced by workloadIdentity.enabled. Rendered as JSON into the ConfigMap.
*/}}
{{- define "inboxd.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if not $cfg.consumer }}
{{- $_ := set $cfg "consumer" (include "inboxd.fullname" .) }}
{{- end }}
{{- if and (eq (default "password" ($cfg.db).auth) "workload_identity") (not .Values.workloadIdentity.enabled) }}
{{- fail "config.db.auth workload_identity needs workloadIdentity.enabled (the token comes from the pod's workload identity)" }}
{{- end }}
{{- if .Values.workloadIdentity.enabled }}
{{- $sb := default (dict) $cfg.servicebus }}
{{- $_ := set $sb "auth" "workload_identity" }}
{{- $_ := set $cfg "servicebus" $sb }}
{{- end }}
{{- toPrettyJson $cfg }}
{{- end }}

{{/*
Service Bus entity parts for KEDA: queue, or topic + subscription, from the
keda.* overrides or from config.servicebus.entity.
*/}}
{{- define "inboxd.kedaEntity" -}}
{{- $entity := default "" .Values.config.servicebus.entity }}
{{- $parts := splitList "/" $entity }}
{{- $out := dict }}
{{- if .Values.keda.queueName }}
{{- $_ := set $out "queueName" .Values.keda.queueName }}
{{- else if .Values.keda.topicName }}
{{- $_ := set $out "topicName" .Values.keda.topicName }}
{{- $_ := set $out "subscriptionName" (required "keda.subscriptionName is required with keda.topicName" .Values.keda.subscriptionName) }}
{{- else if and (eq (len $parts) 3) (eq (lower (index $parts 1)) "subscriptions") }}
{{- $_ := set $out "topicName" (index $parts 0) }}
{{- $_ := set $out "subscriptionName" (index $parts 2) }}
{{- else if and (eq (len $parts) 1) $entity }}
{{- $_ := set $out "queueName" $entity }}
{{- else }}
{{- fail "keda.enabled needs keda.queueName, keda.topicName + keda.subscriptionName, or config.servicebus.entity" }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Secret names: the configured existingSecret, else one named like the release.
*/}}
{{- define "inboxd.serviceBusSecret" -}}
{{- default (include "inboxd.fullname" .) .Values.secrets.serviceBus.existingSecret }}
{{- end }}
{{- define "inboxd.dbSecret" -}}
{{- default (include "inboxd.fullname" .) .Values.secrets.db.existingSecret }}
{{- end }}
