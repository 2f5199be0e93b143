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

from horus.api.profile import MAX_PROFILE_DOCUMENT_BYTES, InlineProfile, parse_profile_object
from horus.common.constants import PROFILE_SCHEMA_VERSION
from horus.common.documents import load_yaml, read_text_file
from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile

SCHEMA_VERSION = PROFILE_SCHEMA_VERSION
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
    """Validate a parsed profile document; every problem names the field and the fix.

    The document rules are :func:`horus.api.profile.parse_profile_object`'s, the ones the
    operator applies to DLJobs, so ``horus predict`` and the cluster give one answer; this
    adds only what a prediction needs (:data:`REQUIRED_FEATURES`).
    """
    inline = parse_profile_object(data, where)
    missing = [k for k in REQUIRED_FEATURES if k not in inline.features]
    if missing:
        raise ValidationError(
            f"{where}: features lack {', '.join(missing)}; regenerate it with 'horus profile'"
        )
    return graph_profile(inline)


def graph_profile(profile: InlineProfile) -> GraphProfile:
    """The predictor's view of a profile the API validated (:mod:`horus.api.profile`)."""
    return GraphProfile(
        model=profile.model,
        batch_size=profile.batch_size,
        features=dict(profile.features),
        family=profile.family,
        schema_version=profile.schema_version,
    )


def load_profile(path: Path) -> GraphProfile:
    """Read and validate a profile YAML file written by ``horus profile``.

    Size, encoding and nesting are checked before parsing (``horus.common.documents``).
    """
    text = read_text_file(path, max_bytes=MAX_PROFILE_DOCUMENT_BYTES)
    data = load_yaml(text, str(path), max_bytes=MAX_PROFILE_DOCUMENT_BYTES, max_depth=8)
    return profile_from_dict(data, where=str(path))
