"""Model inputs: turning a profile and a GPU into a numeric row, and loading the shipped tables.

Why derived features: raw FLOPs and bytes span ten orders of magnitude, and what drives GPU
utilisation is less the amount of work than how it meets the GPU — time the step would take at
peak FLOP/s versus at peak memory bandwidth, work per sample, arithmetic intensity. So every
size is log-scaled and a few roofline-style terms are added (each documented in
:data:`DERIVED`). The same function builds the row at training and at prediction time, so the
two cannot drift apart.

Feature sets (all in the same benchmark run): ``full`` (everything below), ``thesis`` (the
thesis prototype's set: FLOPs, parameters, conv/linear/activation/other counts, batch and input
size) and ``flops`` (FLOPs only).

Training data the user brings (the agent's observed rows, a ``--with-lucid`` folder) is read
and validated in :mod:`horus.predictor.userdata`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from horus.predictor.gpus import DATASET_GPUS, GpuSpec, gpu_spec
from horus.predictor.schema import FAMILIES, FEATURE_NAMES
from horus.predictor.tables import DATA_DIR

_LOG = (
    "batch_size",
    "input_elems",
    "params",
    "param_bytes",
    "optimizer_bytes",
    "activation_bytes",
    "input_bytes",
    "fwd_flops",
    "bwd_flops",
    "depth",
    "layers",
)

# Derived terms (name → meaning).
DERIVED: dict[str, str] = {
    "log_flops_per_sample": "ln(1 + (fwd+bwd FLOPs) / batch)",
    "log_act_per_sample": "ln(1 + activation bytes / batch)",
    "log_intensity": "ln((fwd+bwd FLOPs) / (activation + 3 x parameter bytes)): arithmetic intensity",
    "log_compute_ms": "ln(1 + step FLOPs / peak FP32 FLOP/s in ms): compute-bound step time",
    "log_memory_ms": "ln(1 + (2 x activation + 4 x parameter bytes) / bandwidth in ms)",
    "compute_vs_memory": "log_compute_ms - log_memory_ms",
    "est_memory_mib": "(weights + gradients + optimizer + activations + input) / MiB",
    "est_memory_frac": "est_memory_mib / GPU memory",
    "log_kernels": "ln(1 + 3 x leaf modules): kernels launched per step (forward, backward, update)",
    "log_ms_per_kernel": "ln(max(compute, memory) ms / kernels): work per kernel launch",
    "busy_frac": "gpu_ms / (gpu_ms + 20 us x kernels): share of the step the GPU is busy if each "
    "kernel costs 20 us of host-side overhead",
}


def full_feature_names() -> list[str]:
    names = [f"log_{k}" for k in _LOG]
    names += ["amp"]
    names += [f"share_{f}" for f in FAMILIES]
    names += [f"log_count_{f}" for f in FAMILIES]
    names += list(DERIVED)
    names += ["gpu_fp32_tflops", "gpu_mem_bw_gbs", "gpu_mem_gib"]
    return names


FULL = full_feature_names()
THESIS = [
    "log_fwd_flops",
    "log_params",
    "log_count_conv",
    "log_count_matmul",
    "log_count_elementwise",
    "log_count_other",
    "log_batch_size",
    "log_input_elems",
]
FLOPS_ONLY = ["log_fwd_flops"]
FEATURE_SETS: dict[str, list[str]] = {"full": FULL, "thesis": THESIS, "flops": FLOPS_ONLY}


def _roofline(f: Mapping[str, Any], flops: Any, gpu: GpuSpec) -> dict[str, Any]:
    """Step times, memory estimate and busy fraction on ``gpu``: one formula for the batched
    path (NumPy columns) and the scalar one (floats), so both compute them identically."""
    compute_ms = flops / (gpu.fp32_tflops * 1e12) * 1e3
    memory_ms = (
        (2 * f["activation_bytes"] + 4 * f["param_bytes"]) / (gpu.memory_bandwidth_gbs * 1e9) * 1e3
    )
    est = (
        2 * f["param_bytes"] + f["optimizer_bytes"] + f["activation_bytes"] + f["input_bytes"]
    ) / 2**20
    kernels = 3.0 * f["layers"] + 1.0
    gpu_ms = np.maximum(compute_ms, memory_ms)
    return {
        "compute_ms": compute_ms,
        "memory_ms": memory_ms,
        "kernels": kernels,
        "gpu_ms": gpu_ms,
        "est_memory_mib": est,
        "est_memory_frac": est / gpu.memory_mib,
        "busy_frac": gpu_ms / (gpu_ms + 0.02 * kernels),
    }


def feature_columns(raw: np.ndarray, gpu: GpuSpec) -> dict[str, np.ndarray]:
    """Vectorised :func:`row_features`: ``raw`` is (n, len(FEATURE_NAMES)) in schema order.

    One implementation serves training (row by row) and batched serving, so they agree exactly.
    """
    raw = np.asarray(raw, dtype=np.float64).reshape(-1, len(FEATURE_NAMES))
    f = {k: raw[:, i] for i, k in enumerate(FEATURE_NAMES)}
    out: dict[str, np.ndarray] = {f"log_{k}": np.log1p(np.maximum(f[k], 0.0)) for k in _LOG}
    out["amp"] = f["amp"]
    for fam in FAMILIES:
        out[f"share_{fam}"] = f[f"share_{fam}"]
        out[f"log_count_{fam}"] = np.log1p(f[f"count_{fam}"])
    batch = np.maximum(f["batch_size"], 1.0)
    flops = f["fwd_flops"] + f["bwd_flops"]
    out["log_flops_per_sample"] = np.log1p(flops / batch)
    out["log_act_per_sample"] = np.log1p(f["activation_bytes"] / batch)
    out["log_intensity"] = np.log(
        (flops + 1.0) / (f["activation_bytes"] + 3 * f["param_bytes"] + 1.0)
    )
    r = _roofline(f, flops, gpu)
    out["log_compute_ms"] = np.log1p(r["compute_ms"])
    out["log_memory_ms"] = np.log1p(r["memory_ms"])
    out["compute_vs_memory"] = out["log_compute_ms"] - out["log_memory_ms"]
    out["est_memory_mib"] = r["est_memory_mib"]
    out["est_memory_frac"] = r["est_memory_frac"]
    out["log_kernels"] = np.log(r["kernels"])
    out["log_ms_per_kernel"] = np.log(r["gpu_ms"] / r["kernels"] + 1e-9)
    out["busy_frac"] = r["busy_frac"]
    n = raw.shape[0]
    for k, v in gpu.features().items():
        out[k] = np.full(n, v)
    other = sum(
        f[f"count_{fam}"] for fam in FAMILIES if fam not in ("conv", "matmul", "elementwise")
    )
    out["log_count_other"] = np.log1p(other)
    return out


def row_values(features: Mapping[str, float], gpu: GpuSpec) -> dict[str, float]:
    """Scalar :func:`feature_columns` for one profile: the single-prediction fast path.

    Plain-float arithmetic, with every logarithm of the row taken in one NumPy call (NumPy's
    ``log``/``log1p`` may use SIMD kernels whose last bit differs from ``math``'s, so using the
    same ufuncs keeps the fast path bit-identical to the batched one) — ~15x cheaper than
    :func:`feature_columns` on length-1 arrays. A unit test compares the two on every catalogued
    job type and several GPUs.
    """
    f = {k: float(features.get(k, 0.0)) for k in FEATURE_NAMES}
    batch = max(f["batch_size"], 1.0)
    flops = f["fwd_flops"] + f["bwd_flops"]
    r = _roofline(f, flops, gpu)
    compute_ms, memory_ms, kernels = r["compute_ms"], r["memory_ms"], r["kernels"]
    gpu_ms = float(r["gpu_ms"])
    other = 0.0
    for fam in FAMILIES:
        if fam not in ("conv", "matmul", "elementwise"):
            other += f[f"count_{fam}"]
    names1p = [f"log_{k}" for k in _LOG] + [f"log_count_{fam}" for fam in FAMILIES]
    args1p = [max(f[k], 0.0) for k in _LOG] + [f[f"count_{fam}"] for fam in FAMILIES]
    names1p += ["log_flops_per_sample", "log_act_per_sample", "log_compute_ms", "log_memory_ms"]
    args1p += [flops / batch, f["activation_bytes"] / batch, compute_ms, memory_ms]
    names1p.append("log_count_other")
    args1p.append(other)
    out = dict(zip(names1p, np.log1p(np.array(args1p)).tolist(), strict=True))
    logs = np.log(
        np.array(
            [
                (flops + 1.0) / (f["activation_bytes"] + 3 * f["param_bytes"] + 1.0),
                kernels,
                gpu_ms / kernels + 1e-9,
            ]
        )
    ).tolist()
    out["log_intensity"], out["log_kernels"], out["log_ms_per_kernel"] = logs
    out["amp"] = f["amp"]
    for fam in FAMILIES:
        out[f"share_{fam}"] = f[f"share_{fam}"]
    out["compute_vs_memory"] = out["log_compute_ms"] - out["log_memory_ms"]
    out["est_memory_mib"] = r["est_memory_mib"]
    out["est_memory_frac"] = r["est_memory_frac"]
    out["busy_frac"] = float(r["busy_frac"])
    out.update(gpu.features())
    return out


def raw_matrix(features: Sequence[Mapping[str, float]]) -> np.ndarray:
    """(n, len(FEATURE_NAMES)) matrix of profile features; absent features are 0."""
    return np.array([[m.get(k, 0.0) for k in FEATURE_NAMES] for m in features], dtype=np.float64)


def row_features(features: Mapping[str, float], gpu: GpuSpec) -> dict[str, float]:
    """All model inputs (``full`` plus the thesis extras) of one profile on one GPU."""
    cols = feature_columns(raw_matrix([features]), gpu)
    return {k: float(v[0]) for k, v in cols.items()}


def matrix(rows: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[r[n] for n in names] for r in rows], dtype=np.float64)


@dataclass(frozen=True)
class SingleTable:
    """Isolated-job rows: model inputs, targets and the group for held-out evaluation."""

    rows: list[dict[str, float]]
    util: np.ndarray  # NaN where not measured
    memory_mib: np.ndarray  # NaN where not measured
    family: list[str]  # architecture family (GPUMemNet) or model (Lucid)
    source: list[str]


def _gpu_for(source_key: str) -> GpuSpec:
    return gpu_spec(DATASET_GPUS.get(source_key, source_key))


def load_gpumemnet(data_dir: Path = DATA_DIR) -> SingleTable:
    rows, util, mem, fam, src = [], [], [], [], []
    gpu = _gpu_for("gpumemnet")
    with (data_dir / "gpumemnet.csv").open() as fh:
        for r in csv.DictReader(fh):
            feats = {k: float(r[k]) for k in FEATURE_NAMES}
            rows.append(row_features(feats, gpu))
            util.append(float(r["util"]) if r["util"] not in ("", None) else math.nan)
            mem.append(float(r["memory_mib"]))
            fam.append(r["family"])
            src.append(r["source"])
    return SingleTable(rows, np.array(util), np.array(mem), fam, src)


def load_lucid_single(lucid_dir: Path) -> SingleTable:
    """Lucid's isolated profiles (non-commercial data: evaluation and user-trained models)."""
    from horus.predictor.catalog import job_type

    rows, util, mem, fam, src = [], [], [], [], []
    gpu = _gpu_for("lucid")
    with (lucid_dir / "single_data.csv").open() as fh:
        for r in csv.DictReader(fh):
            jt = job_type("lucid", r["model"], int(r["batchsize"]), r["amp"] == "1")
            rows.append(row_features(jt.profile.features, gpu))
            util.append(float(r["gpu_util"]))
            mem.append(float(r["gmem"]))
            fam.append(r["model"])
            src.append("lucid")
    return SingleTable(rows, np.array(util), np.array(mem), fam, src)


def concat(tables: Sequence[SingleTable]) -> SingleTable:
    return SingleTable(
        [r for t in tables for r in t.rows],
        np.concatenate([t.util for t in tables]),
        np.concatenate([t.memory_mib for t in tables]),
        [f for t in tables for f in t.family],
        [s for t in tables for s in t.source],
    )
