"""The extender's own Prometheus metrics, served at ``/metrics`` (on the plain health port too).

Why: the extender answers kube-scheduler for every plain pod that asks for Horus GPUs, and
a pod-readiness probe (via kube-state-metrics) says only whether it is up. These say what it
does: requests per verb and outcome, how long they take, and how binds end.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from horus.common import constants as c

__all__ = ["ExtenderMetrics"]

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ExtenderMetrics:
    """Counters and a latency histogram in a registry of their own."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            c.METRIC_EXTENDER_REQUESTS,
            "Extender requests, by verb (filter, prioritize, bind) and outcome",
            ["verb", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            c.METRIC_EXTENDER_LATENCY,
            "Time to answer one extender request, by verb",
            ["verb"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.tls_refused = Counter(
            c.METRIC_EXTENDER_TLS_REFUSED,
            "Connections refused at the TLS handshake (no client certificate, one from another "
            "CA, plain HTTP); nothing they sent was read",
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
