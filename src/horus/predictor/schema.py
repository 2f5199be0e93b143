"""The graph-profile schema: feature names, and the versioned YAML file ``horus profile`` writes.

Why a versioned file: a profile is computed once (where torch is installed) and read many times
(by the scheduler, the operator, ``horus predict``), possibly by a newer Horus. The reader
checks ``schemaVersion`` and every required feature, so a stale or hand-edited profile fails
with a message naming what is wrong instead of silently producing a wrong prediction.

File layout (``kind: GraphProfile``)::

    apiVersion: horus.io/v1alpha1
    kind: GraphProfile
    schemaVersion: 1
    model: resnet50
    family: resnet
    batchSize: 64
    features: {fwd_flops: 2.6e11, params: 2.5e7, ...}   # per training step, see FEATURES

All features describe one *training step* (forward + backward + optimizer) at the given batch
size. See ``docs/predictor.md`` for the meaning of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile

SCHEMA_VERSION = 1
API_VERSION = "horus.io/v1alpha1"
KIND = "GraphProfile"

# Operator families: FLOPs and layer counts are broken down by these.
FAMILIES: tuple[str, ...] = (
    "conv",
    "matmul",
    "attention",
    "norm",
    "embedding",
    "recurrent",
    "pool",
    "elementwise",
)

# Every feature a profile carries (name → meaning). Order is the column order of the tables.
FEATURES: dict[str, str] = {
    "batch_size": "samples per training step",
    "input_elems": "elements of one input sample (e.g. 3*224*224)",
    "amp": "1 if automatic mixed precision (16-bit activations), else 0",
    "dtype_bytes": "bytes per activation element (2 with AMP, else 4)",
    "params": "trainable parameters",
    "param_bytes": "bytes of the parameters (fp32 master weights)",
    "optimizer_bytes": "bytes of optimizer state (Adam: 2 per param, SGD momentum: 1)",
    "activation_bytes": "bytes of tensors the forward pass produces (saved for backward)",
    "input_bytes": "bytes of one batch of input",
    "fwd_flops": "floating-point operations of the forward pass (multiply-add = 2)",
    "bwd_flops": "floating-point operations of the backward pass",
    "depth": "layers with parameters (conv, linear, norm, embedding, recurrent, attention)",
    "layers": "leaf modules",
    **{f"count_{f}": f"leaf modules of family {f}" for f in FAMILIES},
    **{f"share_{f}": f"share of forward FLOPs in family {f}" for f in FAMILIES},
}
FEATURE_NAMES: tuple[str, ...] = tuple(FEATURES)
REQUIRED_FEATURES: tuple[str, ...] = (
    "batch_size",
    "params",
    "fwd_flops",
    "bwd_flops",
    "activation_bytes",
    "param_bytes",
)

# The thesis prototype's feature set (Horus thesis, 2022): FLOPs, parameters, counts of
# conv/linear/activation/other layers, batch size and input size. Kept as a named baseline.
THESIS_FEATURES: tuple[str, ...] = (
    "fwd_flops",
    "params",
    "count_conv",
    "count_matmul",
    "count_elementwise",
    "count_other",
    "batch_size",
    "input_elems",
)


def thesis_features(features: Mapping[str, float]) -> dict[str, float]:
    """The thesis feature set computed from a full feature mapping."""
    other = sum(
        float(features.get(f"count_{f}", 0.0))
        for f in FAMILIES
        if f not in ("conv", "matmul", "elementwise")
    )
    out = {k: float(features.get(k, 0.0)) for k in THESIS_FEATURES if k != "count_other"}
    out["count_other"] = other
    return out


def profile_to_dict(profile: GraphProfile) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "schemaVersion": profile.schema_version,
        "model": profile.model,
        "family": profile.family,
        "batchSize": profile.batch_size,
        "features": {k: _num(v) for k, v in profile.features.items()},
    }


def _num(v: float) -> float | int:
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def dump_profile(profile: GraphProfile, path: Path | None = None) -> str:
    """The YAML text of ``profile``; written to ``path`` too when given."""
    text = yaml.safe_dump(profile_to_dict(profile), sort_keys=False)
    if path is not None:
        path.write_text(text)
    return text


def profile_from_dict(data: Any, where: str = "profile") -> GraphProfile:
    """Validate a parsed profile document; every problem names the field and the fix."""
    if not isinstance(data, Mapping):
        raise ValidationError(
            f"{where}: expected a mapping with kind: {KIND}, got {type(data).__name__}"
        )
    kind = data.get("kind", KIND)
    if kind != KIND:
        raise ValidationError(f"{where}: kind is {kind!r}, expected {KIND!r}")
    version = data.get("schemaVersion")
    if version is None:
        raise ValidationError(
            f"{where}: missing schemaVersion (this Horus reads schemaVersion {SCHEMA_VERSION}); "
            "regenerate it with 'horus profile'"
        )
    if version != SCHEMA_VERSION:
        raise ValidationError(
            f"{where}: schemaVersion {version!r} is not supported (this Horus reads "
            f"{SCHEMA_VERSION}); regenerate the profile with this version's 'horus profile'"
        )
    for key in ("model", "batchSize", "features"):
        if key not in data:
            raise ValidationError(f"{where}: missing required field {key!r}")
    features = data["features"]
    if not isinstance(features, Mapping):
        raise ValidationError(f"{where}: 'features' must be a mapping of name to number")
    missing = [k for k in REQUIRED_FEATURES if k not in features]
    if missing:
        raise ValidationError(
            f"{where}: features lack {', '.join(missing)}; regenerate it with 'horus profile'"
        )
    clean: dict[str, float] = {}
    for k, v in features.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValidationError(f"{where}: feature {k!r} must be a number, got {v!r}")
        if v != v or v < 0:  # NaN or negative
            raise ValidationError(
                f"{where}: feature {k!r} must be a non-negative number, got {v!r}"
            )
        clean[str(k)] = float(v)
    batch = data["batchSize"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValidationError(f"{where}: batchSize must be a positive integer, got {batch!r}")
    return GraphProfile(
        model=str(data["model"]),
        batch_size=batch,
        features=clean,
        family=str(data.get("family", "")),
        schema_version=SCHEMA_VERSION,
    )


def load_profile(path: Path) -> GraphProfile:
    """Read and validate a profile YAML file written by ``horus profile``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValidationError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path}: not valid YAML: {exc}") from exc
    return profile_from_dict(data, where=str(path))
