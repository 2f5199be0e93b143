"""The node annotation ``horus.io/gpu-inventory``: the GPUs a node offers to Horus.

Written by the device plugin (or, for simulated nodes, by ``horus dev cluster add-nodes``) and
read by the scheduler, so both sides share this one encoder/decoder. JSON form::

    [{"index": 0, "uuid": "GPU-…", "model": "H100", "memoryMiB": 81920, "health": "Healthy"}]
"""

from __future__ import annotations

import json
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from horus.api._fields import load_annotation_json, read_int, read_str, require_object, type_name
from horus.common.constants import GPU_HEALTHY, GPU_UNHEALTHY, MAX_GPU_MEMORY_MIB
from horus.common.errors import ValidationError
from horus.common.memo import Memo

_HEALTH = (GPU_HEALTHY, GPU_UNHEALTHY)
MAX_GPU_INDEX = 1023
#: No node has more GPUs than indices it can number.
MAX_GPUS_PER_NODE = MAX_GPU_INDEX + 1
_MAX_NAME = 256
_UUID_NAMESPACE = uuidlib.UUID("6f1c1f3e-6a7e-4f1e-9a43-2f9c1f0b6a11")


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU of a node, as the device plugin sees it."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    health: str = GPU_HEALTHY

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValidationError(f"GPU index must be >= 0, got {self.index}")
        if not self.uuid:
            raise ValidationError(f"GPU {self.index}: uuid must not be empty")
        if not self.model:
            raise ValidationError(f"GPU {self.index}: model must not be empty")
        if self.memory_mib <= 0:
            raise ValidationError(f"GPU {self.index}: memoryMiB must be > 0, got {self.memory_mib}")
        if self.health not in _HEALTH:
            raise ValidationError(
                f"GPU {self.index}: health must be one of {', '.join(_HEALTH)}, got {self.health!r}"
            )

    @property
    def healthy(self) -> bool:
        return self.health == GPU_HEALTHY

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "memoryMiB": self.memory_mib,
            "health": self.health,
        }


def simulated_gpu_uuid(node_name: str, index: int) -> str:
    """A stable, unique UUID for GPU ``index`` of simulated node ``node_name``."""
    return "GPU-" + str(uuidlib.uuid5(_UUID_NAMESPACE, f"{node_name}/{index}"))


def encode_inventory(gpus: list[GpuDevice]) -> str:
    """The annotation value for ``gpus`` (compact, stable key order)."""
    return json.dumps([g.to_json() for g in gpus], separators=(",", ":"))


#: Decoded inventories by their exact text (a node's annotation rarely changes; every pass
#: and every extender answer reads every node's).
_DECODED: Memo[tuple[GpuDevice, ...]] = Memo(limit=50_000)


def decode_inventory(text: str, where: str = "gpu-inventory") -> list[GpuDevice]:
    """Parse an annotation value; errors name ``where`` (e.g. the node) and the bad field.

    Fields this version does not know are ignored, so a newer device plugin that adds one
    does not take its node out of an older scheduler's cluster.
    """
    if not isinstance(text, str):
        return _decode_inventory(text, where)
    return list(_DECODED.get((text, where), lambda: tuple(_decode_inventory(text, where))))


def _decode_inventory(text: str, where: str) -> list[GpuDevice]:
    raw = load_annotation_json(text, where)
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: must be a JSON list of GPUs, got {type_name(raw)}")
    if len(raw) > MAX_GPUS_PER_NODE:
        raise ValidationError(
            f"{where}: lists {len(raw)} GPUs; a node has at most {MAX_GPUS_PER_NODE}"
        )
    gpus: list[GpuDevice] = []
    for i, value in enumerate(raw):
        path = f"{where}[{i}]"
        item = require_object(value, path)
        health = read_str(item, "health", path, max_length=32, default=GPU_HEALTHY)
        if health not in _HEALTH:
            raise ValidationError(
                f"{path}.health: must be one of {', '.join(_HEALTH)}, got {health!r}"
            )
        gpus.append(
            GpuDevice(
                index=read_int(item, "index", path, lo=0, hi=MAX_GPU_INDEX),
                uuid=read_str(item, "uuid", path, max_length=_MAX_NAME),
                model=read_str(item, "model", path, max_length=_MAX_NAME),
                memory_mib=read_int(item, "memoryMiB", path, lo=1, hi=MAX_GPU_MEMORY_MIB),
                health=health,
            )
        )
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise ValidationError(f"{where}: duplicate GPU index in {indices}")
    return gpus
