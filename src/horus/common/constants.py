"""Every name Horus shares with Kubernetes or Prometheus, in one place.

Components talk only through Kubernetes objects (as in HAMi), so an annotation key or resource
name spelled twice would be a protocol bug waiting to happen. Anything that appears on the wire
(API group, resource names, annotation keys, metric names, labels) must be defined here and
imported everywhere else. The values follow ``shared/DESIGN.md``.
"""

from typing import Final, Literal

# --- Custom resource -------------------------------------------------------------------------
API_GROUP: Final = "horus.io"
API_VERSION: Final = "v1alpha1"
API_GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"
DLJOB_KIND: Final = "DLJob"
DLJOB_PLURAL: Final = "dljobs"
DLJOB_SINGULAR: Final = "dljob"
DLJOB_SHORT_NAME: Final = "dlj"
DLJOB_CRD_NAME: Final = f"{DLJOB_PLURAL}.{API_GROUP}"

# --- Scheduling ------------------------------------------------------------------------------
SCHEDULER_NAME: Final = "horus-scheduler"  # on DLJob replica pods: the operator binds them
# The chart's optional second kube-scheduler (scheduler.enabled) that calls the extender: the
# schedulerName plain pods choose to be placed by Horus (chart value scheduler.schedulerName).
KUBE_SCHEDULER_NAME: Final = "horus-kube-scheduler"
#: A stopping operator leader (SIGTERM) writes nothing from the signal on; it waits at most
#: this long for its pass in flight to end (requests already on the wire answered) before it
#: gives the Lease up, so the next leader never races a write of the old one.
OPERATOR_STOP_WAIT_SECONDS: Final = 2.0
#: glibc malloc arenas the operator and extender processes use (``horus.common.heap``): the
#: default, eight per core, let a burst's freed memory sit in many arenas for good.
MALLOC_ARENAS: Final = 2
#: How often the operator gives freed heap memory back to the system, when its view changed.
HEAP_RELEASE_SECONDS: Final = 15.0
#: How long a reconcile pass waits, at its end, for the deletions of leftover pods and claims
#: it started; the rest go on beside the next passes (each object's deletion is started once).
LEFTOVER_DELETE_WAIT_SECONDS: Final = 5.0

# --- Identities (ServiceAccounts in HORUS_NAMESPACE; the admission policies name them) -------
OPERATOR_SERVICE_ACCOUNT: Final = "horus-operator"
NODE_SERVICE_ACCOUNT: Final = "horus-node"
#: The claim a pod-bound ServiceAccount token carries of its pod's node (KEP-4193, GA in
#: Kubernetes 1.32): ``request.userInfo.extra`` of every request made with the token the
#: kubelet mounts. The node policies compare it with the object's node.
TOKEN_EXTRA_NODE_NAME: Final = "authentication.kubernetes.io/node-name"
#: Dev cluster only (never in the chart): the kwok demo's agent, a local process that serves
#: every simulated node with one token and so can carry no node claim.
KWOK_AGENT_SERVICE_ACCOUNT: Final = "horus-dev-kwok-agent"
#: Dev cluster only (never in the chart): the local Prometheus' service discovery, which may
#: only read pods, Services, Endpoints and EndpointSlices in HORUS_NAMESPACE
#: (horus.devcluster.prometheus).
PROMETHEUS_SERVICE_ACCOUNT: Final = "horus-dev-prometheus"

# --- Extended resources advertised by the device plugin --------------------------------------
RESOURCE_GPU_CORE: Final = f"{API_GROUP}/gpu-core"  # percent of one GPU's compute
RESOURCE_GPU_MEMORY: Final = f"{API_GROUP}/gpu-memory"  # MiB
GPU_CORE_UNITS_PER_GPU: Final = 100
# NVIDIA's device plugin's resource: a node advertising it hands whole GPUs out already
RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"

# --- Annotations -----------------------------------------------------------------------------
ANNOTATION_GPU_INVENTORY: Final = f"{API_GROUP}/gpu-inventory"  # node: JSON list of GPUs
ANNOTATION_GPU_ASSIGNMENT: Final = f"{API_GROUP}/gpu-assignment"  # pod: chosen GPU and share
ANNOTATION_PREDICTED: Final = f"{API_GROUP}/predicted"  # pod: predicted util/memory/version
ANNOTATION_GRAPH_PROFILE: Final = f"{API_GROUP}/graph-profile"  # plain pod: its model profile
# pod: Ed25519 signature of the assignment, bound to the pod's UID, its DLJob's UID and the
# record epoch ("v2:<epoch>:<signature>", see api/signing.py); the operator puts it in the
# Binding, so it lands on the pod together with spec.nodeName
ANNOTATION_ASSIGNMENT_SIGNATURE: Final = f"{API_GROUP}/gpu-assignment-signature"

