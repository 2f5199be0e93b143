"""File system snapshots and layer tars: what one build stage changed, and applying a layer.

The image builder (:mod:`horus.devcluster.imagebuild`) runs a stage's instructions in an
unpacked root, then records the paths added or changed since a :func:`snapshot` taken before
(ctime included, so a file rewritten with the same size and mtime still counts) and a
whiteout (``.wh.<name>``, the OCI convention) for each path removed. GNU tar writes the layer,
so modes, numeric owners and extended attributes survive as they would in docker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from horus.common.errors import ClusterError


def file_digest(path: Path) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


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
