"""Feedback: what pods really used goes back to the DLJob and to the predictor's training data.

Outputs, from per-pod running statistics (mean and peak of utilisation and memory):

* **DLJob ``status.observed``** — over the job's pods this agent sees: ``util`` the mean and
  ``utilPeak`` the highest utilisation (percent), ``memoryMiB`` the largest peak memory of one
  replica (what a share must hold) and ``memoryMiBMean`` the mean memory, ``sampledAt`` the time.
  Written with a JSON merge patch on the status subresource that touches only ``observed``: the
  operator owns the rest of status. (Per-pod figures are in the metrics and the training rows.)
* **Training rows** — one CSV row per finished pod (and per pod still running at agent
  shutdown) appended to ``training_rows``, in exactly the columns
  ``horus predictor train --extra-rows`` reads (:func:`horus.predictor.userdata.load_extra_rows`):
  every profile feature, ``gpu``, ``util`` (mean, percent) and ``memory_mib`` (peak), plus
  provenance columns it ignores (``backend`` says ``simulated`` for rows from simulated GPUs —
  filter those out before training a production model). Pods whose graph profile is unknown
  are not written: a row without features cannot train anything.
* **Measured pair speeds** — ``status.observed.pairs``: for each job kind a replica has shared
  a GPU with, its normalised speed there — from the job's own progress where it reports it
  (:class:`horus.agent.progress.ProgressSpeeds`), else from utilisation (:class:`PairSpeeds`)
  — with ``source``, ``samples`` and ``error`` (the reading's typical absolute error), which
  the operator gives the scheduler (``Scheduler.observe_pair``) in place of the predicted
  speed, with a margin of z × error.
* **Pair rows** — when a pod finishes (or the agent shuts down), one CSV row per neighbour kind
  it has a measured speed next to, appended to ``pair_rows`` in the columns
  ``horus predictor train --extra-pair-rows`` reads
  (:data:`horus.predictor.userdata.PAIR_ROW_COLUMNS`: ``gpu``, ``speed`` and both jobs' profile
  features as ``a_<feature>`` / ``b_<feature>``) plus provenance. ``status.observed.pairs``
  lasts only as long as its DLJob (a restarted operator re-reads it from the DLJobs still
  there); a model retrained on these rows keeps the measurement after the job is gone, and
  generalises it to kinds that have not met yet.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from horus.agent.pods import PodInfo
from horus.agent.progress import PairReading, ProgressSpeeds
from horus.common.constants import (
    MAX_OBSERVED_PAIRS,
    MIB,
    MIN_OBSERVED_PAIR_SPEED,
    PAIR_SOURCE_PROGRESS,
    PAIR_SOURCE_UTILISATION,
    UTILISATION_PAIR_ERROR,
)
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import FEATURE_NAMES
from horus.predictor.userdata import PAIR_ROW_COLUMNS, TRAINING_ROW_COLUMNS

log = logging.getLogger("horus.agent.feedback")

#: The columns :func:`_provenance` fills, first in both files.
SOURCE = ["namespace", "pod", "job", "node", "backend", "model"]
PROVENANCE = [*SOURCE, "family", "samples", "util_peak", "memory_mib_mean"]
ROW_COLUMNS = [*TRAINING_ROW_COLUMNS, *PROVENANCE]
PAIR_PROVENANCE = [*SOURCE, "other", "other_model", "samples"]
PAIR_FILE_COLUMNS = [*PAIR_ROW_COLUMNS, *PAIR_PROVENANCE]

#: A pair's speed key: (neighbour job kind, GPU model) → (speed, samples next to it).
PairKey = tuple[str, str]


@dataclass
class PodStats:
    """Running statistics of one pod's use."""

    pod: PodInfo
    gpu_model: str
    backend: str
    samples: int = 0
    util_samples: int = 0
    util_sum: float = 0.0  # percent
    util_peak: float = 0.0
    mem_sum: float = 0.0  # MiB
    mem_peak: float = 0.0
    pairs: dict[PairKey, tuple[float, int]] = field(default_factory=dict)
    """Measured pair speeds, filled in when the pod's statistics are handed out (finished)."""
    neighbours: dict[str, GraphProfile] = field(default_factory=dict)
    """The profile of each neighbour kind in ``pairs`` (for pair rows)."""

    def add(self, util_ratio: float | None, mem_bytes: float) -> None:
        self.samples += 1
        mem = mem_bytes / MIB
        self.mem_sum += mem
        self.mem_peak = max(self.mem_peak, mem)
        if util_ratio is not None:
            u = max(0.0, min(100.0, util_ratio * 100.0))
            self.util_samples += 1
            self.util_sum += u
            self.util_peak = max(self.util_peak, u)

    @property
    def util_mean(self) -> float | None:
        return self.util_sum / self.util_samples if self.util_samples else None

    @property
    def mem_mean(self) -> float:
        return self.mem_sum / self.samples if self.samples else 0.0


