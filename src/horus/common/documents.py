"""Bounded reading of every document Horus parses: size and nesting depth checked first.

Why one module: Python's ``json`` and PyYAML decoders recurse once per nesting level, so a
document a few thousand levels deep (``[[[[…]]]]`` — 18 KB is enough, and the apiserver stores
such a DLJob) raises ``RecursionError`` deep inside a library, and a binary file raises
``UnicodeDecodeError``; neither says what was wrong, and either one, uncaught in a loop, stops
a whole component. Every reader here checks, *before* parsing, what the parser would choke on:

* the size in bytes (``max_bytes``) — a limit the caller chooses for its kind of input;
* UTF-8 text (a binary file is named as such);
* the nesting depth of brackets (``[``/``{``), found by a linear scan that skips string
  literals, so JSON and YAML flow collections deeper than ``max_depth`` are refused without
  ever reaching the recursive parser; YAML block nesting (indentation) is bounded by
  catching the parser's ``RecursionError`` and by measuring the result;
* YAML anchors/aliases are refused (``&a``/``*a``): a profile or trace never needs them, and
  aliases are how a small document expands into an exponential one.

Every failure is a :class:`~horus.common.errors.ValidationError` naming the source and the
limit. :func:`loads_api_json` is the lenient variant for responses of the Kubernetes API: it
never refuses a list because one object in it is too deep — it replaces the too-deep values
with :data:`TOO_DEEP` so that object alone is refused later, with its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from horus.common.errors import ValidationError

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "TOO_DEEP",
    "check_depth",
    "decode_text",
    "depth_of",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "loads_api_json",
    "read_text_file",
]

#: Deeper than any document Horus reads legitimately (a pod template is < 20 levels).
DEFAULT_MAX_DEPTH = 64
#: What :func:`loads_api_json` puts where a value was nested deeper than it decodes.
TOO_DEEP = "<horus: value nested too deep to decode>"
#: An API response object is decoded to this depth at most (its items sit at depth 2).
API_MAX_DEPTH = 200

# A string literal (either quote style, escapes honoured) or one bracket.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'|[\[\]{}]', re.DOTALL)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _human(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n} bytes"


def decode_text(data: bytes | str, where: str) -> str:
    """``data`` as text; a clear error when it is not UTF-8 (a binary file, most likely)."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{where}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
            "is it a binary file? Give the text file (YAML, JSON or CSV) this input expects"
        ) from None


def _check_size(data: bytes | str, where: str, max_bytes: int) -> None:
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ValidationError(
            f"{where}: {_human(size)} is larger than the {_human(max_bytes)} this input may be"
        )