# --- The signing key pair: only the operator and the extender hold the private key -------------
HORUS_NAMESPACE: Final = "horus-system"
#: Secret with the Ed25519 private key (PKCS8 PEM) that signs assignments and records.
SIGNING_KEY_SECRET: Final = "horus-signing-key"
SIGNING_KEY_SECRET_ENTRY: Final = "private.pem"
#: ConfigMap with the public keys that verify (current + earlier ones; Horus never removes one).
VERIFY_KEYS_CONFIGMAP: Final = "horus-verify-keys"
VERIFY_KEYS_CONFIGMAP_ENTRY: Final = "keys.pem"
#: ConfigMap annotation prefix: when the operator published a key (``<prefix><key id>``).
ANNOTATION_KEY_PUBLISHED_PREFIX: Final = "horus.io/published-"
#: Operator/extender: a private key PEM file (else the Secret). Nodes: the public keys file.
ASSIGNMENT_KEY_FILE_ENV: Final = "HORUS_ASSIGNMENT_KEY_FILE"
#: Before Horus 0.2: the HMAC Secret (no longer read; docs/operator.md says how to upgrade).
LEGACY_ASSIGNMENT_KEY_SECRET: Final = "horus-assignment-key"

# --- The extender's TLS: its server certificate and the CA its callers' certificates carry ----
# Created by the operator (or the extender) when absent (horus.operator.extender.tls); the
# kube-scheduler gets ca.crt, client.crt and client.key (its extender tlsConfig).
EXTENDER_TLS_SECRET: Final = "horus-extender-tls"
EXTENDER_TLS_CA: Final = "ca.crt"  # verifies the server (caFile) and the callers (client CA)
EXTENDER_TLS_CERT: Final = "tls.crt"  # the extender's server certificate
EXTENDER_TLS_KEY: Final = "tls.key"
EXTENDER_TLS_CLIENT_CERT: Final = "client.crt"  # the kube-scheduler's (certFile)
EXTENDER_TLS_CLIENT_KEY: Final = "client.key"  # (keyFile)
# The Service in front of the operator pods' extender (its DNS names are in the certificate).
EXTENDER_SERVICE: Final = "horus-operator"
# The chart's metrics Services (port "metrics", prometheus.io/* annotations), which
# Prometheus discovers the operator and agent pods through.
OPERATOR_METRICS_SERVICE: Final = "horus-operator"
NODE_METRICS_SERVICE: Final = "horus-node"

# --- Labels ----------------------------------------------------------------------------------
LABEL_GPU_NODE: Final = f"{API_GROUP}/gpu-node"  # "true" on nodes that carry Horus GPUs
LABEL_GPU_MODEL: Final = f"{API_GROUP}/gpu-model"
LABEL_DLJOB_NAME: Final = f"{API_GROUP}/dljob"
LABEL_REPLICA_INDEX: Final = f"{API_GROUP}/replica-index"
# --- A plain pod's horus.io/gpu-* requests on the DRA path -------------------------------------
# The admission policy (examples/dra/extended-resources-policy.yaml) moves the requests of the
# pod's first container into these annotations (quantities as written) and makes the pod
# reference, as entry CONVERTED_CLAIM_ENTRY, claim CONVERTED_CLAIM_PREFIX + <pod name> (a pod
# named at creation) or the template CONVERTED_CLAIM_TEMPLATE (a pod with only generateName:
# no name yet at admission). The operator chooses the GPU and creates the claim — for a
# template reference CONVERTED_CLAIM_PREFIX + <pod UID>, owned by the pod as the
# kube-controller-manager's resourceclaim controller would make it (POD_CLAIM_ANNOTATION), which
# then records it in the pod's status. No template of that name may exist: the controller would
# make an unpinned claim from it first.
ANNOTATION_GPU_CORE_REQUEST: Final = f"{API_GROUP}/gpu-core-request"
ANNOTATION_GPU_MEMORY_REQUEST: Final = f"{API_GROUP}/gpu-memory-request"
CONVERTED_CLAIM_ENTRY: Final = "horus-gpu"
CONVERTED_CLAIM_PREFIX: Final = "horus-gpu-"
CONVERTED_CLAIM_TEMPLATE: Final = "horus-gpu-made-by-horus"
LABEL_CONVERTED_POD: Final = f"{API_GROUP}/converted-pod"
# The UID of the pod a converted claim was made for. A horus.io/ annotation on a claim only the
# operator may write (the chart's ValidatingAdmissionPolicy horus-claim-annotations), so it
# tells a claim Horus made from one a tenant made under the same name.
ANNOTATION_CONVERTED_FOR: Final = f"{API_GROUP}/converted-for-pod"
# k8s.io/api resource/v1 PodResourceClaimAnnotation: the pod entry a claim generated for a
# template reference serves.
POD_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"

