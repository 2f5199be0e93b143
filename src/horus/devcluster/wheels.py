"""``pip install`` in a RUN: which extras of the build context it installs, the project's
requirements, and the wheels for them, downloaded once by this host's pip.

pip inside the image's chroot could neither reach nor verify a registry, so a RUN may install
only the build context (``pip install "."`` or ``".[extra]"``), offline, from a folder of
wheels this host downloaded for the image's Python and glibc.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.dockerfile import Instruction


def pip_target(ins: Instruction, where: str) -> list[str] | None:
    """The extras of ``pip install "."``/``".[a,b]"`` in a RUN (None when no pip install)."""
    if ins.keyword != "RUN" or "pip install" not in ins.args:
        return None
    m = re.search(
        r"pip install(?:\s+--?[\w-]+(?:=\S+)?)*\s+[\"']?\.(?:\[([\w,\s-]*)\])?[\"']?(?:\s|$|&&)",
        ins.args,
    )
    if m is None:
        raise ValidationError(
            f"{where}: the local builder installs only the build context with pip "
            '(pip install "." or ".[extra]"), offline from wheels it downloads'
        )
    return [e.strip() for e in (m.group(1) or "").split(",") if e.strip()]


def project_requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """Requirements of the project in ``pyproject`` with ``extras``, plus its build backend."""
    try:
        data: dict[str, Any] = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValidationError(
            f"{pyproject}: cannot read the project's requirements ({exc})"
        ) from None
    project = data.get("project") or {}
    req = list(project.get("dependencies") or [])
    optional = project.get("optional-dependencies") or {}
    for extra in extras:
        if extra not in optional:
            raise ValidationError(f"{pyproject}: no optional dependency group {extra!r}")
        req += optional[extra]
    req += list((data.get("build-system") or {}).get("requires") or [])
    return sorted(set(req))


def download_wheels(
    folder: Path,
    python: str,
    glibc: str,
    requirements: list[str],
    pip_python: str,
    log: Callable[[str], None],
) -> None:
    """Download ``requirements`` as wheels for CPython ``python`` on glibc ``glibc`` (x86-64)
    into ``folder``, with ``pip_python``'s pip; ``folder/.complete`` marks a finished one."""
    major, minor = (int(x) for x in glibc.split("."))
    platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 16, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    tag = python.replace(".", "")
    tmp = folder.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"images: downloading {len(requirements)} requirement(s) as wheels for Python {python}")
    argv = [
        *(pip_python, "-m", "pip", "download", "--quiet", "--dest", str(tmp)),
        *("--only-binary=:all:", "--python-version", python, "--implementation", "cp"),
        *("--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none"),
        *(x for p in platforms for x in ("--platform", p)),
        *requirements,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(
            "downloading the image's wheels failed (pip needs PyPI): " + proc.stderr.strip()[-2000:]
        )
    (tmp / ".complete").write_text("\n".join(requirements))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
