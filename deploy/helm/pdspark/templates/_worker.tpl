{{/* Prefill and decode workers share one pod shape; (dict "root" $ "component" "decode"). */}}
{{- define "pdspark.workerStatefulSet" -}}
{{- $root := .root }}
{{- $role := .component }}
{{- $w := index $root.Values $role }}
{{- $shared := $root.Values.workers }}
{{- $names := $root.Values.flagNames }}
{{- $headless := include "pdspark.headlessName" . }}
{{- $port := include "pdspark.word" $w.ports.grpc }}
{{- $tp := index $w.flags "tensor-parallel-size" | default 1 | int }}
{{- if and (gt (int $w.gpus) 0) (gt $tp (int $w.gpus)) }}
{{- fail (printf "%s: tensor-parallel-size %d needs at least %d GPUs, gpus is %d" $role $tp $tp (int $w.gpus)) }}
{{- end }}
{{- $minGrace := add (int $w.preStopSleepSeconds) (int $shared.maxTransferLeaseSeconds) }}
{{- if le (int $w.terminationGracePeriodSeconds) $minGrace }}
{{- fail (printf "%s.terminationGracePeriodSeconds must exceed preStopSleepSeconds + workers.maxTransferLeaseSeconds (%d)" $role $minGrace) }}
{{- end }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ include "pdspark.componentName" . }}
  labels:
    {{- include "pdspark.componentLabels" . | nindent 4 }}
