"""The local image cache (``${HORUS_CACHE_DIR:-~/.cache/horus}/images``) and buildah's storage
in it: the buildah command line bound to that storage, the images it holds, and the
descriptors that record each built image in the cache's OCI layout (:mod:`horus.devcluster.images`
builds them, :mod:`horus.devcluster.image_load` streams them into nodes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from horus.common.errors import ClusterError

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuiltImage:
    """A built image as the import needs it; stored as JSON (its descriptor)."""

    ref: str
    manifest_digest: str
    image_id: str
    layout: str  # the OCI layout folder that holds its blobs
    descriptor: str = ""
    #: of its Dockerfile, bases and context (:func:`horus.devcluster.images.fingerprint`)
    fingerprint: str = ""
    #: buildah's image of every step of its last build, all stages (full IDs): its step cache,
    #: which :func:`horus.devcluster.image_prune.prune_storage` keeps. Empty in a descriptor
    #: written before they were kept.
    steps: tuple[str, ...] = ()


def cache_dir() -> Path:
    root = os.environ.get("HORUS_CACHE_DIR") or str(Path.home() / ".cache" / "horus")
    return Path(root) / "images"


def buildah(*args: str) -> list[str]:
    """buildah with this cache's own storage (overlay: one copy of each layer on disk)."""
    if shutil.which("buildah") is None:
        raise ClusterError(
            "building images needs buildah (Debian package buildah): run tools/dev/setup.sh "
            "or apt-get install -y buildah"
        )
    store = cache_dir() / "storage"
    return [
        *("buildah", "--root", str(store / "root"), "--runroot", str(store / "run")),
        *("--storage-driver", "overlay", *args),
    ]


def run(argv: list[str], what: str, log: Log | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(
            f"{what} failed (exit {proc.returncode}): "
            + (proc.stdout + proc.stderr).strip()[-3000:]
        )
    return proc.stdout


def load_descriptor(path: Path) -> BuiltImage:
    try:
        raw = json.loads(path.read_text())
        image = BuiltImage(**{**raw, "steps": tuple(raw.get("steps", ()))})
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ClusterError(
            f"image descriptor {path} is unreadable ({exc}); rebuild with 'horus dev images build'"
        ) from None
    if not blob(Path(image.layout), image.manifest_digest).is_file():
        raise ClusterError(
            f"{image.ref}: its manifest is gone from {image.layout}; rebuild with "
            "'horus dev images build'"
        )
    return image


def has_image(name: str) -> bool:
    """Whether buildah's storage holds an image of that name."""
    proc = subprocess.run(
        buildah("inspect", "--type", "image", name), capture_output=True, text=True
    )
    return proc.returncode == 0


def storage_images() -> dict[str, list[str]]:
    """Every image in buildah's storage (intermediate ones too): full ID -> its names."""
    listed = run(
        buildah(
            *("images", "--all", "--no-trunc", "--noheading"),
            *("--format", "{{.ID}} {{.Name}}:{{.Tag}}"),
        ),
        "buildah images",
    )
    out: dict[str, list[str]] = {}
    for line in listed.splitlines():
        ident, _, name = line.strip().partition(" ")
        names = out.setdefault(ident.removeprefix("sha256:"), [])
        if name.strip() and name.strip() != "<none>:<none>":
            names.append(name.strip())
    return out


def read_descriptor(path: Path) -> BuiltImage | None:
    if not path.is_file():
        return None
    try:
        return load_descriptor(path)
    except ClusterError:
        return None


def blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def manifest_digest(layout: Path, ref: str) -> str:
    index = json.loads((layout / "index.json").read_text())
    for entry in index.get("manifests", []):
        if (entry.get("annotations") or {}).get("org.opencontainers.image.ref.name") == ref:
            return str(entry["digest"])
    raise ClusterError(f"buildah push wrote no manifest named {ref} into {layout}")