# --- kwok (simulated nodes for the local control plane and tests) -----------------------------
KWOK_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE: Final = "fake"
KWOK_NODE_TYPE_LABEL: Final = "type"
KWOK_NODE_TYPE_VALUE: Final = "kwok"
# Real kubelet nodes of the local cluster (horus dev cluster add-nodes --real) carry this label,
# so a chart install or a test can select them in a cluster that also has kwok nodes.
LABEL_DEV_NODE: Final = f"{API_GROUP}/dev-node"
DEV_NODE_REAL: Final = "real"

# --- GPU health as written in the inventory ----------------------------------------------------
GPU_HEALTHY: Final = "Healthy"
GPU_UNHEALTHY: Final = "Unhealthy"

# --- Prometheus ------------------------------------------------------------------------------
METRIC_PREFIX: Final = "horus_"
METRIC_GPU_UTILIZATION: Final = "horus_gpu_utilization_ratio"
METRIC_GPU_MEMORY_USED: Final = "horus_gpu_memory_used_bytes"
METRIC_GPU_MEMORY_TOTAL: Final = "horus_gpu_memory_total_bytes"
METRIC_POD_GPU_MEMORY_USED: Final = "horus_pod_gpu_memory_used_bytes"
METRIC_POD_GPU_CORE_SHARE: Final = "horus_pod_gpu_core_share_ratio"
METRIC_POD_GPU_MEMORY_LIMIT: Final = "horus_pod_gpu_memory_limit_bytes"
METRIC_POD_PREDICTED_UTIL: Final = "horus_pod_predicted_gpu_utilization_ratio"
METRIC_POD_OBSERVED_UTIL: Final = "horus_pod_observed_gpu_utilization_ratio"
METRIC_ENFORCEMENT_EVICTIONS: Final = "horus_enforcement_evictions"  # client adds _total
METRIC_QUEUE_LENGTH: Final = "horus_queue_length"
METRIC_SCHEDULING_DECISIONS: Final = "horus_scheduling_decisions"  # client adds _total
METRIC_SCHEDULING_FAILURES: Final = "horus_scheduling_failures"  # client adds _total
METRIC_DECISION_LATENCY: Final = "horus_scheduling_decision_duration_seconds"
METRIC_DLJOB_PHASE: Final = "horus_dljobs"
METRIC_GPU_PREDICTED_UTIL_SUM: Final = "horus_gpu_predicted_utilization_ratio"
# Which GPUs the operator exports it for (setting ``gpu_metrics``): one series per GPU makes
# a large cluster's scrape large (each mode's size: benchmarks/results/metrics-render.json),
# so a large cluster may keep only the GPUs that carry a predicted share, or none.
GPU_METRICS_ALL: Final = "all"
GPU_METRICS_BUSY: Final = "busy"
GPU_METRICS_OFF: Final = "off"
GPU_METRICS_MODES: Final = (GPU_METRICS_ALL, GPU_METRICS_BUSY, GPU_METRICS_OFF)
GpuMetrics = Literal["all", "busy", "off"]
METRIC_COMMIT_LATENCY: Final = "horus_scheduling_commit_duration_seconds"  # decision → bound
METRIC_OPERATOR_LEADER: Final = "horus_operator_leader"
METRIC_PREDICTOR_INFO: Final = "horus_predictor_info"  # 1, label version: the model in use
METRIC_PREDICTOR_RELOADS: Final = "horus_predictor_reloads"  # client adds _total; label result
METRIC_EXTENDER_REQUESTS: Final = "horus_extender_requests"  # client adds _total
METRIC_EXTENDER_LATENCY: Final = "horus_extender_request_duration_seconds"
# connections refused before HTTP: no client certificate, one from another CA, plain HTTP
METRIC_EXTENDER_TLS_REFUSED: Final = "horus_extender_tls_refused"  # client adds _total
METRIC_MIGRATIONS: Final = "horus_migrations"  # client adds _total; label reason
METRIC_SIGNING_KEY_AVAILABLE: Final = "horus_signing_key_available"  # 0: placement paused
# the operator's watch-fed view: its LIST and WATCH requests (label verb), by resource
METRIC_VIEW_REQUESTS: Final = "horus_operator_view_requests"  # _total; labels resource, verb
# watches that ended with 410 Gone (each followed by a relist) or an error, by resource
METRIC_VIEW_WATCH_BREAKS: Final = "horus_operator_view_watch_breaks"  # _total; resource, reason
METRIC_VIEW_EVENTS: Final = "horus_operator_view_events"  # _total; watch events, by resource
#: Passes by how the live state was had: "kept" (brought up to date from what changed), or
#: "full: <why>" (horus.operator.livedelta.FULL_*; "full: dra" on the DRA path)
METRIC_LIVE_STATE_BUILDS: Final = "horus_operator_live_state_builds"  # _total; label how
#: Histogram: each hand-back of freed heap memory to the system (horus.common.heap.release)
METRIC_HEAP_RELEASE: Final = "horus_operator_heap_release_seconds"
#: Changes the extender's watch-fed view keeps for it (its live state is brought up to date
#: from them, once per request after a change); a reader further behind diffs the whole copy.
VIEW_CHANGE_LOG_MAX: Final = 20_000

