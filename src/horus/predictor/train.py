"""Deterministic training of the predictor artifact from the shipped feature tables.

Why these choices (measured in ``benchmarks/predictor.py``, see ``docs/predictor.md``):

* **Learner**: scikit-learn ``GradientBoostingRegressor`` (squared error, 150 trees of depth 4,
  learning rate 0.1, row subsampling 0.8, fixed ``random_state``). Boosted trees handle the
  mix of log-sizes, shares and counts without scaling, and export to plain arrays
  (:mod:`horus.predictor.trees`). Same seed and same tables → byte-identical artifact.
* **Targets**: utilisation in percent; memory as ln(MiB) (errors are relative, MAPE is judged).
* **Upper quantile**: cross-conformal — fit on all but one *family* (grouped K-fold), collect the
  held-out residuals, take their ``quantile`` (0.9) as the upper offset. The interval is thus
  calibrated against unseen architectures, which is what a scheduler meets.
* **Pairs**: the interference head predicts job A's normalised speed next to job B from both
  jobs' features, both jobs' *predicted* util/memory (from the heads above, as at serving
  time), terms of the two together (:data:`horus.predictor.pairfeatures.PAIR_TERMS`) and the GPU.
  Learner: an extra-trees forest (:data:`PAIR_PARAMS`), exported to the same tree arrays.

Data and licences: the default artifact uses only GPUMemNet (CC BY 4.0) and Gavel (MIT).
``include_lucid`` adds Lucid (S-Lab 1.0, non-commercial) for a model a user trains for their
own non-commercial use (``horus predictor train --with-lucid DIR -o model.json``); it is never
shipped. ``extra_rows`` adds rows observed in the user's own cluster and ``extra_pair_rows`` pair
speeds measured there (the online-learning hooks; the sharing agent writes both files).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from horus.common.errors import ValidationError
from horus.predictor.catalog import job_type, measured_job_types
from horus.predictor.dataset import (
    FULL,
    SingleTable,
    concat,
    load_gpumemnet,
    load_lucid_single,
    row_features,
)
from horus.predictor.gpus import DATASET_GPUS, GpuSpec, gpu_spec
from horus.predictor.model import ARTIFACT_FORMAT, RANGE_FEATURES, Head, artifact_digest
from horus.predictor.pairfeatures import PAIR_BASES, PAIR_FEATURES, pair_row, row_bound
from horus.predictor.tables import DATA_DIR
from horus.predictor.trees import TreeEnsemble
from horus.predictor.userdata import (
    ObservedPair,
    check_lucid_dir,
    load_extra_pair_rows,
    load_extra_rows,
)

QUANTILE = 0.9
# Test hook: smaller ensembles for fast determinism tests (see ``train_artifact(quick=...)``).
_OVERRIDES: dict[str, Any] = {}
GBR_PARAMS: dict[str, Any] = {
    "n_estimators": 150,
    "max_depth": 4,
    "learning_rate": 0.1,
    "subsample": 0.8,
    "min_samples_leaf": 5,
}


def fit_gbr(x: np.ndarray, y: np.ndarray, seed: int = 0, **overrides: Any) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    params = {**GBR_PARAMS, **_OVERRIDES, **overrides}
    return GradientBoostingRegressor(random_state=seed, **params).fit(x, y)


def group_folds(groups: Sequence[str], k: int = 5) -> list[np.ndarray]:
    """Deterministic grouped folds: each group (family/model) wholly in one fold."""
    uniq = sorted(set(groups))
    fold_of = {g: i % k for i, g in enumerate(uniq)}
    idx = np.array([fold_of[g] for g in groups])
    return [np.flatnonzero(idx == f) for f in range(min(k, len(uniq)))]


def oof_predictions(
    x: np.ndarray, y: np.ndarray, groups: Sequence[str], seed: int = 0, k: int = 5, **params: Any
) -> np.ndarray:
    """Out-of-fold predictions with grouped folds (each fold's groups unseen in its fit)."""
    pred = np.full(len(y), np.nan)
    for test in group_folds(groups, k):
        train = np.setdiff1d(np.arange(len(y)), test)
        pred[test] = fit_gbr(x[train], y[train], seed, **params).predict(x[test])
    return pred


# The pair head is an extremely randomised forest (ExtraTrees) of depth-8 trees. Measured
# (docs/predictor.md): on Gavel pairs (no Lucid involved) it ties the random forest it
# replaced (held-out-family 0.1215 vs 0.1211, leave-one-GPU-out 0.134 vs 0.135); on Lucid
# pairs, leave-one-model-out, 0.066 vs 0.072. Boosting measured 0.144 / 0.074 there.
PAIR_PARAMS: dict[str, Any] = {
    "ExtraTreesRegressor": {
        "n_estimators": 100,
        "max_depth": 8,
        "min_samples_leaf": 5,
        "max_features": 0.5,
    }
}


def fit_pair(x: np.ndarray, y: np.ndarray, seed: int = 0) -> Any:
    """The pair head's learner (deterministic: fixed seed, one job)."""
    from sklearn.ensemble import ExtraTreesRegressor

    params = dict(PAIR_PARAMS["ExtraTreesRegressor"])
    if "n_estimators" in _OVERRIDES:
        params["n_estimators"] = _OVERRIDES["n_estimators"]
    return ExtraTreesRegressor(random_state=seed, n_jobs=1, **params).fit(x, y)


def oof_pair(x: np.ndarray, y: np.ndarray, groups: Sequence[str], seed: int = 0) -> np.ndarray:
    """Out-of-fold pair-head predictions with grouped folds."""
    pred = np.full(len(y), np.nan)
    for test in group_folds(groups):
        train = np.setdiff1d(np.arange(len(y)), test)
        pred[test] = fit_pair(x[train], y[train], seed).predict(x[test])
    return pred


def conformal_offset(y: np.ndarray, pred: np.ndarray, q: float = QUANTILE) -> float:
    resid = y - pred
    resid = resid[~np.isnan(resid)]
    return float(np.quantile(resid, q)) if len(resid) else 0.0


def _x(rows: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[r[n] for n in names] for r in rows], dtype=np.float64)


