"""Keeping the image cache bounded: buildah's storage keeps only the images and step cache
that the descriptors record, and the OCI layout only the blobs its named images use."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import fields

from horus.devcluster.image_cache import BuiltImage, Log, blob, buildah, cache_dir, storage_images


def prune_storage(log: Log) -> list[str]:
    """Remove from buildah's storage every image no build needs; returns their IDs.

    Kept: every named image (the bases, the built images) and every step image a descriptor
    records, i.e. the step cache of each image's last build in every stage, so an unchanged
    image stays seconds and a changed source rebuilds only from the step it touches. Gone:
    the steps of earlier builds (an old source's ``COPY`` and everything after it). Not
    ``buildah rmi --prune``: it counts a multi-stage build's first stage as dangling (no named
    image stands on it) and drops the cache of its dependency layer. When a descriptor of an
    image in storage records no steps (written before they were), nothing is removed: its
    cache cannot be told from leftovers until that image is built once more. Working
    containers left by a killed build go first (every build holds the cache's build lock)."""
    present = storage_images()
    named = {ident for ident, names in present.items() if names}
    keep = set(named)
    for path in sorted((cache_dir() / "descriptors").glob("*.json")):
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if set(raw) - {f.name for f in fields(BuiltImage)}:
            path.unlink(missing_ok=True)  # the hand-written builder's, read by nothing now
            continue
        if not raw.get("steps") and raw.get("image_id") in named:
            log(f"images: buildah storage not pruned: {raw.get('ref')} has no recorded steps")
            return []
        keep.update(raw.get("steps") or ())
    # Working containers: every build of this cache holds the build lock, so one left now is
    # a killed build's (buildah bud removes its own); each holds a writable layer and its
    # image.
    subprocess.run(buildah("rm", "--all"), capture_output=True)
    removed = []
    for ident in present:
        # in use by a working container (a build of another checkout's stale lock): kept
        if (
            ident not in keep
            and subprocess.run(buildah("rmi", ident), capture_output=True).returncode == 0
        ):
            removed.append(ident)
    if removed:
        log(f"images: removed {len(removed)} image(s) of earlier builds from buildah's storage")
    return removed


def prune_layout() -> None:
    """Drop what no named image of the OCI layout uses: a push under a name already there
    leaves the old manifest in the index without its name. Without this the layout only
    grows. buildah's own storage: :func:`prune_storage`."""
    for legacy in ("layers", "stages", "bases", "wheels"):  # the hand-written builder's cache
        shutil.rmtree(cache_dir() / legacy, ignore_errors=True)
    layout = cache_dir() / "oci"
    if not (layout / "index.json").is_file():
        return
    index = json.loads((layout / "index.json").read_text())
    named = [
        e
        for e in index.get("manifests", [])
        if (e.get("annotations") or {}).get("org.opencontainers.image.ref.name")
        and blob(layout, e["digest"]).is_file()
    ]
    keep: set[str] = set()
    for entry in named:
        keep.add(entry["digest"].removeprefix("sha256:"))
        manifest = json.loads(blob(layout, entry["digest"]).read_text())
        keep.add(manifest["config"]["digest"].removeprefix("sha256:"))
        keep.update(d["digest"].removeprefix("sha256:") for d in manifest["layers"])
    tmp = layout / "index.json.tmp"
    tmp.write_text(json.dumps({**index, "manifests": named}))
    tmp.replace(layout / "index.json")
    for stored in (layout / "blobs" / "sha256").iterdir():
        if stored.name not in keep:
            stored.unlink(missing_ok=True)