MIB: Final = 1024 * 1024  # bytes in one MiB: shares, NVML and torch readings convert with it

# --- Environment variables handed to containers by the device plugin -----------------------------
ENV_PREFIX: Final = "HORUS_"
# Set by the device plugin's Allocate in every container that got a Horus share; the sharing
# agent reads them from /proc/<pid>/environ to map a GPU process to its pod and share.
ENV_GPU_UUID: Final = "HORUS_GPU_UUID"  # the assigned GPU's UUID
ENV_GPU_INDEX: Final = "HORUS_GPU_INDEX"  # its index on the host (NVML order)
ENV_GPU_CORE_PERCENT: Final = "HORUS_GPU_CORE_PERCENT"  # share of compute, 1..100
ENV_GPU_MEMORY_MIB: Final = "HORUS_GPU_MEMORY_MIB"  # memory share, MiB
ENV_POD_NAMESPACE: Final = "HORUS_POD_NAMESPACE"
ENV_POD_NAME: Final = "HORUS_POD_NAME"
ENV_POD_UID: Final = "HORUS_POD_UID"
ENV_NODE_NAME: Final = "HORUS_NODE_NAME"
ENV_ENFORCEMENT: Final = "HORUS_ENFORCEMENT"  # "mps" or "none": how the share is enforced
# CUDA's own MPS variable for a client's share of the SMs (1..100): the device plugin sets it
# from the core share; `horus predictor measure --mps-thread-percent` sets it for its workers.
ENV_MPS_ACTIVE_THREAD_PERCENTAGE: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

# --- Device plugin (kubelet device-plugin API v1beta1) ------------------------------------------
DEVICE_PLUGIN_API_VERSION: Final = "v1beta1"
DEFAULT_DEVICE_PLUGIN_DIR: Final = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET_NAME: Final = "kubelet.sock"
# pod: set by the device plugin once Allocate handed the pod its share; JSON object mapping the
# resource (horus.io/gpu-core, horus.io/gpu-memory) to the RFC 3339 time it was allocated.
ANNOTATION_GPU_ALLOCATED: Final = f"{API_GROUP}/gpu-allocated"
# node: MiB per device ID of horus.io/gpu-memory (written by the device plugin). Absent means 1:
# the quantity is plain MiB, as on the simulated nodes. See docs/decisions.md.
ANNOTATION_GPU_MEMORY_UNIT: Final = f"{API_GROUP}/gpu-memory-unit-mib"
#: Pod annotations that only Horus' identities may set, change or remove: admission policies
#: (manifests/rbac/*.yaml, the chart's rbac.yaml) refuse any other writer, a Binding carrying
#: them included (the apiserver copies a Binding's annotations onto its pod). The node identity
#: may change only ``gpu-allocated``, on pods bound to its own node. ``graph-profile`` (a plain
#: pod's model) and ``simulated-memory-mib`` stay the pod owner's.
HORUS_OWNED_POD_ANNOTATIONS: Final = (
    ANNOTATION_GPU_ASSIGNMENT,
    ANNOTATION_ASSIGNMENT_SIGNATURE,
    ANNOTATION_PREDICTED,
    ANNOTATION_GPU_ALLOCATED,
)
#: Node annotations the node identity may write on its own Node (and nothing else there).
NODE_WRITABLE_NODE_ANNOTATIONS: Final = (ANNOTATION_GPU_INVENTORY, ANNOTATION_GPU_MEMORY_UNIT)
DEFAULT_GPU_MEMORY_UNIT_MIB: Final = 256  # 256 GiB GPUs stay at 1,024 device IDs
MAX_DEVICE_IDS_PER_GPU: Final = 1024
EVENT_REASON_ALLOCATE_REFUSED: Final = "HorusAllocateRefused"
EVENT_REASON_ALLOCATED: Final = "HorusAllocated"
# on a Node: another device plugin advertises nvidia.com/gpu there, Horus does not advertise
EVENT_REASON_GPU_PLUGIN_CONFLICT: Final = "HorusGpuPluginConflict"
EVENT_COMPONENT_DEVICE_PLUGIN: Final = "horus-device-plugin"

