{{/* Names and labels. */}}
{{- define "lizard.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lizard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lizard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "lizard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one role: (list $ "api") or (list $ "node"). */}}
{{- define "lizard.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "lizard.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "lizard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "lizard.databaseSecret" -}}
{{- default (printf "%s-database" (include "lizard.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{/* A role's flags: the shared ones overridden by the role's own. (list $ "api") */}}
{{- define "lizard.flags" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
{{- $own := get (get $root.Values $role) "flags" -}}
{{- toYaml (merge (deepCopy $own) (deepCopy $root.Values.flags)) -}}
{{- end -}}

{{/* The environment variable holding flag NAME's value: LIZARD_FLAG_NAME. */}}
{{- define "lizard.flagVar" -}}
{{- printf "LIZARD_FLAG_%s" (. | upper | replace "-" "_" | replace "." "_") -}}
{{- end -}}

{{/* A role's command line: the role, then --NAME=$(LIZARD_FLAG_NAME) per flag; Kubernetes
     expands $(VAR) from the container's environment, filled from the ConfigMap. */}}
{{- define "lizard.args" -}}
{{- $role := index . 1 -}}
- {{ $role }}
{{- range $k, $v := include "lizard.flags" . | fromYaml }}
- --{{ $k }}=$({{ include "lizard.flagVar" $k }})
{{- end }}
{{- end -}}

{{/* A role's environment: the database URL from the Secret, then every flag from the ConfigMap. */}}
{{- define "lizard.env" -}}
{{- $root := index . 0 -}}
{{- $role := index . 1 -}}
- name: LIZARD_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "lizard.databaseSecret" $root }}
      key: {{ $root.Values.database.existingSecretKey }}
- name: LIZARD_CLUSTER_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "lizard.databaseSecret" $root }}
      key: {{ $root.Values.database.existingSecretClusterKey }}
- name: LIZARD_SECRETS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "lizard.databaseSecret" $root }}
      key: {{ $root.Values.database.existingSecretSecretsKey }}
      optional: true
{{- range $k, $v := include "lizard.flags" . | fromYaml }}
- name: {{ include "lizard.flagVar" $k }}
  valueFrom:
    configMapKeyRef:
      name: {{ include "lizard.fullname" $root }}-flags
      key: {{ $role }}.{{ $k }}
{{- end }}
{{- include "lizard.tracingEnv" $root }}
{{- end -}}

{{- /* The standard OTEL_* variables of tracing (docs/traces.md); none by default. */ -}}
{{- define "lizard.tracingEnv" -}}
{{- with .Values.tracing }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
{{- end }}
{{- if .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- end }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- end }}
{{- range $k, $v := .env }}
{{- if not (hasPrefix "OTEL_" $k) }}
{{- fail (printf "tracing.env.%s: only OTEL_* variables are set from tracing.env" $k) }}
{{- end }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "lizard.probe" -}}
httpGet:
  path: /v1/health
  port: {{ index . 1 }}
initialDelaySeconds: {{ (index . 0).initialDelaySeconds }}
periodSeconds: {{ (index . 0).periodSeconds }}
timeoutSeconds: {{ (index . 0).timeoutSeconds }}
failureThreshold: {{ (index . 0).failureThreshold }}
{{- end -}}
