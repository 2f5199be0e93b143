"""Device IDs: how one GPU becomes many kubelet "devices" of each Horus resource.

The kubelet only knows opaque device IDs and counts them, so a fractional GPU is advertised as
many IDs per GPU: ``horus.io/gpu-core`` has 100 IDs per GPU (one per percent) and
``horus.io/gpu-memory`` one ID per ``unit_mib`` MiB (a partial last unit is not offered). An ID
names its GPU (``<uuid>-c<k>`` / ``<uuid>-m<k>``, at most 47 characters, the API allows 63), so
the IDs of an unhealthy GPU can all be marked Unhealthy, and the preferred allocation can keep a
container's IDs on the GPU its assignment names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from horus.api.inventory import GpuDevice
from horus.common.constants import (
    GPU_CORE_UNITS_PER_GPU,
    MAX_DEVICE_IDS_PER_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResourceKind:
    """One extended resource served by one plugin socket."""

    resource: str  # e.g. horus.io/gpu-core
    socket_name: str  # file name in the kubelet's device-plugin directory
    tag: str  # the ID infix: "c" or "m"
    unit_mib: int = 1  # memory only: MiB per ID

    def ids_per_gpu(self, gpu: GpuDevice) -> int:
        if self.resource == RESOURCE_GPU_CORE:
            return GPU_CORE_UNITS_PER_GPU
        return gpu.memory_mib // self.unit_mib

    def device_id(self, gpu: GpuDevice, k: int) -> str:
        return f"{gpu.uuid}-{self.tag}{k}"

    def gpu_uuid_of(self, device_id: str) -> str | None:
        """The GPU UUID an ID of this resource belongs to (None if it is not ours)."""
        head, sep, tail = device_id.rpartition(f"-{self.tag}")
        return head if sep and tail.isdigit() else None

    def devices(self, gpus: list[GpuDevice]) -> list[tuple[str, str]]:
        """(ID, health) of every device of this resource on ``gpus``."""
        out: list[tuple[str, str]] = []
        for gpu in gpus:
            n = self.ids_per_gpu(gpu)
            if n > MAX_DEVICE_IDS_PER_GPU:
                log.warning(
                    "%s: GPU %d has %d device IDs (> %d); raise memory_unit_mib",
                    self.resource,
                    gpu.index,
                    n,
                    MAX_DEVICE_IDS_PER_GPU,
                )
            out.extend((self.device_id(gpu, k), gpu.health) for k in range(n))
        return out


def core_kind() -> ResourceKind:
    return ResourceKind(RESOURCE_GPU_CORE, "horus-gpu-core.sock", "c")


def memory_kind(unit_mib: int) -> ResourceKind:
    return ResourceKind(RESOURCE_GPU_MEMORY, "horus-gpu-memory.sock", "m", unit_mib)
