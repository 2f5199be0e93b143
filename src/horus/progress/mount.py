"""The per-pod progress directory: where it lives on the node and how a container gets it.

One function for both node paths (the device plugin's ``Allocate`` and the DRA driver's
``NodePrepareResources``): each pod gets its own host directory, keyed by its UID, mounted
read-write at :data:`CONTAINER_DIR` with ``$HORUS_PROGRESS_DIR`` naming it. Keyed by UID, not
name, so a pod made again under the same name never reads or inherits another's progress, and
a pod sees only its own directory (a job cannot write another pod's file).

The default host root is under ``/run`` (tmpfs): progress is worth nothing after a reboot, and
the dev cluster's real nodes each get a private ``/run/horus`` (``horus.devcluster.hostenv``),
so two simulated nodes on one machine never share one.

Names live here and not in ``horus.common.constants`` because this package must import nothing
of Horus (``report.py`` is copied into workload images as it is).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from horus.progress.report import ENV_DIR

#: The host directory under which each pod's progress directory is made (chart: node.progressRoot).
DEFAULT_HOST_ROOT = "/run/horus/progress"
#: Where the container sees its own directory.
CONTAINER_DIR = "/var/run/horus/progress"
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class ProgressMount:
    """What a container gets: ``host_path`` bound read-write at ``container_path``, ``env``."""

    host_path: str
    container_path: str
    env: dict[str, str]


def progress_dir(root: Path, pod_uid: str) -> Path:
    """The host directory of pod ``pod_uid`` under ``root``; a UID that is not a Kubernetes
    UID (lower-case UUID) raises ValueError, so no name can reach outside ``root``."""
    if not _UID.fullmatch(pod_uid):
        raise ValueError(f"not a pod UID: {pod_uid!r:.60}")
    return root / pod_uid


def progress_mount(root: Path, pod_uid: str, create: bool = True) -> ProgressMount:
    """The progress mount of pod ``pod_uid`` (``create``: make its directory now, mode 0777 so
    a container running as any user can write it; it is mounted into that pod only)."""
    path = progress_dir(root, pod_uid)
    if create:
        root.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o777)  # one pod's own directory, mounted into that pod only
    return ProgressMount(str(path), CONTAINER_DIR, {ENV_DIR: CONTAINER_DIR})


def remove_stale(root: Path, keep_uids: Iterable[str], older_than: float = 0.0) -> list[str]:
    """Remove the progress directories of pods not in ``keep_uids`` (pods gone from the node)
    that nothing changed for ``older_than`` seconds (a pod just allocated may not be listed
    yet); returns the UIDs removed. Only entries named like a pod UID are touched."""
    keep = set(keep_uids)
    now = time.time()
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if _UID.fullmatch(entry.name) and entry.name not in keep:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < older_than:
                    continue
            except FileNotFoundError:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
    return removed
