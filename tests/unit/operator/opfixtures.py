"""Hand-made API objects (raw JSON dicts, as the apiserver returns them) for operator unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.inventory import GpuDevice, encode_inventory, simulated_gpu_uuid
from horus.common import constants as c
from signing_keys import KEY, sign_pod, sign_record

ROOT = Path(__file__).resolve().parents[3]


def profile_doc(name: str = "resnet50-bs64") -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "profiles" / f"{name}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def inline_profile(name: str = "resnet50-bs64") -> dict[str, Any]:
    doc = profile_doc(name)
    return {k: doc[k] for k in ("model", "batchSize", "features", "family") if k in doc}


def node(
    name: str,
    gpus: int = 2,
    memory: int = 81920,
    ready: bool = True,
    unschedulable: bool = False,
    unhealthy: tuple[int, ...] = (),
) -> dict[str, Any]:
    devs = [
        GpuDevice(
            i,
            simulated_gpu_uuid(name, i),
            "H100",
            memory,
            c.GPU_UNHEALTHY if i in unhealthy else c.GPU_HEALTHY,
        )
        for i in range(gpus)
    ]
    return {
        "metadata": {
            "name": name,
            "annotations": {c.ANNOTATION_GPU_INVENTORY: encode_inventory(devs)},
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def share(node_name: str, index: int, core: int = 50, mem: int = 10000) -> dict[str, Any]:
    return {
        "node": node_name,
        "gpuUUID": simulated_gpu_uuid(node_name, index),
        "gpuIndex": index,
        "corePercent": core,
        "memoryMiB": mem,
    }


#: The key pair the fixtures sign with (what the operator and extender under test hold).
__all__ = ["KEY", "sign_pod"]


def dljob(
    name: str,
    placements: list[dict[str, Any]] | None = None,
    phase: str | None = None,
    replicas: int = 1,
    gpu: dict[str, Any] | None = None,
    namespace: str = "default",
    gpus_per_replica: int = 1,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if placements:
        status["placements"] = [{"replica": i, **p} for i, p in enumerate(placements)]
    obj: dict[str, Any] = {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
        "spec": {
            "replicas": replicas,
            "gpusPerReplica": gpus_per_replica,
            "profile": inline_profile(),
            "gpu": gpu or {"mode": "explicit", "corePercent": 50, "memoryMiB": 10000},
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }
    if status:
        status[c.STATUS_PLACEMENT_EPOCH] = 1  # the operator's first signed write
        obj["status"] = status
        sign_record(obj)
    return obj


def pod(
    name: str,
    assignment: GpuAssignment | None,
    phase: str = "Running",
    namespace: str = "default",
    job: str | None = None,
    replica: int | None = None,
) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if assignment is not None:
        ann[c.ANNOTATION_GPU_ASSIGNMENT] = encode_assignment(assignment)
    labels = {c.LABEL_DLJOB_NAME: job, c.LABEL_REPLICA_INDEX: str(replica)} if job else {}
    return sign_pod(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": ann,
                "labels": labels,
            },
            "spec": {"nodeName": assignment.node if assignment else None},
            "status": {"phase": phase},
        }
    )


def assignment(
    node_name: str,
    index: int,
    core: int = 50,
    mem: int = 10000,
    job: str | None = None,
    replica: int | None = None,
) -> GpuAssignment:
    return GpuAssignment(
        node=node_name,
        gpu_uuid=simulated_gpu_uuid(node_name, index),
        gpu_index=index,
        core_percent=core,
        memory_mib=mem,
        job=job,
        replica=replica,
    )
