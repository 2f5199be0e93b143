"""Builders shared by the agent's unit tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from horus.agent.pods import PodInfo
from horus.agent.settings import AgentSettings
from horus.api.assignment import GpuAssignment, PredictedUsage, encode_assignment
from horus.api.inventory import GpuDevice, encode_inventory, simulated_gpu_uuid
from horus.common import constants as c
from kube_fakes import RawResponse
from signing_keys import KEY, sign_pod, write_public_keys

ROOT = Path(__file__).resolve().parents[3]
__all__ = ["KEY", "write_public_keys"]


def assignment(
    node: str = "n1", gpu: int = 0, core: int = 50, mem: int = 2048, job: str | None = None
) -> GpuAssignment:
    return GpuAssignment(
        node, simulated_gpu_uuid(node, gpu), gpu, core, mem, job, 0 if job else None
    )


def pod_obj(
    name: str = "p1",
    node: str = "n1",
    assign: GpuAssignment | None = None,
    predicted: PredictedUsage | None = None,
    extra: dict[str, str] | None = None,
    raw_assignment: str | None = None,
    sign: bool = True,
    phase: str = "Running",
) -> dict[str, Any]:
    text = (
        raw_assignment
        if raw_assignment is not None
        else encode_assignment(assign or assignment(node))
    )
    ann = {c.ANNOTATION_GPU_ASSIGNMENT: text}
    if predicted is not None:
        ann[c.ANNOTATION_PREDICTED] = json.dumps(predicted.to_json())
    obj = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": ann},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }
    if sign:
        sign_pod(obj)
    ann.update(extra or {})
    return obj


def pod(
    name: str = "p1",
    core: int = 50,
    mem: int = 2048,
    util: float = 40.0,
    mem_pred: float = 1000.0,
    gpu: int = 0,
    sim_mem: float | None = None,
    job: str | None = None,
) -> PodInfo:
    return PodInfo(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        node="n1",
        assignment=assignment("n1", gpu, core, mem, job),
        predicted=PredictedUsage(util, util, mem_pred, mem_pred, "test"),
        job=job,
        simulated_memory_mib=sim_mem,
        workload=job or f"Pod/{name}",
    )


def inventory(node: str = "n1", n: int = 2) -> list[GpuDevice]:
    return [GpuDevice(i, simulated_gpu_uuid(node, i), "H100", 81920) for i in range(n)]


def sim_agent_settings(node: str, key_file: Path) -> AgentSettings:
    """An agent on simulated GPUs verifying with ``key_file``: no metrics port, no feedback
    patches during a test."""
    return AgentSettings(
        node_name=node,
        backend="simulated",
        assignment_key_file=key_file,
        metrics_port=0,
        feedback_interval_seconds=3600,
    )


class NodeApiserver:
    """Serves one kwok node with two simulated H100s and a pod list the test changes between
    cycles (an ApiClient's ``param_serialize``/``call_api``, as the agent uses them)."""

    def __init__(self, node: str) -> None:
        self.node_name = node
        self.pods: list[dict[str, Any]] = []
        gpus = [GpuDevice(i, simulated_gpu_uuid(node, i), "H100", 81920) for i in range(2)]
        ann = {
            c.KWOK_NODE_ANNOTATION: c.KWOK_NODE_ANNOTATION_VALUE,
            c.ANNOTATION_GPU_INVENTORY: encode_inventory(gpus),
        }
        self.node = json.dumps({"metadata": {"name": node, "annotations": ann}}).encode()

    def param_serialize(self, method: str, path: str, **kw: Any) -> tuple[Any, ...]:
        return (method, path, kw.get("query_params"), kw.get("body"))

    def call_api(self, method: str, path: str, *_: Any, **__: Any) -> RawResponse:
        if method != "GET":
            return RawResponse(200, b"{}")
        if path == "/api/v1/pods":
            return RawResponse(200, json.dumps({"items": self.pods}).encode())
        if path == f"/api/v1/nodes/{self.node_name}":
            return RawResponse(200, self.node)
        return RawResponse(404, b"not found")
