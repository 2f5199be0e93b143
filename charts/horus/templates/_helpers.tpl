{{/* Horus components find each other by fixed names (constants.py: HORUS_NAMESPACE,
SIGNING_KEY_SECRET, VERIFY_KEYS_CONFIGMAP), so the chart installs into horus-system only. */}}
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

{{/* registry/repository[:tag][@digest]. The Horus images have no default registry: the
project publishes none, and a made-up default namespace could be taken by someone else (see
docs/decisions.md, Chart). Call with (dict "image" .Values.images.X "root" . "what" "images.X"). */}}
{{- define "horus.image" -}}
{{- $registry := .image.registry | default .root.Values.images.registry | trimSuffix "/" -}}
{{- if not $registry -}}
{{- fail (printf "images.registry is empty: build the Horus images, push them to your registry and set it, e.g. --set images.registry=registry.example.com/horus (README, \"Install on a cluster\", step 1; %s.registry overrides it for this image only)" .what) -}}
{{- end -}}
{{- $ref := printf "%s/%s" $registry .image.repository -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $ref .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The kube-scheduler image of the optional Horus scheduler: registry.k8s.io/kube-scheduler
at the cluster's own version unless a tag is given. Distribution suffixes are stripped
(v1.30.8-eks-2d5f260 -> v1.30.8, v1.31.1+k3s1 -> v1.31.1), as HAMi does: registry.k8s.io
publishes only the upstream tags. */}}
{{- define "horus.kubeSchedulerImage" -}}
{{- $img := .Values.images.kubeScheduler -}}
{{- $ref := printf "%s/%s" ($img.registry | trimSuffix "/") $img.repository -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $ref $img.digest -}}
{{- else -}}
{{- $tag := $img.tag | default (regexReplaceAll "^(v[0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "${1}") -}}
{{- printf "%s:%s" $ref $tag -}}
{{- end -}}
{{- end -}}

{{/* Chart enforcement mode -> the agent's two knobs (AgentSettings.enforcement, .watchdog). */}}
{{- define "horus.agentEnforcement" -}}
{{- if eq .Values.enforcement "mps" }}mps{{ else }}none{{ end -}}
{{- end -}}
{{- define "horus.agentWatchdog" -}}
{{- if eq .Values.enforcement "mps" }}evict{{ else if eq .Values.enforcement "report" }}report{{ else }}off{{ end -}}
{{- end -}}

{{/* MPS directories on the host, mounted at the same paths in the pods (the device plugin
hands the pipe directory to workloads by its host path). */}}
{{- define "horus.mpsPipeDir" -}}{{ printf "%s/pipe" (.Values.node.mps.root | trimSuffix "/") }}{{- end -}}
{{- define "horus.mpsShmDir" -}}{{ printf "%s/shm" (.Values.node.mps.root | trimSuffix "/") }}{{- end -}}

{{/* The signing (private) key as a file, only in the operator and the Horus scheduler pod and
only when the admin manages the Secret (assignmentKey.existingSecret): the volume, its mount and
the variable they read it by. Without it they read the Secret horus-signing-key through the API. */}}
{{- define "horus.keyFileEnv" -}}
- name: HORUS_ASSIGNMENT_KEY_FILE
  value: /var/run/horus/signing-key/{{ .Values.assignmentKey.secretKey }}
{{- end -}}
{{- define "horus.keyVolume" -}}
- name: signing-key
  secret:
    secretName: {{ .Values.assignmentKey.existingSecret }}
{{- end -}}
{{- define "horus.keyMount" -}}
- name: signing-key
  mountPath: /var/run/horus/signing-key
  readOnly: true
{{- end -}}

{{/* The public keys the nodes verify with (a node holds no key that signs): the
ConfigMap horus-verify-keys the operator publishes, optional so the DaemonSet starts before the
operator's first start; the kubelet fills and refreshes the mount. */}}
{{- define "horus.verifyKeysVolume" -}}
- name: verify-keys
  configMap:
    name: horus-verify-keys
    optional: true
{{- end -}}
{{- define "horus.verifyKeysMount" -}}
- name: verify-keys
  mountPath: /var/run/horus/verify-keys
  readOnly: true
{{- end -}}

{{/* prometheus.io/* scrape annotations, only when no prometheus-operator monitor scrapes the
same endpoints (both together would scrape every series twice). Call with (dict "root" . "port" N). */}}
{{- define "horus.scrapeAnnotations" -}}
{{- $v := .root.Values -}}
{{- if and $v.metrics.serviceAnnotations (not $v.serviceMonitor.enabled) (not $v.podMonitor.enabled) }}
annotations:
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .port | quote }}
  prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* The node DaemonSet's nodeAffinity: any of node.gpuNodeSelectorTerms, each narrowed by the
opt-out label horus.io/gpu-node=false and, with node.nvidiaDevicePlugin=avoid, by the GPU
Operator's label that says NVIDIA's device plugin runs on the node. */}}
{{- define "horus.nodeAffinityTerms" -}}
{{- $terms := list -}}
{{- range .Values.node.gpuNodeSelectorTerms -}}
{{- $exprs := concat (.matchExpressions | default list) (list (dict "key" "horus.io/gpu-node" "operator" "NotIn" "values" (list "false"))) -}}
{{- if eq $.Values.node.nvidiaDevicePlugin "avoid" -}}
{{- $exprs = append $exprs (dict "key" "nvidia.com/gpu.deploy.device-plugin" "operator" "NotIn" "values" (list "true")) -}}
{{- end -}}
{{- $terms = append $terms (dict "matchExpressions" $exprs) -}}
{{- end -}}
{{- toYaml $terms -}}
{{- end -}}

