"""Ground truth for the simulator: measured job types and measured pairwise co-location speeds.

The simulator must not learn its physics from the predictor it evaluates, so a job's progress
rate comes only from these measured tables (the repository's ``data/``, or ``--data-dir`` /
``$HORUS_DATA_DIR``: :mod:`horus.sim.datasets`; each folder has its ``PROVENANCE.md``):

* ``lucid`` — Lucid (ASPLOS '23, S-Lab License 1.0, non-commercial): 66 isolated job
  configurations (model, batch size, AMP) with utilisation and memory, and 1,388 measured
  pairs with each job's normalised speed. GPU: RTX 3090, 24 GiB (the data README does not
  state it; peak pair memory 20,970 MiB fits a 24 GB card).
* ``gavel`` — Gavel (OSDI '20, MIT): 26 job types with isolated throughput and pairwise
  co-located throughput on V100 (also P100, K80), scale factor 1. No utilisation or memory
  was measured, so those come from the predictor (the simulator's utilisation metric says so).
  The default: its licence lets anyone use it, Lucid's does not (``docs/decisions.md``).
* ``measured:DIR`` — what ``horus predictor measure`` measured on the user's own GPU (zoo jobs
  alone and in pairs, :func:`load_measured`): the same physics for the GPU a cluster has.

Documented choices (never tuned to a policy):

* Measured speeds above 1.0 (21 % of Lucid rows, measurement noise per its analyzer) are
  clipped to 1.0: sharing never makes a job faster than running alone.
* **Fallback for an unmeasured pair** (Gavel's ``[0, 0]`` entries, Lucid pairs not profiled):
  a multiplicative model, ``s(a|b) = sens(a) · aggr(b) / mean`` clipped to [0.05, 1], where
  ``sens(a)`` is a's mean measured speed over all its partners, ``aggr(b)`` the mean measured
  speed of every job next to b, and ``mean`` the mean of all measured speeds; a job with no
  measurement uses ``mean`` for its term. Both orders of a measured pair are measured.
* Three or more jobs on one GPU: a job's speed is the product of its pairwise speeds.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile
from horus.sim.datasets import DEFAULT_TRUTH, GAVEL, LUCID, dataset_file

SOURCES = (DEFAULT_TRUTH, "lucid")


@dataclass(frozen=True)
class JobType:
    """One measured job configuration."""

    kind: str  # unique key, e.g. "lucid:ResNet18/bs64/amp0" or "gavel:ResNet-50 (batch size 64)"
    model: str
    batch_size: int
    amp: bool = False
    util: float | None = None  # measured solo utilisation %, when measured
    memory_mib: float | None = None  # measured solo memory, when measured
    throughput: float | None = None  # solo steps/s (Gavel), for step-count traces

    @property
    def profile(self) -> GraphProfile:
        """A minimal profile; the simulator swaps in the predictor catalog's when present."""
        name = f"{self.model}-amp" if self.amp else self.model
        return GraphProfile(model=name, batch_size=self.batch_size, family=self.model)


@dataclass
class GroundTruth:
    """Measured job types of one GPU model and their pairwise speeds (with the fallback)."""

    source: str
    gpu_model: str
    gpu_memory_mib: int
    types: list[JobType]
    measured: dict[tuple[str, str], float] = field(default_factory=dict)
    profiles: dict[str, GraphProfile] = field(default_factory=dict)
    #: Gavel: solo steps/s per (job type, GPUs) — step counts in traces become durations.
    throughputs: dict[tuple[str, int], float] = field(default_factory=dict)
    #: Lucid: the GPU's mean utilisation (%) while a pair shared it, under both orders.
    pair_util: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.types:
            raise ValidationError(f"ground truth {self.source}: no job types")
        self.by_kind = {t.kind: t for t in self.types}
        sens: dict[str, list[float]] = defaultdict(list)
        aggr: dict[str, list[float]] = defaultdict(list)
        for (a, b), s in self.measured.items():
            sens[a].append(s)
            aggr[b].append(s)
        values = list(self.measured.values())
        self.mean_speed = sum(values) / len(values) if values else 1.0
        self._sens = {k: sum(v) / len(v) for k, v in sens.items()}
        self._aggr = {k: sum(v) / len(v) for k, v in aggr.items()}
        self._cache: dict[tuple[str, str], float] = {}

    @property
    def kinds(self) -> list[str]:
        return [t.kind for t in self.types]

    def profile(self, kind: str) -> GraphProfile:
        return self.profiles.get(kind) or self.by_kind[kind].profile

    def is_measured(self, a: str, b: str) -> bool:
        return (a, b) in self.measured

    def speed(self, a: str, b: str, gpu_model: str = "") -> float:
        """Normalised speed of a job of kind ``a`` sharing a GPU with one of kind ``b``."""
        key = (a, b)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.measured.get(key)
            if hit is None:
                m = self.mean_speed
                hit = self._sens.get(a, m) * self._aggr.get(b, m) / m
                hit = min(1.0, max(0.05, hit))
            self._cache[key] = hit
        return hit

    def util_ratio_speed(self, a: str, b: str) -> float | None:
        """What the agent's utilisation-ratio proxy would report for ``a`` next to ``b``, or None
        where the pair's utilisation was not measured.

        The proxy is (a's utilisation in the pair) / (a's utilisation alone). Only the GPU's
        total in the pair was measured, so a's part of it is taken in proportion to
        utilisation alone × speed — the split the proxy's own premise implies. Measured pair
        utilisation falls short of that premise (``benchmarks/pair_signal.py``), so this
        reports less than the true speed: on average 0.19 less on Lucid.
        """
        total = self.pair_util.get((a, b))
        ua, ub = self.by_kind[a].util, self.by_kind[b].util
        if total is None or ua is None or ub is None:
            return None
        sa, sb = self.speed(a, b), self.speed(b, a)
        premise = ua * sa + ub * sb
        if premise <= 0:
            return None
        return min(1.0, max(0.05, total * sa / premise))

    def coverage(self) -> float:
        """Fraction of ordered kind pairs that were measured."""
        n = len(self.types)
        return len(self.measured) / (n * n)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _float(row: dict[str, str], col: str, where: str) -> float:
    try:
        value = float(row[col])
    except (KeyError, ValueError):
        raise ValidationError(
            f"{where}: column {col!r} is not a number: {row.get(col)!r}"
        ) from None
    if math.isnan(value):
        raise ValidationError(f"{where}: column {col!r} is NaN")
    return value