#: Samples needed of a pod alone and of it next to one neighbour kind before a speed is given.
MIN_PAIR_SAMPLES = 3


@dataclass
class _Mean:
    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, v: float) -> None:
        self.n += 1
        self.total += v
        self.squares += v * v

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def standard_error(self) -> float:
        if self.n < 2:
            return math.inf
        var = max(0.0, (self.squares - self.n * self.mean**2) / (self.n - 1))
        return math.sqrt(var / self.n)


class PairSpeeds:
    """A pod's normalised speed next to each job kind it has shared a GPU with.

    Estimated from utilisation, the only per-pod signal NVML gives: the pod's mean utilisation
    while its GPU holds exactly one other Horus pod, over its mean utilisation while it held the
    GPU alone, clipped to [0.05, 1]. Time-slicing or MPS hands a GPU-bound job a fraction of its
    solo throughput, and its share of the GPU's busy time falls by that fraction (the backend
    reads shares: under time-slicing NVML gives each process about the whole GPU, see
    :func:`horus.common.nvml.busy_share_scale`); a job that was not GPU-bound keeps its
    utilisation, and indeed barely slows. A pod that never ran alone gives no speed
    (its solo baseline is unknown), nor does one with fewer than ``min_samples`` of either.
    """

    def __init__(self, min_samples: int = MIN_PAIR_SAMPLES) -> None:
        self.min_samples = min_samples
        self.solo: dict[str, _Mean] = {}
        self.shared: dict[str, dict[PairKey, _Mean]] = {}  # uid → (kind, GPU) → mean
        self.profiles: dict[str, GraphProfile] = {}  # neighbour kind → its profile (pair rows)

    def know(self, kind: str, profile: GraphProfile) -> None:
        """Remember the profile behind a neighbour ``kind`` (what a pair row's B features are)."""
        self.profiles[kind] = profile

    def add(self, gpu_model: str, group: list[tuple[str, str | None, float | None]]) -> None:
        """One sample of one GPU: each Horus pod on it as (uid, the pod's own job kind or None
        when unknown, utilisation 0..1 or None). A neighbour's kind names the pair."""
        if len(group) == 1:
            uid, _, util = group[0]
            if util is not None:
                self.solo.setdefault(uid, _Mean()).add(util)
        elif len(group) == 2:
            for (uid, _, util), (_, other, _) in ((group[0], group[1]), (group[1], group[0])):
                if util is not None and other is not None:
                    per = self.shared.setdefault(uid, {})
                    per.setdefault((other, gpu_model), _Mean()).add(util)

    def speeds(self, uid: str) -> dict[PairKey, tuple[float, int]]:
        """(neighbour kind, GPU model) → (speed, samples next to it) for one pod."""
        solo = self.solo.get(uid)
        if solo is None or solo.n < self.min_samples or solo.mean <= 0:
            return {}
        out: dict[tuple[str, str], tuple[float, int]] = {}
        for key, m in self.shared.get(uid, {}).items():
            if m.n >= self.min_samples:
                out[key] = (min(1.0, max(MIN_OBSERVED_PAIR_SPEED, m.mean / solo.mean)), m.n)
        return out

    def readings(self, uid: str) -> dict[PairKey, PairReading]:
        """:meth:`speeds` with each reading's error: its sampling error, but never less than
        :data:`~horus.common.constants.UTILISATION_PAIR_ERROR`, the proxy's measured error
        against true speeds — averaging more samples does not remove a bias."""
        solo = self.solo.get(uid)
        out: dict[PairKey, PairReading] = {}
        for key, (speed, n) in self.speeds(uid).items():
            m = self.shared[uid][key]
            rel = math.hypot(
                m.standard_error / m.mean if m.mean > 0 else 1.0,
                solo.standard_error / solo.mean if solo is not None and solo.mean > 0 else 1.0,
            )
            error = min(1.0, max(UTILISATION_PAIR_ERROR, speed * rel))
            out[key] = PairReading(speed, n, error, PAIR_SOURCE_UTILISATION)
        return out

    def forget(self, present_uids: Iterable[str]) -> None:
        keep = set(present_uids)
        for d in (self.solo, self.shared):
            for uid in [u for u in d if u not in keep]:
                del d[uid]
        kinds = {kind for per in self.shared.values() for kind, _ in per}
        for kind in [k for k in self.profiles if k not in kinds]:
            del self.profiles[kind]


