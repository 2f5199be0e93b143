"""Typed settings for every Horus role, with one precedence: CLI > environment > config file.

Each role declares its settings as a frozen dataclass whose fields have defaults. A value is
looked up, first match wins, in

1. the command line (``--some-field`` → field ``some_field``), then
2. the environment (``HORUS_<SECTION>_<FIELD>``, e.g. ``HORUS_SCHEDULER_POLICY``), then
3. the YAML config file, under the section key (``scheduler: {policy: horus}``), then
4. the dataclass default.

Values from the environment and file are converted to the field's type (bool accepts
``true/false/1/0/yes/no``); anything that does not convert, and any unknown key in the file's
section, is a :class:`~horus.common.errors.ConfigError` that names the source and the field —
a misspelled setting must never be silently ignored. Every source is hostile until checked:
a number must be finite (``nan`` passes every ``<``/``>`` range check a dataclass makes, so it
is refused here, once, for all roles), an integer field takes no fractions, a text value is at
most :data:`MAX_TEXT` characters without control characters, and the config file is read
with the bounded readers of :mod:`horus.common.documents` (size, UTF-8, nesting, no aliases).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from horus.common.documents import load_yaml, read_text_file
from horus.common.errors import ConfigError, ValidationError

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Longest text setting (a path, a node name, a selector); beyond it is not a setting.
MAX_TEXT = 4096
#: Largest config file read (a Horus config is a few KB).
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of a config file (sections hold flat key: value pairs).
MAX_CONFIG_DEPTH = 8


#: The longest period a setting may give in seconds (a week): beyond it is a typo, and
#: ``threading.Event.wait`` overflows on values near 1e308.
MAX_SETTING_SECONDS = 7 * 24 * 3600.0


def check_range(
    name: str,
    value: float,
    lo: float,
    hi: float,
    *,
    lo_open: bool = False,
    unit: str = "",
) -> None:
    """Refuse a setting outside ``lo``..``hi`` (``lo`` excluded when ``lo_open``) with a
    :class:`ConfigError` that names the flag and the allowed range."""
    ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        low = f"> {lo:g}" if lo_open else f">= {lo:g}"
        flag = "--" + name.replace("_", "-")
        raise ConfigError(
            f"{name} ({flag}, or its environment variable or config-file key) must be {low} "
            f"and <= {hi:g}{unit}, got {value!r}"
        )


def check_seconds(name: str, value: float, *, positive: bool = True) -> None:
    """A period in seconds: > 0 (or >= 0), at most :data:`MAX_SETTING_SECONDS`."""
    check_range(name, value, 0.0, MAX_SETTING_SECONDS, lo_open=positive, unit=" seconds")


def env_var_name(section: str, field: str) -> str:
    """The environment variable that sets ``field`` of ``section``."""
    return f"HORUS_{section}_{field}".upper().replace("-", "_")


def _convert(value: Any, typ: Any, where: str) -> Any:
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("", "none", "null")):
            return None
        return _convert(value, args[0], where)
    if origin is typing.Literal:
        allowed = typing.get_args(typ)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, allowed))}")
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{where}: {value!r} is not a boolean (use true or false)")
    if typ is int:
        return _integer(value, where)
    if typ is float:
        return _float(value, where)
    if typ is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{where}: {_show(value)} is not a string")
        return _text(str(value), where)
    if typ is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{where}: {_show(value)} is not a path")
        text = _text(str(value), where)
        if not text.strip():
            raise ConfigError(f"{where}: a path must not be empty (leave the setting out instead)")
        return Path(text).expanduser()
    return value


def _show(value: Any) -> str:
    """``value`` for an error message, cut short: a hostile value may be huge."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: str, where: str) -> str:
    if len(value) > MAX_TEXT:
        raise ConfigError(f"{where}: {len(value)} characters is longer than the {MAX_TEXT} allowed")
    if any(ord(ch) < 32 and ch not in "\t" for ch in value):
        raise ConfigError(f"{where}: {_show(value)} holds control characters (a newline or NUL?)")
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {_show(value)} is not a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: {_show(value)} is not a whole number")
    if isinstance(value, str) and len(value) <= 32:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{where}: {_show(value)} is not a whole number")


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: {_show(value)} is not a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}: {_show(value)} is not a number") from None
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {_show(value)} is not a finite number; give a plain number")
    return number


def load_file_section(path: Path | None, section: str) -> dict[str, Any]:
    """The mapping under ``section`` in YAML file ``path`` (empty when no file is given)."""
    if path is None:
        return {}
    if not Path(path).exists():
        raise ConfigError(f"config file {path} does not exist; pass an existing file")
    where = f"config file {path}"
    try:
        text = read_text_file(path, where, max_bytes=MAX_CONFIG_BYTES)
        data = load_yaml(text, where, max_bytes=MAX_CONFIG_BYTES, max_depth=MAX_CONFIG_DEPTH)
    except ValidationError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where} must be a mapping of sections (e.g. '{section}: {{...}}'), got "
            f"{type(data).__name__}"
        )
    body = data.get(section, {})
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: section '{section}' must be a mapping of key: value")
    bad = [k for k in body if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{where}: section '{section}' has non-text key(s) {bad[:5]!r}")
    return body


def load_settings(
    cls: type[T],
    section: str,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> T:
    """Build ``cls`` from CLI values, environment and config file (in that precedence).

    ``cli`` maps field names to values; ``None`` values mean "not given on the command line".
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    environ = os.environ if env is None else env
    from_file = load_file_section(config_file, section)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(from_file) - names)
    if unknown:
        raise ConfigError(
            f"config file {config_file}: unknown key(s) {', '.join(unknown)} in section "
            f"'{section}'; known keys are {', '.join(sorted(names))}"
        )
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        name = field.name
        typ = hints[name]
        cli_value = (cli or {}).get(name)
        var = env_var_name(section, name)
        if cli_value is not None:
            values[name] = _convert(cli_value, typ, f"--{name.replace('_', '-')}")
        elif var in environ:
            values[name] = _convert(environ[var], typ, f"environment variable {var}")
        elif name in from_file:
            values[name] = _convert(from_file[name], typ, f"{config_file}: {section}.{name}")
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError, ValidationError) as exc:
        raise ConfigError(f"invalid {section} settings: {exc}") from None


def add_settings_flags(
    parser: argparse.ArgumentParser,
    cls: type[Any],
    section: str,
    helps: Mapping[str, str] | None = None,
) -> None:
    """One ``--some-field`` flag per field of the settings dataclass ``cls`` (default None, so
    an absent flag leaves the value to the environment, the file, then the default; a
    ``Literal`` field lists its choices). Every role's ``run`` command declares its flags here,
    so the CLI > env > file rule reads the same everywhere."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        choices = list(typing.get_args(typ)) if typing.get_origin(typ) is typing.Literal else None
        text = (helps or {}).get(f.name)
        where = f"env {env_var_name(section, f.name)}; default {f.default!r}"
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            default=None,
            choices=choices,
            help=f"{text} ({where})" if text else f"({where})",
        )


def cli_values(args: argparse.Namespace, cls: type[Any]) -> dict[str, Any]:
    """The values :func:`add_settings_flags` parsed, keyed by field (None: not given)."""
    return {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