def lucid_kind(model: str, batch: int, amp: int) -> str:
    return f"lucid:{model}/bs{batch}/amp{amp}"


def load_lucid(data_dir: Path | None = None) -> GroundTruth:
    """Lucid's single-job profiles and measured pairs (RTX 3090, 24 GiB; non-commercial)."""
    single = _read_csv(dataset_file(LUCID, "single_data.csv", data_dir))
    types: dict[str, JobType] = {}
    for i, row in enumerate(single, start=2):
        where = f"lucid/single_data.csv line {i}"
        batch, amp = int(_float(row, "batchsize", where)), int(_float(row, "amp", where))
        kind = lucid_kind(row["model"], batch, amp)
        types[kind] = JobType(
            kind=kind,
            model=row["model"],
            batch_size=batch,
            amp=bool(amp),
            util=_float(row, "gpu_util", where),
            memory_mib=_float(row, "gmem", where),
        )
    measured: dict[tuple[str, str], float] = {}
    pair_util: dict[tuple[str, str], float] = {}
    for i, row in enumerate(_read_csv(dataset_file(LUCID, "colocate_info.csv", data_dir)), 2):
        where = f"lucid/colocate_info.csv line {i}"
        a = lucid_kind(
            row["model1"], int(_float(row, "batchsize1", where)), int(_float(row, "amp1", where))
        )
        b = lucid_kind(
            row["model2"], int(_float(row, "batchsize2", where)), int(_float(row, "amp2", where))
        )
        if a not in types or b not in types:
            raise ValidationError(f"{where}: pair {a} / {b} has no single-job profile")
        measured[(a, b)] = min(1.0, _float(row, "speed1", where))
        measured[(b, a)] = min(1.0, _float(row, "speed2", where))
        pair_util[(a, b)] = pair_util[(b, a)] = _float(row, "gpu_util", where)
    # Only job types that appear in at least one measured pair are used by traces.
    paired = {a for a, _ in measured}
    kept = [t for k, t in sorted(types.items()) if k in paired]
    return GroundTruth("lucid", "RTX3090", 24576, kept, measured, pair_util=pair_util)


def gavel_kind(job_type: str) -> str:
    return f"gavel:{job_type}"


def _gavel_model_batch(job_type: str) -> tuple[str, int]:
    if "(batch size " in job_type:
        name, rest = job_type.split(" (batch size ", 1)
        return name, int(rest.rstrip(")"))
    return job_type, 1


