"""What a simulated run produced: one record per job, the utilisation timeline, the metrics.

Apart from the engine because readers of results (the report, the benchmarks, the CLI's
table) need these and nothing of how a run is simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class JobRecord:
    """What happened to one job."""

    job_id: str
    kind: str
    num_gpus: int
    submit: float
    duration: float
    start: float = math.nan
    finish: float = math.nan
    priority: int = 0
    #: Times it was moved (``+migrate``) and evicted by a higher priority (``+preempt``).
    moves: int = 0
    preemptions: int = 0

    @property
    def jct(self) -> float:
        return self.finish - self.submit

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def mean_speed(self) -> float:
        run = self.finish - self.start
        return self.duration / run if run > 0 else 1.0


@dataclass
class SimResult:
    """Per-job records, the utilisation timeline and summary metrics of one run."""

    policy: str
    trace: str
    gpus: int
    records: list[JobRecord]
    timeline: list[tuple[float, float, float]] = field(default_factory=list)  # t, busy, util
    busy_integral: float = 0.0
    util_integral: float = 0.0
    wall_seconds: float = 0.0
    slow_threshold: float = 0.8
    util_source: str = "measured"
    rejected: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """Makespan, JCT mean/median/p95, mean queueing delay, busy fraction, summed util…"""
        recs = self.records
        jct = sorted(r.jct for r in recs)
        start = min(r.submit for r in recs)
        end = max(r.finish for r in recs)
        span = max(end - start, 1e-9)

        def pct(q: float) -> float:
            return jct[min(len(jct) - 1, int(q * len(jct)))]

        return {
            "jobs": float(len(recs)),
            "makespan_s": end - start,
            "jct_mean_s": sum(jct) / len(jct),
            "jct_median_s": pct(0.5),
            "jct_p95_s": pct(0.95),
            "queue_delay_mean_s": sum(r.wait for r in recs) / len(recs),
            "gpu_busy_fraction": self.busy_integral / (span * self.gpus),
            "summed_util_mean_pct": self.util_integral / (span * self.gpus),
            "jobs_slowed": float(sum(1 for r in recs if r.mean_speed < self.slow_threshold - 1e-9)),
            "wall_seconds": self.wall_seconds,
            "jobs_rejected": float(len(self.rejected)),
            "migrations": float(sum(r.moves for r in recs)),
            "migrations_per_job": sum(r.moves for r in recs) / len(recs),
            "migrations_max_per_job": float(max(r.moves for r in recs)),
            "preemptions": float(sum(r.preemptions for r in recs)),
        }