{{/* "true" when the node's labels satisfy one nodeSelectorTerm (In, NotIn, Exists,
DoesNotExist, as the scheduler reads them). Call with (dict "labels" L "term" T). */}}
{{- define "horus.termMatches" -}}
{{- $ok := true -}}
{{- range .term.matchExpressions -}}
{{- $has := hasKey $.labels .key -}}
{{- $val := "" -}}{{- if $has }}{{ $val = index $.labels .key }}{{ end -}}
{{- if eq .operator "In" -}}{{- if not (and $has (has $val .values)) }}{{ $ok = false }}{{ end -}}
{{- else if eq .operator "NotIn" -}}{{- if and $has (has $val .values) }}{{ $ok = false }}{{ end -}}
{{- else if eq .operator "Exists" -}}{{- if not $has }}{{ $ok = false }}{{ end -}}
{{- else if eq .operator "DoesNotExist" -}}{{- if $has }}{{ $ok = false }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $ok -}}
{{- end -}}

{{/* How many of the cluster's nodes the node DaemonSet selects; "" when the cluster cannot be
read (helm template, --dry-run=client, Argo CD). */}}
{{- define "horus.gpuNodeCount" -}}
{{- $nodes := lookup "v1" "Node" "" "" -}}
{{- if $nodes -}}
{{- $terms := include "horus.nodeAffinityTerms" . | fromYamlArray -}}
{{- $n := 0 -}}
{{- range ($nodes.items | default list) -}}
{{- $labels := .metadata.labels | default dict -}}
{{- $sel := true -}}
{{- range $k, $v := $.Values.node.nodeSelector -}}
{{- if ne (toString (index $labels $k | default "")) (toString $v) }}{{ $sel = false }}{{ end -}}
{{- end -}}
{{- $any := false -}}
{{- range $terms -}}
{{- if eq (include "horus.termMatches" (dict "labels" $labels "term" .)) "true" }}{{ $any = true }}{{ end -}}
{{- end -}}
{{- if and $sel $any }}{{ $n = add1 $n }}{{ end -}}
{{- end -}}
{{- $n -}}
{{- end -}}
{{- end -}}

{{/* Which path carries a GPU share to the container (docs/dra.md, "Which path"):
"dra" or "deviceplugin", from gpuSharing.path. auto is dra when the cluster serves
resource.k8s.io/v1 (.Capabilities.APIVersions: the apiserver's discovery on install/upgrade,
helm's built-in list under `helm template`) and its version is 1.36 or later, where
DRAConsumableCapacity — many claims sharing one device by amounts of its capacities — is on by
default; else deviceplugin. A cluster that turned the feature gate off sets devicePlugin. */}}
{{- define "horus.placementPath" -}}
{{- $path := .Values.gpuSharing.path -}}
{{- if eq $path "dra" -}}dra
{{- else if eq $path "devicePlugin" -}}deviceplugin
{{- else if and (.Capabilities.APIVersions.Has "resource.k8s.io/v1") (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}dra
{{- else -}}deviceplugin
{{- end -}}
{{- end -}}
