"""Job traces for the simulator: Philly-derived (Gavel), Alibaba GPU v2023, seeded synthetic.

A trace job carries its arrival, its solo duration, its GPU count and the measured job type
(``kind``) that governs its speed. How each source gets its kinds (seeded, documented):

* **philly** (Gavel's ``traces_msr_seed0/*.trace``): each row names a Gavel job type, so on
  the ``gavel`` ground truth the kind is that type and the duration is ``total_steps`` ÷ the
  type's measured solo throughput at its GPU count (scale factor 1 when the multi-GPU
  throughput was not measured). On another ground truth the kind is drawn uniformly (seeded)
  and the duration still comes from the Gavel throughput.
* **alibaba** (``openb_pod_list_*.csv``): pods with ``num_gpu`` ≥ 1; arrival =
  ``creation_time``, duration = ``deletion_time − scheduled_time`` (rows without a schedule
  time or with a non-positive duration are skipped and counted). The trace has no model
  names, so the kind is drawn uniformly (seeded). ``gpu_milli`` shares are not used: Horus
  sizes shares itself.
* **synthetic**: Poisson arrivals, log-normal durations, a GPU-count mix; kinds uniform.

``arrival_scale`` (< 1 compresses time) raises the load of a trace on a bigger cluster than it
was recorded on; the benchmark picks it with :func:`scale_for_load` (windowed load, see
:func:`windowed_load`) and states the factor it uses. Every malformed row is an error
naming the file and line.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from horus.common.errors import ValidationError
from horus.sim.groundtruth import GroundTruth, gavel_kind, load_gavel


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace."""

    job_id: str
    submit_time: float  # seconds from the trace start
    duration: float  # seconds when running alone on its GPUs
    num_gpus: int
    kind: str
    priority: int = 0


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the seeded synthetic generator."""

    jobs: int = 10_000
    arrival_rate: float = 1.0 / 60.0  # jobs per second (Poisson)
    duration_median: float = 3600.0  # seconds (log-normal)
    duration_sigma: float = 1.2
    #: (GPU count, probability) pairs; probabilities are normalised.
    sizes: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.1), (4, 0.1), (8, 0.1))
    seed: int = 0

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValidationError(f"synthetic trace: jobs must be >= 1, got {self.jobs}")
        if self.arrival_rate <= 0:
            raise ValidationError(
                f"synthetic trace: arrival rate must be > 0, got {self.arrival_rate}"
            )
        if self.duration_median <= 0 or self.duration_sigma < 0:
            raise ValidationError("synthetic trace: duration median must be > 0 and sigma >= 0")
        if not self.sizes or any(n < 1 or p < 0 for n, p in self.sizes):
            raise ValidationError(f"synthetic trace: bad size mix {self.sizes}")


def synthetic(spec: SyntheticSpec, truth: GroundTruth) -> list[TraceJob]:
    """A seeded synthetic trace on ``truth``'s job types."""
    rng = random.Random(spec.seed)
    kinds = truth.kinds
    sizes = [n for n, _ in spec.sizes]
    weights = [p for _, p in spec.sizes]
    t = 0.0
    out = []
    for i in range(spec.jobs):
        t += rng.expovariate(spec.arrival_rate)
        dur = rng.lognormvariate(math.log(spec.duration_median), spec.duration_sigma)
        out.append(
            TraceJob(
                f"syn-{i}", t, max(1.0, dur), rng.choices(sizes, weights)[0], rng.choice(kinds)
            )
        )
    return out


def load_philly(
    paths: Sequence[Path],
    truth: GroundTruth,
    seed: int = 0,
    limit: int | None = None,
    data_dir: Path | None = None,
) -> list[TraceJob]:
    """Gavel's Philly-derived traces (all files merged, sorted by arrival). Durations come
    from Gavel's solo throughputs: ``truth``'s own, else those under ``data_dir``."""
    rng = random.Random(seed)
    throughputs = truth.throughputs or load_gavel(data_dir).throughputs
    jobs: list[TraceJob] = []
    for path in paths:
        if not path.exists():
            raise ValidationError(f"trace file {path} does not exist")
        for line_no, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {line_no}"
            fields = line.split("\t")
            if len(fields) != 7:
                raise ValidationError(
                    f"{where}: expected 7 tab-separated fields, got {len(fields)}"
                )
            job_type = fields[0]
            try:
                steps = float(fields[4])
                arrival = float(fields[5])
                gpus = int(fields[6])
            except ValueError:
                raise ValidationError(
                    f"{where}: total_steps, arrival_time and scale_factor must be numbers, got "
                    f"{fields[4]!r}, {fields[5]!r}, {fields[6]!r}"
                ) from None
            if steps <= 0 or arrival < 0 or gpus < 1:
                raise ValidationError(
                    f"{where}: need total_steps > 0, arrival_time >= 0, scale_factor >= 1; got "
                    f"{steps}, {arrival}, {gpus}"
                )
            tput = throughputs.get((job_type, gpus)) or throughputs.get((job_type, 1))
            if tput is None:
                raise ValidationError(f"{where}: job type {job_type!r} has no measured throughput")
            kind = gavel_kind(job_type) if truth.source == "gavel" else rng.choice(truth.kinds)
            jobs.append(TraceJob(f"{path.stem}-{line_no}", arrival, steps / tput, gpus, kind))
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return jobs[:limit] if limit is not None else jobs


