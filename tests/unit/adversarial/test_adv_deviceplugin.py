"""Hostile device-plugin RPCs and pods, over the plugin's real gRPC server on a unix socket.

The kubelet's side is a plain gRPC client (as ``tests/deviceplugin_peer.py``'s is); the API
server is the in-memory ``FakeNodeApi`` of the device-plugin tests (pods as the apiserver
returns them). Every malformed request gets a gRPC status naming the field; every hostile pod
is refused at Allocate with the reason (and an Event); after each case a well-formed,
correctly signed pod is still allocated — one bad RPC never stops the server.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from dp_fakes import KEY, FakeNodeApi

from deviceplugin_peer import assignment_annotations, pod_manifest
from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.deviceplugin.api import api_pb2 as pb
from horus.deviceplugin.api import api_pb2_grpc as pb_grpc
from horus.deviceplugin.app import build
from horus.deviceplugin.server import MAX_MESSAGE_BYTES
from horus.deviceplugin.settings import DevicePluginSettings
from horus.node.gpus import SimulatedGpus

NODE = "adv-node"
GPUS, MEMORY_MIB = 2, 16384
UUID0, UUID1 = simulated_gpu_uuid(NODE, 0), simulated_gpu_uuid(NODE, 1)


class Plugin:
    """A running plugin (both resources) and stubs dialling its sockets as the kubelet does."""

    def __init__(self, directory: Path, api: FakeNodeApi) -> None:
        settings = DevicePluginSettings(
            node_name=NODE,
            plugin_dir=directory,
            backend="simulated",
            sim_gpu_count=GPUS,
            sim_gpu_memory_mib=MEMORY_MIB,
            health_interval_s=5.0,
            socket_poll_s=0.05,
        )
        backend = SimulatedGpus(NODE, GPUS, "H100", MEMORY_MIB)
        self.manager = build(settings, backend, backend.discover(), api)
        self.api = api
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.manager.run, args=(self.stop,), daemon=True)
        self.thread.start()
        core, mem = (directory / "horus-gpu-core.sock", directory / "horus-gpu-memory.sock")
        for _ in range(200):
            if core.exists() and mem.exists():
                break
            self.stop.wait(0.02)
        self.channels = [grpc.insecure_channel(f"unix://{p}") for p in (core, mem)]
        self.core: Any = pb_grpc.DevicePluginStub(self.channels[0])
        self.mem: Any = pb_grpc.DevicePluginStub(self.channels[1])
        self._n = 0

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
        self.stop.set()
        self.thread.join(10)

    def good_pod(self) -> str:
        """Add a correctly signed pod and allocate it: the plugin still works."""
        self._n += 1
        name = f"good-{self._n}"
        ann = assignment_annotations(KEY, "ml", name, NODE, UUID1, 1, 10, 1024)
        self.api.add(pod_manifest("ml", name, NODE, 10, 4, ann))
        ids = [f"{UUID1}-c{k}" for k in range(10)]
        response = allocate(self.core, [ids])
        assert response.container_responses[0].envs[c.ENV_POD_NAME] == name
        return name


@pytest.fixture
def plugin() -> Iterator[Plugin]:
    directory = Path(tempfile.mkdtemp(prefix="hadv-"))  # unix socket paths must stay short
    running = Plugin(directory, FakeNodeApi())
    try:
        yield running
    finally:
        running.close()
        shutil.rmtree(directory, ignore_errors=True)


def allocate(stub: Any, id_lists: list[list[str]]) -> Any:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in id_lists]
    )
    return stub.Allocate(request, timeout=10)


def preferred(stub: Any, available: list[str], must: list[str], size: int, n: int = 1) -> Any:
    creq = pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
    )
    return stub.GetPreferredAllocation(
        pb.PreferredAllocationRequest(container_requests=[creq] * n), timeout=10
    )


def core_ids(uuid: str, n: int, start: int = 0) -> list[str]:
    return [f"{uuid}-c{k}" for k in range(start, start + n)]


def expect(code: grpc.StatusCode, words: str, call: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, (info.value.code(), info.value.details())
    assert words in (info.value.details() or ""), info.value.details()


# --- malformed RPCs ------------------------------------------------------------------------------

RPC_CASES: list[tuple[str, Any, grpc.StatusCode, str]] = [
    (
        "allocate-no-containers",
        lambda p: allocate(p.core, []),
        grpc.StatusCode.INVALID_ARGUMENT,
        "1..64 container requests",
    ),
    (
        "allocate-65-containers",
        lambda p: allocate(p.core, [core_ids(UUID0, 1)] * 65),
        grpc.StatusCode.INVALID_ARGUMENT,
        "got 65",
    ),
    (
        "allocate-empty-ids",
        lambda p: allocate(p.core, [[]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "devices_ids: empty",
    ),
    (
        "allocate-unknown-id",
        lambda p: allocate(p.core, [["GPU-forged-c1"]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not a horus.io/gpu-core device this plugin advertised",
    ),
    (
        "allocate-duplicate-id",
        lambda p: allocate(p.core, [core_ids(UUID0, 1) * 2]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "listed twice",
    ),
    (
        "allocate-memory-id-to-core",
        lambda p: allocate(p.core, [[f"{UUID0}-m0"]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not a horus.io/gpu-core device",
    ),
    (
        "allocate-core-id-to-memory",
        lambda p: allocate(p.mem, [core_ids(UUID0, 1)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not a horus.io/gpu-memory device",
    ),
    (
        "allocate-long-id",
        lambda p: allocate(p.core, [["x" * 200]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "1..63 characters",
    ),
    (
        "allocate-empty-id",
        lambda p: allocate(p.core, [[""]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "1..63 characters",
    ),
    (
        "allocate-too-many-ids",
        lambda p: allocate(p.core, [core_ids(UUID0, 100) + core_ids(UUID1, 100) + ["extra"]]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "this plugin advertises 200",
    ),
    (
        "allocate-oversized",
        lambda p: allocate(p.core, [["x" * 60] * (MAX_MESSAGE_BYTES // 60 + 10)]),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "",
    ),
    (
        "preferred-no-containers",
        lambda p: p.core.GetPreferredAllocation(pb.PreferredAllocationRequest(), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        "container requests",
    ),
    (
        "preferred-size-zero",
        lambda p: preferred(p.core, core_ids(UUID0, 5), [], 0),
        grpc.StatusCode.INVALID_ARGUMENT,
        "allocation_size",
    ),
    (
        "preferred-size-negative",
        lambda p: preferred(p.core, core_ids(UUID0, 5), [], -3),
        grpc.StatusCode.INVALID_ARGUMENT,
        "allocation_size",
    ),
    (
        "preferred-size-over",
        lambda p: preferred(p.core, core_ids(UUID0, 5), [], 6),
        grpc.StatusCode.INVALID_ARGUMENT,
        "allocation_size",
    ),
    (
        "preferred-must-not-available",
        lambda p: preferred(p.core, core_ids(UUID0, 5), core_ids(UUID1, 1), 2),
        grpc.StatusCode.INVALID_ARGUMENT,
        "must_include_deviceIDs",
    ),
    (
        "preferred-must-over-size",
        lambda p: preferred(p.core, core_ids(UUID0, 5), core_ids(UUID0, 3), 2),
        grpc.StatusCode.INVALID_ARGUMENT,
        "must_include_deviceIDs",
    ),
    (
        "preferred-unknown-available",
        lambda p: preferred(p.core, ["nope-c1"], [], 1),
        grpc.StatusCode.INVALID_ARGUMENT,
        "available_deviceIDs[0]",
    ),
    (
        "preferred-duplicates",
        lambda p: preferred(p.core, core_ids(UUID0, 1) * 3, [], 1),
        grpc.StatusCode.INVALID_ARGUMENT,
        "listed twice",
    ),
    (
        "preferred-100-containers",
        lambda p: preferred(p.core, core_ids(UUID0, 2), [], 1, n=100),
        grpc.StatusCode.INVALID_ARGUMENT,
        "got 100",
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "code", "words"), RPC_CASES, ids=[c[0] for c in RPC_CASES]
)
def test_malformed_rpc_gets_a_status_naming_the_field(
    plugin: Plugin, case: str, call: Any, code: grpc.StatusCode, words: str
) -> None:
    before = len(plugin.api.events)
    expect(code, words, lambda: call(plugin))
    assert len(plugin.api.events) == before  # no pod was blamed for a malformed RPC
    plugin.good_pod()


@pytest.mark.parametrize(
    "payload",
    [b"\xff" * 64, b"\x0a\x05\x0a\x03\xff\xfe\xfd", bytes(range(256))],
    ids=["garbage", "invalid-utf8-id", "all-bytes"],
)
def test_undecodable_request_bytes(plugin: Plugin, payload: bytes) -> None:
    """Bytes that are not an AllocateRequest (or hold a non-UTF-8 string) are refused by the
    gRPC layer; the server goes on."""
    raw = plugin.channels[0].unary_unary(
        "/v1beta1.DevicePlugin/Allocate",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as info:
        raw(payload, timeout=10)
    assert info.value.code() in (
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNKNOWN,
    )
    plugin.good_pod()


# --- hostile pods: refused at Allocate with the reason and an Event ------------------------------


def _pod(name: str, core: int, ann: dict[str, str], **spec_extra: Any) -> dict[str, Any]:
    pod = pod_manifest("ml", name, NODE, core, 4, ann)
    pod["spec"].update(spec_extra)
    return pod


def _signed(name: str, core: int = 30) -> dict[str, str]:
    return assignment_annotations(KEY, "ml", name, NODE, UUID0, 0, core, 1024)


def _init(amount: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "init",
            "image": "busybox",
            "resources": {
                "limits": {c.RESOURCE_GPU_CORE: str(amount)},
                "requests": {c.RESOURCE_GPU_CORE: str(amount)},
            },
        }
    ]


def hostile_pod(case: str) -> tuple[dict[str, Any], int]:
    """(pod, the amount of gpu-core the kubelet asks devices for)."""
    name = f"evil-{case}"
    if case == "init-container-over-share":
        return _pod(name, 30, _signed(name), initContainers=_init(100)), 30
    if case == "init-container-admitted-first":
        return _pod(name, 30, _signed(name), initContainers=_init(100)), 100
    if case == "second-container":
        pod = _pod(name, 30, _signed(name))
        pod["spec"]["containers"].append(dict(pod["spec"]["containers"][0], name="sidecar"))
        return pod, 30
    if case == "unsigned":
        return _pod(
            name, 30, assignment_annotations(None, "ml", name, NODE, UUID0, 0, 30, 1024)
        ), 30
    if case == "copied-signature":
        ann = assignment_annotations(KEY, "ml", name, NODE, UUID0, 0, 30, 1024, sign_as=("ml", "x"))
        return _pod(name, 30, ann), 30
    if case == "deep-assignment":
        return _pod(name, 30, {c.ANNOTATION_GPU_ASSIGNMENT: "[" * 5000 + "]" * 5000}), 30
    if case == "huge-assignment":
        return _pod(name, 30, {c.ANNOTATION_GPU_ASSIGNMENT: '"' + "x" * 300_000 + '"'}), 30
    if case == "assignment-other-node":
        ann = assignment_annotations(KEY, "ml", name, "elsewhere", UUID0, 0, 30, 1024)
        return _pod(name, 30, ann), 30
    if case == "assignment-unknown-gpu":
        ann = assignment_annotations(KEY, "ml", name, NODE, "GPU-not-here", 0, 30, 1024)
        return _pod(name, 30, ann), 30
    raise AssertionError(case)


POD_CASES: list[tuple[str, str]] = [
    ("init-container-over-share", "effective request of horus.io/gpu-core is 100"),
    (
        "init-container-admitted-first",
        "requests horus.io/gpu-core=100 but its assignment grants 30",
    ),
    ("second-container", "containers together 60"),
    ("unsigned", "has no horus.io/gpu-assignment-signature"),
    ("copied-signature", "invalid horus.io/gpu-assignment-signature"),
    ("deep-assignment", "nested deeper"),
    ("huge-assignment", "larger than"),
    ("assignment-other-node", "assignment is for node 'elsewhere'"),
    ("assignment-unknown-gpu", "is not on node"),
]


@pytest.mark.parametrize(("case", "words"), POD_CASES, ids=[c[0] for c in POD_CASES])
def test_hostile_pod_is_refused_at_allocate(plugin: Plugin, case: str, words: str) -> None:
    pod, amount = hostile_pod(case)
    plugin.api.add(pod)
    expect(
        grpc.StatusCode.FAILED_PRECONDITION,
        words,
        lambda: allocate(plugin.core, [core_ids(UUID0, amount)]),
    )
    name = pod["metadata"]["name"]
    assert plugin.api.events[-1][:2] == (name, c.EVENT_REASON_ALLOCATE_REFUSED)
    assert c.ANNOTATION_GPU_ALLOCATED not in plugin.api.get(name)["metadata"]["annotations"]
    plugin.api.pods.remove(plugin.api.get(name))  # the kubelet fails its admission
    plugin.good_pod()


def test_init_container_within_its_share_is_refused_with_the_reason(plugin: Plugin) -> None:
    """Within the share, but the kubelet would call Allocate again for the app container (it
    reuses the init container's devices) and a share is handed out once: refused at the
    first call, saying why, instead of failing obscurely at the second."""
    plugin.api.add(_pod("init-same", 30, _signed("init-same"), initContainers=_init(30)))
    expect(
        grpc.StatusCode.FAILED_PRECONDITION,
        "init container(s) init request horus.io/gpu-core",
        lambda: allocate(plugin.core, [core_ids(UUID0, 30)]),
    )
    plugin.api.pods.remove(plugin.api.get("init-same"))
    plugin.good_pod()


def test_a_hostile_allocated_mark_does_not_stop_allocation(plugin: Plugin) -> None:
    """``horus.io/gpu-allocated`` is written by the plugin, but anyone who may edit the pod may
    rewrite it: a deep or garbled value is read as "not allocated", never a crash."""
    ann = {**_signed("marked"), c.ANNOTATION_GPU_ALLOCATED: "{" * 3000 + "}" * 3000}
    plugin.api.add(_pod("marked", 30, ann))
    response = allocate(plugin.core, [core_ids(UUID0, 30)])
    assert response.container_responses[0].envs[c.ENV_POD_NAME] == "marked"
    plugin.good_pod()


@pytest.mark.parametrize(
    ("quantity", "found"),
    [("1k", True), ("1000", True), ("1e3", False), ("-1k", False), ("1000m", False), ("x", False)],
)
def test_canonical_quantities_find_the_pod(quantity: str, found: bool) -> None:
    """The apiserver stores quantities in canonical form (1000 comes back as "1k"): the pod
    being admitted for 1000 units is found by its parsed amount, never by int()."""
    from horus.deviceplugin.allocator import candidates

    pod = pod_manifest("ml", "big", NODE, 10, 4, {})
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {c.RESOURCE_GPU_MEMORY: quantity},
        "requests": {c.RESOURCE_GPU_MEMORY: quantity},
    }
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    assert bool(candidates([pod], c.RESOURCE_GPU_MEMORY, 1000)) is found