def _subset(t: SingleTable, mask: np.ndarray) -> tuple[list[dict[str, float]], list[str]]:
    idx = np.flatnonzero(mask)
    return [t.rows[i] for i in idx], [t.family[i] for i in idx]


def train_single_heads(table: SingleTable, seed: int = 0) -> tuple[Head, Head, dict[str, Any]]:
    """Util and memory heads with calibrated upper offsets; returns the held-out metrics too."""
    metrics: dict[str, Any] = {}
    heads = []
    for target in ("util", "memory"):
        y_all = table.util if target == "util" else table.memory_mib
        mask = ~np.isnan(y_all) & ((y_all > 0) if target == "memory" else True)
        rows, groups = _subset(table, mask)
        y = y_all[mask]
        if target == "memory":
            y = np.log(y)
        x = _x(rows, FULL)
        oof = oof_predictions(x, y, groups, seed)
        offset = conformal_offset(y, oof)
        if target == "util":
            metrics["util_heldout_mae_pp"] = float(np.mean(np.abs(oof - y)))
            metrics["util_heldout_coverage"] = float(np.mean(y <= oof + offset))
        else:
            ape = np.abs(np.exp(oof) - np.exp(y)) / np.exp(y)
            metrics["memory_heldout_mape"] = float(np.mean(ape))
            metrics["memory_heldout_coverage"] = float(np.mean(y <= oof + offset))
        metrics[f"{target}_rows"] = len(y)
        est = fit_gbr(x, y, seed)
        heads.append(Head(tuple(FULL), TreeEnsemble.from_sklearn(est), offset))
    return heads[0], heads[1], metrics