spec:
  replicas: {{ include "pdspark.word" $w.replicas }}
  serviceName: {{ $headless }}
  podManagementPolicy: {{ $shared.podManagementPolicy }}
  updateStrategy:
    {{- toYaml $w.updateStrategy | nindent 4 }}
  selector:
    matchLabels:
      {{- include "pdspark.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "pdspark.componentLabels" . | nindent 8 }}
      {{- with $w.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      automountServiceAccountToken: false
      # SIGTERM starts the drain: stop taking work, finish or hand off, wait for transfers
      # and leases, deregister, exit 0. The grace period bounds it.
      terminationGracePeriodSeconds: {{ include "pdspark.word" $w.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $role }}
          image: {{ include "pdspark.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: [{{ index $root.Values.binaries $role | quote }}]
          args:
            - {{ $names.model | quote }}
            - {{ $root.Values.model.path | quote }}
            - {{ $names.host | quote }}
            - {{ $shared.host | quote }}
            - {{ $names.port | quote }}
            - {{ $port | quote }}
            - {{ $names.metricsPort | quote }}
            - {{ include "pdspark.word" $w.ports.metrics | quote }}
            - {{ $names.router | quote }}
            - {{ include "pdspark.routerAddresses" $root | quote }}
            - {{ $names.advertiseAddress | quote }}
            {{- if eq $shared.advertiseBy "podDNS" }}
            - {{ printf "$(POD_NAME).%s.$(POD_NAMESPACE).svc.%s:%s" $headless $root.Values.clusterDomain $port | quote }}
            {{- else if eq $shared.advertiseBy "podIP" }}
            - {{ printf "$(POD_IP):%s" $port | quote }}
            {{- else }}
            {{- fail "workers.advertiseBy must be podDNS or podIP" }}
            {{- end }}
            - {{ $names.ucxTls | quote }}
            - {{ required "ucx.tls is required" $root.Values.ucx.tls | quote }}
            {{- with $root.Values.ucx.netDevices }}
            - {{ $names.ucxNetDevices | quote }}
            - {{ . | quote }}
            {{- end }}
            {{- with include "pdspark.flagArgs" $w.flags | trim }}{{ . | nindent 12 }}{{- end }}
            {{- with $w.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            # Kubernetes expands $(POD_NAME) etc. in args, which builds the advertise address.
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            # The root filesystem is read-only: keep CUDA's JIT cache on the /tmp volume.
            - name: CUDA_CACHE_PATH
              value: /tmp/cuda-cache
            - name: UCX_TLS
              value: {{ $root.Values.ucx.tls | quote }}
            {{- with $root.Values.ucx.netDevices }}
            - name: UCX_NET_DEVICES
              value: {{ . | quote }}
            {{- end }}
            {{- range $k, $v := $root.Values.ucx.env }}
            - name: {{ $k }}
              value: {{ include "pdspark.word" $v | quote }}
            {{- end }}
            {{- with $w.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - {name: grpc, containerPort: {{ $port }}, protocol: TCP}
            - {name: metrics, containerPort: {{ include "pdspark.word" $w.ports.metrics }}, protocol: TCP}
          # Startup gives model loading its budget; liveness only asks "process alive", so a
          # worker whose router is away is not restarted; readiness means registered with a
          # router and transport validated.
          startupProbe:
            httpGet: {path: /live, port: metrics}
            {{- include "pdspark.probeTiming" $w.probes.startup | nindent 12 }}
          readinessProbe:
            httpGet: {path: /ready, port: metrics}
            {{- include "pdspark.probeTiming" $w.probes.readiness | nindent 12 }}
          livenessProbe:
            httpGet: {path: /live, port: metrics}
            {{- include "pdspark.probeTiming" $w.probes.liveness | nindent 12 }}
          {{- with include "pdspark.preStop" $w.preStopSleepSeconds | trim }}{{ . | nindent 10 }}{{- end }}
          resources:
            {{- $res := deepCopy $w.resources }}
            {{- $extra := dict }}
            {{- if gt (int $w.gpus) 0 }}
            {{- $_ := set $extra "nvidia.com/gpu" (int $w.gpus) }}
            {{- end }}
            {{- if $root.Values.rdma.enabled }}
            {{- range $k, $v := $root.Values.rdma.resources }}
            {{- $_ := set $extra $k (int $v) }}
            {{- end }}
            {{- end }}
            {{- if $extra }}
            {{- $_ := set $res "requests" (mergeOverwrite (default dict (index $res "requests")) $extra) }}
            {{- $_ := set $res "limits" (mergeOverwrite (default dict (index $res "limits")) $extra) }}
            {{- end }}
            {{- toYaml $res | nindent 12 }}
          securityContext:
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
              {{- with $root.Values.workerCapabilities }}
              add:
                {{- toYaml . | nindent 16 }}
              {{- end }}
          volumeMounts:
            - {name: dshm, mountPath: /dev/shm}
            - {name: tmp, mountPath: /tmp}
            {{- with include "pdspark.modelMount" (dict "root" $root "override" dict) | trim }}{{ . | nindent 12 }}{{- end }}
      volumes:
        # NCCL and UCX shared-memory transports need far more than the runtime's 64 MiB.
        - name: dshm
          emptyDir:
            medium: Memory
            sizeLimit: {{ $w.shmSizeLimit }}
        - name: tmp
          emptyDir: {}
        {{- with include "pdspark.modelVolume" (dict "root" $root "override" dict) | trim }}{{ . | nindent 8 }}{{- end }}
      {{- with $w.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $w.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* Headless Service per worker role: stable pod DNS names (the advertise address) and the
     endpoints the ServiceMonitor scrapes. Not-ready pods are published because a worker is
     reached through this name before it has registered. */}}
{{- define "pdspark.workerHeadlessService" -}}
{{- $w := index .root.Values .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "pdspark.headlessName" . }}
  labels:
    {{- include "pdspark.componentLabels" . | nindent 4 }}
    pdspark.io/scrape: "true"
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {{- include "pdspark.selectorLabels" . | nindent 4 }}
  ports:
    - {name: grpc, port: {{ include "pdspark.word" $w.ports.grpc }}, targetPort: grpc, protocol: TCP, appProtocol: grpc}
    - {name: metrics, port: {{ include "pdspark.word" $w.ports.metrics }}, targetPort: metrics, protocol: TCP}
{{- end }}
