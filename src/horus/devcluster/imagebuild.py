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
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from horus.common.errors import ClusterError, ValidationError
from horus.devcluster.dockerfile import (
    Dockerfile,
    Instruction,
    Stage,
    split_copy,
    split_env,
    substitute,
)

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


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
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


# --- .dockerignore ---------------------------------------------------------------------------


class Ignore:
    """The ``.dockerignore`` patterns of a build context (``**`` and ``!`` supported)."""

    def __init__(self, context: Path) -> None:
        self.rules: list[tuple[bool, str]] = []
        path = context / ".dockerignore"
        if path.is_file():
            for raw in path.read_text().splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                negate = line.startswith("!")
                pattern = line.lstrip("!").strip("/")
                self.rules.append((negate, pattern))

    def ignored(self, rel: str) -> bool:
        out = False
        for negate, pattern in self.rules:
            if self._match(rel, pattern):
                out = not negate
        return out

    @staticmethod
    def _match(rel: str, pattern: str) -> bool:
        parts = rel.split("/")
        # a pattern matches the path or any of its parent folders
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if pattern.startswith("**/") and any(
                fnmatch.fnmatchcase("/".join(parts[j:i]), pattern[3:]) for j in range(i)
            ):
                return True
        return False


def _walk_sources(context: Path, source: str, ignore: Ignore, where: str) -> list[Path]:
    """Files and folders of one COPY source, relative to the context, without ignored ones."""
    base = (context / source).resolve()
    if context.resolve() not in (base, *base.parents):
        raise ValidationError(f"{where}: COPY source {source!r} is outside the build context")
    if not base.exists():
        raise ValidationError(f"{where}: COPY source {source!r} does not exist in {context}")
    if base.is_file() or base.is_symlink():
        return [base]
    out = [base]
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        here = Path(dirpath)
        keep = []
        for d in dirnames:
            if not ignore.ignored(str((here / d).relative_to(context.resolve()))):
                keep.append(d)
                out.append(here / d)
        dirnames[:] = keep
        for f in sorted(filenames):
            p = here / f
            if not ignore.ignored(str(p.relative_to(context.resolve()))):
                out.append(p)
    return out


def content_key(context: Path, sources: list[str], ignore: Ignore, where: str) -> str:
    """A digest of what COPY would copy: names, modes and bytes."""
    h = hashlib.sha256()
    for source in sources:
        root = (context / source).resolve()
        for p in _walk_sources(context, source, ignore, where):
            st = p.lstat()
            rel = str(p.relative_to(root.parent))
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(file_digest(p).encode())
    return h.hexdigest()


# --- file system snapshots and layers ----------------------------------------------------------


Signature = tuple[int, int, int, int, int, int, int, str]


def snapshot(root: Path) -> dict[str, Signature]:
    """Every path under ``root`` with what changes when it is written (ctime included)."""
    out: dict[str, Signature] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            link = os.readlink(p) if os.path.islink(p) else ""
            out[os.path.relpath(p, root)] = (
                st.st_mode,
                st.st_uid,
                st.st_gid,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
                link,
            )
    return out


