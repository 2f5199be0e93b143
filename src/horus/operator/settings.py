"""Settings of ``horus operator run`` (section ``operator``): CLI > ``HORUS_OPERATOR_*`` > file.

One frozen dataclass, loaded with :func:`horus.common.settings.load_settings`, so every knob
has a flag, an environment variable and a config-file key with one precedence (as the NVIDIA
device plugin does). Each field is documented where it is declared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from horus.common.constants import (
    GPU_METRICS_ALL,
    HORUS_NAMESPACE,
    PLACEMENT_PATH_DEVICE_PLUGIN,
    GpuMetrics,
    PlacementPath,
)
from horus.common.settings import check_range, check_seconds
from horus.scheduler import POLICY_NAMES

SECTION = "operator"


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator process needs to know."""

    #: The operator's own namespace: where its Lease lives (DLJobs are watched cluster-wide).
    namespace: str = HORUS_NAMESPACE
    #: Name of the coordination.k8s.io/v1 Lease that elects the one replica that writes.
    lease_name: str = "horus-operator"
    #: Seconds a leader's lease stays valid without renewal: the hand-over time after a crash.
    lease_duration: float = 15.0
    #: Placement policy of the scheduling core (``horus``, ``exclusive``, ``binpack``, …).
    policy: str = "horus"
    #: Port of the Prometheus ``/metrics`` endpoint (0 disables it).
    metrics_port: int = 8080
    #: Address the metrics endpoint listens on.
    metrics_host: str = "0.0.0.0"
    #: Seconds between full reconcile passes even when no watch event arrives.
    resync_period: float = 30.0
    #: kubeconfig file; empty means in-cluster config, else ``$KUBECONFIG``/``~/.kube/config``.
    kubeconfig: str = ""
    #: This replica's name in the Lease; empty means ``<hostname>-<pid>``.
    identity: str = ""
    #: Commit chains in flight: jobs whose placement is committed concurrently, each in its
    #: own order (status write with a resourceVersion precondition → its pods → their
    #: Bindings); a job's replicas go out concurrently after its status write. The
    #: decision itself is made once per pass, before any commit. 8–32 suits one apiserver.
    workers: int = 16
    #: File holding the Ed25519 private key (PEM) that signs assignments and records; empty:
    #: ``$HORUS_ASSIGNMENT_KEY_FILE`` or the Secret ``horus-system/horus-signing-key``
    #: (a key pair is generated only on the first install, when no public key is published).
    assignment_key_file: str = ""
    #: Seconds between reads of the signing key and the published public keys (a rotation is
    #: picked up without a restart; while no key can sign, every 5 s at most).
    key_refresh_seconds: float = 30.0
    #: Seconds a newly published public key waits before its private key signs, so every
    #: node's mounted ConfigMap has it (the kubelet refreshes them within about a minute).
    key_publish_delay: float = 60.0
    #: Seconds to wait after a watch event before a pass, so a burst becomes one pass.
    debounce: float = 0.05
    #: Predictor artifact to predict and place with (``horus predictor train -o``, JSON or
    #: ``.json.gz``), e.g. one retrained on the agents' observed rows; unset: the shipped one.
    #: Loaded at start, before anything talks to the cluster (a missing or broken file stops
    #: the process with a message naming it), then checked every ``predictor_reload_seconds``.
    predictor: Path | None = None
    #: Seconds between checks of the ``predictor`` file: when it changes (a ConfigMap update)
    #: new decisions use the new model; one that does not load is logged and the running
    #: model kept. 0: read once at start.
    predictor_reload_seconds: float = 30.0
    #: Seconds a placed job may take to get every replica pod created and bound, and a
    #: replica may stay stuck before starting (image pull errors, bad container config),
    #: before its GPU shares are given back: requeued when it has no pod, failed otherwise.
    progress_deadline: float = 300.0
    #: Seconds between two rounds of run-time correction (moves of jobs whose measured
    #: neighbours slow them, preemptions for waiting higher-priority jobs); 0 turns it off.
    correction_period: float = 30.0
    #: Seconds a moved or preempted job needs to run again (pod start, process and framework
    #: start, loading its checkpoint), added to its checkpoint grace period as its move cost.
    restart_seconds: float = 60.0
    #: Which path carries a placement to the GPU: ``dra`` — one ResourceClaim per replica,
    #: allocated by the kube-scheduler (the only allocator) and prepared by the DRA driver;
    #: ``deviceplugin`` — the operator binds pods that ask for horus.io extended resources.
    #: The chart sets it from ``gpuSharing.path`` (docs/dra.md "Which path").
    placement_path: PlacementPath = PLACEMENT_PATH_DEVICE_PLUGIN
    #: Also post the Normal Events of a job that goes well (``Scheduled``, ``Running``,
    #: ``Succeeded``). Off: the status conditions carry the same sentences and times
    #: (``kubectl describe dlj``), and two Events per job would be a large share of the
    #: operator's apiserver writes. Warnings — refusals when their reason changes, failures,
    #: errors — are posted either way.
    lifecycle_events: bool = False
    #: Answer Kueue's AdmissionChecks of controller ``horus.io/gpu-placement``
    #: (:mod:`horus.operator.kueue`; DRA path only). Without Kueue installed it looks for
    #: Kueue again every 30 s; without an AdmissionCheck of that controller it lists no Workloads.
    kueue_check: bool = True
    #: At most this many new DLJobs admitted, and this many jobs placed, in one pass; the
    #: rest wait, untouched, for the next pass, which starts at once. A pass keeps what it
    #: commits in memory until it ends, and a process keeps the memory its largest pass
    #: needed, so one pass that places every arrival of a large burst leaves the operator
    #: larger for good (``benchmarks/results/operator-scale-1000x3000-cap.json`` against
    #: ``operator-scale-1000x3000-before-cap.json``). Jobs are taken in the order the
    #: scheduler would take them (admission: untried jobs first, by class value then age,
    #: then those tried longest ago: :meth:`NewJobs._admission_turn`), so the cap delays
    #: placements, never reorders them.
    max_jobs_per_pass: int = 1000
    #: Which GPUs get a ``horus_gpu_predicted_utilization_ratio`` series: ``all`` (every GPU
    #: of the cluster, 0 when idle), ``busy`` (only GPUs carrying a predicted share; an idle
    #: GPU has no series) or ``off``. ``all`` is one series per GPU, so on a large cluster
    #: the scrape's size and the operator's CPU to render it grow with the GPU count; each
    #: mode's cost: ``benchmarks/results/metrics-render.json`` (``benchmarks/metrics_render.py``).
    gpu_metrics: GpuMetrics = GPU_METRICS_ALL

    def __post_init__(self) -> None:
        check_range("lease_duration", self.lease_duration, 1.0, 3600.0, unit=" seconds")
        if self.policy not in POLICY_NAMES:
            raise ValueError(
                f"policy must be one of {', '.join(POLICY_NAMES)}, got {self.policy!r}"
            )
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be 0..65535, got {self.metrics_port}")
        if self.resync_period <= 0:
            raise ValueError(f"resync_period must be > 0 seconds, got {self.resync_period}")
        if not 1 <= self.workers <= 128:
            raise ValueError(f"workers must be 1..128, got {self.workers}")
        if not self.namespace or not self.lease_name:
            raise ValueError("namespace and lease_name must not be empty")
        if self.debounce < 0:
            raise ValueError(f"debounce must be >= 0, got {self.debounce}")
        check_range("max_jobs_per_pass", self.max_jobs_per_pass, 1, 100_000)
        check_range("correction_period", self.correction_period, 0.0, 86400.0, unit=" seconds")
        check_range("restart_seconds", self.restart_seconds, 0.0, 86400.0, unit=" seconds")
        check_range("progress_deadline", self.progress_deadline, 10.0, 7 * 86400.0, unit=" seconds")
        if not self.predictor_reload_seconds >= 0:
            raise ValueError(
                "predictor_reload_seconds must be >= 0 (0: never reload), got "
                f"{self.predictor_reload_seconds}"
            )
        check_seconds("resync_period", self.resync_period)
        check_range("debounce", self.debounce, 0.0, 60.0, unit=" seconds")
        check_range("key_refresh_seconds", self.key_refresh_seconds, 0.1, 3600.0, unit=" seconds")
        check_range("key_publish_delay", self.key_publish_delay, 0.0, 3600.0, unit=" seconds")
        check_seconds("predictor_reload_seconds", self.predictor_reload_seconds, positive=False)
