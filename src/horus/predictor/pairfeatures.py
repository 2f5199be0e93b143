"""The inputs of the pairwise interference model: each job's own features and the terms of
the two together, built one pair at a time (:func:`pair_row`, training) or for many pairs at
once (:func:`pair_columns`, the scheduler's inner loop).

Why a module of its own: training (:mod:`horus.predictor.train`) and prediction
(:mod:`horus.predictor.model`) must build exactly the same columns in the same order, so
both read them from here (the trained pair head records the column names it was fitted on).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from horus.predictor.gpus import GpuSpec

# Per-job inputs of the pairwise interference model (each appears for job "a" and "b").
PAIR_BASE: tuple[str, ...] = (
    "log_flops_per_sample",
    "log_compute_ms",
    "log_memory_ms",
    "log_intensity",
    "log_batch_size",
    "log_params",
    "log_activation_bytes",
    "share_conv",
    "share_matmul",
    "share_attention",
    "share_recurrent",
    "share_embedding",
    "amp",
    "pred_util",
    "pred_mem_frac",
    # GPU-relative load (see dataset.DERIVED): both depend on the GPU's peak FLOP/s and
    # bandwidth, so the head sees how busy each job keeps *this* GPU, not just its size.
    "busy_frac",
    "log_ms_per_kernel",
)

# Terms of the two jobs together (name -> meaning). Utilisation terms use the jobs' predicted
# (serving) or measured (Lucid evaluation) isolated utilisation in percent.
PAIR_TERMS: dict[str, str] = {
    "util_sum": "util_a + util_b",
    "mem_frac_sum": "memory fraction of the GPU, a + b",
    "util_prod": "util_a x util_b / 100",
    "util_min": "min(util_a, util_b)",
    "util_max": "max(util_a, util_b)",
    "util_over": "max(0, util_a + util_b - 100): demand beyond one GPU",
    "util_share_a": "util_a / (util_a + util_b): a's share of the joint demand",
    "busy_sum": "busy_frac_a + busy_frac_b (roofline + launch-overhead busy fractions on this GPU)",
    "busy_prod": "busy_frac_a x busy_frac_b",
}


#: The pair head's base: ``none`` (it predicts the speed itself, as older artifacts do)
#: or ``contention_bound`` (it predicts a correction on top of :func:`contention_bound`).
PAIR_BASES = ("none", "contention_bound")


def contention_bound(util_a: np.ndarray, util_b: np.ndarray) -> np.ndarray:
    """``min(1, 100 / (u_a + u_b))``: the speed two jobs keep if their summed solo
    utilisation (%) is all the GPU has to give, shared in proportion. With measured solo
    utilisation it scores 85.8 % "slowed below 0.85×" accuracy and MAE 0.064 on Lucid's
    pairs without any training (``benchmarks/predictor.py``), so the learned head only
    corrects it."""
    total = np.maximum(np.asarray(util_a, dtype=np.float64) + util_b, 1e-9)
    return np.asarray(np.minimum(1.0, 100.0 / total), dtype=np.float64)


def row_bound(row: Mapping[str, float]) -> float:
    """:func:`contention_bound` of one :func:`pair_row` (its jobs' isolated utilisation)."""
    total = max(row["a_pred_util"] + row["b_pred_util"], 1e-9)
    return min(1.0, 100.0 / total)


def pair_feature_names() -> list[str]:
    names = [f"a_{k}" for k in PAIR_BASE] + [f"b_{k}" for k in PAIR_BASE]
    return [*names, *PAIR_TERMS, "gpu_fp32_tflops", "gpu_mem_bw_gbs", "gpu_mem_gib"]


PAIR_FEATURES = pair_feature_names()


def pair_columns(
    a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], gpu: GpuSpec
) -> dict[str, np.ndarray]:
    """Vectorised :func:`pair_row`."""
    out = {f"a_{k}": np.asarray(a[k], dtype=np.float64) for k in PAIR_BASE}
    out.update({f"b_{k}": np.asarray(b[k], dtype=np.float64) for k in PAIR_BASE})
    ua, ub = out["a_pred_util"], out["b_pred_util"]
    out["util_sum"] = ua + ub
    out["mem_frac_sum"] = out["a_pred_mem_frac"] + out["b_pred_mem_frac"]
    out["util_prod"] = ua * ub / 100.0
    out["util_min"] = np.minimum(ua, ub)
    out["util_max"] = np.maximum(ua, ub)
    out["util_over"] = np.maximum(0.0, ua + ub - 100.0)
    out["util_share_a"] = ua / (ua + ub + 1e-9)
    out["busy_sum"] = out["a_busy_frac"] + out["b_busy_frac"]
    out["busy_prod"] = out["a_busy_frac"] * out["b_busy_frac"]
    n = len(out["util_sum"])
    for k, v in gpu.features().items():
        out[k] = np.full(n, v)
    return out


def pair_row(a: Mapping[str, float], b: Mapping[str, float], gpu: GpuSpec) -> dict[str, float]:
    """Inputs of the pair model; ``a``/``b`` are row features plus pred_util / pred_mem_frac."""
    out = {f"a_{k}": float(a[k]) for k in PAIR_BASE}
    out.update({f"b_{k}": float(b[k]) for k in PAIR_BASE})
    ua, ub = out["a_pred_util"], out["b_pred_util"]
    out["util_sum"] = ua + ub
    out["mem_frac_sum"] = out["a_pred_mem_frac"] + out["b_pred_mem_frac"]
    out["util_prod"] = ua * ub / 100.0
    out["util_min"] = min(ua, ub)
    out["util_max"] = max(ua, ub)
    out["util_over"] = max(0.0, ua + ub - 100.0)
    out["util_share_a"] = ua / (ua + ub + 1e-9)
    out["busy_sum"] = out["a_busy_frac"] + out["b_busy_frac"]
    out["busy_prod"] = out["a_busy_frac"] * out["b_busy_frac"]
    out.update(gpu.features())
    return out