# --- DRA driver (resource.k8s.io/v1 ResourceSlices; kubelet plugin APIs dra/v1) ------------------
# The contract others rely on (docs/dra.md): driver and DeviceClass name, one device per GPU
# named gpu-<index>, its attributes and its two consumable capacities.
DRA_DRIVER_NAME: Final = "gpu.horus.io"
DRA_DEVICE_CLASS: Final = "gpu.horus.io"
DRA_DEVICE_PREFIX: Final = "gpu-"  # device gpu-<host index>
DRA_ATTR_UUID: Final = "uuid"  # string
DRA_ATTR_MODEL: Final = "model"  # string
DRA_ATTR_INDEX: Final = "index"  # int, host (NVML) index
DRA_ATTR_MEMORY_MIB: Final = "memoryMiB"  # int
DRA_CAPACITY_CORES: Final = "cores"  # 100 per GPU, consumed in whole percent
DRA_CAPACITY_MEMORY: Final = "memory"  # the GPU's memory, consumed in whole MiB
# How long a DLJob re-placed because another claim overtook its decision keeps off the GPUs
# it was overtaken on (horus.operator.claimcommit; docs/dra.md "What Horus counts").
OVERTAKE_AVOID_SECONDS: Final = 300.0
DRA_TAINT_UNHEALTHY: Final = f"{DRA_DRIVER_NAME}/unhealthy"  # NoSchedule on an unhealthy GPU
# The GPU identity registry (horus.node.identities): a ConfigMap in the release namespace,
# key = GPU UUID, value = the node that published it first. Only the operator writes it (adds,
# never re-assigns: admission policy horus-gpu-identities-operator-only); the policies on
# ResourceSlices and the node inventory read it as their param, and Horus' view ignores a GPU
# a node publishes that is registered to another node.
GPU_IDENTITIES_CONFIGMAP: Final = "horus-gpu-identities"
GPU_IDENTITIES_SYNC_SECONDS: Final = 10.0  # how often the operator records new GPUs
# on a Node: it publishes a GPU UUID registered to another node (ignored on this node)
EVENT_REASON_GPU_IDENTITY_CONFLICT: Final = "HorusGpuIdentityConflict"
RESOURCE_API_GROUP: Final = "resource.k8s.io"
RESOURCE_API_VERSION: Final = "v1"
#: what the plugin lists in PluginInfo.supported_versions (k8s.io/kubelet dra/v1 DRAPluginService)
DRA_PLUGIN_SERVICE: Final = "v1.DRAPlugin"
DRA_PLUGIN_TYPE: Final = "DRAPlugin"  # PluginInfo.type (pluginregistration/v1)
DEFAULT_KUBELET_PLUGINS_DIR: Final = "/var/lib/kubelet/plugins"
DEFAULT_KUBELET_REGISTRY_DIR: Final = "/var/lib/kubelet/plugins_registry"
DEFAULT_CDI_SPEC_DIR: Final = "/var/run/cdi"
#: CDI kind of the specs the DRA driver writes (one spec file per prepared claim)
DRA_CDI_KIND: Final = "horus.io/gpu"
# Set by the DRA driver beside the HORUS_* the device plugin sets: the claim whose share it is.
ENV_CLAIM_NAMESPACE: Final = "HORUS_CLAIM_NAMESPACE"
ENV_CLAIM_NAME: Final = "HORUS_CLAIM_NAME"
ENV_CLAIM_UID: Final = "HORUS_CLAIM_UID"
ENV_SHARE_ID: Final = "HORUS_SHARE_ID"  # the allocation result's shareID
EVENT_COMPONENT_DRA_DRIVER: Final = "horus-dra-driver"