class Feedback:
    """Accumulates per-pod statistics and renders the outputs."""

    def __init__(self) -> None:
        self.stats: dict[str, PodStats] = {}
        self.pairs = PairSpeeds()
        self.progress = ProgressSpeeds()

    def readings(self, uid: str) -> dict[PairKey, PairReading]:
        """The pod's measured pair speeds: from its progress where it reports enough, else
        from utilisation (a job that does not report keeps the utilisation signal)."""
        out = self.pairs.readings(uid)
        out.update(self.progress.speeds(uid))
        return out

    def add(
        self, pod: PodInfo, gpu_model: str, backend: str, util_ratio: float | None, mem_bytes: float
    ) -> None:
        st = self.stats.get(pod.uid)
        if st is None:
            st = self.stats[pod.uid] = PodStats(pod, gpu_model, backend)
        st.add(util_ratio, mem_bytes)

    def finished(self, present_uids: Iterable[str]) -> list[PodStats]:
        """Remove and return the statistics of pods no longer present (with their pair speeds)."""
        keep = set(present_uids)
        gone = [
            self._with_pairs(self.stats.pop(uid)) for uid in list(self.stats) if uid not in keep
        ]
        self.pairs.forget(keep)
        self.progress.forget(keep)
        return gone

    def drain(self) -> list[PodStats]:
        out = [self._with_pairs(st) for st in self.stats.values()]
        self.stats.clear()
        return out

    def _with_pairs(self, st: PodStats) -> PodStats:
        st.pairs = {k: (r.speed, r.samples) for k, r in self.readings(st.pod.uid).items()}
        st.neighbours = {
            kind: self.pairs.profiles[kind] for kind, _ in st.pairs if kind in self.pairs.profiles
        }
        return st

    def job_observed(self) -> dict[tuple[str, str], dict[str, Any]]:
        """``status.observed`` per (namespace, job) from the pods currently tracked."""
        groups: dict[tuple[str, str], list[PodStats]] = {}
        for st in self.stats.values():
            if st.pod.job:
                groups.setdefault((st.pod.namespace, st.pod.job), []).append(st)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for key, sts in groups.items():
            means = [m for m in (s.util_mean for s in sts) if m is not None]
            obs: dict[str, Any] = {
                "memoryMiB": round(max(s.mem_peak for s in sts), 1),
                "memoryMiBMean": round(sum(s.mem_mean for s in sts) / len(sts), 1),
                "sampledAt": now,
            }
            if means:
                obs["util"] = round(min(100.0, sum(means) / len(means)), 2)
                obs["utilPeak"] = round(min(100.0, max(s.util_peak for s in sts)), 2)
            pairs: dict[PairKey, PairReading] = {}
            for st in sts:  # per neighbour: progress first, then the replica measured longest
                for k, r in self.readings(st.pod.uid).items():
                    old = pairs.get(k)
                    if old is None or _rank(r) > _rank(old):
                        pairs[k] = r
            if pairs:
                best = sorted(pairs.items(), key=lambda kv: (-kv[1].samples, kv[0]))
                obs["pairs"] = [
                    {
                        "other": other,
                        "gpuModel": gpu,
                        "speed": round(r.speed, 4),
                        "samples": r.samples,
                        "error": round(max(r.error, 1e-4), 4),
                        "source": r.source,
                    }
                    for (other, gpu), r in best[:MAX_OBSERVED_PAIRS]
                ]
            out[key] = obs
        return out


