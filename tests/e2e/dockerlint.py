"""A small Dockerfile linter for the rules Horus's images must keep (hadolint is not packaged
for Debian, and we need only a few of its rules plus two of our own).

Rules: every ``FROM`` pins a version tag or digest (no bare name, no ``latest``); the final
stage switches to a non-root ``USER``; the ``ENTRYPOINT`` is exec form and starts the role's
module (``python -m horus.<role>``; the predictor tool image uses ``python -m horus``);
``pip install`` installs the repository itself (``.`` or ``.[extras]``), nothing else — or,
with ``-r FILE``, the dependencies the same ``RUN`` wrote to FILE from ``pyproject.toml`` (a
layer of their own, so a changed source does not re-install them).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

#: image folder → the module its ENTRYPOINT must run
ENTRY_MODULES = {
    "operator": "horus.operator",
    "device-plugin": "horus.deviceplugin",
    "predictor": "horus",
}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def check(path: Path, role: str) -> list[str]:
    """Every rule the Dockerfile at ``path`` breaks, as readable sentences."""
    problems: list[str] = []
    ins = instructions(path.read_text())
    stages = [i for i, (op, _) in enumerate(ins) if op == "FROM"]
    if not stages:
        return [f"{path}: no FROM"]
    aliases: set[str] = set()
    for i in stages:
        parts = ins[i][1].split()
        image = parts[0]
        if len(parts) >= 3 and parts[1].upper() == "AS":
            aliases.add(parts[2])
        if image in aliases:
            continue
        tag = image.partition(":")[2]
        if "@sha256:" in image:
            continue
        if not tag:
            problems.append(f"{path}: base image {image!r} is not pinned to a tag")
        elif tag == "latest":
            problems.append(f"{path}: base image {image!r} uses 'latest'; pin a version")
        elif not re.search(r"\d", tag):
            problems.append(f"{path}: base image tag {image!r} names no version (not pinned)")
    final = ins[stages[-1] :]
    users = [args for op, args in final if op == "USER"]
    if not users:
        problems.append(f"{path}: the final stage sets no USER (the image would run as root)")
    elif users[-1].split(":")[0] in ("0", "root"):
        problems.append(f"{path}: the final USER is root")
    entry = [args for op, args in final if op == "ENTRYPOINT"]
    module = ENTRY_MODULES.get(role, f"horus.{role}")
    if not entry:
        problems.append(f"{path}: no ENTRYPOINT (want python -m {module})")
    else:
        try:
            argv = json.loads(entry[-1])
        except json.JSONDecodeError:
            argv = None
        if not isinstance(argv, list):
            problems.append(f"{path}: ENTRYPOINT must be exec form (a JSON list)")
        elif argv[:3] != ["python", "-m", module]:
            problems.append(f"{path}: ENTRYPOINT is {argv}, want python -m {module}")
    for op, args in ins:
        if op != "RUN" or "pip" not in args:
            continue
        commands = shell_commands(args)
        written = {
            cmd[cmd.index(">") + 1]
            for cmd in commands
            if ">" in cmd[:-1] and any("pyproject.toml" in w for w in cmd)
        }
        for words in commands:
            if "pip" not in " ".join(words[:2]) or "install" not in words:
                continue
            after = words[words.index("install") + 1 :]
            files = {after[i + 1] for i, w in enumerate(after[:-1]) if w in ("-r", "--requirement")}
            for f in sorted(files - written):
                problems.append(
                    f"{path}: pip install -r {f}: not written from pyproject.toml in this RUN"
                )
            targets = [w for w in after if not w.startswith("-") and w not in files]
            for t in targets:
                if not re.fullmatch(r"\.(\[[a-z0-9_,-]+\])?", t):
                    problems.append(
                        f"{path}: pip install target {t!r} is not the repository ('.' or '.[extra]')"
                    )
    return problems


def shell_commands(script: str) -> list[list[str]]:
    """The words of each command of a shell line (split at ``&&``, ``||``, ``;``, ``|``, ``&``
    outside quotes; a redirection ``>`` is a word of its own)."""
    lex = shlex.shlex(script, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    for word in lex:
        if word in ("&&", "||", ";", "|", "&"):
            out.append([])
        else:
            out[-1].append(word)
    return [c for c in out if c]
