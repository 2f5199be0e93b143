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

from horus.common.constants import GPU_HEALTHY, GPU_UNHEALTHY
from horus.common.errors import ValidationError

_HEALTH = (GPU_HEALTHY, GPU_UNHEALTHY)
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


def decode_inventory(text: str, where: str = "gpu-inventory") -> list[GpuDevice]:
    """Parse an annotation value; errors name ``where`` (e.g. the node) and the bad entry."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"{where}: not valid JSON ({exc.msg} at position {exc.pos})"
        ) from None
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: must be a JSON list of GPUs, got {type(raw).__name__}")
    gpus: list[GpuDevice] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValidationError(f"{where}[{i}]: must be an object, got {type(item).__name__}")
        missing = [k for k in ("index", "uuid", "model", "memoryMiB") if k not in item]
        if missing:
            raise ValidationError(f"{where}[{i}]: missing field(s) {', '.join(missing)}")
        index, memory = item["index"], item["memoryMiB"]
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValidationError(f"{where}[{i}].index: must be an integer, got {index!r}")
        if not isinstance(memory, int) or isinstance(memory, bool):
            raise ValidationError(f"{where}[{i}].memoryMiB: must be an integer, got {memory!r}")
        try:
            gpus.append(
                GpuDevice(
                    index=index,
                    uuid=str(item["uuid"]),
                    model=str(item["model"]),
                    memory_mib=memory,
                    health=str(item.get("health", GPU_HEALTHY)),
                )
            )
        except ValidationError as exc:
            raise ValidationError(f"{where}[{i}]: {exc}") from None
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise ValidationError(f"{where}: duplicate GPU index in {indices}")
    return gpus