def _with_preds(row: Mapping[str, float], util: Head, mem: Head, gpu: GpuSpec) -> dict[str, float]:
    out = dict(row)
    out["pred_util"] = float(np.clip(util.predict([row])[0], 0, 100))
    out["pred_mem_frac"] = float(math.exp(mem.predict([row])[0])) / gpu.memory_mib
    return out


def gavel_pairs(
    util: Head, mem: Head, data_dir: Path = DATA_DIR
) -> tuple[list[dict[str, float]], np.ndarray, list[str]]:
    """Pair-model rows from the shipped Gavel pairs; groups are job A's model."""
    cache: dict[tuple[str, str], dict[str, float]] = {}

    def job(name: str, gpu_key: str) -> dict[str, float]:
        if (name, gpu_key) not in cache:
            spec = gpu_spec(DATASET_GPUS[gpu_key])
            jt = job_type("gavel", name)
            cache[(name, gpu_key)] = _with_preds(
                row_features(jt.profile.features, spec), util, mem, spec
            )
        return cache[(name, gpu_key)]

    rows, ys, groups = [], [], []
    with (data_dir / "gavel_pairs.csv").open() as fh:
        for r in csv.DictReader(fh):
            spec = gpu_spec(DATASET_GPUS[r["gpu"]])
            rows.append(pair_row(job(r["job_a"], r["gpu"]), job(r["job_b"], r["gpu"]), spec))
            ys.append(float(r["speed_a"]))
            groups.append(r["job_a"].split(" (")[0])
    return rows, np.array(ys), groups


def lucid_pairs(
    util: Head | None, mem: Head | None, lucid_dir: Path, measured_isolated: bool = False
) -> tuple[list[dict[str, float]], np.ndarray, list[str], list[str]]:
    """Pair-model rows from Lucid's co-location table (both orders); groups: (model A, model B).

    With ``measured_isolated`` the jobs' *measured* isolated util/memory stand in for the
    predicted ones (the benchmark's "quick model on isolated util/memory" comparison).
    """
    spec = gpu_spec(DATASET_GPUS["lucid"])
    measured: dict[tuple[str, int, int], tuple[float, float]] = {}
    with (lucid_dir / "single_data.csv").open() as fh:
        for r in csv.DictReader(fh):
            measured[(r["model"], int(r["batchsize"]), int(r["amp"]))] = (
                float(r["gpu_util"]),
                float(r["gmem"]),
            )
    cache: dict[tuple[str, int, int], dict[str, float]] = {}

    def job(model: str, batch: int, amp: int) -> dict[str, float]:
        key = (model, batch, amp)
        if key not in cache:
            jt = job_type("lucid", model, batch, bool(amp))
            row = row_features(jt.profile.features, spec)
            if measured_isolated or util is None or mem is None:
                u, m = measured[key]
                row = {**row, "pred_util": u, "pred_mem_frac": m / spec.memory_mib}
            else:
                row = _with_preds(row, util, mem, spec)
            cache[key] = row
        return cache[key]

    rows, ys, ga, gb = [], [], [], []
    with (lucid_dir / "colocate_info.csv").open() as fh:
        for r in csv.DictReader(fh):
            a = job(r["model1"], int(r["batchsize1"]), int(r["amp1"]))
            b = job(r["model2"], int(r["batchsize2"]), int(r["amp2"]))
            rows.append(pair_row(a, b, spec))
            ys.append(float(r["speed1"]))
            ga.append(r["model1"])
            gb.append(r["model2"])
            rows.append(pair_row(b, a, spec))
            ys.append(float(r["speed2"]))
            ga.append(r["model2"])
            gb.append(r["model1"])
    return rows, np.array(ys), ga, gb


