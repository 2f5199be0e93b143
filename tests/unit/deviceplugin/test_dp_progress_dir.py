"""Each pod gets its own progress directory (issue 26): made under the node's progress root,
keyed by the pod's UID, mounted read-write with $HORUS_PROGRESS_DIR — through the device
plugin's Allocate and the same build_grant the DRA driver uses."""

from __future__ import annotations

import os
from pathlib import Path

from horus.api.assignment import GpuAssignment
from horus.deviceplugin.allocator import Allocator, AssignmentKey
from horus.node.grant import Consumer, GrantPolicy, build_grant
from horus.progress.mount import CONTAINER_DIR
from horus.progress.report import ENV_DIR

NODE = "gpu-node-0000"
UID = "3f1c2b4a-1111-4222-8333-944455556666"
SHARE = GpuAssignment(NODE, "GPU-aaaa", 0, 40, 8192)


def test_allocate_mounts_the_pods_own_progress_directory(tmp_path: Path) -> None:
    alloc = Allocator(
        None,  # type: ignore[arg-type]  # grant() never calls the API
        NODE,
        AssignmentKey(None, None),  # type: ignore[arg-type]
        lambda: [],
        256,
        "none",
        progress_root=tmp_path / "progress",
    )
    pod = {"metadata": {"namespace": "ml", "name": "p1", "uid": UID}}
    grant = alloc.grant(pod, SHARE)
    mounts = [m for m in grant.mounts if m.container_path == CONTAINER_DIR]
    assert len(mounts) == 1 and not mounts[0].read_only
    assert mounts[0].host_path == str(tmp_path / "progress" / UID)
    assert os.path.isdir(mounts[0].host_path)
    assert grant.envs[ENV_DIR] == CONTAINER_DIR


def test_no_directory_without_a_root_a_pod_or_where_it_cannot_be_made(tmp_path: Path) -> None:
    def progress(policy: GrantPolicy, consumer: Consumer | None) -> bool:
        grant = build_grant(policy, SHARE, consumer)
        return ENV_DIR in grant.envs or any(m.container_path == CONTAINER_DIR for m in grant.mounts)

    pod = Consumer("ml", "p1", UID)
    assert not progress(GrantPolicy(NODE, "none"), pod)  # no root configured
    root = tmp_path / "progress"
    assert not progress(GrantPolicy(NODE, "none", progress_root=root), None)  # a shared claim
    assert not progress(GrantPolicy(NODE, "none", progress_root=root), Consumer("ml", "p", ""))
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert not progress(GrantPolicy(NODE, "none", progress_root=blocked), pod)
    assert progress(GrantPolicy(NODE, "none", progress_root=root), pod)
