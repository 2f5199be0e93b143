"""How a GPU share maps to the extended-resource quantities a pod requests and a node offers.

``horus.io/gpu-core`` is always percent of one GPU (100 device IDs per GPU). ``horus.io/gpu-memory``
is counted in *units* of ``unit_mib`` MiB, because the kubelet turns every device ID into one
unit of capacity and a device plugin should keep a GPU at ≤ 1,024 IDs (an 80 GiB GPU in 1 MiB
IDs would be 81,920 IDs in every ListAndWatch message and kubelet checkpoint). The unit is
published on the node (annotation ``horus.io/gpu-memory-unit-mib``, written by the device
plugin); a node without it (the simulated kwok nodes) counts in plain MiB, unit 1, which is
what ``shared/DESIGN.md`` describes. Shares (``memoryMiB`` in an assignment, the inventory's
``memoryMiB``) stay in MiB everywhere; only the *resource quantity* uses units, and these
helpers are the one place that converts. A share asks for the whole units it covers (rounded
*down*, at least one), the way the device plugin offers a GPU (``floor(M / unit)`` IDs: a
partial last unit is not offered). Rounding both the same way keeps them consistent: shares
that fit a GPU in MiB always fit its IDs, however many share it, and a whole-GPU share of a
GPU whose memory is not a multiple of the unit (a real H100's 81,559 MiB) asks exactly the
IDs the GPU has. Rounding a share up instead would ask 319 of the H100's 318 IDs, and two
half shares 320. The share's MiB, not its units, are what the container is
limited to. See ``docs/decisions.md`` ("Device plugin: gpu-memory unit").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from horus.api._fields import type_name
from horus.api.assignment import GpuAssignment
from horus.common.constants import (
    ANNOTATION_GPU_MEMORY_UNIT,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
)
from horus.common.errors import ValidationError

__all__ = [
    "EffectiveRequest",
    "container_amount",
    "containers_asking",
    "memory_units",
    "node_memory_unit_mib",
    "parse_quantity",
    "pod_effective_request",
    "pod_gpu_requests",
    "units_to_mib",
]

MAX_UNIT_MIB = 65536


def memory_units(memory_mib: int, unit_mib: int) -> int:
    """The ``horus.io/gpu-memory`` quantity for a share of ``memory_mib`` MiB on one GPU: the
    whole units it covers, at least one (module docstring: the plugin offers ``floor(M /
    unit)`` IDs per GPU, so for shares of at least one unit the requests of everything that
    fits a GPU in MiB fit its IDs)."""
    if unit_mib < 1:
        raise ValidationError(f"gpu-memory unit must be >= 1 MiB, got {unit_mib}")
    return max(1, memory_mib // unit_mib)


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

    Summed over every GPU of a multi-GPU assignment; memory in whole units per GPU
    (:func:`memory_units`), as the device plugin offers whole units of each GPU.
    """
    gpus = assignment.all_gpus
    return {
        RESOURCE_GPU_CORE: sum(g.core_percent for g in gpus),
        RESOURCE_GPU_MEMORY: sum(memory_units(g.memory_mib, unit_mib) for g in gpus),
    }


# --- quantities a pod asks for ----------------------------------------------------------------

