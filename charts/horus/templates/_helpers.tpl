{{/* Horus components find each other by fixed names (constants.py: HORUS_NAMESPACE,
ASSIGNMENT_KEY_SECRET), so the chart installs into horus-system only. */}}
{{- define "horus.checkNamespace" -}}
{{- if ne .Release.Namespace "horus-system" -}}
{{- fail (printf "install Horus into the namespace horus-system (helm install -n horus-system --create-namespace), not %q: its components find the assignment key and each other there" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{- define "horus.labels" -}}
app.kubernetes.io/name: horus
app.kubernetes.io/part-of: horus
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "horus.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* Chart enforcement mode -> the agent's two knobs (AgentSettings.enforcement, .watchdog). */}}
{{- define "horus.agentEnforcement" -}}
{{- if eq .Values.enforcement "mps" }}mps{{ else }}none{{ end -}}
{{- end -}}
{{- define "horus.agentWatchdog" -}}
{{- if eq .Values.enforcement "mps" }}evict{{ else if eq .Values.enforcement "report" }}report{{ else }}off{{ end -}}
{{- end -}}
