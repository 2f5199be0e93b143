"""The device plugin on the real kube-apiserver: inventory on a kwok node, Allocate for a pod
with a signed assignment, and refusals (with Events) of forged, unsigned, missing, mismatching
and malformed assignments. The kubelet side is the spec-written peer in deviceplugin_peer.py."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import grpc
import pytest
from dp_cluster_support import DpEnv, RunningPlugin

from deviceplugin_peer import assignment_annotations, pod_manifest, sign_created_pod
from horus.api.inventory import decode_inventory, simulated_gpu_uuid
from horus.api.resources import memory_units
from horus.api.signing import KeyRing, SigningKey
from horus.common import constants as c

CORE, MEM = c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY


def create_pod(
    env: DpEnv,
    name: str,
    core: int,
    mem_units: int,
    ann: dict[str, str],
    key: KeyRing | None = None,
    sign_as: tuple[str, str] | None = None,
) -> None:
    """Create the pod, then sign its assignment for its UID (as the extender's bind does) with
    ``key`` (default: the operator's) when ``ann`` carries a signature."""
    env.core.create_namespaced_pod(
        env.namespace, pod_manifest(env.namespace, name, env.node, core, mem_units, ann)
    )
    if c.ANNOTATION_ASSIGNMENT_SIGNATURE in ann:
        sign_created_pod(env.core, key or env.key, env.namespace, name, sign_as)


def delete_pod(env: DpEnv, name: str) -> None:
    env.core.delete_namespaced_pod(name, env.namespace, grace_period_seconds=0)


def events_for(env: DpEnv, pod: str, timeout: float = 10) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = env.core.list_namespaced_event(
            env.namespace, field_selector=f"involvedObject.name={pod}"
        ).items
        found = [e for e in items if e.reason == c.EVENT_REASON_ALLOCATE_REFUSED]
        if found:
            return found
        time.sleep(0.2)
    return []


def test_inventory_annotation_is_published(dp_env: DpEnv, plugin: RunningPlugin) -> None:
    node = dp_env.core.read_node(dp_env.node)
    ann = node.metadata.annotations
    gpus = decode_inventory(ann[c.ANNOTATION_GPU_INVENTORY])
    assert [g.uuid for g in gpus] == [simulated_gpu_uuid(dp_env.node, i) for i in range(2)]
    assert {g.health for g in gpus} == {c.GPU_HEALTHY}
    assert ann[c.ANNOTATION_GPU_MEMORY_UNIT] == str(c.DEFAULT_GPU_MEMORY_UNIT_MIB)
    # what the kubelet derives as capacity from the device lists
    assert len(plugin.kubelet.lists[CORE]) == 200
    assert len(plugin.kubelet.lists[MEM]) == 2 * 81920 // c.DEFAULT_GPU_MEMORY_UNIT_MIB


def test_allocate_for_a_signed_assignment(dp_env: DpEnv, plugin: RunningPlugin) -> None:
    uuid = simulated_gpu_uuid(dp_env.node, 1)
    ann = assignment_annotations(
        dp_env.key, dp_env.namespace, "good", dp_env.node, uuid, 1, 40, 12288
    )
    units = memory_units(12288, c.DEFAULT_GPU_MEMORY_UNIT_MIB)
    create_pod(dp_env, "good", 40, units, ann)
    try:
        core = plugin.kubelet.allocate_n(CORE, 40)
        mem = plugin.kubelet.allocate_n(MEM, units)
        for response in (core, mem):
            envs = response.envs
            assert envs["NVIDIA_VISIBLE_DEVICES"] == uuid == envs["CUDA_VISIBLE_DEVICES"]
            assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
            assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=12288M"
            assert envs["CUDA_MPS_PIPE_DIRECTORY"] == c.MPS_PIPE_DIRECTORY_DEFAULT
            assert envs[c.ENV_POD_NAME] == "good" and envs[c.ENV_GPU_INDEX] == "1"
            assert response.mounts[0].container_path == c.MPS_PIPE_DIRECTORY_DEFAULT
        pod = dp_env.core.read_namespaced_pod("good", dp_env.namespace)
        assert envs[c.ENV_POD_UID] == pod.metadata.uid
        # its own progress directory (issue 26), made on the node and keyed by its UID
        progress = [m for m in core.mounts if m.container_path == "/var/run/horus/progress"]
        assert len(progress) == 1 and envs["HORUS_PROGRESS_DIR"] == "/var/run/horus/progress"
        assert progress[0].host_path.endswith(f"/progress/{pod.metadata.uid}")
        assert os.path.isdir(progress[0].host_path) and not progress[0].read_only
        marks = json.loads(pod.metadata.annotations[c.ANNOTATION_GPU_ALLOCATED])
        assert set(marks) == {CORE, MEM}
        assert events_for(dp_env, "good", timeout=0.5) == []
    finally:
        delete_pod(dp_env, "good")


FORGER = KeyRing.of(SigningKey.generate())  # a key pair Horus never published


def _annotations(
    case: str, env: DpEnv, name: str
) -> tuple[dict[str, str], KeyRing | None, tuple[str, str] | None]:
    uuid = simulated_gpu_uuid(env.node, 0)
    if case == "missing":
        return {}, None, None
    if case == "malformed":
        return (
            {c.ANNOTATION_GPU_ASSIGNMENT: '{"node": "' + env.node + '", "gpuUUID": 7'},
            None,
            None,
        )
    key = {"forged": FORGER, "unsigned": None}.get(case, env.key)
    sign_as = (env.namespace, "someone-else") if case == "copied" else None
    ann = assignment_annotations(key, env.namespace, name, env.node, uuid, 0, 30, 4096, sign_as)
    return ann, key, sign_as


@pytest.mark.parametrize(
    ("case", "request_core", "expect"),
    [
        ("forged", 30, "invalid horus.io/gpu-assignment-signature"),
        ("unsigned", 30, "has no horus.io/gpu-assignment-signature"),
        ("copied", 30, "invalid horus.io/gpu-assignment-signature"),
        ("missing", 30, "has no horus.io/gpu-assignment annotation"),
        ("mismatch", 60, "requests horus.io/gpu-core=60 but its assignment grants 30"),
        ("malformed", 30, "malformed assignment"),
    ],
)
def test_bad_assignments_are_refused_with_an_event(
    dp_env: DpEnv, plugin: RunningPlugin, case: str, request_core: int, expect: str
) -> None:
    name = f"bad-{case}"
    ann, key, sign_as = _annotations(case, dp_env, name)
    create_pod(dp_env, name, request_core, 16, ann, key, sign_as)
    try:
        with pytest.raises(grpc.RpcError) as info:
            plugin.kubelet.allocate_n(CORE, request_core)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert expect in info.value.details()
        events = events_for(dp_env, name)
        assert events, f"no {c.EVENT_REASON_ALLOCATE_REFUSED} Event on pod {name}"
        assert events[0].type == "Warning" and expect in events[0].message
        pod = dp_env.core.read_namespaced_pod(name, dp_env.namespace)
        assert c.ANNOTATION_GPU_ALLOCATED not in (pod.metadata.annotations or {})
    finally:
        delete_pod(dp_env, name)


def test_unhealthy_gpu_reaches_kubelet_and_node(dp_env: DpEnv, plugin: RunningPlugin) -> None:
    """A GPU failing (simulated through the health file) turns its IDs Unhealthy in
    ListAndWatch and its inventory entry Unhealthy on the Node; recovery reverses both."""
    sick = simulated_gpu_uuid(dp_env.node, 0)
    kubelet = plugin.kubelet

    def state(health: str) -> bool:
        ids = [h for i, h in kubelet.lists[CORE].items() if i.startswith(sick)]
        return bool(ids) and set(ids) == {health}

    def node_health() -> list[str]:
        ann = dp_env.core.read_node(dp_env.node).metadata.annotations
        return [g.health for g in decode_inventory(ann[c.ANNOTATION_GPU_INVENTORY])]

    health_file = plugin.plugin_dir / "health.json"
    health_file.write_text(json.dumps({"0": c.GPU_UNHEALTHY}))
    try:
        assert kubelet.wait(lambda: state("Unhealthy"), 10)
        deadline = time.monotonic() + 10
        while node_health() != [c.GPU_UNHEALTHY, c.GPU_HEALTHY] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert node_health() == [c.GPU_UNHEALTHY, c.GPU_HEALTHY]
    finally:
        health_file.write_text("{}")
    assert kubelet.wait(lambda: state("Healthy"), 10)