def observed_pair_rows(
    pairs: Sequence[ObservedPair], util: Head, mem: Head
) -> tuple[list[dict[str, float]], np.ndarray, list[str]]:
    """Pair-model rows from pair speeds measured in a cluster; as for Gavel's and Lucid's, the
    jobs' util/memory inputs are the heads' *predictions*, which is what serving has."""
    cache: dict[tuple[tuple[float, ...], str], dict[str, float]] = {}

    def job(features: dict[str, float], gpu: GpuSpec) -> dict[str, float]:
        key = (tuple(features.values()), gpu.name)
        if key not in cache:
            cache[key] = _with_preds(row_features(features, gpu), util, mem, gpu)
        return cache[key]

    rows = [pair_row(job(p.a, p.gpu), job(p.b, p.gpu), p.gpu) for p in pairs]
    return rows, np.array([p.speed for p in pairs]), [p.group for p in pairs]


def _ranges(rows: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    return {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in RANGE_FEATURES}


def train_artifact(
    *,
    seed: int = 0,
    include_lucid: Path | None = None,
    extra_rows: Path | Sequence[Path] | None = None,
    extra_pair_rows: Path | Sequence[Path] | None = None,
    data_dir: Path = DATA_DIR,
    n_estimators: int | None = None,
    keep_simulated: bool = False,
    pair_base: str = "contention_bound",
) -> dict[str, Any]:
    """Train every head and return the artifact (a JSON-serialisable dict).

    ``pair_base``: ``contention_bound`` (the default) fits the pair head to the
    residual over :func:`horus.predictor.pairfeatures.contention_bound` of the jobs'
    isolated utilisation, and the predictor adds those corrections only on GPU models the
    head learned pairs from (elsewhere the bound alone: corrections learned on K80/P100/V100
    made Lucid's RTX 3090 pairs worse: ``benchmarks/predictor.py``, docs/results/predictor.md);
    ``none``: the head predicts the speed itself (as older artifacts do).

    ``extra_rows`` / ``extra_pair_rows``: one observed-rows file or several (one per node, as
    each node's agent writes its own); their rows from simulated GPUs are dropped unless
    ``keep_simulated``. ``n_estimators`` overrides the ensemble size (tests use
    a small one to stay fast).
    """
    if pair_base not in PAIR_BASES:
        raise ValidationError(
            f"pair_base must be one of {', '.join(PAIR_BASES)}, got {pair_base!r}"
        )
    _OVERRIDES.clear()
    if n_estimators is not None:
        _OVERRIDES["n_estimators"] = n_estimators
    try:
        return _train_artifact(
            seed,
            include_lucid,
            _paths(extra_rows),
            _paths(extra_pair_rows),
            data_dir,
            keep_simulated,
            pair_base,
        )
    finally:
        _OVERRIDES.clear()


def _paths(value: Path | Sequence[Path] | None) -> tuple[Path, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, Path) else tuple(value)


def _train_artifact(
    seed: int,
    include_lucid: Path | None,
    extra_rows: tuple[Path, ...],
    extra_pair_rows: tuple[Path, ...],
    data_dir: Path,
    keep_simulated: bool,
    pair_base: str = "contention_bound",
) -> dict[str, Any]:
    tables = [load_gpumemnet(data_dir)]
    sources = ["GPUMemNet (CC BY 4.0)", "Gavel (MIT)"]
    if include_lucid is not None:
        if not (include_lucid / "single_data.csv").exists():
            raise ValidationError(
                f"{include_lucid} holds no Lucid single_data.csv / colocate_info.csv"
            )
        check_lucid_dir(include_lucid)  # before any training: the folder is the user's
        tables.append(load_lucid_single(include_lucid))
        sources.append("Lucid (S-Lab License 1.0, NON-COMMERCIAL)")
    for path in extra_rows:
        tables.append(load_extra_rows(path, keep_simulated=keep_simulated))
        sources.append(f"observed rows {path.name} ({len(tables[-1].rows)} rows)")
    observed_pairs: list[ObservedPair] = []
    for path in extra_pair_rows:
        pairs = load_extra_pair_rows(path, keep_simulated=keep_simulated)  # fail before training
        observed_pairs += pairs
        sources.append(f"observed pair rows {path.name} ({len(pairs)} rows)")
    table = concat(tables)
    util, mem, metrics = train_single_heads(table, seed)

    prow, py, pgroups = gavel_pairs(util, mem, data_dir)
    with (data_dir / "gavel_pairs.csv").open() as fh:
        pair_gpus = {gpu_spec(DATASET_GPUS[r["gpu"]]).name for r in csv.DictReader(fh)}
    if include_lucid is not None:
        lrows, ly, la, _ = lucid_pairs(util, mem, include_lucid)
        prow, py, pgroups = prow + lrows, np.concatenate([py, ly]), pgroups + la
        pair_gpus.add(gpu_spec(DATASET_GPUS["lucid"]).name)
    if observed_pairs:
        orows, oy, og = observed_pair_rows(observed_pairs, util, mem)
        prow, py, pgroups = prow + orows, np.concatenate([py, oy]), pgroups + og
        pair_gpus.update(p.gpu.name for p in observed_pairs)
    px = _x(prow, PAIR_FEATURES)
    base = (
        np.array([row_bound(r) for r in prow])
        if pair_base == "contention_bound"
        else np.zeros(len(py))
    )
    oof = oof_pair(px, py - base, pgroups, seed) + base
    metrics["pair_heldout_mae"] = float(np.mean(np.abs(np.clip(oof, 0.05, 1.0) - py)))
    metrics["pair_rows"] = len(py)
    pair_est = fit_pair(px, py - base, seed)
    pair = Head(tuple(PAIR_FEATURES), TreeEnsemble.from_sklearn(pair_est), 0.0)

    artifact: dict[str, Any] = {
        "format": ARTIFACT_FORMAT,
        "quantile": QUANTILE,
        "util": util.to_json(),
        "memory": mem.to_json(),
        "pair": pair.to_json(),
        "pair_base": pair_base,
        "ranges": _ranges(table.rows),
        "card": {
            "trained_on": sources,
            # GPUs the pair head has measured pairs from; on others its speeds extrapolate
            "pair_gpus": sorted(pair_gpus),
            "job_types": len(measured_job_types()),
            "seed": seed,
            "learner": {
                "GradientBoostingRegressor": {**GBR_PARAMS, **_OVERRIDES},
                "pair_head": PAIR_PARAMS,
            },
            "metrics_heldout_family": {
                k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
            },
            "licences": LICENCE_NOTE + (LUCID_NOTE if include_lucid is not None else ""),
        },
    }
    artifact["version"] = f"horus-predictor-{artifact_digest(artifact)[:12]}"
    return artifact


LICENCE_NOTE = (
    "Trained on GPUMemNet data (Copyright 2025 Ehsan Yousefzadeh-Asl-Miandoab, IT University of "
    "Copenhagen; CC BY 4.0; 'GPU Memory and Utilization Estimation for Training-Aware Resource "
    "Management', arXiv:2602.17817; github.com/itu-rad/GPUMemNet) and Gavel throughputs "
    "(Copyright (c) 2020 Stanford Future Data Systems, MIT; github.com/stanford-futuredata/gavel). "
)
LUCID_NOTE = (
    "ALSO trained on Lucid data (Copyright 2022 S-Lab, S-Lab License 1.0): non-commercial use "
    "only; do not redistribute this artifact for commercial purposes."
)


def save_artifact(artifact: Mapping[str, Any], path: Path) -> str:
    """Write ``artifact`` as canonical JSON; returns the JSON's sha256.

    A path ending in ``.gz`` is written gzip-compressed (about a third of the size, so a
    trained artifact fits a Kubernetes ConfigMap's 1 MiB), deterministically (no timestamp
    or name in the gzip header), so the same training gives the same bytes either way.
    """
    import gzip
    import hashlib

    text = json.dumps(artifact, sort_keys=True, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with path.open("wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as fh:
            fh.write(text.encode())
    else:
        path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()