# --- Which path carries a share to the GPU -----------------------------------------------------
# Setting ``placement_path`` of the operator, the extender and the agent (one chart value,
# gpuSharing.path, sets all three): ``dra`` — one ResourceClaim per share, allocated by the
# kube-scheduler, prepared by the DRA driver; ``deviceplugin`` — extended resources
# (horus.io/gpu-core, horus.io/gpu-memory) and the device plugin's Allocate.
PLACEMENT_PATH_DRA: Final = "dra"
PLACEMENT_PATH_DEVICE_PLUGIN: Final = "deviceplugin"
PLACEMENT_PATHS: Final = (PLACEMENT_PATH_DRA, PLACEMENT_PATH_DEVICE_PLUGIN)
#: The settings' field type (flags list the choices; anything else is a ConfigError).
PlacementPath = Literal["dra", "deviceplugin"]

# --- DLJob spec and status values (the CRD in manifests/crds and horus.api.dljob agree) -------
DLJOB_PHASE_PENDING: Final = "Pending"  # accepted, not yet validated/predicted
DLJOB_PHASE_QUEUED: Final = "Queued"  # waiting for capacity; status.reason says why
DLJOB_PHASE_SCHEDULED: Final = "Scheduled"  # every replica has a GPU and a bound pod
DLJOB_PHASE_RUNNING: Final = "Running"
DLJOB_PHASE_SUCCEEDED: Final = "Succeeded"
DLJOB_PHASE_FAILED: Final = "Failed"
DLJOB_PHASES: Final = (
    DLJOB_PHASE_PENDING,
    DLJOB_PHASE_QUEUED,
    DLJOB_PHASE_SCHEDULED,
    DLJOB_PHASE_RUNNING,
    DLJOB_PHASE_SUCCEEDED,
    DLJOB_PHASE_FAILED,
)
GPU_MODE_AUTO: Final = "auto"  # share sized from the prediction
GPU_MODE_EXPLICIT: Final = "explicit"  # share given as corePercent + memoryMiB
GPU_MODES: Final = (GPU_MODE_AUTO, GPU_MODE_EXPLICIT)
# Largest GPU memory any request may name (1 TiB): the apiserver rejects more outright; the
# operator then refuses a request larger than every node's GPU with a reason.
MAX_GPU_MEMORY_MIB: Final = 1_048_576
MAX_DLJOB_REPLICAS: Final = 1024
MAX_GPUS_PER_REPLICA: Final = 16
DLJOB_MAX_NAME_LENGTH: Final = 63  # the name is a label value (horus.io/dljob) on its pods
DEFAULT_QUEUE: Final = "default"
PROFILE_CONFIGMAP_DEFAULT_KEY: Final = "profile.yaml"  # `horus profile` output (YAML or JSON)
MAX_PROFILE_FEATURES: Final = 256
#: Measured pair speeds one DLJob's status.observed may carry, and the lowest speed reported.
MAX_OBSERVED_PAIRS: Final = 16
MIN_OBSERVED_PAIR_SPEED: Final = 0.05
#: Where a measured pair speed came from (status.observed.pairs[].source): the job's
#: own progress (steps or samples per second) or NVML utilisation in the pair over alone.
PAIR_SOURCE_PROGRESS: Final = "progress"
PAIR_SOURCE_UTILISATION: Final = "utilisation"
OBSERVED_PAIR_SOURCES: Final = (PAIR_SOURCE_PROGRESS, PAIR_SOURCE_UTILISATION)
#: The typical error of a pair speed read from utilisation, below which the agent never
#: reports one: the proxy's mean absolute error on Lucid's 1,388 measured pairs when the pair's
#: utilisation is split in proportion to u·s (benchmarks/pair_signal.py, docs/agent.md). Its
#: sampling error alone says nothing of that bias. The agent's own reading on a real GPU (H200,
#: time-slicing, 8 readings, benchmarks/results/gpu-pair-signal.json) was off by 0.147 on
#: average once clipped to ≤ 1 as published (0.418 unclipped): the larger, better-sampled
#: figure stays (not a tuning constant).
UTILISATION_PAIR_ERROR: Final = 0.192
#: spec.migration.policy: whether Horus may move or preempt a running job.
MIGRATION_NEVER: Final = "Never"
MIGRATION_ON_CHECKPOINT: Final = "OnCheckpoint"
MIGRATION_POLICIES: Final = (MIGRATION_NEVER, MIGRATION_ON_CHECKPOINT)
#: The environment variable a movable job's containers find their checkpoint path in.
ENV_CHECKPOINT_PATH: Final = "HORUS_CHECKPOINT_PATH"
#: DLJob status field: the operator's signature over the job's uid, phase and placements.
STATUS_PLACEMENT_SIGNATURE: Final = "placementSignature"
#: Raised on every signed record write; pods carry the epoch they were bound in (rollback).
STATUS_PLACEMENT_EPOCH: Final = "placementEpoch"
PROFILE_SCHEMA_VERSION: Final = 1  # the graph-profile schemaVersion this Horus reads
GRAPH_PROFILE_KIND: Final = "GraphProfile"  # kind of the document `horus profile` writes

