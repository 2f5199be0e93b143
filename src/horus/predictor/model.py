"""The trained predictor: loads the shipped artifact and implements the :class:`Predictor` protocol.

Use from the scheduler or simulator::

    from horus.predictor import load_default_predictor
    p = load_default_predictor()                 # loaded once, cached
    r = p.predict(profile, "A100")               # ResourcePrediction (util %, MiB, upper 90 %)
    s = p.pair_speed(job, other, "V100")         # normalised speed of job next to other

Why it looks like this: the scheduler calls it in its inner loop, so loading happens once
(:func:`load_default_predictor` caches) and a prediction is a few NumPy operations over
exported trees (:mod:`horus.predictor.trees`) — no scikit-learn, no torch at predict time.

Intervals: ``util_upper``/``memory_mib_upper`` are the mean plus a residual quantile calibrated
on *held-out families* during training (cross-conformal), so they hold for models unlike the
training ones, not just for rows like them. A profile whose features fall outside the training
range (beyond a 10 % margin) is flagged ``low_confidence`` and its intervals widened (util upper
→ 100 %, memory upper doubled): the scheduler should treat it conservatively, never as a
confident guess.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from horus.common.errors import ValidationError
from horus.predictor.dataset import row_features
from horus.predictor.gpus import GpuSpec, gpu_spec
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.predictor.schema import REQUIRED_FEATURES, SCHEMA_VERSION
from horus.predictor.tables import DATA_DIR
from horus.predictor.trees import TreeEnsemble

ARTIFACT_FORMAT = 1
DEFAULT_ARTIFACT = DATA_DIR / "model-default.json"

# Features whose training range decides "low confidence".
RANGE_FEATURES: tuple[str, ...] = (
    "log_flops_per_sample",
    "log_act_per_sample",
    "log_params",
    "log_batch_size",
    "log_activation_bytes",
)

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
)


def pair_feature_names() -> list[str]:
    names = [f"a_{k}" for k in PAIR_BASE] + [f"b_{k}" for k in PAIR_BASE]
    return [*names, "util_sum", "mem_frac_sum", "gpu_fp32_tflops", "gpu_mem_bw_gbs", "gpu_mem_gib"]


PAIR_FEATURES = pair_feature_names()


def pair_row(
    a: Mapping[str, float], b: Mapping[str, float], gpu: GpuSpec
) -> dict[str, float]:
    """Inputs of the pair model; ``a``/``b`` are row features plus pred_util / pred_mem_frac."""
    out = {f"a_{k}": float(a[k]) for k in PAIR_BASE}
    out.update({f"b_{k}": float(b[k]) for k in PAIR_BASE})
    out["util_sum"] = float(a["pred_util"]) + float(b["pred_util"])
    out["mem_frac_sum"] = float(a["pred_mem_frac"]) + float(b["pred_mem_frac"])
    out.update(gpu.features())
    return out


@dataclass(frozen=True)
class Head:
    """One regressor: input names, trees, and the calibrated upper offset."""

    inputs: tuple[str, ...]
    trees: TreeEnsemble
    upper_offset: float = 0.0

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        x = np.array([[r[n] for n in self.inputs] for r in rows], dtype=np.float64)
        return self.trees.predict(x)

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": list(self.inputs),
            "upper_offset": self.upper_offset,
            "trees": self.trees.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Head:
        return cls(tuple(d["inputs"]), TreeEnsemble.from_json(dict(d["trees"])), float(d["upper_offset"]))


class HorusPredictor:
    """Implements :class:`horus.predictor.interface.Predictor` from a trained artifact."""

    def __init__(self, artifact: Mapping[str, Any]) -> None:
        if artifact.get("format") != ARTIFACT_FORMAT:
            raise ValidationError(
                f"predictor artifact format {artifact.get('format')!r} is not supported "
                f"(this Horus reads {ARTIFACT_FORMAT}); retrain with 'horus predictor train'"
            )
        self._artifact = artifact
        self._version = str(artifact["version"])
        self.util = Head.from_json(artifact["util"])
        self.memory = Head.from_json(artifact["memory"])  # predicts ln(MiB)
        self.pair = Head.from_json(artifact["pair"])
        self.quantile = float(artifact.get("quantile", 0.9))
        self.ranges: dict[str, tuple[float, float]] = {
            k: (float(v[0]), float(v[1])) for k, v in artifact["ranges"].items()
        }
        self.card: Mapping[str, Any] = artifact.get("card", {})

    @property
    def version(self) -> str:
        return self._version

    # ------------------------------------------------------------------ single jobs

    def _rows(self, profiles: Sequence[GraphProfile], gpu: str) -> tuple[list[dict[str, float]], GpuSpec]:
        spec = gpu_spec(gpu)
        rows = []
        for p in profiles:
            missing = [k for k in REQUIRED_FEATURES if k not in p.features]
            if missing:
                raise ValidationError(
                    f"profile {p.model!r} lacks features {', '.join(missing)}; "
                    "regenerate it with 'horus profile'"
                )
            if p.schema_version != SCHEMA_VERSION:
                raise ValidationError(
                    f"profile {p.model!r} has schema version {p.schema_version}, expected {SCHEMA_VERSION}"
                )
            rows.append(row_features(p.features, spec))
        return rows, spec

    def _out_of_range(self, row: Mapping[str, float]) -> bool:
        for k, (lo, hi) in self.ranges.items():
            margin = 0.1 * (hi - lo) + 1e-9
            if not lo - margin <= row[k] <= hi + margin:
                return True
        return False

    def predict_many(self, profiles: Sequence[GraphProfile], gpu: str) -> list[ResourcePrediction]:
        if not profiles:
            return []
        rows, spec = self._rows(profiles, gpu)
        util = np.clip(self.util.predict(rows), 0.0, 100.0)
        log_mem = self.memory.predict(rows)
        out = []
        for i, row in enumerate(rows):
            low = self._out_of_range(row)
            u = float(util[i])
            m = float(math.exp(log_mem[i]))
            u_up = min(100.0, u + self.util.upper_offset)
            m_up = float(math.exp(log_mem[i] + self.memory.upper_offset))
            if low:
                u_up = 100.0
                m_up = 2.0 * m_up
            out.append(
                ResourcePrediction(
                    util_mean=u,
                    util_upper=max(u_up, u),
                    memory_mib_mean=m,
                    memory_mib_upper=max(m_up, m),
                    quantile=self.quantile,
                    low_confidence=low,
                    model_version=self._version,
                )
            )
        del spec
        return out

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        return self.predict_many([profile], gpu)[0]

    # ------------------------------------------------------------------ pairs

    def pair_speeds(
        self, pairs: Sequence[tuple[GraphProfile, GraphProfile]], gpu: str
    ) -> list[float]:
        """Normalised speed of the first job of each pair; batched :meth:`pair_speed`."""
        if not pairs:
            return []
        spec = gpu_spec(gpu)
        firsts = [a for a, _ in pairs]
        seconds = [b for _, b in pairs]
        rows_a, _ = self._rows(firsts, gpu)
        rows_b, _ = self._rows(seconds, gpu)
        self._add_preds(rows_a, spec)
        self._add_preds(rows_b, spec)
        prows = [pair_row(a, b, spec) for a, b in zip(rows_a, rows_b, strict=True)]
        speeds = np.clip(self.pair.predict(prows), 0.05, 1.0)
        return [float(s) for s in speeds]

    def _add_preds(self, rows: list[dict[str, float]], spec: GpuSpec) -> None:
        util = np.clip(self.util.predict(rows), 0.0, 100.0)
        mem = np.exp(self.memory.predict(rows))
        for r, u, m in zip(rows, util, mem, strict=True):
            r["pred_util"] = float(u)
            r["pred_mem_frac"] = float(m) / spec.memory_mib

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        return self.pair_speeds([(job, other)], gpu)[0]


def artifact_digest(artifact: Mapping[str, Any]) -> str:
    """sha256 of the artifact's canonical JSON (without its own version field)."""
    body = {k: v for k, v in artifact.items() if k != "version"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_predictor(path: Path) -> HorusPredictor:
    """Load a predictor artifact written by ``horus predictor train``."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValidationError(f"cannot read predictor artifact {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path} is not a predictor artifact (invalid JSON: {exc})") from exc
    if not isinstance(data, dict):
        raise ValidationError(f"{path} is not a predictor artifact")
    return HorusPredictor(data)


@lru_cache(maxsize=1)
def load_default_predictor() -> HorusPredictor:
    """The shipped predictor (Gavel + GPUMemNet only), loaded once per process."""
    if not DEFAULT_ARTIFACT.exists():
        raise ValidationError(
            f"the default predictor artifact {DEFAULT_ARTIFACT} is missing; "
            "build it with 'horus predictor train'"
        )
    return load_predictor(DEFAULT_ARTIFACT)