def write_layer(root: Path, before: dict[str, Signature], layers: Path) -> str | None:
    """The changes under ``root`` since ``before`` as a layer tar; returns its digest (None
    when nothing changed)."""
    after = snapshot(root)
    changed = sorted(p for p, sig in after.items() if before.get(p) != sig)
    gone = sorted(p for p in before if p not in after)
    removed: list[str] = []
    for p in gone:  # a removed folder's whiteout covers its contents
        if not any(p.startswith(r + "/") for r in removed):
            removed.append(p)
    if not changed and not removed:
        return None
    layers.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=layers, suffix=".tar.tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    listing = tmp.with_suffix(".list")
    listing.write_text("".join(f"./{p}\n" for p in changed))
    try:
        proc = subprocess.run(
            [
                *("tar", "--create", "--file", str(tmp), "--directory", str(root)),
                *("--no-recursion", "--numeric-owner", "--xattrs", "--files-from", str(listing)),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise ClusterError(f"writing a layer failed: {proc.stderr.strip()}")
        if removed:
            with tarfile.open(tmp, "a", format=tarfile.GNU_FORMAT) as tar:
                for p in removed:
                    head, tail = os.path.split(p)
                    info = tarfile.TarInfo(os.path.join(".", head, f".wh.{tail}"))
                    info.mtime = int(time.time())
                    tar.addfile(info)
        digest = file_digest(tmp)
        tmp.replace(layers / f"{digest}.tar")
        return digest
    finally:
        tmp.unlink(missing_ok=True)
        listing.unlink(missing_ok=True)


def extract_layer(layer: Path, root: Path, only: list[str] | None = None) -> None:
    """Apply one layer to ``root``: whiteouts remove, everything else is unpacked (``only``:
    just the members at or under those paths)."""
    listing = subprocess.run(
        ["tar", "--list", "--file", str(layer)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    present: set[str] = set()
    for name in listing:
        rel = name.removeprefix("./").rstrip("/")
        hit = [p for p in only or [] if rel == p or rel.startswith(p + "/")]
        if only is not None and not hit:
            continue
        present.update(hit)
        head, tail = os.path.split(name)
        if tail.startswith(".wh."):
            target = root / head / tail[4:]
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
    if only is not None and not present:
        return
    dot = "./" if listing and listing[0].startswith("./") else ""
    # Members named by their top folder: tar takes everything under it (no per-file list,
    # whose matching is quadratic in GNU tar).
    select = [dot + p for p in sorted(present)]
    proc = subprocess.run(
        [
            *("tar", "--extract", "--file", str(layer), "--directory", str(root)),
            *("--numeric-owner", "--same-permissions", "--xattrs", "--wildcards"),
            *("--exclude", "*/.wh.*", "--exclude", ".wh.*", *select),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise ClusterError(f"unpacking layer {layer.name} failed: {proc.stderr.strip()}")


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
        self.log(f"images: building stage {stage.name!r} of {df.path.relative_to(self.context)}")
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
                entries = _walk_sources(self.context, source, self.ignore, where)
                _copy_entries(entries, entries[0], target, as_dir)
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
                entries = [src] if not src.is_dir() else [src, *_tree(src)]
                _copy_entries(entries, src, target, as_dir)

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
        if (folder / ".complete").is_file():
            return folder
        python, glibc = SUITES[suite]
        major, minor = (int(x) for x in glibc.split("."))
        platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 16, -1)]
        platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
        tag = python.replace(".", "")
        req = project_requirements(self.context / "pyproject.toml", extras)
        tmp = folder.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.log(f"images: downloading {len(req)} requirement(s) as wheels for Python {python}")
        argv = [
            *(self.python, "-m", "pip", "download", "--quiet", "--dest", str(tmp)),
            *("--only-binary=:all:", "--python-version", python, "--implementation", "cp"),
            *("--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none"),
            *(x for p in platforms for x in ("--platform", p)),
            *req,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ClusterError(
                "downloading the image's wheels failed (pip needs PyPI): "
                + proc.stderr.strip()[-2000:]
            )
        (tmp / ".complete").write_text("\n".join(req))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.replace(folder)
        return folder


def _tree(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out += [Path(dirpath) / d for d in dirnames]
        out += [Path(dirpath) / f for f in sorted(filenames)]
    return out


def _copy_entries(entries: list[Path], src_root: Path, target: Path, as_dir: bool) -> None:
    """Copy like docker's COPY: a folder's contents into ``target``, a file to ``target`` (or
    into it when it is a folder), owned by root, modes and mtimes kept."""
    if not src_root.is_dir() or src_root.is_symlink():
        dest = target / src_root.name if (as_dir or target.is_dir()) else target
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_one(src_root, dest)
        return
    target.mkdir(parents=True, exist_ok=True)
    for p in entries[1:]:
        _copy_one(p, target / p.relative_to(src_root))


def _copy_one(src: Path, dest: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copystat(src, dest)
    else:
        if dest.is_symlink() or dest.exists():
            dest.unlink()  # a new inode, so the layer sees the change
        if src.is_symlink():
            os.symlink(os.readlink(src), dest)
        else:
            shutil.copy2(src, dest)
    os.lchown(dest, 0, 0)


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