def load_alibaba(
    path: Path, truth: GroundTruth, seed: int = 0, limit: int | None = None
) -> list[TraceJob]:
    """Alibaba GPU v2023 pods that use GPUs, with seeded kinds."""
    if not path.exists():
        raise ValidationError(f"trace file {path} does not exist")
    rng = random.Random(seed)
    kinds = truth.kinds
    jobs: list[TraceJob] = []
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"name", "num_gpu", "creation_time", "deletion_time", "scheduled_time"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise ValidationError(f"{path.name}: missing column(s) {', '.join(sorted(missing))}")
        for line_no, row in enumerate(reader, start=2):
            where = f"{path.name} line {line_no}"
            try:
                gpus = int(row["num_gpu"])
            except ValueError:
                raise ValidationError(
                    f"{where}: num_gpu must be an integer, got {row['num_gpu']!r}"
                ) from None
            if gpus < 1:
                continue
            if not row["scheduled_time"] or not row["deletion_time"]:
                continue
            try:
                created = float(row["creation_time"])
                duration = float(row["deletion_time"]) - float(row["scheduled_time"])
            except ValueError:
                raise ValidationError(
                    f"{where}: creation/deletion/scheduled times must be numbers"
                ) from None
            if duration <= 0:
                continue
            jobs.append(TraceJob(row["name"], created, duration, gpus, rng.choice(kinds)))
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return jobs[:limit] if limit is not None else jobs


def scale_arrivals(jobs: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """The same jobs with arrival times multiplied by ``factor`` (< 1 raises the load)."""
    if factor <= 0:
        raise ValidationError(f"arrival scale must be > 0, got {factor}")
    return [
        TraceJob(j.job_id, j.submit_time * factor, j.duration, j.num_gpus, j.kind, j.priority)
        for j in jobs
    ]


def offered_load(jobs: Sequence[TraceJob], gpus: int) -> float:
    """GPU-seconds of work ÷ (GPUs × arrival span): above 1 the queue must grow."""
    if not jobs:
        return 0.0
    span = max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)
    work = sum(j.duration * j.num_gpus for j in jobs)
    return work / (gpus * max(span, 1.0))


def windowed_load(jobs: Sequence[TraceJob], gpus: int) -> float:
    """GPU-seconds demanded *inside the arrival window* ÷ (GPUs × window).

    Like :func:`offered_load`, but a job counts only for the part of its run that falls
    before the last arrival (as if it started on arrival). On a heavy-tailed trace a few
    months-long jobs dominate the offered load without making anything wait; this measure
    does not count their tail, so it says how contended the cluster is while jobs arrive.
    """
    if not jobs:
        return 0.0
    first = min(j.submit_time for j in jobs)
    last = max(j.submit_time for j in jobs)
    span = max(last - first, 1.0)
    work = sum(min(j.duration, last - j.submit_time) * j.num_gpus for j in jobs)
    return work / (gpus * span)


def scale_for_load(
    jobs: Sequence[TraceJob], gpus: int, target: float, min_scale: float = 1e-4
) -> float:
    """The arrival scale at which :func:`windowed_load` reaches ``target`` (bisection).

    Compressing arrivals raises the windowed load only up to a limit (all jobs arriving at
    once); when ``target`` lies beyond it, ``min_scale`` is returned and the caller reports
    the load actually reached.
    """
    if target <= 0:
        raise ValidationError(f"target load must be > 0, got {target}")

    def load(f: float) -> float:
        return windowed_load(scale_arrivals(jobs, f), gpus)

    lo, hi = math.log(min_scale), math.log(1e4)
    if load(math.exp(lo)) < target:
        return min_scale
    for _ in range(40):
        mid = (lo + hi) / 2
        if load(math.exp(mid)) >= target:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)
