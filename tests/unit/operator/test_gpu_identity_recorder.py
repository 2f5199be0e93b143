"""The operator's writer of the GPU identity registry (horus.operator.identities) against an
in-memory ConfigMap that behaves as the apiserver's merge patch does (resourceVersion checked)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from horus.api.inventory import GpuDevice, encode_inventory
from horus.common import constants as c
from horus.dra.slices import build_slice_spec
from horus.operator.identities import IdentityRecorder


class Conflict(Exception):
    pass


class FakeApi:
    def __init__(self, data: dict[str, str] | None = None) -> None:
        self.cm: dict[str, Any] | None = (
            None if data is None else {"metadata": {"resourceVersion": "1"}, "data": dict(data)}
        )
        self.events: list[Mapping[str, Any]] = []
        self.patches: list[Mapping[str, Any]] = []

    def read(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.cm)

    def create(self) -> dict[str, Any]:
        assert self.cm is None
        self.cm = {"metadata": {"resourceVersion": "1"}}
        return copy.deepcopy(self.cm)

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        assert self.cm is not None
        self.patches.append(copy.deepcopy(dict(body)))
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != self.cm["metadata"]["resourceVersion"]:
            raise Conflict(want)
        data = self.cm.setdefault("data", {})
        for key, value in (body.get("data") or {}).items():  # a merge patch: null removes
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        self.cm["metadata"]["resourceVersion"] = str(
            int(self.cm["metadata"]["resourceVersion"]) + 1
        )
        return copy.deepcopy(self.cm)

    def post_event(self, body: Mapping[str, Any]) -> None:
        self.events.append(body)


def _gpus(*uuids: str) -> list[GpuDevice]:
    return [GpuDevice(i, u, "H100", 81920) for i, u in enumerate(uuids)]


def _node(name: str, gpus: list[GpuDevice] | None = None) -> dict[str, Any]:
    ann = {c.ANNOTATION_GPU_INVENTORY: encode_inventory(gpus)} if gpus is not None else {}
    return {"metadata": {"name": name, "annotations": ann}}


def _slice(node: str, gpus: list[GpuDevice]) -> dict[str, Any]:
    return {"metadata": {"name": node}, "spec": build_slice_spec(node, gpus, 1)}


def test_the_leader_creates_the_registry_and_records_each_nodes_gpus() -> None:
    api = FakeApi(None)
    nodes = [_node("node-a"), _node("node-b")]
    slices = [_slice("node-a", _gpus("GPU-a0")), _slice("node-b", _gpus("GPU-b0", "GPU-b1"))]
    rec = IdentityRecorder(api, lambda: (nodes, slices), lambda: True)
    assert rec.tick() == 3
    assert api.cm is not None
    assert api.cm["data"] == {"GPU-a0": "node-a", "GPU-b0": "node-b", "GPU-b1": "node-b"}
    assert api.patches[0]["metadata"] == {"resourceVersion": "1"}  # conditional on what it read
    assert rec.registry is not None and rec.registry.owner("GPU-b1") == "node-b"
    assert rec.tick() == 0  # nothing new: no write
    assert len(api.patches) == 1


def test_a_liar_never_takes_a_registered_gpu_and_is_told_once() -> None:
    api = FakeApi({"GPU-b0": "node-b"})
    nodes = [_node("node-a", _gpus("GPU-a0", "GPU-b0")), _node("node-b", _gpus("GPU-b0"))]
    rec = IdentityRecorder(api, lambda: (nodes, None), lambda: True, "op-1")
    assert rec.tick() == 1
    assert api.cm is not None and api.cm["data"] == {"GPU-b0": "node-b", "GPU-a0": "node-a"}
    rec.tick()
    assert len(api.events) == 1
    event = api.events[0]
    assert event["reason"] == c.EVENT_REASON_GPU_IDENTITY_CONFLICT and event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "node-a"
    assert "GPU-b0" in event["message"] and "registered to node node-b" in event["message"]


def test_a_follower_reads_but_never_writes() -> None:
    api = FakeApi(None)
    rec = IdentityRecorder(api, lambda: ([_node("node-a", _gpus("GPU-a0"))], None), lambda: False)
    assert rec.tick() == 0
    assert api.cm is None and not api.patches
    api.cm = {"metadata": {"resourceVersion": "7"}, "data": {"GPU-x": "node-x"}}
    rec.tick()
    assert rec.registry is not None and rec.registry.owner("GPU-x") == "node-x"
    assert not api.patches


def test_a_concurrent_write_fails_the_round_and_the_next_one_reads_again() -> None:
    api = FakeApi({})
    nodes = [_node("node-a", _gpus("GPU-a0")), _node("node-z")]
    rec = IdentityRecorder(api, lambda: (nodes, None), lambda: True)
    real_read = api.read

    def stale() -> dict[str, Any] | None:
        out = real_read()
        assert api.cm is not None
        api.cm["metadata"]["resourceVersion"] = "99"  # someone wrote after this read
        api.cm.setdefault("data", {})["GPU-a0"] = "node-z"
        return out

    api.read = stale  # type: ignore[method-assign]
    with pytest.raises(Conflict):
        rec.tick()
    api.read = real_read  # type: ignore[method-assign]
    assert rec.tick() == 0  # registered to node-z meanwhile: never re-assigned
    assert api.cm is not None and api.cm["data"] == {"GPU-a0": "node-z"}


def test_a_deleted_nodes_gpus_are_released_and_register_on_their_new_node() -> None:
    """A GPU moved to a new node (the old Node object deleted): its entry is removed in one
    round, and it registers to the node that publishes it now in the next — never re-assigned
    in place (the policy refuses that, the operator included)."""
    api = FakeApi({"GPU-m": "old-node", "GPU-b0": "node-b"})
    nodes = [_node("node-b", _gpus("GPU-b0")), _node("new-node", _gpus("GPU-m"))]
    rec = IdentityRecorder(api, lambda: (nodes, None), lambda: True)
    rec.tick()
    assert api.patches[-1]["data"] == {"GPU-m": None}
    assert api.cm is not None and "GPU-m" not in api.cm["data"]
    rec.tick()
    assert api.cm["data"] == {"GPU-b0": "node-b", "GPU-m": "new-node"}
    # a view holding no node releases nothing
    api2 = FakeApi({"GPU-x": "node-x"})
    IdentityRecorder(api2, lambda: ([], None), lambda: True).tick()
    assert api2.cm is not None and api2.cm["data"] == {"GPU-x": "node-x"} and not api2.patches