# --- Node sharing agent (horus.agent) ----------------------------------------------------------
# TEST/DEMO ONLY: on a pod served by the *simulated* GPU backend, the GPU memory (MiB) that
# backend reports for the pod, overriding the prediction. It lets tests and demos make a
# simulated pod exceed its memory share; the NVML backend (real GPUs) ignores it.
ANNOTATION_SIMULATED_MEMORY: Final = f"{API_GROUP}/simulated-memory-mib"
NODE_NAME_ENV: Final = "NODE_NAME"  # downward-API node name of the agent's DaemonSet pod
METRIC_AGENT_BACKEND_UP: Final = "horus_agent_gpu_backend_up"  # 1 when the GPU backend works
METRIC_AGENT_CYCLE_DURATION: Final = "horus_agent_cycle_duration_seconds"
METRIC_MPS_RESTARTS: Final = "horus_mps_daemon_restarts"  # client adds _total
METRIC_LABEL_NAMESPACE: Final = "namespace"
METRIC_LABEL_POD: Final = "pod"
METRIC_LABEL_NODE: Final = "node"
METRIC_LABEL_GPU: Final = "gpu"  # the GPU's index on its node
METRIC_LABEL_GPU_UUID: Final = "uuid"
METRIC_LABEL_GPU_MODEL: Final = "model"
METRIC_LABEL_BACKEND: Final = "backend"  # "nvml" or "simulated": simulated data is always labelled
BACKEND_NVML: Final = "nvml"
BACKEND_SIMULATED: Final = "simulated"
EVENT_REASON_GPU_MEMORY_OVER_SHARE: Final = "GPUMemoryOverShare"  # watchdog mode report
EVENT_REASON_GPU_MEMORY_EVICTED: Final = "GPUMemoryEvicted"  # watchdog mode evict
# dra path: a pod joined a ResourceClaim prepared for another pod (agent/claims.py)
EVENT_REASON_SHARED_CLAIM: Final = "HorusSharedClaim"
EVENT_COMPONENT_AGENT: Final = "horus-agent"
# MPS: where the control daemon's pipes live (the device plugin hands the same path to pods)
MPS_PIPE_DIRECTORY_DEFAULT: Final = "/tmp/nvidia-mps"
# The NVIDIA container toolkit's volume-mount device list: a GPU is granted by a mount at
# <root>/<uuid> (of /dev/null) and NVIDIA_VISIBLE_DEVICES=<root> (deviceplugin gpu_access).
NVIDIA_DEVICE_MOUNT_ROOT: Final = "/var/run/nvidia-container-devices"
GPU_ACCESS_MODES: Final = ("envvar", "volume-mounts", "cdi")
MPS_LOG_DIRECTORY_DEFAULT: Final = "/var/log/nvidia-mps"

