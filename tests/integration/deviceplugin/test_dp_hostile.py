"""Hostile pods at Allocate, stored by the real kube-apiserver (issue 20, item 4's defense in
depth): a pod whose init container asks for more of a Horus resource than its signed
assignment grants is refused with the reason and a Warning Event, as is a pod whose
assignment annotation is nested thousands deep; a well-formed pod is allocated afterwards."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from dp_cluster_support import DpEnv, RunningPlugin

from deviceplugin_peer import assignment_annotations, pod_manifest, sign_created_pod
from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c

CORE = c.RESOURCE_GPU_CORE


def _refused_events(env: DpEnv, pod: str, timeout: float = 10) -> list[Any]:
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


def _create(env: DpEnv, manifest: dict[str, Any]) -> str:
    """Create the pod; a signed assignment is signed again for the created pod's UID."""
    env.core.create_namespaced_pod(env.namespace, manifest)
    name = str(manifest["metadata"]["name"])
    if c.ANNOTATION_ASSIGNMENT_SIGNATURE in (manifest["metadata"].get("annotations") or {}):
        sign_created_pod(env.core, env.key, env.namespace, name)
    return name


def _delete(env: DpEnv, name: str) -> None:
    env.core.delete_namespaced_pod(name, env.namespace, grace_period_seconds=0)


def test_init_container_over_the_signed_share_is_refused(
    dp_env: DpEnv, plugin: RunningPlugin
) -> None:
    uuid = simulated_gpu_uuid(dp_env.node, 0)
    name = "init-escape"
    ann = assignment_annotations(dp_env.key, dp_env.namespace, name, dp_env.node, uuid, 0, 30, 2048)
    manifest = pod_manifest(dp_env.namespace, name, dp_env.node, 30, 8, ann)
    manifest["spec"]["initContainers"] = [
        {
            "name": "grab",
            "image": "registry.invalid/init:1",
            "resources": {"limits": {CORE: "100"}, "requests": {CORE: "100"}},
        }
    ]
    _create(dp_env, manifest)
    try:
        with pytest.raises(grpc.RpcError) as info:
            plugin.kubelet.allocate_n(CORE, 30)  # the app container's share
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = info.value.details() or ""
        assert "effective request of horus.io/gpu-core is 100" in details, details
        assert "largest init container 100" in details and "grants 30" in details
        events = _refused_events(dp_env, name)
        assert events and "effective request" in events[0].message
        pod = dp_env.core.read_namespaced_pod(name, dp_env.namespace)
        assert c.ANNOTATION_GPU_ALLOCATED not in (pod.metadata.annotations or {})
    finally:
        _delete(dp_env, name)


def test_deep_assignment_is_refused_and_the_plugin_goes_on(
    dp_env: DpEnv, plugin: RunningPlugin
) -> None:
    name = "deep-assignment"
    ann = {c.ANNOTATION_GPU_ASSIGNMENT: "[" * 5000 + "]" * 5000}
    _create(dp_env, pod_manifest(dp_env.namespace, name, dp_env.node, 20, 8, ann))
    try:
        with pytest.raises(grpc.RpcError) as info:
            plugin.kubelet.allocate_n(CORE, 20)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "nested deeper than" in (info.value.details() or "")
        assert _refused_events(dp_env, name)
    finally:
        _delete(dp_env, name)
    # the next, well-formed pod is allocated
    uuid = simulated_gpu_uuid(dp_env.node, 1)
    good = "after-deep"
    ann = assignment_annotations(dp_env.key, dp_env.namespace, good, dp_env.node, uuid, 1, 20, 2048)
    _create(dp_env, pod_manifest(dp_env.namespace, good, dp_env.node, 20, 8, ann))
    try:
        response = plugin.kubelet.allocate_n(CORE, 20)
        assert response.envs[c.ENV_POD_NAME] == good
    finally:
        _delete(dp_env, good)
