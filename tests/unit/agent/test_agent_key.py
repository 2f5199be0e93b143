"""The agent picks up a rotated assignment key without a restart (issue 21: the mounted
Secret changes, every component verifies with the new key and, during the rotation, the
previous one). Runs whole agent cycles; the apiserver is replaced at the ApiClient seam."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import KEY, assignment, pod_obj, sim_agent_settings

from horus.agent.agent import Agent
from horus.agent.kube import AgentApi
from horus.api.assignment import encode_assignment
from horus.api.inventory import GpuDevice, encode_inventory, simulated_gpu_uuid
from horus.api.signing import sign_assignment
from horus.common import constants as c
from kube_fakes import RawResponse

NODE = "n1"
NEW = b"the-next-cluster-key-0123456789ab"


class Apiserver:
    """Serves this node and a pod list the test changes between cycles."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        gpus = [GpuDevice(i, simulated_gpu_uuid(NODE, i), "H100", 81920) for i in range(2)]
        ann = {
            c.KWOK_NODE_ANNOTATION: c.KWOK_NODE_ANNOTATION_VALUE,
            c.ANNOTATION_GPU_INVENTORY: encode_inventory(gpus),
        }
        self.node = json.dumps({"metadata": {"name": NODE, "annotations": ann}}).encode()

    def param_serialize(self, method: str, path: str, **kw: Any) -> tuple[Any, ...]:
        return (method, path, kw.get("query_params"), kw.get("body"))

    def call_api(self, method: str, path: str, *_: Any, **__: Any) -> RawResponse:
        if method != "GET":
            return RawResponse(200, b"{}")
        if path == "/api/v1/pods":
            return RawResponse(200, json.dumps({"items": self.pods}).encode())
        if path == f"/api/v1/nodes/{NODE}":
            return RawResponse(200, self.node)
        return RawResponse(404, b"not found")


def signed_pod(name: str, key: bytes, gpu: int) -> dict[str, Any]:
    obj = pod_obj(name, NODE, assignment(NODE, gpu), sign=False)
    text = encode_assignment(assignment(NODE, gpu))
    obj["metadata"]["annotations"][c.ANNOTATION_ASSIGNMENT_SIGNATURE] = sign_assignment(
        key, "ns", name, text
    )
    return obj


def test_a_rotated_key_is_used_from_the_next_cycle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    api = Apiserver()
    api.pods = [signed_pod("before", KEY, 0), signed_pod("after", NEW, 1)]
    settings = sim_agent_settings(NODE, key_file)
    agent = Agent(settings, AgentApi(api), predictor=lambda: None)
    assert set(agent.cycle().pods) == {"uid-before"}  # the new key is not known yet
    # the Secret is rotated: new key, the old one still verifies as previous
    key_file.write_bytes(NEW)
    (tmp_path / "previous").write_bytes(KEY)
    assert set(agent.cycle().pods) == {"uid-before", "uid-after"}
    # the rotation ends: the old key is dropped
    (tmp_path / "previous").unlink()
    assert set(agent.cycle().pods) == {"uid-after"}
    # an unreadable key file keeps the ring in use, said once
    key_file.write_bytes(b"short")
    with caplog.at_level(logging.WARNING):
        assert set(agent.cycle().pods) == {"uid-after"}
        assert set(agent.cycle().pods) == {"uid-after"}
    said = [
        r.getMessage()
        for r in caplog.records
        if "verifying with the key read before" in r.getMessage()
    ]
    assert len(said) == 1 and "need at least 16" in said[0]
