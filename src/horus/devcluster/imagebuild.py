"""Build an OCI image from a Dockerfile without a Docker engine or a registry.

The local cluster's real nodes (:mod:`horus.devcluster.realnodes`) need Horus' images, and
this machine has neither Docker nor access to Docker Hub. So the Dockerfiles are *executed*
here, instruction by instruction, as a root user would by hand:

* ``FROM python:<X.Y[.Z]>-slim-<suite>`` is stood in for by Debian itself: ``mmdebstrap
  --variant=minbase <suite>`` with ``python3``, ``python3-venv`` and ``python-is-python3``
  (documentation, man pages and locales left out, as in the slim images). The suite must ship
  the tag's Python (bookworm 3.11, trixie 3.13), else the build stops and says so. ``FROM
  scratch`` and ``FROM <earlier stage>`` are what they are in docker;
* ``RUN`` runs in a ``chroot`` of the stage's root inside private mount and PID namespaces
  (``unshare``), with ``/proc`` and a minimal ``/dev``; when the command installs the build
  context with pip (``pip install "."`` or ``".[extra]"``), it installs offline from wheels
  downloaded on this host for the image's Python and glibc (``PIP_NO_INDEX``,
  ``PIP_FIND_LINKS``): pip inside the chroot could not verify a registry's TLS anyway;
* ``COPY`` honours ``.dockerignore`` and ``--from=<stage>``; files end up owned by root;
* each stage's changes become one layer (files added or changed since its base, whiteouts for
  removals), so images built on the same base share its layer in containerd.

Every stage is cached by content — its base, its instructions, the bytes it copies and the
wheels it installs — so building an unchanged image again costs the time to hash the build
context (well under a second). Caches live in ``${HORUS_CACHE_DIR:-~/.cache/horus}/images``.

This module is the builder: cache keys, stages, the Debian stand-in base and the RUN sandbox.
The parts it uses live beside it: :mod:`~horus.devcluster.dockerfile` (parsing),
:mod:`~horus.devcluster.buildcontext` (``.dockerignore``, COPY's sources and copying),
:mod:`~horus.devcluster.layers` (snapshots, layer tars, whiteouts) and
:mod:`~horus.devcluster.wheels` (what ``pip install`` installs, downloaded as wheels).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.buildcontext import Ignore, content_key, copy_entries, tree, walk_sources
from horus.devcluster.dockerfile import (
    Dockerfile,
    Instruction,
    Stage,
    split_copy,
    split_env,
    substitute,
)
from horus.devcluster.layers import extract_layer, file_digest, snapshot, write_layer
from horus.devcluster.wheels import download_wheels, pip_target, project_requirements

#: Debian suites that can stand in for python:<version>-slim-<suite>: (Python, glibc).
SUITES = {"bookworm": ("3.11", "2.36"), "trixie": ("3.13", "2.41")}
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
#: Mount point of the wheel folder inside the chroot (exists in every Debian root, empty).
WHEELS_MOUNT = "/mnt"
#: Bumped when the way layers are made changes, so old cache entries are not reused.
BUILDER_VERSION = "1"

Log = Callable[[str], None]


def cache_dir() -> Path:
    root = os.environ.get("HORUS_CACHE_DIR") or str(Path.home() / ".cache" / "horus")
    return Path(root) / "images"


def _sha(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class StageResult:
    """A built stage: its layers (base first) and the image config it accumulated."""

    layers: list[str]  # sha256 hex digests of uncompressed layer tars in the layer cache
    env: dict[str, str]
    user: str = ""
    workdir: str = ""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    exposed: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)


# --- the builder -----------------------------------------------------------------------------


class Builder:
    """Builds Dockerfiles of one build context into cached layers and configs."""

    def __init__(self, context: Path, python: str | None = None, log: Log | None = None) -> None:
        self.context = context.resolve()
        self.cache = cache_dir()
        self.layers = self.cache / "layers"
        self.python = python or sys.executable
        self.log: Log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.ignore = Ignore(self.context)
        self._results: dict[str, StageResult] = {}
        self._content: dict[str, str] = {}

    # -- keys --

    def base_key(self, base: str, where: str) -> tuple[str, str]:
        """(cache key, suite) of a ``python:…-slim-<suite>`` stand-in."""
        m = re.fullmatch(
            r"(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)", base
        )
        if m is None:
            raise ValidationError(
                f"{where}: FROM {base}: the local builder stands in Debian for "
                "python:<X.Y>-slim-<suite> images (and builds FROM scratch or an earlier stage);"
                " build other bases with docker"
            )
        version, suite = m.group(1), m.group(2)
        if suite not in SUITES:
            raise ValidationError(f"{where}: FROM {base}: unknown Debian suite {suite!r}")
        if SUITES[suite][0] != version:
            raise ValidationError(
                f"{where}: FROM {base}: Debian {suite} ships Python {SUITES[suite][0]}, not "
                f"{version}; the local builder stands in Debian's python3 for the python image, "
                f"so use python:{SUITES[suite][0]}-slim-{suite}"
            )
        spec = json.dumps([suite, MIRROR, BASE_PACKAGES, DPKG_EXCLUDES, BUILDER_VERSION])
        return _sha("base", spec), suite

    def stage_key(self, df: Dockerfile, stage: Stage) -> str:
        """Identifies everything the stage makes: its files and its config."""
        n = _fs_prefix(stage)
        tail = [f"{i.keyword} {i.args}" for i in stage.instructions[n:]]
        return _sha(self.fs_key(df, stage), *tail)

    def fs_key(self, df: Dockerfile, stage: Stage) -> str:
        """Identifies the stage's files: its parent and its instructions up to the last one
        that writes files (ENTRYPOINT, CMD, … after it change no layer, so two images that
        differ only there share their layers)."""
        where = f"{df.path}:{stage.line}"
        if stage.base == "scratch":
            parent = _sha("scratch")
        elif (earlier := df.stage(stage.base)) is not None and earlier is not stage:
            parent = self.stage_key(df, earlier)
        else:
            parent = self.base_key(stage.base, where)[0]
        parts = [BUILDER_VERSION, parent]
        for ins in stage.instructions[: _fs_prefix(stage)]:
            at = f"{df.path}:{ins.line}"
            parts.append(f"{ins.keyword} {ins.args}")
            if ins.keyword == "COPY":
                src_stage, sources, _ = split_copy(ins, at)
                if src_stage is None:
                    # Hashed once per build, so images built together see one context even
                    # while files change under them.
                    memo = "\0".join(sources)
                    if memo not in self._content:
                        self._content[memo] = content_key(self.context, sources, self.ignore, at)
                    parts.append(self._content[memo])
                else:
                    other = df.stage(src_stage)
                    if other is None:
                        raise ValidationError(f"{at}: COPY --from={src_stage}: no such stage")
                    parts.append(self.fs_key(df, other))
            elif ins.keyword == "RUN" and (extras := pip_target(ins, at)) is not None:
                parts.append(self.wheel_key(stage_suite(df, stage), extras))
        return _sha(*parts)

    def stages_used(self) -> set[str]:
        """Keys of the stage records this builder read or wrote."""
        return set(self._results)

    def wheel_key(self, suite: str, extras: list[str]) -> str:
        req = project_requirements(self.context / "pyproject.toml", extras)
        return _sha("wheels", suite, *req, BUILDER_VERSION)

    # -- building --

    def build(self, df: Dockerfile, stage: Stage | None = None) -> StageResult:
        """The (cached) result of ``stage`` (default: the last one)."""
        stage = stage or df.stages[-1]
        key = self.fs_key(df, stage)
        result = self._results.get(key)
        record = self.cache / "stages" / f"{key}.json"
        if result is None and record.is_file():
            result = StageResult(**json.loads(record.read_text()))
            if not all((self.layers / f"{d}.tar").is_file() for d in result.layers):
                result = None
        if result is None:
            result = self._build_stage(df, stage)
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(asdict(result), indent=2))
        self._results[key] = result
        final = _copy_result(result)
        self._apply_metadata(df, stage.instructions[_fs_prefix(stage) :], final)
        return final

    def _parent(self, df: Dockerfile, stage: Stage) -> StageResult:
        where = f"{df.path}:{stage.line}"
        if stage.base == "scratch":
            return StageResult(layers=[], env={"PATH": DEFAULT_PATH})
        earlier = df.stage(stage.base)
        if earlier is not None and earlier is not stage:
            return self.build(df, earlier)
        key, suite = self.base_key(stage.base, where)
        layer = self.cache / "bases" / f"{key}.digest"
        if not layer.is_file() or not (self.layers / f"{layer.read_text().strip()}.tar").is_file():
            self._debootstrap(suite, key)
        return StageResult(
            layers=[layer.read_text().strip()],
            env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
            cmd=["python3"],
            history=[
                f"{stage.base} stood in by Debian {suite} minbase + {' '.join(BASE_PACKAGES)}"
            ],
        )

    def _debootstrap(self, suite: str, key: str) -> None:
        if shutil.which("mmdebstrap") is None:
            raise ClusterError(
                "building images needs mmdebstrap (Debian package mmdebstrap): run "
                "tools/dev/setup.sh or apt-get install -y mmdebstrap"
            )
        self.layers.mkdir(parents=True, exist_ok=True)
        (self.cache / "bases").mkdir(parents=True, exist_ok=True)
        tmp = self.layers / f"base-{key}.tar.tmp"
        self.log(f"images: Debian {suite} base (mmdebstrap; first time only, about 2 min)")
        argv = [
            *("mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet"),
            "--include=" + ",".join(BASE_PACKAGES),
            *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            '--aptopt=Acquire::Retries "3"',
            *(suite, str(tmp), MIRROR),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0 or not tmp.is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.unlink(missing_ok=True)
            raise ClusterError(
                f"mmdebstrap {suite} failed (exit {proc.returncode}); it needs the Debian mirror "
                f"{MIRROR} (HORUS_DEBIAN_MIRROR): {proc.stderr.strip()[-2000:]}"
            )
        digest = file_digest(tmp)
        tmp.replace(self.layers / f"{digest}.tar")
        (self.cache / "bases" / f"{key}.digest").write_text(digest)

    @contextlib.contextmanager
    def _rootfs(self, layers: list[str], only: list[str] | None = None) -> Iterator[Path]:
        """The layers unpacked in a scratch folder (``only``: just those paths)."""
        work = self.cache / "work"
        work.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=work))
        try:
            root.chmod(0o755)
            for digest in layers:
                extract_layer(self.layers / f"{digest}.tar", root, only)
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _build_stage(self, df: Dockerfile, stage: Stage) -> StageResult:
        """The stage's files (one layer) and its config up to its last file-writing
        instruction; the rest of its config is applied by :meth:`build`."""
        parent = self._parent(df, stage)
        result = _copy_result(parent)
        prefix = stage.instructions[: _fs_prefix(stage)]
        if not prefix:
            return result
        started = time.monotonic()
        shown = (
            df.path.relative_to(self.context) if df.path.is_relative_to(self.context) else df.path
        )
        self.log(f"images: building stage {stage.name!r} of {shown}")
        with self._rootfs(parent.layers) as root:
            before = snapshot(root)
            for ins in prefix:
                where = f"{df.path}:{ins.line}"
                if ins.keyword == "WORKDIR":
                    result.workdir = substitute(ins.args, result.env)
                    (root / result.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
                elif ins.keyword == "COPY":
                    self._copy(df, ins, where, root, result)
                elif ins.keyword == "RUN":
                    self._run(df, stage, ins, where, root, result)
                else:
                    self._metadata(ins, where, result)
                result.history.append(f"{ins.keyword} {ins.args}")
            digest = write_layer(root, before, self.layers)
        if digest is not None:
            result.layers.append(digest)
        self.log(f"images: stage {stage.name!r} built in {time.monotonic() - started:.0f}s")
        return result

    def _apply_metadata(
        self, df: Dockerfile, instructions: list[Instruction], result: StageResult
    ) -> None:
        for ins in instructions:
            self._metadata(ins, f"{df.path}:{ins.line}", result)
            result.history.append(f"{ins.keyword} {ins.args}")

    def _metadata(self, ins: Instruction, where: str, result: StageResult) -> None:
        if ins.keyword == "ENV":
            for k, v in split_env(ins, where):
                result.env[k] = substitute(v, result.env)
        elif ins.keyword == "USER":
            result.user = substitute(ins.args, result.env)
        elif ins.keyword in ("ENTRYPOINT", "CMD"):
            value = ins.exec_form() or ["/bin/sh", "-c", ins.args]
            if ins.keyword == "ENTRYPOINT":
                result.entrypoint, result.cmd = value, []
            else:
                result.cmd = value
        elif ins.keyword == "LABEL":
            for k, v in split_env(ins, where):
                result.labels[k] = v
        elif ins.keyword == "EXPOSE":
            for port in ins.args.split():
                result.exposed.append(port if "/" in port else f"{port}/tcp")

    def _copy(
        self, df: Dockerfile, ins: Instruction, where: str, root: Path, result: StageResult
    ) -> None:
        src_stage, sources, dest = split_copy(ins, where)
        dest = substitute(dest, result.env)
        if not dest.startswith("/"):
            dest = (result.workdir or "/").rstrip("/") + "/" + dest
        as_dir = dest.endswith("/") or len(sources) > 1
        target = root / dest.lstrip("/")
        if src_stage is None:
            for source in sources:
                entries = walk_sources(self.context, source, self.ignore, where)
                copy_entries(entries, entries[0], target, as_dir)
            return
        other = df.stage(src_stage)
        assert other is not None  # stage_key checked it
        built = self.build(df, other)
        paths = [src.lstrip("/") for src in sources]
        with self._rootfs(built.layers, only=paths) as other_root:
            for source in sources:
                src = other_root / source.lstrip("/")
                if not src.exists() and not src.is_symlink():
                    raise ValidationError(f"{where}: {source} does not exist in stage {src_stage}")
                entries = [src] if not src.is_dir() else [src, *tree(src)]
                copy_entries(entries, src, target, as_dir)

    def _run(
        self,
        df: Dockerfile,
        stage: Stage,
        ins: Instruction,
        where: str,
        root: Path,
        result: StageResult,
    ) -> None:
        command = ins.exec_form()
        env = {**result.env, "HOME": "/root"}
        wheels = ""
        extras = pip_target(ins, where)
        if extras is not None:
            wheels = str(self.wheelhouse(stage_suite(df, stage), extras))
            env.update(
                PIP_NO_INDEX="1",
                PIP_FIND_LINKS=WHEELS_MOUNT,
                PIP_DISABLE_PIP_VERSION_CHECK="1",
                PIP_ROOT_USER_ACTION="ignore",
            )
        userspec = []
        if result.user:
            if not re.fullmatch(r"\d+(:\d+)?", result.user):
                raise ValidationError(
                    f"{where}: RUN after USER {result.user}: the local builder runs commands as "
                    "a numeric uid[:gid] only"
                )
            userspec = [f"--userspec={result.user if ':' in result.user else result.user + ':0'}"]
        workdir = result.workdir or "/"
        inner = (
            [*command]
            if command is not None
            else ["/bin/sh", "-c", f"cd {json.dumps(workdir)} && {ins.args}"]
        )
        script = (
            'set -e; R="$1"; W="$2"; shift 2\n'
            'mount -t proc proc "$R/proc"\n'
            'mount -t tmpfs -o mode=755,size=16m tmpfs "$R/dev"\n'
            "for d in null zero full random urandom tty; do\n"
            '  touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done\n'
            'if [ -n "$W" ]; then mount --bind "$W" "$R' + WHEELS_MOUNT + '";'
            ' mount -o remount,bind,ro "$R' + WHEELS_MOUNT + '"; fi\n'
            'exec chroot "$@"\n'
        )
        argv = [
            *("unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child"),
            *("/bin/sh", "-c", script, "sh", str(root), wheels),
            *userspec,
            str(root),
            *inner,
        ]
        self.log(f"images:   RUN {ins.args[:100]}")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterError(
                f"{where}: RUN failed (exit {proc.returncode}):\n"
                + (proc.stdout + proc.stderr).strip()[-3000:]
            )

    def wheelhouse(self, suite: str, extras: list[str]) -> Path:
        """Wheels of the context's project (and the extras asked for) and its build backend,
        for the suite's Python and glibc, downloaded once by this host's pip."""
        folder = self.cache / "wheels" / self.wheel_key(suite, extras)
        if not (folder / ".complete").is_file():
            python, glibc = SUITES[suite]
            req = project_requirements(self.context / "pyproject.toml", extras)
            download_wheels(folder, python, glibc, req, self.python, self.log)
        return folder


def stage_suite(df: Dockerfile, stage: Stage) -> str:
    """The Debian suite a stage ultimately stands on (for its wheels)."""
    seen = set()
    while (earlier := df.stage(stage.base)) is not None and stage.name not in seen:
        seen.add(stage.name)
        stage = earlier
    m = re.search(r"-slim-(\w+)$", stage.base)
    if m is None or m.group(1) not in SUITES:
        raise ValidationError(
            f"{df.path}:{stage.line}: pip install needs a python:<X.Y>-slim-<suite> base here"
        )
    return m.group(1)


def _fs_prefix(stage: Stage) -> int:
    """How many of the stage's instructions run up to its last file-writing one."""
    last = 0
    for i, ins in enumerate(stage.instructions):
        if ins.keyword in ("COPY", "RUN", "WORKDIR"):
            last = i + 1
    return last


def _copy_result(result: StageResult) -> StageResult:
    copied: StageResult = StageResult(**json.loads(json.dumps(asdict(result))))
    return copied


def prune(keep_layers: set[str], keep_stages: set[str]) -> int:
    """Remove cached layers and stage records not in the keep sets (base layers always stay);
    returns the bytes freed. Every build context change makes new layers of ~0.5 GB, so
    without this the cache only grows."""
    cache = cache_dir()
    bases = {p.read_text().strip() for p in (cache / "bases").glob("*.digest")}
    freed = 0
    for record in (cache / "stages").glob("*.json"):
        if record.stem not in keep_stages:
            record.unlink(missing_ok=True)
    for layer in (cache / "layers").glob("*.tar"):
        digest = layer.name.removesuffix(".tar")
        if digest not in keep_layers and digest not in bases:
            freed += layer.stat().st_size
            layer.unlink(missing_ok=True)
    return freed
