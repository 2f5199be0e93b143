"""Simulated GPU nodes: kwok-managed Node objects that look as the device plugin will make them.

Each node carries the extended resources ``horus.io/gpu-core`` (100 per GPU) and
``horus.io/gpu-memory`` (MiB) in its capacity, and the ``horus.io/gpu-inventory`` annotation
listing its GPUs, in the exact format :mod:`horus.api.inventory` defines for the device plugin.
kwok (started by ``horus dev cluster up``) keeps the nodes Ready and runs pods bound to them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from horus.api.inventory import GpuDevice, encode_inventory, simulated_gpu_uuid
from horus.common import constants as c
from horus.common.errors import ClusterError, ValidationError


@dataclass(frozen=True)
class NodeSpec:
    """The shape of a batch of simulated GPU nodes."""

    count: int
    gpus_per_node: int = 8
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81920
    prefix: str = "gpu-node"
    cpu: str = "96"
    memory: str = "1Ti"

    def __post_init__(self) -> None:
        if not 1 <= self.count <= 5000:
            raise ValidationError(f"--count must be between 1 and 5000, got {self.count}")
        if not 1 <= self.gpus_per_node <= 16:
            raise ValidationError(
                f"--gpus-per-node must be between 1 and 16, got {self.gpus_per_node}"
            )
        if not 1024 <= self.gpu_memory_mib <= 1_048_576:
            raise ValidationError(
                f"--gpu-memory-mib must be between 1024 and 1048576 MiB, got {self.gpu_memory_mib}"
            )
        if not self.gpu_model.replace("-", "").replace("_", "").isalnum():
            raise ValidationError(
                f"--gpu-model must be letters, digits, '-' or '_' (e.g. H100), got {self.gpu_model!r}"
            )


def node_manifest(name: str, spec: NodeSpec) -> dict[str, Any]:
    """The Node object for one simulated GPU node."""
    gpus = [
        GpuDevice(
            index=i,
            uuid=simulated_gpu_uuid(name, i),
            model=spec.gpu_model,
            memory_mib=spec.gpu_memory_mib,
        )
        for i in range(spec.gpus_per_node)
    ]
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": "250",
        c.RESOURCE_GPU_CORE: str(c.GPU_CORE_UNITS_PER_GPU * spec.gpus_per_node),
        c.RESOURCE_GPU_MEMORY: str(spec.gpu_memory_mib * spec.gpus_per_node),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                c.KWOK_NODE_ANNOTATION: c.KWOK_NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
                c.ANNOTATION_GPU_INVENTORY: encode_inventory(gpus),
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                c.KWOK_NODE_TYPE_LABEL: c.KWOK_NODE_TYPE_VALUE,
                c.LABEL_GPU_NODE: "true",
                c.LABEL_GPU_MODEL: spec.gpu_model,
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "kwok",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "kwok",
                "kernelVersion": "",
                "osImage": "kwok",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
            },
        },
    }


def _existing_names(core: Any, prefix: str) -> set[str]:
    return {
        n.metadata.name for n in core.list_node().items if n.metadata.name.startswith(prefix + "-")
    }


def add_nodes(kubeconfig: str, spec: NodeSpec, wait: float = 120.0) -> list[str]:
    """Create ``spec.count`` new nodes (numbered after existing ones) and wait until Ready."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    core: Any = client.CoreV1Api(api)
    existing = _existing_names(core, spec.prefix)
    names: list[str] = []
    i = 0
    while len(names) < spec.count:
        name = f"{spec.prefix}-{i:04d}"
        if name not in existing:
            names.append(name)
        i += 1
    for name in names:
        core.create_node(node_manifest(name, spec))
    deadline = time.monotonic() + wait
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for node in core.list_node().items:
            conds = {cd.type: cd.status for cd in (node.status.conditions or [])}
            if node.metadata.name in pending and conds.get("Ready") == "True":
                pending.discard(node.metadata.name)
        if pending:
            time.sleep(0.5)
    if pending:
        raise ClusterError(
            f"{len(pending)} node(s) not Ready after {wait:.0f}s (e.g. {sorted(pending)[0]}); is "
            "kwok running? see 'horus dev cluster status' and the kwok log in the cluster folder"
        )
    return names
