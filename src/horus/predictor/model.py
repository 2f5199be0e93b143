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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from horus.common.errors import ValidationError
from horus.predictor.dataset import feature_columns, raw_matrix, row_values
from horus.predictor.gpus import GpuSpec, gpu_spec
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.predictor.pairfeatures import (
    PAIR_BASES,
    contention_bound,
    pair_columns,
    pair_row,
    row_bound,
)
from horus.predictor.schema import REQUIRED_FEATURES, SCHEMA_VERSION
from horus.predictor.tables import DATA_DIR
from horus.predictor.trees import JointEnsembles, TreeEnsemble

ARTIFACT_FORMAT = 1
# Entries of the per-profile caches of the single-prediction fast path (cleared when full).
CACHE_SIZE = 4096
DEFAULT_ARTIFACT = DATA_DIR / "model-default.json"

# Features whose training range decides "low confidence".
RANGE_FEATURES: tuple[str, ...] = (
    "log_flops_per_sample",
    "log_act_per_sample",
    "log_params",
    "log_batch_size",
    "log_activation_bytes",
)


@dataclass(frozen=True)
class Head:
    """One regressor: input names, trees, and the calibrated upper offset."""

    inputs: tuple[str, ...]
    trees: TreeEnsemble
    upper_offset: float = 0.0

    def predict(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        x = np.array([[r[n] for n in self.inputs] for r in rows], dtype=np.float64)
        return self.trees.predict(x)

    def predict_row(self, row: Mapping[str, float]) -> float:
        """One row: the single-prediction fast path (same result as :meth:`predict`)."""
        return self.trees.predict_one(np.array([row[n] for n in self.inputs], dtype=np.float64))

    def predict_columns(self, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.trees.predict(np.column_stack([cols[n] for n in self.inputs]))

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": list(self.inputs),
            "upper_offset": self.upper_offset,
            "trees": self.trees.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Head:
        inputs = tuple(str(name) for name in d["inputs"])
        trees = TreeEnsemble.from_json(dict(d["trees"]))
        trees.check(len(inputs), MAX_TREE_CELLS)
        offset = float(d["upper_offset"])
        if not np.isfinite(offset):
            raise ValueError(f"upper_offset {offset} is not finite")
        return cls(inputs, trees, offset)


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
        #: What the pair head predicts: the speed (``none``) or corrections on top of the
        #: contention bound, applied on the GPU models it learned pairs from
        #: (``contention_bound``; :func:`horus.predictor.train.train_artifact`).
        self.pair_base = str(artifact.get("pair_base", "none"))
        if self.pair_base not in PAIR_BASES:
            raise ValidationError(
                f"predictor artifact: pair_base {self.pair_base!r} is not one of "
                f"{', '.join(PAIR_BASES)}"
            )
        self.quantile = float(artifact.get("quantile", 0.9))
        self.ranges: dict[str, tuple[float, float]] = {
            k: (float(v[0]), float(v[1])) for k, v in artifact["ranges"].items()
        }
        self.card: Mapping[str, Any] = artifact.get("card", {})
        # Fast-path caches, keyed by (GPU name, schema version, profile feature items): the
        # scheduler asks about the same few job kinds over and over.
        self._gpus: dict[str, GpuSpec] = {}
        self._single_cache: dict[Any, ResourcePrediction] = {}
        self._row_cache: dict[Any, dict[str, float]] = {}
        self._pair_cache: dict[Any, float] = {}
        # Util and memory heads share their inputs: one tree walk serves both on the fast path.
        self._joint: JointEnsembles | None = None
        if (
            self.util.inputs == self.memory.inputs
            and self.util.trees.depth == self.memory.trees.depth
        ):
            self._joint = JointEnsembles((self.util.trees, self.memory.trees))

    @property
    def version(self) -> str:
        return self._version

    def clear_cache(self) -> None:
        """Forget the fast path's per-profile results (benchmarks time the uncached path)."""
        self._single_cache.clear()
        self._row_cache.clear()
        self._pair_cache.clear()

    # ------------------------------------------------------------------ single jobs

    @staticmethod
    def _check(p: GraphProfile) -> None:
        if p.schema_version != SCHEMA_VERSION:
            raise ValidationError(
                f"profile {p.model!r} has schema version {p.schema_version}, expected {SCHEMA_VERSION}"
            )
        feats = p.features
        if not all(k in feats for k in REQUIRED_FEATURES):
            missing = [k for k in REQUIRED_FEATURES if k not in feats]
            raise ValidationError(
                f"profile {p.model!r} lacks features {', '.join(missing)}; "
                "regenerate it with 'horus profile'"
            )

    def _spec(self, gpu: str) -> GpuSpec:
        spec = self._gpus.get(gpu)
        if spec is None:
            spec = gpu_spec(gpu)  # raises, naming the known GPUs
            self._gpus[gpu] = spec
        return spec

    def _columns(
        self, profiles: Sequence[GraphProfile], gpu: str
    ) -> tuple[dict[str, np.ndarray], GpuSpec]:
        spec = self._spec(gpu)
        for p in profiles:
            self._check(p)
        cols = feature_columns(raw_matrix([p.features for p in profiles]), spec)
        return cols, spec

    def _out_of_range(self, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(cols.values())))
        out = np.zeros(n, dtype=bool)
        for k, (lo, hi) in self.ranges.items():
            margin = 0.1 * (hi - lo) + 1e-9
            v = cols[k]
            out |= (v < lo - margin) | (v > hi + margin)
        return out

    def _means(self, cols: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        util = np.clip(self.util.predict_columns(cols), 0.0, 100.0)
        log_mem = self.memory.predict_columns(cols)
        return util, log_mem

    def predict_many(self, profiles: Sequence[GraphProfile], gpu: str) -> list[ResourcePrediction]:
        if not profiles:
            return []
        cols, _ = self._columns(profiles, gpu)
        util, log_mem = self._means(cols)
        low = self._out_of_range(cols)
        mem = np.exp(log_mem)
        util_up = np.maximum(np.minimum(100.0, util + self.util.upper_offset), util)
        mem_up = np.maximum(np.exp(log_mem + self.memory.upper_offset), mem)
        util_up = np.where(low, 100.0, util_up)
        mem_up = np.where(low, 2.0 * mem_up, mem_up)
        q, version = self.quantile, self._version
        return [
            ResourcePrediction(u, uu, m, mu, q, lo, version)
            for u, uu, m, mu, lo in zip(
                util.tolist(),
                util_up.tolist(),
                mem.tolist(),
                mem_up.tolist(),
                low.tolist(),
                strict=True,
            )
        ]

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        """One profile: the fast path (cached per profile and GPU; scalar on a miss).

        Gives exactly what :meth:`predict_many` gives for the same profile (tested).
        """
        key = _key(profile, gpu)
        if key is not None:
            hit = self._single_cache.get(key)
            if hit is not None:
                return hit
        row = self._row(profile, gpu, key)
        util, log_mem, low = row["pred_util"], row["log_mem"], row["low"] > 0
        mem, mem_up = np.exp([log_mem, log_mem + self.memory.upper_offset]).tolist()
        mem_up = max(mem_up, mem)
        util_up = 100.0 if low else max(min(100.0, util + self.util.upper_offset), util)
        if low:
            mem_up = 2.0 * mem_up
        r = ResourcePrediction(util, util_up, mem, mem_up, self.quantile, low, self._version)
        if key is not None:
            _put(self._single_cache, key, r)
        return r

    def _row(self, profile: GraphProfile, gpu: str, key: Any) -> dict[str, float]:
        """Model inputs of one profile plus its predicted util / ln(memory) (cached)."""
        if key is not None:
            hit = self._row_cache.get(key)
            if hit is not None:
                return hit
        spec = self._spec(gpu)
        self._check(profile)
        row = row_values(profile.features, spec)
        if self._joint is not None:
            x = np.array([row[n] for n in self.util.inputs], dtype=np.float64)
            util, log_mem = self._joint.predict_one(x)
        else:
            util, log_mem = self.util.predict_row(row), self.memory.predict_row(row)
        row["pred_util"] = 0.0 if util < 0.0 else 100.0 if util > 100.0 else util
        row["log_mem"] = log_mem
        row["pred_mem_frac"] = float(np.exp(log_mem)) / spec.memory_mib
        low = False
        for k, (lo, hi) in self.ranges.items():
            margin = 0.1 * (hi - lo) + 1e-9
            v = row[k]
            low = low or v < lo - margin or v > hi + margin
        row["low"] = 1.0 if low else 0.0
        if key is not None:
            _put(self._row_cache, key, row)
        return row

    # ------------------------------------------------------------------ pairs

    def _pair_inputs(
        self, profiles: Sequence[GraphProfile], gpu: str
    ) -> tuple[dict[str, np.ndarray], GpuSpec]:
        cols, spec = self._columns(profiles, gpu)
        util, log_mem = self._means(cols)
        cols["pred_util"] = util
        cols["pred_mem_frac"] = np.exp(log_mem) / spec.memory_mib
        return cols, spec

    def pair_speeds(
        self, pairs: Sequence[tuple[GraphProfile, GraphProfile]], gpu: str
    ) -> list[float]:
        """Normalised speed of the first job of each pair; batched :meth:`pair_speed`."""
        if not pairs:
            return []
        a, spec = self._pair_inputs([p for p, _ in pairs], gpu)
        b, _ = self._pair_inputs([q for _, q in pairs], gpu)
        cols = pair_columns(a, b, spec)
        if self.pair_base == "none":
            raw = self.pair.predict_columns(cols)
        else:
            raw = contention_bound(cols["a_pred_util"], cols["b_pred_util"])
            if self._corrects(spec):
                raw = raw + self.pair.predict_columns(cols)
        speeds = np.clip(raw, 0.05, 1.0)
        return [float(s) for s in speeds]

    def _corrects(self, spec: GpuSpec) -> bool:
        """Whether the head's corrections apply on ``spec``'s model (learned from its pairs)."""
        known = self.card.get("pair_gpus")
        return isinstance(known, list) and spec.name in known

    def pair_gpu_known(self, gpu: str) -> bool | None:
        """Whether the pair head learned from pairs measured on ``gpu``'s model (None: the
        artifact predates this record). On another GPU its speeds are an extrapolation — the
        shipped head, trained on K80/P100/V100 pairs, is pessimistic on newer GPUs."""
        known = self.card.get("pair_gpus")
        if not isinstance(known, list):
            return None
        return self._spec(gpu).name in known

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        """One pair: the fast path (cached; scalar on a miss), equal to :meth:`pair_speeds`."""
        ka, kb = _key(job, gpu), _key(other, gpu)
        key = None if ka is None or kb is None else (ka, kb[2])
        if key is not None:
            hit = self._pair_cache.get(key)
            if hit is not None:
                return hit
        a, b = self._row(job, gpu, ka), self._row(other, gpu, kb)
        spec = self._spec(gpu)
        row = pair_row(a, b, spec)
        if self.pair_base == "none":
            speed = self.pair.predict_row(row)
        else:
            speed = row_bound(row)
            if self._corrects(spec):
                speed += self.pair.predict_row(row)
        speed = 0.05 if speed < 0.05 else 1.0 if speed > 1.0 else speed
        if key is not None:
            _put(self._pair_cache, key, speed)
        return speed


def _key(profile: GraphProfile, gpu: str) -> Any:
    """Cache key of a profile on a GPU, or None when its features are not hashable."""
    try:
        key = (gpu, profile.schema_version, tuple(profile.features.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _put(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= CACHE_SIZE:
        cache.clear()
    cache[key] = value


def artifact_digest(artifact: Mapping[str, Any]) -> str:
    """sha256 of the artifact's canonical JSON (without its own version field)."""
    body = {k: v for k, v in artifact.items() if k != "version"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


#: Largest artifact read, compressed or not (the shipped one is 1.7 MB, 0.53 MB gzipped).
MAX_ARTIFACT_BYTES = 64 << 20
#: An artifact is a few levels deep (artifact → head → trees → arrays).
MAX_ARTIFACT_DEPTH = 16
#: Trees x leaves of the complete layout a head may build (the shipped pair head: 25,600).
MAX_TREE_CELLS = 1 << 24


def _read_artifact_bytes(path: Path) -> bytes:
    """The artifact's JSON bytes: the file's size checked before reading, gzip inflated
    with the same bound (a small compressed file cannot expand without limit)."""
    import zlib

    try:
        size = Path(path).stat().st_size
        if size > MAX_ARTIFACT_BYTES:
            raise ValidationError(
                f"{path}: {size} bytes is larger than a predictor artifact may be "
                f"({MAX_ARTIFACT_BYTES} bytes); is it the right file?"
            )
        with Path(path).open("rb") as fh:
            raw = fh.read(MAX_ARTIFACT_BYTES + 1)
    except OSError as exc:
        raise ValidationError(
            f"cannot read predictor artifact {path}: {exc.strerror or exc}"
        ) from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    inflate = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        out = inflate.decompress(raw, MAX_ARTIFACT_BYTES + 1)
    except zlib.error as exc:
        raise ValidationError(
            f"{path} is not a predictor artifact (truncated or corrupt gzip: {exc}); "
            "copy it again from 'horus predictor train -o'"
        ) from None
    if len(out) > MAX_ARTIFACT_BYTES:
        raise ValidationError(
            f"{path}: inflates to more than {MAX_ARTIFACT_BYTES} bytes; not a predictor artifact"
        )
    if not inflate.eof:
        raise ValidationError(
            f"{path} is not a predictor artifact (truncated or corrupt gzip: it ends early); "
            "copy it again from 'horus predictor train -o'"
        )
    return out


def load_predictor(path: Path) -> HorusPredictor:
    """Load a predictor artifact written by ``horus predictor train`` (JSON, or gzip-compressed
    JSON as ``-o model.json.gz`` writes it; told apart by the gzip magic bytes, not the name).

    Everything is checked before it is used: the size (also after inflating), UTF-8 and
    nesting (:mod:`horus.common.documents`), every head's arrays and indices, and finally one
    prediction on a reference profile, so a truncated, foreign or hand-edited file is one
    clear error here, never a traceback in the middle of a scheduling pass."""
    from horus.common.documents import load_json

    raw = _read_artifact_bytes(path)
    try:
        data = load_json(
            raw,
            f"predictor artifact {path}",
            max_bytes=MAX_ARTIFACT_BYTES,
            max_depth=MAX_ARTIFACT_DEPTH,
        )
    except ValidationError as exc:
        raise ValidationError(f"{exc}; copy it again from 'horus predictor train -o'") from None
    if not isinstance(data, dict):
        raise ValidationError(
            f"{path} is not a predictor artifact (a JSON object with format, util, memory, "
            f"pair …; got {type(data).__name__})"
        )
    try:
        predictor = HorusPredictor(data)
        _smoke_test(predictor)
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        what = (
            f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        )
        raise ValidationError(
            f"{path} is not a usable predictor artifact ({what}); retrain it with "
            "'horus predictor train -o'"
        ) from None
    return predictor


#: A reference training step (ResNet-50 at batch 64) that every artifact must predict.
_SMOKE_PROFILE = GraphProfile(
    model="smoke-test",
    batch_size=64,
    features={
        "batch_size": 64.0,
        "params": 2.56e7,
        "fwd_flops": 5.3e11,
        "bwd_flops": 1.06e12,
        "activation_bytes": 1.1e10,
        "param_bytes": 1.02e8,
        "input_elems": 150528.0,
    },
)


def _smoke_test(predictor: HorusPredictor) -> None:
    """One prediction and one pair speed: an artifact whose heads name unknown inputs or hold
    indices outside their arrays fails here, at load time."""
    import math

    r = predictor.predict(_SMOKE_PROFILE, "A100")
    speed = predictor.pair_speed(_SMOKE_PROFILE, _SMOKE_PROFILE, "A100")
    values = (r.util_mean, r.util_upper, r.memory_mib_mean, r.memory_mib_upper, speed)
    if not all(math.isfinite(v) for v in values):
        raise ValidationError(
            "its reference prediction is not finite (corrupt leaf values?); retrain it with "
            "'horus predictor train -o'"
        )


@lru_cache(maxsize=1)
def load_default_predictor() -> HorusPredictor:
    """The shipped predictor (Gavel + GPUMemNet only), loaded once per process."""
    if not DEFAULT_ARTIFACT.exists():
        raise ValidationError(
            f"the default predictor artifact {DEFAULT_ARTIFACT} is missing; "
            "build it with 'horus predictor train'"
        )
    return load_predictor(DEFAULT_ARTIFACT)