_QUANTITY = re.compile(
    r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$"
)
_SUFFIX = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
#: No extended-resource request Horus reads is near this; beyond it a value is hostile.
_MAX_QUANTITY = 2**62


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_quantity(value: object, where: str) -> int:
    """A Kubernetes quantity of an extended resource as a whole number (errors name ``where``).

    The apiserver stores quantities in canonical form, so ``1000`` comes back as ``"1k"``:
    every reader of a pod's Horus requests must accept the suffixes, not just digits.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValidationError(f"{where}: must be a quantity string, got {type_name(value)}")
    text = str(value).strip()
    m = _QUANTITY.match(text) if len(text) <= 64 else None
    if m is None:
        raise ValidationError(f"{where}: {_short(text)} is not a Kubernetes quantity")
    number, suffix = m.group(1), m.group(2)
    if number.startswith("-") and float(number) != 0:
        raise ValidationError(f"{where}: {text!r} is negative; a resource request cannot be")
    if suffix == "m":
        milli = float(number)
        if not math.isfinite(milli) or milli % 1000:
            raise ValidationError(f"{where}: {text!r} is not a whole number")
        return int(milli // 1000)
    amount = float(number) * _SUFFIX[suffix]
    if not math.isfinite(amount) or amount > _MAX_QUANTITY:
        raise ValidationError(f"{where}: {text!r} is far larger than any GPU share")
    if amount != int(amount):
        raise ValidationError(f"{where}: {text!r} is not a whole number")
    return int(amount)


def container_amount(ctr: Mapping[str, Any], resource: str, where: str) -> int | None:
    """What one container asks of ``resource`` (its request, else its limit; None if neither).

    For extended resources the apiserver requires request == limit when both are given, and
    fills the request in from the limit, so either one is the amount."""
    res = ctr.get("resources") or {}
    if not isinstance(res, Mapping):
        raise ValidationError(f"{where}.resources: must be an object, got {type_name(res)}")
    for kind in ("requests", "limits"):  # an extended resource given only as a limit counts
        values = res.get(kind) or {}
        if not isinstance(values, Mapping):
            raise ValidationError(
                f"{where}.resources.{kind}: must be an object, got {type_name(values)}"
            )
        if resource in values:
            return parse_quantity(values[resource], f"{where}.resources.{kind}[{resource}]")
    return None


def containers_asking(spec: Mapping[str, Any], group: str, resources: tuple[str, ...]) -> list[str]:
    """Names (``#<index>`` when unnamed) of the ``group`` (``containers`` or
    ``initContainers``) entries that request or limit any of ``resources``. Only the names of
    the resources are looked at, never their quantities, so a hostile pod cannot make this
    raise; :func:`container_amount` reads the amounts."""
    items = spec.get(group) or []
    out: list[str] = []
    for i, ctr in enumerate(items if isinstance(items, list) else []):
        if not isinstance(ctr, Mapping):
            continue
        res = ctr.get("resources") or {}
        named: set[str] = set()
        for kind in ("requests", "limits") if isinstance(res, Mapping) else ():
            values = res.get(kind) or {}
            if isinstance(values, Mapping):
                named.update(str(k) for k in values)
        if named.intersection(resources):
            out.append(str(ctr.get("name") or f"#{i}"))
    return out


class EffectiveRequest:
    """A pod's effective request of one resource, as the kubelet and scheduler compute it:
    the larger of the sum over its containers and the largest single init container (init
    containers run one at a time, before the others)."""

    def __init__(self, containers: int | None, init: int | None) -> None:
        self.containers = containers  # summed over spec.containers (None: none asks)
        self.init = init  # largest spec.initContainers entry (None: none asks)

    @property
    def total(self) -> int | None:
        if self.containers is None and self.init is None:
            return None
        return max(self.containers or 0, self.init or 0)

    def describe(self) -> str:
        parts = []
        if self.containers is not None:
            parts.append(f"containers together {self.containers}")
        if self.init is not None:
            parts.append(f"largest init container {self.init}")
        return ", ".join(parts)


def pod_effective_request(spec: Mapping[str, Any], resource: str) -> EffectiveRequest:
    """:class:`EffectiveRequest` of ``resource`` in a pod ``spec`` (quantities parsed)."""
    totals: dict[str, int | None] = {"containers": None, "initContainers": None}
    for group in totals:
        items = spec.get(group) or []
        if not isinstance(items, list):
            raise ValidationError(f"spec.{group}: must be a list, got {type_name(items)}")
        for i, ctr in enumerate(items):
            if not isinstance(ctr, Mapping):
                raise ValidationError(f"spec.{group}[{i}]: must be an object")
            amount = container_amount(ctr, resource, f"spec.{group}[{i}]")
            if amount is None:
                continue
            have = totals[group]
            if group == "containers":
                totals[group] = (have or 0) + amount
            else:
                totals[group] = max(have or 0, amount)
    return EffectiveRequest(totals["containers"], totals["initContainers"])
