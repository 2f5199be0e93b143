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
a misspelled setting must never be silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from horus.common.errors import ConfigError

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
    if typ in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not a number")
        try:
            return typ(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {value!r} is not a {typ.__name__}") from None
    if typ is str:
        if not isinstance(value, str | int | float):
            raise ConfigError(f"{where}: {value!r} is not a string")
        return str(value)
    if typ is Path:
        return Path(str(value)).expanduser()
    return value


def load_file_section(path: Path | None, section: str) -> dict[str, Any]:
    """The mapping under ``section`` in YAML file ``path`` (empty when no file is given)."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; pass an existing file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of sections, got {type(data)}")
    body = data.get(section, {})
    if not isinstance(body, dict):
        raise ConfigError(f"config file {path}: section '{section}' must be a mapping")
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
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {section} settings: {exc}") from None
