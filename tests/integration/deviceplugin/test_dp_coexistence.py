"""One device plugin per GPU, on the real kube-apiserver: a node whose capacity lists
nvidia.com/gpu (another device plugin hands its GPUs out) gets no Horus registration, its
horus.io/gpu-inventory is withdrawn and a Warning Event on the Node says why; once the other
plugin's resource is gone the plugin registers and publishes again. The kubelet side is the
spec-written peer (deviceplugin_peer.py); the node is a kwok node whose status the test sets
as the kubelet would."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dp_cluster_support import sim_settings

from deviceplugin_peer import FakeKubelet
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.deviceplugin.app import run_plugin


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _set_nvidia_gpus(core: Any, node: str, count: str) -> None:
    core.patch_node_status(node, {"status": {"capacity": {c.RESOURCE_NVIDIA_GPU: count}}})


def _annotations(core: Any, node: str) -> dict[str, str]:
    return dict(core.read_node(node).metadata.annotations or {})


@pytest.fixture
def gpu_node(cluster: Any) -> Iterator[tuple[Any, str, str]]:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    node = f"dp-coexist-{uuid.uuid4().hex[:6]}"
    core.create_node(node_manifest(node, NodeSpec(count=1, gpus_per_node=2)))
    try:
        yield core, node, cluster.kubeconfig
    finally:
        core.delete_node(node)


def test_no_horus_gpus_beside_another_device_plugin(gpu_node: tuple[Any, str, str]) -> None:
    core, node, kubeconfig = gpu_node
    _set_nvidia_gpus(core, node, "2")
    assert c.ANNOTATION_GPU_INVENTORY in _annotations(core, node)  # the node was Horus'
    folder = Path(tempfile.mkdtemp(prefix="hdpc-"))
    kubelet = FakeKubelet(folder).start()
    settings = sim_settings(
        node, folder, kubeconfig, health_interval_s=0.2, node_check_interval_s=0.5
    )
    stop = threading.Event()
    thread = threading.Thread(target=run_plugin, args=(settings, stop), daemon=True)
    thread.start()
    try:
        assert _wait(lambda: c.ANNOTATION_GPU_INVENTORY not in _annotations(core, node))
        assert c.ANNOTATION_GPU_MEMORY_UNIT not in _annotations(core, node)

        def events() -> list[Any]:
            items = core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node}"
            ).items
            return [e for e in items if e.reason == c.EVENT_REASON_GPU_PLUGIN_CONFLICT]

        assert _wait(lambda: bool(events()))
        event = events()[0]
        assert event.type == "Warning" and event.involved_object.kind == "Node"
        assert f"{c.RESOURCE_NVIDIA_GPU}: 2" in event.message
        assert event.source.component == c.EVENT_COMPONENT_DEVICE_PLUGIN
        time.sleep(1.0)  # two more checks: still nothing registered, still one Event
        assert kubelet.registrations == [] and thread.is_alive()
        assert len(events()) == 1
        # the other plugin is removed from the node: the kubelet drops its resource
        core.patch_node_status(node, [{"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"}])
        assert kubelet.wait(
            lambda: set(kubelet.lists) == {c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY}, 20
        )
        assert _wait(lambda: c.ANNOTATION_GPU_INVENTORY in _annotations(core, node))
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(folder, ignore_errors=True)
