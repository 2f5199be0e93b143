"""How a GPU share maps to the extended-resource quantities a pod requests and a node offers.

``horus.io/gpu-core`` is always percent of one GPU (100 device IDs per GPU). ``horus.io/gpu-memory``
is counted in *units* of ``unit_mib`` MiB, because the kubelet turns every device ID into one
unit of capacity and a device plugin should keep a GPU at ≤ 1,024 IDs (an 80 GiB GPU in 1 MiB
IDs would be 81,920 IDs in every ListAndWatch message and kubelet checkpoint). The unit is
published on the node (annotation ``horus.io/gpu-memory-unit-mib``, written by the device
plugin); a node without it (the simulated kwok nodes) counts in plain MiB, unit 1, which is
what ``shared/DESIGN.md`` describes. Shares (``memoryMiB`` in an assignment, the inventory's
``memoryMiB``) stay in MiB everywhere; only the *resource quantity* uses units, and these
helpers are the one place that converts (round up: a share never gets less than it asked for).
See ``docs/decisions.md`` ("Device plugin: gpu-memory unit").
"""

from __future__ import annotations

from collections.abc import Mapping

from horus.api.assignment import GpuAssignment
from horus.common.constants import (
    ANNOTATION_GPU_MEMORY_UNIT,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
)
from horus.common.errors import ValidationError

__all__ = [
    "memory_units",
    "node_memory_unit_mib",
    "pod_gpu_requests",
    "units_to_mib",
]

MAX_UNIT_MIB = 65536


def memory_units(memory_mib: int, unit_mib: int) -> int:
    """The ``horus.io/gpu-memory`` quantity for ``memory_mib`` MiB (rounded up to whole units)."""
    if unit_mib < 1:
        raise ValidationError(f"gpu-memory unit must be >= 1 MiB, got {unit_mib}")
    return -(-memory_mib // unit_mib)


def units_to_mib(units: int, unit_mib: int) -> int:
    """The MiB that ``units`` units of ``horus.io/gpu-memory`` stand for."""
    return units * unit_mib


def node_memory_unit_mib(annotations: Mapping[str, str] | None, where: str = "node") -> int:
    """MiB per unit of ``horus.io/gpu-memory`` on a node (1 when the annotation is absent)."""
    text = (annotations or {}).get(ANNOTATION_GPU_MEMORY_UNIT)
    if text is None:
        return 1
    try:
        unit = int(text.strip())
    except ValueError:
        raise ValidationError(
            f"{where}: annotation {ANNOTATION_GPU_MEMORY_UNIT} must be a whole number of MiB, "
            f"got {text!r}"
        ) from None
    if not 1 <= unit <= MAX_UNIT_MIB:
        raise ValidationError(
            f"{where}: annotation {ANNOTATION_GPU_MEMORY_UNIT} must be 1..{MAX_UNIT_MIB}, got {unit}"
        )
    return unit


def pod_gpu_requests(assignment: GpuAssignment, unit_mib: int) -> dict[str, int]:
    """The extended-resource quantities a pod with ``assignment`` requests on its node.

    Summed over every GPU of a multi-GPU assignment; memory is rounded up per GPU, as the device
    plugin hands out whole units of each GPU.
    """
    gpus = assignment.all_gpus
    return {
        RESOURCE_GPU_CORE: sum(g.core_percent for g in gpus),
        RESOURCE_GPU_MEMORY: sum(memory_units(g.memory_mib, unit_mib) for g in gpus),
    }