def _rank(r: PairReading) -> tuple[bool, int]:
    """Which of two readings of one pair to publish: progress over utilisation, then more
    samples."""
    return r.source == PAIR_SOURCE_PROGRESS, r.samples


def _provenance(st: PodStats, profile: GraphProfile) -> dict[str, Any]:
    """Where a row comes from (columns training ignores): the pod, its node and backend, model."""
    return {
        "namespace": st.pod.namespace,
        "pod": st.pod.name,
        "job": st.pod.job or "",
        "node": st.pod.node,
        "backend": st.backend,
        "model": profile.model,
    }


def training_row(st: PodStats, profile: GraphProfile) -> dict[str, Any] | None:
    """The CSV row of one pod's run, or None when it has no utilisation samples."""
    util = st.util_mean
    if util is None or st.samples == 0:
        return None
    row: dict[str, Any] = {
        "gpu": st.gpu_model,
        "util": round(util, 3),
        "memory_mib": round(st.mem_peak, 1),
    }
    for name in FEATURE_NAMES:
        row[name] = profile.features.get(name, 0.0)
    row.update(
        _provenance(st, profile),
        family=profile.family or profile.model,
        samples=st.samples,
        util_peak=round(st.util_peak, 3),
        memory_mib_mean=round(st.mem_mean, 1),
    )
    return row


def pair_rows(st: PodStats, profile: GraphProfile) -> list[dict[str, Any]]:
    """One CSV row per neighbour kind the pod has a measured speed next to (its profile is
    ``profile``); a neighbour whose profile the agent no longer knows gives none."""
    out = []
    for (other, gpu), (speed, n) in sorted(st.pairs.items()):
        neighbour = st.neighbours.get(other)
        if neighbour is None:
            continue
        row: dict[str, Any] = {"gpu": gpu, "speed": round(speed, 4)}
        for name in FEATURE_NAMES:
            row[f"a_{name}"] = profile.features.get(name, 0.0)
            row[f"b_{name}"] = neighbour.features.get(name, 0.0)
        row.update(
            _provenance(st, profile),
            other=other,
            other_model=neighbour.model,
            samples=n,
        )
        out.append(row)
    return out


def append_rows(
    path: Path, rows: Iterable[Mapping[str, Any]], columns: list[str] = ROW_COLUMNS
) -> int:
    """Append ``rows`` to the CSV at ``path`` in ``columns`` (header written when the file is
    new; nothing appended, with an error logged, when the file has other columns)."""
    rows = list(rows)
    if not rows:
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header != columns:
            log.error(
                "feedback: %s has different columns than this agent writes; not appending %d "
                "row(s) (move the file away to start a new one)",
                path,
                len(rows),
            )
            return 0
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        if new:
            writer.writeheader()
        for r in rows:
            writer.writerow(r)
    return len(rows)
