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
naming the file and line: a trace file is read bounded (size, UTF-8 —
:func:`horus.common.documents.read_text_file`), and every time, duration and size must be a
finite number in a sane range. A NaN arrival never compares ``<=`` to the clock, so before
these checks one such row made ``horus sim`` run forever; :class:`TraceJob` itself refuses
such values too, so no source can hand the engine one.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from horus.common.documents import read_text_file
from horus.common.errors import ValidationError
from horus.sim.groundtruth import GroundTruth, gavel_kind, load_gavel

#: Largest trace file read (Gavel's Philly traces are < 1 MB, Alibaba's pod list ~ 2 MB).
MAX_TRACE_BYTES = 256 << 20
#: Latest arrival and longest run a trace may state, in seconds (about 300 years): beyond
#: it a value is a unit mistake, and the simulator's clock would lose its precision.
MAX_TRACE_SECONDS = 1e10
#: Most GPUs one trace job may ask for.
MAX_JOB_GPUS = 65536


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace (every number checked: see the module docstring)."""

    job_id: str
    submit_time: float  # seconds from the trace start
    duration: float  # seconds when running alone on its GPUs
    num_gpus: int
    kind: str
    priority: int = 0

    def __post_init__(self) -> None:
        where = f"trace job {self.job_id}"
        if not (math.isfinite(self.submit_time) and 0 <= self.submit_time <= MAX_TRACE_SECONDS):
            raise ValidationError(
                f"{where}: arrival time must be a finite number of seconds from 0 to "
                f"{MAX_TRACE_SECONDS:g}, got {self.submit_time!r}"
            )
        if not (math.isfinite(self.duration) and 0 < self.duration <= MAX_TRACE_SECONDS):
            raise ValidationError(
                f"{where}: duration must be a finite number of seconds above 0 and at most "
                f"{MAX_TRACE_SECONDS:g}, got {self.duration!r}"
            )
        if isinstance(self.num_gpus, bool) or not 1 <= self.num_gpus <= MAX_JOB_GPUS:
            raise ValidationError(
                f"{where}: GPU count must be 1..{MAX_JOB_GPUS}, got {self.num_gpus!r}"
            )


def _finite(text: str | None, where: str, name: str, lo: float, hi: float) -> float:
    """One numeric field of a trace row: finite and within ``lo``..``hi``."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValidationError(f"{where}: {name} must be a number, got {text!r}") from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValidationError(
            f"{where}: {name} must be a finite number from {lo:g} to {hi:g}, got {text!r}"
        )
    return value


def _whole(text: str | None, where: str, name: str, lo: int, hi: int) -> int:
    try:
        value = int(text.strip())  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        raise ValidationError(f"{where}: {name} must be an integer, got {text!r}") from None
    if not lo <= value <= hi:
        raise ValidationError(f"{where}: {name} must be {lo}..{hi}, got {value}")
    return value


