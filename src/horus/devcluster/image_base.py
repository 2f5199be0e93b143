"""The base image a Dockerfile names, stood in for locally: this machine pulls no images, so
``python:<X.Y[.Z]>-slim-<suite>`` is committed into buildah's storage under that very name from
a Debian root that ``mmdebstrap --variant=minbase`` makes with ``python3`` (documentation, man
pages and locales left out, as in the slim images)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.image_cache import Log, buildah, cache_dir, has_image, run

#: Debian suites that can stand in for python:<version>-slim-<suite>: their Python.
SUITES = {"bookworm": "3.11", "trixie": "3.13"}
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3")
#: What the slim images leave out too.
DPKG_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MIRROR = os.environ.get("HORUS_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def bases(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines name, other than its own stages and scratch
    (what buildah would pull: it must be in storage here)."""
    found: list[str] = []
    stages: set[str] = set()
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if m is None:
            continue
        if m.group(1) not in stages and m.group(1) != "scratch" and m.group(1) not in found:
            found.append(m.group(1))
        if m.group(2):
            stages.add(m.group(2))
    return found


def base_suite(name: str) -> str:
    """The Debian suite that stands in for ``python:<X.Y[.Z]>-slim-<suite>``."""
    m = re.fullmatch(r"(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", name)
    if m is None:
        raise ValidationError(
            f"FROM {name}: this machine pulls no images; the local build stands in Debian for "
            "python:<X.Y>-slim-<suite> only (and builds FROM scratch or an earlier stage)"
        )
    version, suite = m.group(1), m.group(2)
    if SUITES.get(suite) != version:
        known = ", ".join(f"{s} ({v})" for s, v in SUITES.items())
        raise ValidationError(
            f"FROM {name}: Debian {suite} does not ship Python {version} (known: {known})"
        )
    return suite


def ensure_base(name: str, log: Log) -> None:
    """Commit the Debian stand-in for ``name`` into buildah's storage (first time only)."""
    if has_image(name):
        return
    suite = base_suite(name)
    if shutil.which("mmdebstrap") is None:
        raise ClusterError(
            "building images needs mmdebstrap (Debian package mmdebstrap): run "
            "tools/dev/setup.sh or apt-get install -y mmdebstrap"
        )
    work = cache_dir() / "work"
    work.mkdir(parents=True, exist_ok=True)
    tar = work / f"{suite}-base.tar"
    log(f"images: Debian {suite} base for {name} (mmdebstrap; first time only, about 2 min)")
    argv = [
        *("mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet"),
        "--include=" + ",".join(BASE_PACKAGES),
        *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        '--aptopt=Acquire::Retries "3"',
        *(suite, str(tar), MIRROR),
    ]
    try:
        run(argv, f"mmdebstrap {suite} (it needs the Debian mirror {MIRROR}, HORUS_DEBIAN_MIRROR)")
        container = run(buildah("from", "--quiet", "scratch"), "buildah from scratch").strip()
        try:
            run(buildah("add", "--quiet", container, str(tar), "/"), "buildah add")
            run(
                buildah(
                    *("config", "--env", f"PATH={DEFAULT_PATH}", "--env", "LANG=C.UTF-8"),
                    *("--cmd", "python3", container),
                ),
                "buildah config",
            )
            run(buildah("commit", "--quiet", container, name), f"buildah commit {name}")
        finally:
            subprocess.run(buildah("rm", container), capture_output=True)
    finally:
        tar.unlink(missing_ok=True)
