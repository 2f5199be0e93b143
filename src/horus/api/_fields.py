"""Field readers shared by the horus.api decoders.

Each reader checks one key of a decoded JSON/YAML object and names the full field path in its
error (``spec.gpu.corePercent: must be 1..100, got 150``), the same path the apiserver would
report, so a user sees exactly which key to fix whether the object came from a cluster or a
unit test.
"""

from __future__ import annotations

import json
import math
from typing import Any

from horus.common.documents import load_json
from horus.common.errors import ValidationError

#: All of an object's annotations together may hold 256 KiB (the apiserver's limit), so no
#: single annotation value Horus decodes can be larger.
MAX_ANNOTATION_BYTES = 256 * 1024
#: Deeper than any annotation document Horus writes (an assignment is 3 levels).
MAX_ANNOTATION_DEPTH = 8


def type_name(value: object) -> str:
    """A JSON-ish name for ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def require_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(f"{path}: must be an object, got {type_name(value)}")
    return value


def reject_unknown(obj: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        names = ", ".join(f"{path}.{k}" for k in unknown)
        raise ValidationError(f"{names}: unknown field(s); allowed: {', '.join(allowed)}")


def read_int(
    obj: dict[str, Any],
    key: str,
    path: str,
    *,
    lo: int | None = None,
    hi: int | None = None,
    default: int | None = None,
) -> int:
    """``obj[key]`` as an integer in ``lo..hi``; ``default`` when absent (required if None)."""
    where = f"{path}.{key}"
    if key not in obj:
        if default is None:
            raise ValidationError(f"{where}: required")
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        # JSON decoders may hand back 3.0 for 3: accept whole floats, nothing else.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValidationError(f"{where}: must be an integer, got {type_name(value)} {value!r}")
    check_range(value, where, lo, hi)
    return value


def read_number(
    obj: dict[str, Any],
    key: str,
    path: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    default: float | None = None,
) -> float:
    """``obj[key]`` as a finite number in ``lo..hi``; ``default`` when absent."""
    where = f"{path}.{key}"
    if key not in obj:
        if default is None:
            raise ValidationError(f"{where}: required")
        return default
    return as_number(obj[key], where, lo=lo, hi=hi)


def as_number(
    value: object, where: str, *, lo: float | None = None, hi: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{where}: must be a number, got {type_name(value)} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValidationError(f"{where}: must be a finite number, got {value!r}")
    check_range(number, where, lo, hi)
    return number


def check_range(value: float, where: str, lo: float | None, hi: float | None) -> None:
    if lo is not None and hi is not None and not lo <= value <= hi:
        raise ValidationError(f"{where}: must be {fmt(lo)}..{fmt(hi)}, got {fmt(value)}")
    if lo is not None and value < lo:
        raise ValidationError(f"{where}: must be >= {fmt(lo)}, got {fmt(value)}")
    if hi is not None and value > hi:
        raise ValidationError(f"{where}: must be <= {fmt(hi)}, got {fmt(value)}")


def read_str(
    obj: dict[str, Any],
    key: str,
    path: str,
    *,
    max_length: int,
    default: str | None = None,
    allow_empty: bool = False,
) -> str:
    where = f"{path}.{key}"
    if key not in obj:
        if default is None:
            raise ValidationError(f"{where}: required")
        return default
    value = obj[key]
    if not isinstance(value, str):
        raise ValidationError(f"{where}: must be a string, got {type_name(value)} {value!r}")
    if not value and not allow_empty:
        raise ValidationError(f"{where}: must not be empty")
    if len(value) > max_length:
        raise ValidationError(f"{where}: must be at most {max_length} characters, got {len(value)}")
    return value


def read_bool(obj: dict[str, Any], key: str, path: str, *, default: bool) -> bool:
    if key not in obj:
        return default
    value = obj[key]
    if not isinstance(value, bool):
        raise ValidationError(
            f"{path}.{key}: must be true or false, got {type_name(value)} {value!r}"
        )
    return value


def fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def load_annotation_json(text: str, where: str) -> Any:
    """An annotation value's JSON, size and nesting checked before parsing.

    Anyone who may edit the object may write any text there: a value nested thousands deep
    would make ``json.loads`` raise ``RecursionError``, which no caller expects.
    """
    if not isinstance(text, str):
        raise ValidationError(f"{where}: must be a string, got {type_name(text)}")
    return load_json(text, where, max_bytes=MAX_ANNOTATION_BYTES, max_depth=MAX_ANNOTATION_DEPTH)


def load_json_object(text: str, where: str) -> dict[str, Any]:
    return require_object(load_annotation_json(text, where), where)


def dump_json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def rebase(exc: ValidationError, default: str, where: str) -> ValidationError:
    """``exc`` with its leading ``default`` path replaced by ``where`` (for nested objects)."""
    msg = str(exc)
    if where != default and msg.startswith(default):
        msg = where + msg[len(default) :]
    return ValidationError(msg)
