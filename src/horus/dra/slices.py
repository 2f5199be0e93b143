"""This node's ResourceSlice: one device per GPU, shareable by amounts of its capacities.

The kube-scheduler allocates claims against ResourceSlices, so the slice is the node's whole
offer. One pool per node (named after the node, one slice), one device per GPU:

* name ``gpu-<index>``; attributes ``uuid``, ``model`` (strings), ``index``, ``memoryMiB``
  (ints), so a claim can pin a GPU by a CEL selector
  (``device.attributes["gpu.horus.io"].uuid == "GPU-…"``);
* ``allowMultipleAllocations: true`` with two consumable capacities (DRAConsumableCapacity):
  ``cores`` = 100, consumed in whole percent (``validRange`` min 1, step 1), and ``memory`` =
  the GPU's memory in MiB, consumed in whole MiB (min 1Mi, step 1Mi). The scheduler rounds a
  request up to the step, so every allocation is a whole number of the units the agent and
  MPS enforce (percent, MiB) and never more than the GPU has: an 81,559 MiB GPU takes a job
  asking all of it, or two asking 40,779Mi each. A capacity a request leaves out defaults to
  the whole of it (``default`` = the value): a claim that says nothing gets the whole GPU;
* an unhealthy GPU carries the taint ``gpu.horus.io/unhealthy`` (NoSchedule): no new claim is
  allocated on it, claims already there stay.

The slice is owned by the Node (garbage-collected with it) and kept in sync by
:class:`SlicePublisher`: created when missing, updated (pool generation + 1) when the GPUs or
their health change or someone edited it, extra slices of this driver and node deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from horus.api.inventory import GpuDevice
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.common.errors import ValidationError

log = logging.getLogger(__name__)

SLICE_PATH = f"/apis/{c.RESOURCE_API_GROUP}/{c.RESOURCE_API_VERSION}/resourceslices"


def device_name(gpu: GpuDevice) -> str:
    return f"{c.DRA_DEVICE_PREFIX}{gpu.index}"


def build_device(gpu: GpuDevice) -> dict[str, Any]:
    """One GPU as a ResourceSlice device (pure)."""
    cores = str(c.GPU_CORE_UNITS_PER_GPU)
    memory = f"{gpu.memory_mib}Mi"
    device: dict[str, Any] = {
        "name": device_name(gpu),
        "attributes": {
            c.DRA_ATTR_UUID: {"string": gpu.uuid},
            c.DRA_ATTR_MODEL: {"string": gpu.model},
            c.DRA_ATTR_INDEX: {"int": gpu.index},
            c.DRA_ATTR_MEMORY_MIB: {"int": gpu.memory_mib},
        },
        "capacity": {
            c.DRA_CAPACITY_CORES: {
                "value": cores,
                "requestPolicy": {"default": cores, "validRange": {"min": "1", "step": "1"}},
            },
            c.DRA_CAPACITY_MEMORY: {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "step": "1Mi"},
                },
            },
        },
        "allowMultipleAllocations": True,
    }
    if not gpu.healthy:
        device["taints"] = [
            {"key": c.DRA_TAINT_UNHEALTHY, "value": gpu.health, "effect": "NoSchedule"}
        ]
    return device


def build_slice_spec(node: str, gpus: Sequence[GpuDevice], generation: int) -> dict[str, Any]:
    """The spec of this node's one slice (pure)."""
    return {
        "driver": c.DRA_DRIVER_NAME,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": [build_device(g) for g in sorted(gpus, key=lambda g: g.index)],
    }


def _quantity(value: Any) -> Any:
    try:
        return parse_quantity(value, "quantity")
    except ValidationError:
        return value


def normalize(spec: Mapping[str, Any]) -> Any:
    """What of a slice spec this driver decides, in a form the apiserver cannot change:
    quantities as numbers (the apiserver rewrites them canonically), taints without the
    ``timeAdded`` the apiserver stamps, the pool without its generation."""

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, k) for k, v in sorted(value.items()) if k not in ("timeAdded",)}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if key in ("value", "default", "min", "max", "step"):
            return _quantity(value)
        return value

    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    body = {k: v for k, v in spec.items() if k != "pool"}
    return walk({**body, "pool": pool})


class SliceApi(Protocol):
    """The apiserver calls the publisher makes (raw JSON)."""

    def list_slices(self, node: str) -> list[dict[str, Any]]:
        """This driver's ResourceSlices of ``node`` (field selector)."""
        ...

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def update_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_slice(self, name: str) -> None: ...

    def node_uid(self, node: str) -> str | None:
        """The Node's UID (None when it does not exist)."""
        ...


class SlicePublisher:
    """Keeps this node's one ResourceSlice equal to its GPUs."""

    def __init__(self, api: SliceApi, node: str) -> None:
        self.api = api
        self.node = node
        # (what we wanted, what the apiserver kept of it): a field the apiserver drops (a
        # feature gate off) must not make every resync write again
        self._accepted: tuple[Any, Any] | None = None
        self.writes = 0  # creates + updates + deletes (tests, logs)

    def _body(self, gpus: Sequence[GpuDevice], generation: int, uid: str) -> dict[str, Any]:
        return {
            "apiVersion": f"{c.RESOURCE_API_GROUP}/{c.RESOURCE_API_VERSION}",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{self.node}-{c.DRA_DRIVER_NAME}-"[:200],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node,
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "spec": build_slice_spec(self.node, gpus, generation),
        }

    def sync(self, gpus: Sequence[GpuDevice]) -> bool:
        """Make the apiserver's slice match ``gpus``; True when it wrote anything. Raises the
        API's errors (the caller logs and retries at the next tick)."""
        wanted = normalize(build_slice_spec(self.node, gpus, 0))
        live = sorted(self.api.list_slices(self.node), key=_created)
        keep = live[0] if live else None
        wrote = False
        for extra in live[1:]:  # one pool, one slice: anything else is stale
            self.api.delete_slice(_name(extra))
            self.writes += 1
            wrote = True
        if keep is not None:
            current = normalize(keep.get("spec") or {})
            if current == wanted or self._accepted == (wanted, current):
                return wrote
        uid = self.api.node_uid(self.node)
        if uid is None:
            log.warning("node %s does not exist (yet): its ResourceSlice waits", self.node)
            return wrote
        if keep is None:
            out = self.api.create_slice(self._body(gpus, 1, uid))
            log.info("created ResourceSlice %s (%d GPUs)", _name(out), len(gpus))
        else:
            generation = int(((keep.get("spec") or {}).get("pool") or {}).get("generation") or 0)
            body = self._body(gpus, generation + 1, uid)
            body["metadata"] = {
                **keep.get("metadata", {}),
                "ownerReferences": body["metadata"]["ownerReferences"],
            }
            out = self.api.update_slice(_name(keep), body)
            log.info("updated ResourceSlice %s (pool generation %d)", _name(out), generation + 1)
        self.writes += 1
        self._accepted = (wanted, normalize(out.get("spec") or {}))
        return True

    def delete_all(self) -> None:
        """Withdraw this node's slices (no GPUs any more)."""
        for item in self.api.list_slices(self.node):
            self.api.delete_slice(_name(item))
            self.writes += 1


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _created(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))
