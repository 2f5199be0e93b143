"""Builders shared by the agent's unit tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from horus.agent.pods import PodInfo
from horus.agent.settings import AgentSettings
from horus.api.assignment import GpuAssignment, PredictedUsage, encode_assignment
from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common import constants as c
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