def check_depth(text: str, where: str, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Refuse ``text`` when its brackets nest deeper than ``max_depth`` (strings skipped).

    Linear in the length of ``text`` and never recursive, so it is safe on any input.
    """
    depth = 0
    for match in _TOKENS.finditer(text):
        tok = match.group()
        if tok in ("[", "{"):
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, match.start()) + 1
                raise ValidationError(
                    f"{where}: nested deeper than {max_depth} levels (line {line}); "
                    "no Horus document needs that — check the file"
                )
        elif tok in ("]", "}"):
            depth = max(0, depth - 1)


def depth_of(value: Any) -> int:
    """The nesting depth of a decoded document (a scalar is 0), without recursion."""
    best = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen: set[int] = set()
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list):
            if id(item) in seen:
                continue
            seen.add(id(item))
            d += 1
            best = max(best, d)
            stack.extend((v, d) for v in (item.values() if isinstance(item, dict) else item))
    return best


def load_json(
    data: bytes | str, where: str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:
    """Parse a JSON document within the size and depth limits."""
    _check_size(data, where, max_bytes)
    text = decode_text(data, where)
    check_depth(text, where, max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:  # unreachable after check_depth; kept so nothing escapes as such
        raise ValidationError(f"{where}: nested too deep to parse") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line (its ``str`` spans several, with a caret drawing)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if not problem:
        return " ".join(str(exc).split())
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
    context = getattr(exc, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases (see the module docstring)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            mark: Any = event.start_mark
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors (&name) and aliases (*name) are not accepted here; write the value out",
                mark,
            )
        return super().compose_node(parent, index)


def _yaml_values(
    data: bytes | str,
    where: str,
    max_bytes: int,
    max_depth: int,
    parse: Callable[[str], list[Any]],
) -> list[Any]:
    """``parse`` (one or all documents, no aliases) of ``data`` within the limits."""
    _check_size(data, where, max_bytes)
    text = decode_text(data, where)
    check_depth(text, where, max_depth)
    try:
        values = parse(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"{where}: not valid JSON or YAML ({_yaml_problem(exc)})") from None
    except RecursionError:
        raise ValidationError(
            f"{where}: nested deeper than this reader can parse (more than {max_depth} "
            "levels of indentation?); no Horus document needs that — check the file"
        ) from None
    if any(depth_of(value) > max_depth for value in values):
        raise ValidationError(f"{where}: nested deeper than {max_depth} levels")
    return values


def load_yaml(
    data: bytes | str, where: str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH
) -> Any:
    """Parse one YAML (or JSON) document within the size and depth limits, no aliases."""
    return _yaml_values(
        data, where, max_bytes, max_depth, lambda text: [yaml.load(text, Loader=_NoAliasLoader)]
    )[0]


def load_yaml_all(
    data: bytes | str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_documents: int = 100,
) -> list[Any]:
    """Every document of a multi-document YAML stream (``---``-separated, as ``kubectl apply
    -f`` files are), within the size and depth limits, no aliases; empty documents dropped."""
    docs = [
        value
        for value in _yaml_values(
            data,
            where,
            max_bytes,
            max_depth,
            lambda text: list(yaml.load_all(text, Loader=_NoAliasLoader)),
        )
        if value is not None
    ]
    if len(docs) > max_documents:
        raise ValidationError(f"{where}: holds more than {max_documents} documents; split the file")
    return docs


def read_text_file(path: Path | str, where: str | None = None, *, max_bytes: int) -> str:
    """A file's text: its size checked before it is read, a binary file named as such."""
    p = Path(path)
    name = where or str(p)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise ValidationError(
                f"{name}: {_human(size)} is larger than the {_human(max_bytes)} this input may be"
            )
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)  # a file that grew since stat: still bounded
    except OSError as exc:
        raise ValidationError(f"cannot read {name}: {exc.strerror or exc}") from None
    _check_size(data, name, max_bytes)
    return decode_text(data, name)


# --- API responses -----------------------------------------------------------------------------


def _too_deep_spans(text: str, max_depth: int) -> Iterator[tuple[int, int]]:
    """(start, end) of every value that opens at depth ``max_depth + 1`` (outermost only)."""
    depth = 0
    start = -1
    for match in _JSON_TOKENS.finditer(text):
        tok = match.group()
        if tok in ("[", "{"):
            depth += 1
            if depth == max_depth + 1:
                start = match.start()
        elif tok in ("]", "}"):
            if depth == max_depth + 1 and start >= 0:
                yield start, match.end()
                start = -1
            depth -= 1


def loads_api_json(data: bytes | str, max_depth: int = API_MAX_DEPTH) -> Any:
    """Decode a response of the Kubernetes API, even when one object in it is absurdly deep.

    The fast path is ``json.loads``. Only when that fails on depth are the values nested below
    ``max_depth`` replaced by :data:`TOO_DEEP` (a string), so the rest of a list decodes and
    the one bad object can be refused by name (its own depth check sees the marker).
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except RecursionError:
        pass
    marker = json.dumps(TOO_DEEP)
    out: list[str] = []
    last = 0
    for start, end in _too_deep_spans(text, max_depth):
        out.append(text[last:start])
        out.append(marker)
        last = end
    out.append(text[last:])
    return json.loads("".join(out))
