"""The graph profile a DLJob carries: one validator for every place a profile comes from.

A profile arrives inline in a DLJob, as a document in a ConfigMap, as a plain pod's
``horus.io/graph-profile`` annotation, or as a file given to ``horus predict``. Each of these
is read by :func:`parse_profile_mapping` (or :func:`parse_profile_document` for text), so
one profile gets one answer everywhere: a profile ``horus predict`` refuses is refused by the
operator with the same sentence, and the other way round.

What it checks is what a *measured* training step can be: every feature a finite,
non-negative number (they are counts, bytes and FLOPs; a negative parameter count is no
model), at most :data:`~horus.common.constants.MAX_PROFILE_FEATURES` of them, named as the
CRD allows; the batch size a positive integer; the schema version one this Horus reads.
Which features a prediction *needs* is the predictor's business
(``horus.predictor.schema.REQUIRED_FEATURES``), checked where it predicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from horus.api._fields import (
    read_int,
    read_str,
    reject_unknown,
    require_object,
    type_name,
)
from horus.common.constants import (
    API_GROUP_VERSION,
    GRAPH_PROFILE_KIND,
    MAX_PROFILE_FEATURES,
    PROFILE_SCHEMA_VERSION,
)
from horus.common.documents import load_yaml
from horus.common.errors import ValidationError

__all__ = [
    "MAX_PROFILE_DOCUMENT_BYTES",
    "PROFILE_KEYS",
    "InlineProfile",
    "parse_profile_document",
    "parse_profile_mapping",
    "parse_profile_object",
]

#: A profile of 256 features is ~10 KB; PyYAML spends ~10 s on a 1 MiB one, so the bound is
#: what a real profile needs with room to spare, not what a ConfigMap could hold.
MAX_PROFILE_DOCUMENT_BYTES = 64 << 10
#: The keys of a profile's body (an inline DLJob profile has exactly these).
PROFILE_KEYS = ("model", "batchSize", "schemaVersion", "family", "features")
_FEATURE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_MAX_FEATURE_NAME = 128


@dataclass(frozen=True)
class InlineProfile:
    """A model's graph profile: what ``horus profile`` prints (and a ConfigMap may hold)."""

    model: str
    batch_size: int
    features: Mapping[str, float]
    schema_version: int = PROFILE_SCHEMA_VERSION
    family: str = ""

    def to_document(self) -> dict[str, Any]:
        """The profile as the document ``horus profile`` writes (``kind: GraphProfile``)."""
        return {
            "apiVersion": API_GROUP_VERSION,
            "kind": GRAPH_PROFILE_KIND,
            "schemaVersion": self.schema_version,
            "model": self.model,
            "family": self.family,
            "batchSize": self.batch_size,
            "features": dict(self.features),
        }


def _feature(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{where}: must be a number, got {type_name(value)} {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValidationError(
            f"{where}: must be a finite number >= 0 (features are counts, bytes and FLOPs of "
            f"one training step), got {value!r}; regenerate the profile with `horus profile`"
        )
    return number


def parse_profile_mapping(raw: Mapping[str, Any], path: str) -> InlineProfile:
    """Validate a profile's body (``model``, ``batchSize``, ``features``, …) at ``path``."""
    if "model" not in raw:
        raise ValidationError(f"{path}.model: an inline profile needs model alongside features")
    if "batchSize" not in raw:
        raise ValidationError(
            f"{path}.batchSize: an inline profile needs batchSize alongside features"
        )
    if "features" not in raw:
        raise ValidationError(f"{path}.features: required (what `horus profile` prints)")
    obj = dict(raw)
    model = read_str(obj, "model", path, max_length=253)
    batch = read_int(obj, "batchSize", path, lo=1, hi=1_048_576)
    version = read_int(obj, "schemaVersion", path, lo=1, default=PROFILE_SCHEMA_VERSION)
    if version != PROFILE_SCHEMA_VERSION:
        raise ValidationError(
            f"{path}.schemaVersion: {version} is not supported (this Horus reads "
            f"{PROFILE_SCHEMA_VERSION}); regenerate the profile with this version's "
            "`horus profile`"
        )
    family = read_str(obj, "family", path, max_length=253, default="", allow_empty=True)
    fpath = f"{path}.features"
    features_raw = require_object(obj["features"], fpath)
    if not 1 <= len(features_raw) <= MAX_PROFILE_FEATURES:
        raise ValidationError(
            f"{fpath}: must have 1..{MAX_PROFILE_FEATURES} entries, got {len(features_raw)}"
        )
    features: dict[str, float] = {}
    for key, val in features_raw.items():
        if not isinstance(key, str) or len(key) > _MAX_FEATURE_NAME or not _FEATURE_NAME.match(key):
            raise ValidationError(
                f"{fpath}: feature name {key!r} must match {_FEATURE_NAME.pattern} and be at "
                f"most {_MAX_FEATURE_NAME} characters"
            )
        features[key] = _feature(val, f"{fpath}.{key}")
    return InlineProfile(
        model=model,
        batch_size=batch,
        features=features,
        schema_version=version,
        family=family,
    )


def parse_profile_document(text: str | bytes, where: str = "profile") -> InlineProfile:
    """Parse a profile document (the YAML ``horus profile`` writes, or JSON) from text.

    ``where`` names the source in errors, e.g. ``configmap ns/resnet50-profile[profile.json]``.
    Size, encoding and nesting are checked before the YAML parser sees the text.
    """
    raw = load_yaml(text, where, max_bytes=MAX_PROFILE_DOCUMENT_BYTES, max_depth=8)
    return parse_profile_object(raw, where)


def parse_profile_object(raw: object, where: str) -> InlineProfile:
    """Validate a parsed profile *document* (``kind: GraphProfile`` with its body)."""
    obj = require_object(raw, where)
    reject_unknown(obj, ("apiVersion", "kind", *PROFILE_KEYS), where)
    if obj.get("apiVersion", API_GROUP_VERSION) != API_GROUP_VERSION:
        raise ValidationError(
            f"{where}.apiVersion: must be {API_GROUP_VERSION}, got {obj['apiVersion']!r}"
        )
    if obj.get("kind", GRAPH_PROFILE_KIND) != GRAPH_PROFILE_KIND:
        raise ValidationError(f"{where}.kind: must be {GRAPH_PROFILE_KIND}, got {obj['kind']!r}")
    return parse_profile_mapping(obj, where)
