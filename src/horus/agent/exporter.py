"""The agent's Prometheus exporter: per-GPU and per-pod series with namespace/pod/node/gpu labels.

Per-pod GPU use missing from metrics is a top complaint about GPU-sharing systems, and
prediction error should be one PromQL expression away
(``horus_pod_observed_gpu_utilization_ratio - horus_pod_predicted_gpu_utilization_ratio``).
The collector renders the agent's latest :class:`Snapshot` atomically at scrape time (no
half-updated cycle is ever exposed, and series of pods that left vanish with the next
snapshot). Every series carries ``backend`` (``nvml`` or ``simulated``), every per-pod
series ``workload`` (:func:`horus.agent.workload.workload_identity`, a display label).

Measured pair speeds are exported for pods of any owner, not only DLJob replicas (whose
speeds also go to ``status.observed.pairs``): ``horus_pod_pair_speed_ratio`` is a pod's
speed beside one neighbour job kind (1 = as fast as alone) with ``neighbour`` (that kind),
``model`` (the GPU model) and ``source`` (``progress`` or ``utilisation``), and
``horus_pod_pair_speed_error_ratio`` the reading's typical absolute error. A pod has a series
per neighbour kind it has a reading beside, so their number stays bounded by the kinds it met.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from horus.agent.backend import NodeSample
from horus.agent.pods import PodInfo
from horus.agent.progress import PairReading
from horus.common import constants as c
from horus.common.constants import MIB

GPU_LABELS = [
    c.METRIC_LABEL_NODE,
    c.METRIC_LABEL_GPU,
    c.METRIC_LABEL_GPU_UUID,
    c.METRIC_LABEL_GPU_MODEL,
    c.METRIC_LABEL_BACKEND,
]
POD_LABELS = [
    c.METRIC_LABEL_NAMESPACE,
    c.METRIC_LABEL_POD,
    c.METRIC_LABEL_NODE,
    c.METRIC_LABEL_GPU,
    c.METRIC_LABEL_BACKEND,
    c.METRIC_LABEL_WORKLOAD,
]
PAIR_LABELS = [
    *POD_LABELS,
    c.METRIC_LABEL_NEIGHBOUR,
    c.METRIC_LABEL_GPU_MODEL,
    c.METRIC_LABEL_PAIR_SOURCE,
]
EVICTION_LABELS = [
    c.METRIC_LABEL_NODE,
    c.METRIC_LABEL_NAMESPACE,
    c.METRIC_LABEL_POD,
    c.METRIC_LABEL_GPU,
]


@dataclass
class Snapshot:
    """Everything one agent cycle measured."""

    samples: list[NodeSample] = field(default_factory=list)
    pods: dict[str, PodInfo] = field(default_factory=dict)  # by UID
    evictions: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    backend_up: dict[tuple[str, str], bool] = field(default_factory=dict)  # (node, backend)
    mps_restarts: int | None = None
    cycle_seconds: float = 0.0
    #: by UID: the pod's measured speed beside each (neighbour kind, GPU model)
    pairs: dict[str, dict[tuple[str, str], PairReading]] = field(default_factory=dict)


class AgentCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = Snapshot()

    def update(self, snap: Snapshot) -> None:
        with self._lock:
            self._snap = snap

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._snap
        yield from _gpu_and_pod_metrics(snap)
        yield from _pair_metrics(snap)
        yield from _agent_metrics(snap)


def _pod_gauge(name: str, help_text: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=POD_LABELS)


def _gpu_and_pod_metrics(snap: Snapshot) -> list[Metric]:
    """Per GPU: utilisation and memory; per pod: memory, share, prediction, observation."""
    util = GaugeMetricFamily(
        c.METRIC_GPU_UTILIZATION, "GPU compute utilisation (0..1)", labels=GPU_LABELS
    )
    used = GaugeMetricFamily(
        c.METRIC_GPU_MEMORY_USED, "GPU memory in use, bytes", labels=GPU_LABELS
    )
    total = GaugeMetricFamily(
        c.METRIC_GPU_MEMORY_TOTAL, "GPU memory size, bytes", labels=GPU_LABELS
    )
    p_used = _pod_gauge(c.METRIC_POD_GPU_MEMORY_USED, "GPU memory the pod uses, bytes")
    p_share = _pod_gauge(
        c.METRIC_POD_GPU_CORE_SHARE, "the pod's assigned share of its GPU's compute (0..1)"
    )
    p_limit = _pod_gauge(
        c.METRIC_POD_GPU_MEMORY_LIMIT, "the pod's assigned GPU memory share, bytes"
    )
    p_pred = _pod_gauge(
        c.METRIC_POD_PREDICTED_UTIL,
        "predicted GPU utilisation of the pod alone (0..1, horus.io/predicted)",
    )
    p_obs = _pod_gauge(
        c.METRIC_POD_OBSERVED_UTIL, "measured GPU utilisation of the pod (0..1 of the whole GPU)"
    )
    for s in snap.samples:
        for g in s.gpus:
            labels = [s.node, str(g.index), g.uuid, g.model, s.backend]
            util.add_metric(labels, g.utilization)
            used.add_metric(labels, g.memory_used_bytes)
            total.add_metric(labels, g.memory_total_bytes)
        for uid, ps in s.pods.items():
            pod = snap.pods.get(uid)
            if pod is None:
                continue
            labels = [
                pod.namespace,
                pod.name,
                s.node,
                str(pod.assignment.gpu_index),
                s.backend,
                pod.workload,
            ]
            p_used.add_metric(labels, ps.memory_used_bytes)
            p_share.add_metric(labels, pod.core_share)
            p_limit.add_metric(labels, float(pod.assignment.memory_mib * MIB))
            if pod.predicted is not None:
                p_pred.add_metric(labels, pod.predicted.util_mean / 100.0)
            if ps.utilization is not None:
                p_obs.add_metric(labels, ps.utilization)
    return [util, used, total, p_used, p_share, p_limit, p_pred, p_obs]


def _pair_metrics(snap: Snapshot) -> list[Metric]:
    """Per pod of any owner, its measured speed beside each neighbour kind, and its error."""
    speed = GaugeMetricFamily(
        c.METRIC_POD_PAIR_SPEED,
        "measured speed of the pod beside a neighbour job kind, 1 = as fast as alone "
        "(from its progress, else its utilisation)",
        labels=PAIR_LABELS,
    )
    error = GaugeMetricFamily(
        c.METRIC_POD_PAIR_SPEED_ERROR,
        "typical absolute error of the pod's measured pair speed",
        labels=PAIR_LABELS,
    )
    for s in snap.samples:
        for uid in s.pods:
            pod = snap.pods.get(uid)
            readings = snap.pairs.get(uid)
            if pod is None or not readings:
                continue
            base = [
                pod.namespace,
                pod.name,
                s.node,
                str(pod.assignment.gpu_index),
                s.backend,
                pod.workload,
            ]
            for (neighbour, model), r in sorted(readings.items()):
                labels = [*base, neighbour, model, r.source]
                speed.add_metric(labels, r.speed)
                error.add_metric(labels, r.error)
    return [speed, error]


def _agent_metrics(snap: Snapshot) -> Iterator[Metric]:
    """The agent's own: evictions, backend up, MPS daemon restarts, cycle duration."""
    ev = CounterMetricFamily(
        c.METRIC_ENFORCEMENT_EVICTIONS,
        "pods the memory watchdog evicted for exceeding their GPU memory share",
        labels=EVICTION_LABELS,
    )
    for key, n in snap.evictions.items():
        ev.add_metric(list(key), float(n))
    yield ev
    up = GaugeMetricFamily(
        c.METRIC_AGENT_BACKEND_UP,
        "1 when the node's GPU backend works, 0 when it is unavailable (see the agent log)",
        labels=[c.METRIC_LABEL_NODE, c.METRIC_LABEL_BACKEND],
    )
    for (node, backend), ok in snap.backend_up.items():
        up.add_metric([node, backend], 1.0 if ok else 0.0)
    yield up
    if snap.mps_restarts is not None:
        restarts = CounterMetricFamily(
            c.METRIC_MPS_RESTARTS, "times the agent restarted a dead MPS control daemon"
        )
        restarts.add_metric([], float(snap.mps_restarts))
        yield restarts
    cycle = GaugeMetricFamily(
        c.METRIC_AGENT_CYCLE_DURATION, "duration of the agent's last sampling cycle"
    )
    cycle.add_metric([], snap.cycle_seconds)
    yield cycle


def make_registry() -> tuple[CollectorRegistry, AgentCollector]:
    registry = CollectorRegistry()
    collector = AgentCollector()
    registry.register(collector)
    return registry, collector