# --- Kueue: Horus as an AdmissionCheck controller (horus.operator.kueue) -------------------------
# Kueue's API the check reads and answers (kueue.x-k8s.io v1beta2, the storage version of the
# Kueue release the dev cluster builds: tools/controlplane/workloads).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_WORKLOADS: Final = "workloads"
KUEUE_ADMISSION_CHECKS: Final = "admissionchecks"
# The AdmissionCheck spec.controllerName Horus answers for; a ClusterQueue naming a check of this
# controller gets its workloads' GPUs chosen by Horus, as a gang.
KUEUE_ADMISSION_CHECK_CONTROLLER: Final = f"{API_GROUP}/gpu-placement"
# Kueue's scheduling gate on a pod of its pod integrations (Deployments, StatefulSets, plain
# pods) until its Workload is admitted: such a pod waits for Kueue, not for Horus.
KUEUE_ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
# Kueue's label on a started job's pods naming their pod set (pkg/constants PodSetLabel).
KUEUE_PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
# Kueue's labels that put a pod under its pod integration (a Deployment's, a StatefulSet's, a
# plain pod's): Kueue builds the Workload from the pod itself.
KUEUE_QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
# ... and Kueue's annotation on the pod template of a StatefulSet or Deployment it manages (its
# pod webhook adds the labels above to such a pod only after Horus' admission policy ran).
KUEUE_SUSPENDING_PARENT_ANNOTATION: Final = "kueue.x-k8s.io/pod-suspending-parent"
# Such a pod's claim entry names this ResourceClaimTemplate of its namespace (the admission
# policy), not a claim: Kueue refuses a pod that names a claim and counts a template. It asks
# for one device of KUEUE_DEVICE_CLASS, which selects no device and which Kueue maps to the
# quota resource KUEUE_SHARES_RESOURCE (one per pod); the claim the resourceclaim controller
# makes from it is a placeholder the operator replaces, in the pod's status, with the pod's
# pinned claim, and then deletes.
KUEUE_CLAIM_TEMPLATE: Final = "horus-gpu-kueue"
KUEUE_DEVICE_CLASS: Final = "kueue.gpu.horus.io"
KUEUE_SHARES_RESOURCE: Final = f"{API_GROUP}/gpu-shares"
# The Workload a pod's GPU slots belong to: "<workload name>/<workload UID>", put on each pod set
# by the check's podSetUpdates. Only a pointer: the slots themselves are read from the
# Workload's status, which tenants cannot write.
ANNOTATION_KUEUE_WORKLOAD: Final = f"{API_GROUP}/kueue-workload"
# The GPU slots Horus chose for one pod set (JSON list: index, node, GPU index and UUID, core
# percent, memory MiB), in the check's podSetUpdates; pods carry a copy, Horus reads the status.
ANNOTATION_GANG_SLOTS: Final = f"{API_GROUP}/gpu-slots"
# On a Horus-made claim of such a pod: the slot it fills, "<workload UID>/<pod set>/<index>".
ANNOTATION_GANG_SLOT: Final = f"{API_GROUP}/gang-slot"
# A pod template's profile kept in a ConfigMap of its namespace: "<name>" (key
# PROFILE_CONFIGMAP_DEFAULT_KEY) or "<name>/<key>"; an inline horus.io/graph-profile wins.
ANNOTATION_GRAPH_PROFILE_CONFIGMAP: Final = f"{API_GROUP}/graph-profile-configmap"
# A pod set with Horus resources and no profile: Horus cannot predict how it shares, so each of
# its pods gets a whole GPU, under this model name (its kind is "unprofiled@1").
UNPROFILED_MODEL: Final = "unprofiled"
# How long Kueue waits before asking again after a Retry for lack of room (seconds).
KUEUE_RETRY_SECONDS: Final = 15
# The longest check message Kueue's CRD accepts (status.admissionChecks[].message maxLength).
KUEUE_MESSAGE_MAX: Final = 32768

# --- Gangs of plain pods without Kueue (horus.operator.plain_pod_gangs) ---------------------------
# Pods of one gang carry the same LABEL_GANG_NAME (on their template: a JobSet's or an indexed
# Job's) and ANNOTATION_GANG_SIZE, the number of pods that must all get a GPU before any does,
# as Kueue's plain pod groups (kueue.x-k8s.io/pod-group-name, pod-group-total-count).
LABEL_GANG_NAME: Final = f"{API_GROUP}/gang-name"
ANNOTATION_GANG_SIZE: Final = f"{API_GROUP}/gang-size"
GANG_SIZE_MAX: Final = 1024

# --- Agent: per-workload measurements ---
# A Horus-placed pod's measured speed beside one neighbour job kind (1 = as fast as alone) and
# that reading's typical absolute error, for pods of any owner (horus.agent.exporter).
METRIC_POD_PAIR_SPEED: Final = "horus_pod_pair_speed_ratio"
METRIC_POD_PAIR_SPEED_ERROR: Final = "horus_pod_pair_speed_error_ratio"
# The workload a pod belongs to (horus.agent.workload): a display label only, since tenants
# write the fields it comes from; nothing decides on it.
METRIC_LABEL_WORKLOAD: Final = "workload"
METRIC_LABEL_NEIGHBOUR: Final = "neighbour"  # the neighbour's job kind, "<model>@<batch>"
METRIC_LABEL_PAIR_SOURCE: Final = "source"  # PAIR_SOURCE_PROGRESS or PAIR_SOURCE_UTILISATION