def _read_trace(path: Path) -> str:
    if not path.exists():
        raise ValidationError(f"trace file {path} does not exist")
    return read_text_file(path, f"trace file {path}", max_bytes=MAX_TRACE_BYTES)


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
        if not 1 <= self.jobs <= 10_000_000:
            raise ValidationError(f"synthetic trace: jobs must be 1..10000000, got {self.jobs}")
        if not (math.isfinite(self.arrival_rate) and 0 < self.arrival_rate <= 1e6):
            raise ValidationError(
                f"synthetic trace: arrival rate must be a finite number of jobs per second "
                f"above 0 and at most 1e6 (--rate), got {self.arrival_rate}"
            )
        if not (
            math.isfinite(self.duration_median)
            and 0 < self.duration_median <= MAX_TRACE_SECONDS / 1000
            and math.isfinite(self.duration_sigma)
            and 0 <= self.duration_sigma <= 5
        ):
            raise ValidationError(
                "synthetic trace: duration median must be a finite number of seconds above 0 "
                f"and at most {MAX_TRACE_SECONDS / 1000:g} (--duration), and sigma 0..5; got "
                f"{self.duration_median}, {self.duration_sigma}"
            )
        if (
            not self.sizes
            or any(
                not 1 <= n <= MAX_JOB_GPUS or not math.isfinite(p) or p < 0 for n, p in self.sizes
            )
            or sum(p for _, p in self.sizes) <= 0
        ):
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
        for line_no, line in enumerate(_read_trace(path).splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {line_no}"
            fields = line.split("\t")
            if len(fields) != 7:
                raise ValidationError(
                    f"{where}: expected 7 tab-separated fields, got {len(fields)}"
                )
            job_type = fields[0]
            steps = _finite(fields[4], where, "total_steps", 0.0, 1e18)
            if steps <= 0:
                raise ValidationError(f"{where}: total_steps must be above 0, got {fields[4]!r}")
            arrival = _finite(fields[5], where, "arrival_time", 0.0, MAX_TRACE_SECONDS)
            gpus = _whole(fields[6], where, "scale_factor", 1, MAX_JOB_GPUS)
            tput = throughputs.get((job_type, gpus)) or throughputs.get((job_type, 1))
            if tput is None:
                raise ValidationError(
                    f"{where}: job type {job_type[:80]!r} has no measured throughput"
                )
            duration = steps / tput
            if not 0 < duration <= MAX_TRACE_SECONDS:
                raise ValidationError(
                    f"{where}: total_steps {fields[4]} at {tput:g} steps/s lasts {duration:g} s; "
                    f"a job may last at most {MAX_TRACE_SECONDS:g} s"
                )
            kind = gavel_kind(job_type) if truth.source == "gavel" else rng.choice(truth.kinds)
            jobs.append(TraceJob(f"{path.stem}-{line_no}", arrival, duration, gpus, kind))
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return jobs[:limit] if limit is not None else jobs


def load_alibaba(
    path: Path, truth: GroundTruth, seed: int = 0, limit: int | None = None
) -> list[TraceJob]:
    """Alibaba GPU v2023 pods that use GPUs, with seeded kinds."""
    text = _read_trace(path)
    rng = random.Random(seed)
    kinds = truth.kinds
    jobs: list[TraceJob] = []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    need = ("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time")
    try:
        missing = set(need) - set(reader.fieldnames or ())
        if missing:
            raise ValidationError(f"{path.name}: missing column(s) {', '.join(sorted(missing))}")
        for line_no, row in enumerate(reader, start=2):
            where = f"{path.name} line {line_no}"
            if None in row or any(row.get(k) is None for k in need):
                raise ValidationError(
                    f"{where}: the row's fields do not match the header's (a cut line, or "
                    "extra commas?)"
                )
            gpus = _whole(row["num_gpu"], where, "num_gpu", 0, MAX_JOB_GPUS)
            if gpus < 1:
                continue
            if not row["scheduled_time"] or not row["deletion_time"]:
                continue
            created = _finite(row["creation_time"], where, "creation_time", 0, MAX_TRACE_SECONDS)
            scheduled = _finite(
                row["scheduled_time"], where, "scheduled_time", 0, MAX_TRACE_SECONDS
            )
            deleted = _finite(row["deletion_time"], where, "deletion_time", 0, MAX_TRACE_SECONDS)
            duration = deleted - scheduled
            if duration <= 0:
                continue
            name = row["name"]
            if not name or len(name) > 253:
                raise ValidationError(f"{where}: name must be 1..253 characters")
            jobs.append(TraceJob(name, created, duration, gpus, rng.choice(kinds)))
    except csv.Error as exc:
        raise ValidationError(
            f"{path.name} line {reader.line_num}: not valid CSV ({exc})"
        ) from None
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return jobs[:limit] if limit is not None else jobs


def with_priorities(jobs: Sequence[TraceJob], fraction: float, seed: int = 0) -> list[TraceJob]:
    """The same jobs with a seeded ``fraction`` of them at priority 1 (the rest 0): the
    trace variant with high-priority jobs that preemption is measured on."""
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValidationError(f"high-priority fraction must be in [0, 1], got {fraction}")
    rng = random.Random(f"priority|{seed}")
    return [
        TraceJob(
            j.job_id,
            j.submit_time,
            j.duration,
            j.num_gpus,
            j.kind,
            1 if rng.random() < fraction else 0,
        )
        for j in jobs
    ]


def scale_arrivals(jobs: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """The same jobs with arrival times multiplied by ``factor`` (< 1 raises the load)."""
    if not (math.isfinite(factor) and 0 < factor <= 1e6):
        raise ValidationError(
            f"arrival scale must be a finite number above 0 and at most 1e6 (--arrival-scale), "
            f"got {factor}"
        )
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
    if not (math.isfinite(target) and target > 0):
        raise ValidationError(f"target load must be a finite number above 0, got {target}")

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