def load_gavel(data_dir: Path | None = None, worker: str = "v100") -> GroundTruth:
    """Gavel's measured throughputs on ``worker`` (v100, p100, k80), scale factor 1."""
    memory = {"v100": 16384, "p100": 16384, "k80": 12288}
    if worker not in memory:
        raise ValidationError(f"unknown Gavel worker type {worker!r}; use v100, p100 or k80")
    iso_rows = _read_csv(dataset_file(GAVEL, "derived_isolated_throughputs.csv", data_dir))
    throughput: dict[tuple[str, int], float] = {}
    for i, row in enumerate(iso_rows, start=2):
        if row["source_file"] != "simulation_throughputs.json" or row["worker_type"] != worker:
            continue
        where = f"gavel/derived_isolated_throughputs.csv line {i}"
        throughput[(row["job_type"], int(_float(row, "scale_factor", where)))] = _float(
            row, "isolated_throughput", where
        )
    types: dict[str, JobType] = {}
    for (jt, sf), tput in sorted(throughput.items()):
        if sf != 1:
            continue
        model, batch = _gavel_model_batch(jt)
        types[gavel_kind(jt)] = JobType(gavel_kind(jt), model, batch, throughput=tput)
    measured: dict[tuple[str, str], float] = {}
    for i, row in enumerate(
        _read_csv(dataset_file(GAVEL, "derived_colocation_pairs.csv", data_dir)), start=2
    ):
        if (
            row["source_file"] != "simulation_throughputs.json"
            or row["worker_type"] != worker
            or row["scale_factor_a"] != "1"
            or row["scale_factor_b"] != "1"
        ):
            continue
        where = f"gavel/derived_colocation_pairs.csv line {i}"
        s = _float(row, "normalized_throughput_a", where)
        if s <= 0:  # [0, 0]: infeasible or unmeasured → fallback
            continue
        measured[(gavel_kind(row["job_type_a"]), gavel_kind(row["job_type_b"]))] = min(1.0, s)
    return GroundTruth(
        "gavel", worker.upper(), memory[worker], list(types.values()), measured, {}, throughput
    )


MEASURED_PREFIX = "measured:"


def measured_kind(job_key: str) -> str:
    return f"{MEASURED_PREFIX}{job_key}"


def load_measured(path: Path) -> GroundTruth:
    """What ``horus predictor measure`` measured on one GPU (its output folder or its
    ``measure.json``): each job's solo utilisation, memory and steps/s, and each measured
    pair's speeds. A job measured next to a copy of itself has two speeds; their mean is used.
    The profiles are the ones stored at measurement time, so this needs no torch."""
    from horus.predictor.gpus import gpu_spec
    from horus.predictor.measure import RESULTS_FILE, load_results, solo_profile

    file = path / RESULTS_FILE if path.is_dir() else path
    if not file.exists():
        raise ValidationError(
            f"{file} does not exist; measure first: horus predictor measure --jobs … -o {path}"
        )
    res = load_results(file)
    if not res.get("gpu"):
        raise ValidationError(
            f"{file} is a dry run on the CPU (no GPU); measure on a GPU to use it as ground truth"
        )
    spec = gpu_spec(str(res["gpu"]))
    types: dict[str, JobType] = {}
    profiles: dict[str, GraphProfile] = {}
    for key, entry in sorted(res["solo"].items()):
        kind = measured_kind(key)
        prof = solo_profile(key, entry)
        types[kind] = JobType(
            kind,
            prof.model,
            prof.batch_size,
            amp=bool(prof.features.get("amp", 0.0)),  # as profiled, not read off the key
            util=entry.get("util"),
            memory_mib=entry.get("memory_mib"),
            throughput=entry.get("steps_per_s"),
        )
        profiles[kind] = prof
    measured: dict[tuple[str, str], float] = {}
    pair_util: dict[tuple[str, str], float] = {}
    for key, r in sorted(res["pairs"].items()):
        ka, _, kb = key.partition("|")
        a, b = measured_kind(ka), measured_kind(kb)
        if a not in types or b not in types:
            raise ValidationError(f"{file}: pair {key!r} has no solo run of both jobs")
        try:
            sa, sb = float(r["a"]["speed"]), float(r["b"]["speed"])
        except (KeyError, TypeError, ValueError):
            raise ValidationError(f"{file}: pair {key!r} has no speeds") from None
        if a == b:
            sa = sb = (sa + sb) / 2
        measured[(a, b)], measured[(b, a)] = min(1.0, sa), min(1.0, sb)
        if r.get("util") is not None:
            pair_util[(a, b)] = pair_util[(b, a)] = float(r["util"])
    if not measured:
        raise ValidationError(
            f"{file} has no measured pairs; a ground truth needs pair speeds "
            "(horus predictor measure --pairs all or sample:N)"
        )
    paired = {a for a, _ in measured}
    kept = [t for k, t in sorted(types.items()) if k in paired]
    truth = GroundTruth(
        "measured", spec.name, int(spec.memory_mib), kept, measured, pair_util=pair_util
    )
    truth.profiles.update({k: p for k, p in profiles.items() if k in paired})
    return truth


def load_truth(source: str, data_dir: Path | None = None) -> GroundTruth:
    """``gavel`` (V100), ``lucid`` or ``measured:DIR`` (``horus predictor measure`` output),
    from ``data_dir`` (default: :func:`horus.sim.datasets.data_dir`); unknown names are a
    clear error."""
    if source == "lucid":
        return load_lucid(data_dir)
    if source == "gavel":
        return load_gavel(data_dir)
    if source.startswith(MEASURED_PREFIX):
        return load_measured(Path(source[len(MEASURED_PREFIX) :]))
    raise ValidationError(
        f"unknown ground truth {source!r}; choose one of {', '.join(SOURCES)} or "
        "measured:DIR (a 'horus predictor measure' folder)"
    )
