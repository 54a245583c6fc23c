{{/*
The namespace the operator runs in: namespace.name, else the release namespace.
*/}}
{{- define "grid.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/*
The labels deploy/base puts on the operator's objects. The Deployment selects its pods and
the Service and ServiceMonitor select the Service with exactly these, as in deploy/base,
so that they select the same pods however Grid was installed.
*/}}
{{- define "grid.selectorLabels" -}}
app.kubernetes.io/name: grid
app.kubernetes.io/component: operator
{{- end -}}

{{/*
The labels Helm's conventions add to every object of the chart.
*/}}
{{- define "grid.releaseLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The labels of the operator's own objects.
*/}}
{{- define "grid.operatorLabels" -}}
{{ include "grid.selectorLabels" . }}
{{ include "grid.releaseLabels" . }}
{{- end -}}

{{/*
The operator's image: the tag defaults to the chart's appVersion.
*/}}
{{- define "grid.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
