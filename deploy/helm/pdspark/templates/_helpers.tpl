{{/* Names. Component names append up to 16 characters ("-decode-headless"), so the base is
     cut to 40: Service names must stay DNS labels (63) and StatefulSet pods carry a
     controller-revision-hash label built from the StatefulSet name. */}}
{{- define "pdspark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pdspark.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<fullname>-<component>"; call with (dict "root" $ "component" "decode"). */}}
{{- define "pdspark.componentName" -}}
{{- printf "%s-%s" (include "pdspark.fullname" .root) .component }}
{{- end }}

{{/* Headless Service of a component: stable per-pod DNS names and metrics discovery. */}}
{{- define "pdspark.headlessName" -}}
{{- printf "%s-%s-headless" (include "pdspark.fullname" .root) .component }}
{{- end }}

{{- define "pdspark.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "pdspark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pdspark
{{- end }}

{{/* Selector labels of one component; (dict "root" $ "component" "router"). */}}
{{- define "pdspark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdspark.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "pdspark.componentLabels" -}}
{{ include "pdspark.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "pdspark.image" -}}
{{- printf "%s:%s" (required "image.repository is required" .Values.image.repository) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* A scalar as a command-line word. Helm reads values through JSON, so every number is a
     float64 and would print as 8.388608e+06; whole numbers are printed as integers. */}}
{{- define "pdspark.word" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* One "--flag", "value" pair per map entry as YAML list items, in key order. null or ""
     drops a flag, true passes a bare switch, false drops it. */}}
{{- define "pdspark.flagArgs" -}}
{{- range $name, $value := . }}
{{- if kindIs "bool" $value }}
{{- if $value }}
- {{ printf "--%s" $name | quote }}
{{- end }}
{{- else if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
- {{ printf "--%s" $name | quote }}
- {{ include "pdspark.word" $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Router registry addresses for --router: an explicit list; with a StatefulSet router the
     per-pod names; otherwise the router headless Service (one DNS name resolving to every
     router pod). */}}
{{- define "pdspark.routerAddresses" -}}
{{- $ctx := dict "root" . "component" "router" }}
{{- $headless := include "pdspark.headlessName" $ctx }}
{{- $suffix := printf "%s.%s.svc.%s:%s" $headless .Release.Namespace .Values.clusterDomain (include "pdspark.word" .Values.router.ports.grpc) }}
{{- if .Values.workers.routerAddresses }}
{{- join "," .Values.workers.routerAddresses }}
{{- else if eq .Values.router.kind "StatefulSet" }}
{{- $addrs := list }}
{{- range $i := until (int .Values.router.replicas) }}
{{- $addrs = append $addrs (printf "%s-%d.%s" (include "pdspark.componentName" $ctx) $i $suffix) }}
{{- end }}
{{- join "," $addrs }}
{{- else }}
{{- $suffix }}
{{- end }}
{{- end }}

{{/* Model volume and mount; (dict "root" $ "override" .Values.router.modelVolume). */}}
{{- define "pdspark.modelVolume" -}}
{{- $vol := .root.Values.model.volume }}
{{- if .override }}{{ $vol = .override }}{{ end }}
{{- if eq $vol.type "pvc" }}
- name: model
  persistentVolumeClaim:
    claimName: {{ required "model.volume.pvc.claimName is required when model.volume.type is pvc" $vol.pvc.claimName }}
    readOnly: true
{{- else if eq $vol.type "hostPath" }}
- name: model
  hostPath:
    path: {{ required "model.volume.hostPath.path is required" $vol.hostPath.path }}
    type: {{ $vol.hostPath.type }}
{{- else if ne $vol.type "none" }}
{{- fail (printf "model.volume.type must be pvc, hostPath or none, not %q" $vol.type) }}
{{- end }}
{{- end }}

{{- define "pdspark.modelMount" -}}
{{- $vol := .root.Values.model.volume }}
{{- if .override }}{{ $vol = .override }}{{ end }}
{{- if ne $vol.type "none" }}
- name: model
  mountPath: {{ $vol.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Probe timing block from a values map {periodSeconds, failureThreshold, timeoutSeconds}. */}}
{{- define "pdspark.probeTiming" -}}
periodSeconds: {{ include "pdspark.word" .periodSeconds }}
failureThreshold: {{ include "pdspark.word" .failureThreshold }}
timeoutSeconds: {{ include "pdspark.word" .timeoutSeconds }}
{{- end }}

{{/* preStop sleep, rendered when seconds > 0. */}}
{{- define "pdspark.preStop" -}}
{{- if gt (int .) 0 }}
lifecycle:
  preStop:
    exec:
      command: ["sleep", {{ include "pdspark.word" . | quote }}]
{{- end }}
{{- end }}
