"""Prometheus metrics of the operator (names from :mod:`horus.common.constants`).

Why these: HAMi's users complain that pods pend "with no reason" and that per-pod GPU use is
invisible. So the queue is broken down *by reason*, every decision and failure is counted by
reason, and the predicted summed utilisation of every GPU is exported — what the scheduler
believed when it packed jobs together, to compare with what the node agent measures.

A private :class:`CollectorRegistry` per operator keeps tests (several operators in one
process) from colliding on the global registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from horus.common import constants as c
from horus.scheduler import ClusterState, GpuView

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class OperatorMetrics:
    """The operator's metric families, in their own registry."""

    def __init__(
        self, registry: CollectorRegistry | None = None, gpus: c.GpuMetrics = c.GPU_METRICS_ALL
    ) -> None:
        self.registry = registry or CollectorRegistry()
        #: Which GPUs get a ``horus_gpu_predicted_utilization_ratio`` series (setting
        #: ``gpu_metrics``): every GPU of the live state, only those carrying a predicted
        #: share (an idle GPU has no series rather than 0), or none.
        self.gpus: c.GpuMetrics = gpus
        r = self.registry
        self.queue_length = Gauge(
            c.METRIC_QUEUE_LENGTH,
            "DLJobs waiting for GPUs, by the reason of their last refusal",
            ["reason"],
            registry=r,
        )
        self.decisions = Counter(
            c.METRIC_SCHEDULING_DECISIONS,
            "Scheduling decisions taken, by outcome (placed, or the refusal reason)",
            ["outcome"],
            registry=r,
        )
        self.migrations = Counter(
            c.METRIC_MIGRATIONS,
            "Running jobs moved to other GPUs or preempted, by reason",
            ["reason"],
            registry=r,
        )
        self.failures = Counter(
            c.METRIC_SCHEDULING_FAILURES,
            "DLJobs that failed (invalid spec, never fits, replica failed, API errors), by reason",
            ["reason"],
            registry=r,
        )
        self.latency = Histogram(
            c.METRIC_DECISION_LATENCY,
            "Time one scheduling pass of the placement core takes over the whole queue",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_latency = Histogram(
            c.METRIC_COMMIT_LATENCY,
            "Time from a placement decision to every replica pod bound",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.phases = Gauge(c.METRIC_DLJOB_PHASE, "DLJobs by phase", ["phase"], registry=r)
        self.gpu_predicted_util = Gauge(
            c.METRIC_GPU_PREDICTED_UTIL_SUM,
            "Summed predicted mean utilisation of the jobs on a GPU (1.0 = one GPU's compute)",
            ["node", "gpu", "uuid"],
            registry=r,
        )
        self.live_state_builds = Counter(
            c.METRIC_LIVE_STATE_BUILDS,
            "Passes by how their live state was had: kept (only what changed counted again) "
            "or full, with why",
            ["how"],
            registry=r,
        )
        self.heap_release = Histogram(
            c.METRIC_HEAP_RELEASE,
            "Time one hand-back of freed heap memory to the system took (malloc_trim)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            c.METRIC_OPERATOR_LEADER,
            "1 while this operator replica holds the lease and writes, else 0",
            registry=r,
        )
        self.signing_key = Gauge(
            c.METRIC_SIGNING_KEY_AVAILABLE,
            "1 while the operator can sign (its private key is readable and its public key "
            "published); 0: placement, binding, moves and resets are paused, nothing is deleted",
            registry=r,
        )
        self.signing_key.set(1)
        self.predictor_info = Gauge(
            c.METRIC_PREDICTOR_INFO,
            "1 for the predictor model version placing new jobs (changes when the artifact "
            "file is reloaded)",
            ["version"],
            registry=r,
        )
        self.predictor_reloads = Counter(
            c.METRIC_PREDICTOR_RELOADS,
            "Changes of the predictor artifact file seen, by result (reloaded, failed)",
            ["result"],
            registry=r,
        )
        self._gpu_values: dict[tuple[str, str, str], float] = {}
        self._queue_reasons: set[str] = set()

    def set_predictor(self, version: str) -> None:
        """Mark ``version`` as the model in use (the old version's series drops to absent)."""
        self.predictor_info.clear()
        self.predictor_info.labels(version=version).set(1)

    def set_queue(self, by_reason: Mapping[str, int]) -> None:
        for reason in self._queue_reasons - set(by_reason):
            self.queue_length.labels(reason=reason).set(0)
        for reason, n in by_reason.items():
            self.queue_length.labels(reason=reason).set(n)
        self._queue_reasons |= set(by_reason)

    def set_phases(self, counts: Mapping[str, int]) -> None:
        for phase in c.DLJOB_PHASES:
            self.phases.labels(phase=phase).set(counts.get(phase, 0))

    def set_gpus(self, views: Iterable[GpuView]) -> None:
        self.set_gpu_utils((v.node, v.index, v.uuid, v.util_sum) for v in views)

    def set_state_gpus(self, state: ClusterState) -> None:
        """:meth:`set_gpus` from the state's arrays (no view object per GPU)."""
        if self.gpus == c.GPU_METRICS_OFF:
            self.set_gpu_utils(())
            return
        names = [state.node_names[int(n)] for n in state.node_of]
        self.set_gpu_utils(
            zip(names, state.gpu_index, state.gpu_uuid, state.util_sum.tolist(), strict=True)
        )

    def set_gpu_utils(self, rows: Iterable[tuple[str, int, str, float]]) -> None:
        """One gauge per GPU (node, index, UUID, summed predicted utilisation %) of those
        :attr:`gpus` asks for; only the GPUs whose value changed since the last pass are set
        (a pass sees every GPU, and at 40,000 GPUs setting each costs seconds), and those
        no longer asked for (gone, or idle under ``busy``) are removed."""
        values: dict[tuple[str, str, str], float] = {}
        busy_only = self.gpus == c.GPU_METRICS_BUSY
        off = self.gpus == c.GPU_METRICS_OFF
        for node, index, uuid, util in rows:
            if off or (busy_only and util <= 0):
                continue
            key = (node, str(index), uuid)
            value = values[key] = round(util / 100.0, 6)
            if self._gpu_values.get(key) != value:
                self.gpu_predicted_util.labels(*key).set(value)
        for key in self._gpu_values.keys() - values.keys():
            self.gpu_predicted_util.remove(*key)
        self._gpu_values = values

    def clear_leader_state(self) -> None:
        """Drop the queue, phase and GPU gauges: only the leader's pass sets them, so a
        replica that lost the Lease must not keep reporting its last view (a sum over
        replicas would count every job twice after a fail-over)."""
        self.queue_length.clear()
        self.phases.clear()
        self.gpu_predicted_util.clear()
        self._queue_reasons.clear()
        self._gpu_values.clear()

    def watch_view(self, counts: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        """Export the watch-fed view's own request counters (:class:`ViewCollector`)."""
        self.registry.register(ViewCollector(counts))

    def serve(self, port: int, host: str) -> None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread (port 0: do nothing)."""
        if port:
            start_http_server(port, addr=host, registry=self.registry)


class ViewCollector(Collector):
    """The view's LISTs, WATCHes, broken watches and events, read at scrape time.

    Why: "no full LIST in the steady state" is the view's whole point, and the apiserver's
    own ``apiserver_request_total`` cannot tell whose LIST it served (it has no client
    label; kube-scheduler, the controller-manager and kwok list too). These counters are the
    operator's own, so a relist storm (a watch window too short for a busy cluster, a
    proxy cutting watches) shows on its dashboard, and the benchmarks count its LISTs
    exactly. ``counts`` is :meth:`horus.operator.view.ClusterView.counts`.
    """

    def __init__(self, counts: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        self._counts = counts

    def describe(self) -> Iterable[Metric]:
        return []  # families are made at collect time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            c.METRIC_VIEW_REQUESTS,
            "LIST and WATCH requests the operator's watch-fed view made, by resource",
            labels=["resource", "verb"],
        )
        breaks = CounterMetricFamily(
            c.METRIC_VIEW_WATCH_BREAKS,
            "Watches of the view that ended with 410 Gone (then relisted) or an error",
            labels=["resource", "reason"],
        )
        events = CounterMetricFamily(
            c.METRIC_VIEW_EVENTS, "Watch events the view applied, by resource", labels=["resource"]
        )
        for resource, n in sorted(self._counts().items()):
            requests.add_metric([resource, "list"], n.get("lists", 0))
            requests.add_metric([resource, "watch"], n.get("watches", 0))
            breaks.add_metric([resource, "expired"], n.get("expired", 0))
            breaks.add_metric([resource, "error"], n.get("errors", 0))
            events.add_metric([resource], n.get("events", 0))
        yield from (requests, breaks, events)
