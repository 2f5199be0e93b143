"""One place that turns (trace name, ground truth, policy list) into simulation results.

Used by ``horus sim`` and by ``benchmarks/scheduler.py``, so both load traces and predictors
the same way. The trained predictor is used when ``horus.predictor.load_default_predictor``
exists; ``predictor="profiled"`` selects the stand-in of :mod:`horus.sim.predictors`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from horus.common.errors import ValidationError
from horus.predictor.interface import Predictor
from horus.scheduler import SchedulerSettings
from horus.sim.datasets import ALIBABA, ALIBABA_FILE, DEFAULT_TRUTH, GAVEL, dataset_file
from horus.sim.engine import SimConfig, Simulator
from horus.sim.groundtruth import (
    GroundTruth,
    gavel_kind,
    load_truth,
    lucid_kind,
)
from horus.sim.predictors import ProfiledPredictor
from horus.sim.results import SimResult
from horus.sim.traces import (
    SyntheticSpec,
    TraceJob,
    load_alibaba,
    load_philly,
    scale_arrivals,
    synthetic,
)

TRACES = ("philly", "alibaba", "synthetic")


@dataclass(frozen=True)
class TraceSpec:
    """Which trace, on which ground truth, with which time compression and size."""

    name: str = "synthetic"
    truth: str = DEFAULT_TRUTH
    arrival_scale: float = 1.0
    limit: int | None = None
    seed: int = 0
    synthetic: SyntheticSpec = field(default_factory=SyntheticSpec)
    path: Path | None = None  # an explicit trace file instead of the default one


def load_trace(spec: TraceSpec, truth: GroundTruth, data_dir: Path | None = None) -> list[TraceJob]:
    """The jobs of ``spec`` on ``truth``'s job types; trace files come from ``spec.path`` or
    the data folder (:func:`horus.sim.datasets.data_dir`)."""
    if spec.name == "philly":
        paths = (
            [spec.path]
            if spec.path
            else sorted(dataset_file(GAVEL, "traces_msr_seed0", data_dir).glob("*.trace"))
        )
        if not paths:
            raise ValidationError(
                f"{dataset_file(GAVEL, 'traces_msr_seed0', data_dir)} holds no .trace files"
            )
        jobs = load_philly(paths, truth, seed=spec.seed, limit=spec.limit, data_dir=data_dir)
    elif spec.name == "alibaba":
        path = spec.path or dataset_file(ALIBABA, ALIBABA_FILE, data_dir)
        jobs = load_alibaba(path, truth, seed=spec.seed, limit=spec.limit)
    elif spec.name == "synthetic":
        jobs = synthetic(spec.synthetic, truth)
    else:
        raise ValidationError(f"unknown trace {spec.name!r}; choose one of {', '.join(TRACES)}")
    if spec.arrival_scale != 1.0:
        jobs = scale_arrivals(jobs, spec.arrival_scale)
    if not jobs:
        raise ValidationError(f"trace {spec.name} has no GPU jobs")
    t0 = jobs[0].submit_time
    return [
        TraceJob(j.job_id, j.submit_time - t0, j.duration, j.num_gpus, j.kind, j.priority)
        for j in jobs
    ]


def trained_predictor_available() -> bool:
    try:
        mod = importlib.import_module("horus.predictor")
        mod.load_default_predictor()
    except (ImportError, AttributeError, ValidationError):
        return False
    return True


def make_predictor(name: str, truth: GroundTruth) -> Predictor:
    """``trained`` (the packaged model), ``profiled`` (stand-in) or ``auto`` (trained if present)."""
    if name == "auto":
        try:
            return make_predictor("trained", truth)
        except (ValidationError, ImportError) as exc:
            import logging

            logging.getLogger(__name__).warning(
                "trained predictor unavailable (%s); using the profiled stand-in", exc
            )
            return ProfiledPredictor(truth)
    if name == "profiled":
        return ProfiledPredictor(truth)
    if name == "trained":
        if not trained_predictor_available():
            raise ValidationError(
                "the trained predictor (horus.predictor.load_default_predictor) is not available; "
                "use --predictor profiled"
            )
        mod = importlib.import_module("horus.predictor")
        pred: Predictor = mod.load_default_predictor()
        _attach_catalog(truth)
        return pred
    raise ValidationError(f"unknown predictor {name!r}; choose trained, profiled or auto")


def _attach_catalog(truth: GroundTruth) -> None:
    """Use the predictor catalog's graph profiles for the measured job types.

    Catalog entries name Gavel types as the data spells them ("ResNet-50 (batch size 64)")
    and Lucid types by model, batch size and AMP; both map onto our kinds one to one.
    """
    try:
        catalog = importlib.import_module("horus.predictor.catalog")
    except ImportError:
        return
    try:
        entries = catalog.measured_job_types(truth.source)
    except ValidationError:
        return  # tables not built: keep the minimal profiles
    for entry in entries:
        if truth.source == "gavel":
            kind = gavel_kind(entry.model)
        else:
            kind = lucid_kind(entry.model, entry.batch_size, int(entry.amp))
        if kind in truth.by_kind:
            truth.profiles[kind] = entry.profile


def run_policies(
    trace: Sequence[TraceJob],
    truth: GroundTruth,
    policies: Sequence[str],
    predictor: Predictor,
    config: SimConfig,
    settings: SchedulerSettings | None = None,
    trace_name: str = "trace",
) -> list[SimResult]:
    return [
        Simulator(trace, truth, p, predictor, config, settings, trace_name).run() for p in policies
    ]


def load(spec: TraceSpec, data_dir: Path | None = None) -> tuple[GroundTruth, list[TraceJob]]:
    truth = load_truth(spec.truth, data_dir)
    return truth, load_trace(spec, truth, data_dir)
