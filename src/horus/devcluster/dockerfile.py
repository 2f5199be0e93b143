"""Read a Dockerfile into stages and instructions, so the Dockerfiles users build stay the one
definition of each image even where no Docker engine exists (``horus dev images``).

Only what Horus' Dockerfiles use is understood: ``FROM … [AS name]``, ``WORKDIR``, ``COPY
[--from=stage] src… dest``, ``RUN`` (shell or JSON form), ``ENV``, ``USER``, ``ENTRYPOINT``,
``CMD``, ``LABEL`` and ``EXPOSE``; comments and ``\\`` continuations. Anything else is refused
with the file, the line and what is supported, rather than built differently from ``docker
build``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from horus.common.errors import ValidationError

SUPPORTED = (
    "FROM",
    "WORKDIR",
    "COPY",
    "RUN",
    "ENV",
    "USER",
    "ENTRYPOINT",
    "CMD",
    "LABEL",
    "EXPOSE",
)
MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class Instruction:
    """One instruction: keyword, its raw argument text, and where it was written."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array form of RUN/ENTRYPOINT/CMD, or None for the shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        return value


@dataclass
class Stage:
    """``FROM base [AS name]`` and the instructions up to the next ``FROM``."""

    base: str
    name: str
    line: int
    instructions: list[Instruction] = field(default_factory=list)


@dataclass(frozen=True)
class Dockerfile:
    path: Path
    stages: list[Stage]

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for no, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as docker does
        if not buf:
            start = no
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(b.strip() for b in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse(path: Path) -> Dockerfile:
    """Parse ``path``; errors name the file and line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValidationError(f"{path}: cannot read the Dockerfile ({exc.strerror})") from None
    if len(data) > MAX_BYTES:
        raise ValidationError(
            f"{path}: {len(data)} bytes; a Dockerfile here is at most {MAX_BYTES}"
        )
    stages: list[Stage] = []
    for line, text in _logical_lines(data.decode("utf-8", errors="replace")):
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        where = f"{path}:{line}"
        if keyword not in SUPPORTED:
            raise ValidationError(
                f"{where}: {keyword} is not supported by the local image builder (it builds "
                f"{', '.join(SUPPORTED)}); build this image with docker instead"
            )
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+[Aa][Ss]\s+([A-Za-z0-9_.-]+))?", args.strip())
            if m is None or m.group(1).startswith("--"):
                raise ValidationError(f"{where}: expected 'FROM image [AS name]', got {args!r}")
            stages.append(Stage(base=m.group(1), name=m.group(2) or str(len(stages)), line=line))
            continue
        if not stages:
            raise ValidationError(f"{where}: {keyword} before the first FROM")
        if not args.strip():
            raise ValidationError(f"{where}: {keyword} needs an argument")
        stages[-1].instructions.append(Instruction(keyword, args.strip(), line))
    if not stages:
        raise ValidationError(f"{path}: no FROM instruction")
    return Dockerfile(path, stages)


def split_copy(ins: Instruction, where: str) -> tuple[str | None, list[str], str]:
    """``COPY [--from=stage] src… dest`` → (stage or None, sources, dest)."""
    words = ins.exec_form() or shlex.split(ins.args)
    source_stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            source_stage = flag.split("=", 1)[1]
        else:
            raise ValidationError(f"{where}: COPY {flag} is not supported by the local builder")
    if len(words) < 2:
        raise ValidationError(f"{where}: COPY needs a source and a destination")
    return source_stage, words[:-1], words[-1]


def split_env(ins: Instruction, where: str) -> list[tuple[str, str]]:
    """``ENV k=v k2="v 2"`` or the legacy ``ENV k v``."""
    words = shlex.split(ins.args, posix=True)
    if words and "=" not in words[0]:
        key, _, value = ins.args.partition(" ")
        return [(key, value.strip())]
    pairs = []
    for w in words:
        key, eq, value = w.partition("=")
        if not eq or not key:
            raise ValidationError(f"{where}: ENV expects KEY=VALUE, got {w!r}")
        pairs.append((key, value))
    return pairs


def substitute(value: str, env: dict[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` from the image's environment so far (as ENV does)."""
    return re.sub(
        r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))",
        lambda m: env.get(m.group(1) or m.group(2), ""),
        value,
    )
