"""The pod annotations ``horus.io/gpu-assignment`` and ``horus.io/predicted``.

The scheduler writes both on a pod *before* it binds the pod, so the assignment is the durable
record of a placement: after an operator restart, the live cluster state (which GPU carries
which share) is rebuilt from these annotations alone, and the node agent enforces the share it
reads here. Writer and readers therefore share this one encoder/decoder. JSON forms::

    horus.io/gpu-assignment: {"node": "gpu-node-3", "gpuUUID": "GPU-…", "gpuIndex": 2,
                              "corePercent": 40, "memoryMiB": 12288,
                              "job": "resnet50-train", "replica": 0}
    horus.io/predicted:      {"utilMean": 38.5, "utilUpper": 47.0, "memoryMiBMean": 9800.0,
                              "memoryMiBUpper": 11000.0, "modelVersion": "gbr-2024.1"}

``job`` and ``replica`` are absent for plain pods placed through the scheduler extender.
``PredictedUsage`` is also the shape of a DLJob's ``status.predicted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from horus.api._fields import (
    as_number,
    check_range,
    dump_json,
    fmt,
    load_json_object,
    read_bool,
    read_int,
    read_number,
    read_str,
    rebase,
    reject_unknown,
)
from horus.api.inventory import MAX_GPU_INDEX
from horus.common.constants import (
    GPU_CORE_UNITS_PER_GPU,
    MAX_DLJOB_REPLICAS,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS_PER_REPLICA,
)
from horus.common.errors import ValidationError

__all__ = [
    "GpuAssignment",
    "GpuRef",
    "PredictedUsage",
    "decode_assignment",
    "decode_predicted",
    "encode_assignment",
    "encode_predicted",
    "parse_assignment",
    "parse_predicted",
]


# --- horus.io/gpu-assignment ------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRef:
    """One more GPU of a multi-GPU pod (``gpus`` of the assignment): index, UUID and share."""

    gpu_uuid: str
    gpu_index: int
    core_percent: int
    memory_mib: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpuUUID": self.gpu_uuid,
            "gpuIndex": self.gpu_index,
            "corePercent": self.core_percent,
            "memoryMiB": self.memory_mib,
        }


@dataclass(frozen=True)
class GpuAssignment:
    """The GPU (and share of it) one pod was given.

    A pod with several GPUs (``gpusPerReplica`` > 1) lists *all* of them in ``gpus``; the
    top-level ``gpuUUID``/``gpuIndex``/``corePercent``/``memoryMiB`` then repeat ``gpus[0]``, so
    a reader that only knows single-GPU assignments still sees a valid (first) GPU. ``gpus`` is
    empty for single-GPU pods and is then left out of the JSON (the original format).
    """

    node: str
    gpu_uuid: str
    gpu_index: int
    core_percent: int  # of the GPU's compute, 1..100 (horus.io/gpu-core)
    memory_mib: int  # horus.io/gpu-memory
    job: str | None = None  # owning DLJob, None for plain pods
    replica: int | None = None  # replica index within ``job``
    gpus: tuple[GpuRef, ...] = ()  # every GPU of a multi-GPU pod (gpus[0] = top level)

    def __post_init__(self) -> None:
        path = "gpu-assignment"
        if not self.node:
            raise ValidationError(f"{path}.node: must not be empty")
        if not self.gpu_uuid:
            raise ValidationError(f"{path}.gpuUUID: must not be empty")
        check_range(self.gpu_index, f"{path}.gpuIndex", 0, None)
        check_range(self.core_percent, f"{path}.corePercent", 1, GPU_CORE_UNITS_PER_GPU)
        check_range(self.memory_mib, f"{path}.memoryMiB", 1, MAX_GPU_MEMORY_MIB)
        if (self.job is None) != (self.replica is None):
            raise ValidationError(f"{path}: job and replica must be given together or not at all")
        if self.job is not None and not self.job:
            raise ValidationError(f"{path}.job: must not be empty")
        if self.replica is not None:
            check_range(self.replica, f"{path}.replica", 0, MAX_DLJOB_REPLICAS - 1)
        if self.gpus:
            first = self.gpus[0]
            if (first.gpu_uuid, first.gpu_index, first.core_percent, first.memory_mib) != (
                self.gpu_uuid,
                self.gpu_index,
                self.core_percent,
                self.memory_mib,
            ):
                raise ValidationError(f"{path}.gpus[0]: must repeat the top-level GPU and share")
            uuids = [g.gpu_uuid for g in self.gpus]
            if len(set(uuids)) != len(uuids):
                raise ValidationError(f"{path}.gpus: a GPU is listed twice in {uuids}")
            for i, g in enumerate(self.gpus):
                if not g.gpu_uuid:
                    raise ValidationError(f"{path}.gpus[{i}].gpuUUID: must not be empty")
                check_range(g.gpu_index, f"{path}.gpus[{i}].gpuIndex", 0, None)
                check_range(
                    g.core_percent, f"{path}.gpus[{i}].corePercent", 1, GPU_CORE_UNITS_PER_GPU
                )
                check_range(g.memory_mib, f"{path}.gpus[{i}].memoryMiB", 1, MAX_GPU_MEMORY_MIB)

    @property
    def all_gpus(self) -> tuple[GpuRef, ...]:
        """Every GPU of the pod with its share (one entry for a single-GPU assignment)."""
        if self.gpus:
            return self.gpus
        return (GpuRef(self.gpu_uuid, self.gpu_index, self.core_percent, self.memory_mib),)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "gpuUUID": self.gpu_uuid,
            "gpuIndex": self.gpu_index,
            "corePercent": self.core_percent,
            "memoryMiB": self.memory_mib,
        }
        if self.job is not None:
            out["job"] = self.job
            out["replica"] = self.replica
        if self.gpus:
            out["gpus"] = [g.to_json() for g in self.gpus]
        return out


_ASSIGNMENT_KEYS = (
    "node",
    "gpuUUID",
    "gpuIndex",
    "corePercent",
    "memoryMiB",
    "job",
    "replica",
    "gpus",
)
_GPU_REF_KEYS = ("gpuUUID", "gpuIndex", "corePercent", "memoryMiB")


def _parse_gpu_refs(value: object, where: str) -> tuple[GpuRef, ...]:
    if not isinstance(value, list) or not value:
        raise ValidationError(f"{where}.gpus: must be a non-empty list of GPUs")
    if len(value) > MAX_GPUS_PER_REPLICA:
        raise ValidationError(
            f"{where}.gpus: lists {len(value)} GPUs; a pod has at most {MAX_GPUS_PER_REPLICA}"
        )
    refs: list[GpuRef] = []
    for i, item in enumerate(value):
        path = f"{where}.gpus[{i}]"
        if not isinstance(item, dict):
            raise ValidationError(f"{path}: must be an object, got {type(item).__name__}")
        reject_unknown(item, _GPU_REF_KEYS, path)
        refs.append(
            GpuRef(
                gpu_uuid=read_str(item, "gpuUUID", path, max_length=128),
                gpu_index=read_int(item, "gpuIndex", path, lo=0, hi=MAX_GPU_INDEX),
                core_percent=read_int(item, "corePercent", path, lo=1, hi=GPU_CORE_UNITS_PER_GPU),
                memory_mib=read_int(item, "memoryMiB", path, lo=1, hi=MAX_GPU_MEMORY_MIB),
            )
        )
    return tuple(refs)


def encode_assignment(assignment: GpuAssignment) -> str:
    """The annotation value for ``assignment`` (compact, stable key order)."""
    return dump_json(assignment.to_json())


def parse_assignment(raw: dict[str, Any], where: str = "gpu-assignment") -> GpuAssignment:
    """Build a :class:`GpuAssignment` from its decoded JSON object; errors name ``where``."""
    reject_unknown(raw, _ASSIGNMENT_KEYS, where)
    has_job = "job" in raw
    try:
        return GpuAssignment(
            node=read_str(raw, "node", where, max_length=253),
            gpu_uuid=read_str(raw, "gpuUUID", where, max_length=128),
            gpu_index=read_int(raw, "gpuIndex", where, lo=0, hi=MAX_GPU_INDEX),
            core_percent=read_int(raw, "corePercent", where, lo=1, hi=GPU_CORE_UNITS_PER_GPU),
            memory_mib=read_int(raw, "memoryMiB", where, lo=1, hi=MAX_GPU_MEMORY_MIB),
            job=read_str(raw, "job", where, max_length=253) if has_job else None,
            replica=(
                read_int(raw, "replica", where, lo=0, hi=MAX_DLJOB_REPLICAS - 1)
                if "replica" in raw
                else None
            ),
            gpus=_parse_gpu_refs(raw["gpus"], where) if "gpus" in raw else (),
        )
    except ValidationError as exc:
        raise rebase(exc, "gpu-assignment", where) from None


def decode_assignment(text: str, where: str = "gpu-assignment") -> GpuAssignment:
    """Parse an annotation value; errors name ``where`` (e.g. ``pod ns/name``) and the field."""
    return parse_assignment(load_json_object(text, where), where)


# --- horus.io/predicted -----------------------------------------------------------------------


@dataclass(frozen=True)
class PredictedUsage:
    """Predicted GPU use of one replica alone on its GPU (percent of compute, MiB).

    The same values appear as a pod's ``horus.io/predicted`` annotation and as a DLJob's
    ``status.predicted``; ``*_upper`` is the ``quantile`` upper bound of the prediction.
    """

    util_mean: float
    util_upper: float
    memory_mib_mean: float
    memory_mib_upper: float
    model_version: str
    low_confidence: bool = False
    quantile: float | None = None
    # the predictor learned its pair speeds on other GPU models than this one: its estimates of
    # how much sharing slows the job are an extrapolation there (docs/predictor.md, Confidence)
    pair_low_confidence: bool = False

    def __post_init__(self) -> None:
        path = "predicted"
        for key, value, hi in (
            ("utilMean", self.util_mean, 100.0),
            ("utilUpper", self.util_upper, 100.0),
            ("memoryMiBMean", self.memory_mib_mean, float(MAX_GPU_MEMORY_MIB)),
            ("memoryMiBUpper", self.memory_mib_upper, float(MAX_GPU_MEMORY_MIB)),
        ):
            as_number(value, f"{path}.{key}", lo=0.0, hi=hi)
        if self.util_upper < self.util_mean:
            raise ValidationError(
                f"{path}.utilUpper: must be >= utilMean ({fmt(self.util_mean)}), "
                f"got {fmt(self.util_upper)}"
            )
        if self.memory_mib_upper < self.memory_mib_mean:
            raise ValidationError(
                f"{path}.memoryMiBUpper: must be >= memoryMiBMean ({fmt(self.memory_mib_mean)}), "
                f"got {fmt(self.memory_mib_upper)}"
            )
        if not self.model_version:
            raise ValidationError(f"{path}.modelVersion: must not be empty")
        if self.quantile is not None and not 0.0 < self.quantile < 1.0:
            raise ValidationError(
                f"{path}.quantile: must be between 0 and 1 (exclusive), got {self.quantile}"
            )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "utilMean": self.util_mean,
            "utilUpper": self.util_upper,
            "memoryMiBMean": self.memory_mib_mean,
            "memoryMiBUpper": self.memory_mib_upper,
            "modelVersion": self.model_version,
        }
        if self.low_confidence:
            out["lowConfidence"] = True
        if self.quantile is not None:
            out["quantile"] = self.quantile
        if self.pair_low_confidence:
            out["pairLowConfidence"] = True
        return out


_PREDICTED_KEYS = (
    "utilMean",
    "utilUpper",
    "memoryMiBMean",
    "memoryMiBUpper",
    "modelVersion",
    "lowConfidence",
    "quantile",
    "pairLowConfidence",
)


def encode_predicted(predicted: PredictedUsage) -> str:
    """The annotation value for ``predicted`` (compact, stable key order)."""
    return dump_json(predicted.to_json())


def parse_predicted(raw: dict[str, Any], where: str = "predicted") -> PredictedUsage:
    """Build a :class:`PredictedUsage` from its decoded JSON object; errors name ``where``."""
    reject_unknown(raw, _PREDICTED_KEYS, where)
    mem_hi = float(MAX_GPU_MEMORY_MIB)
    util_mean = read_number(raw, "utilMean", where, lo=0.0, hi=100.0)
    util_upper = read_number(raw, "utilUpper", where, lo=0.0, hi=100.0)
    mem_mean = read_number(raw, "memoryMiBMean", where, lo=0.0, hi=mem_hi)
    mem_upper = read_number(raw, "memoryMiBUpper", where, lo=0.0, hi=mem_hi)
    version = read_str(raw, "modelVersion", where, max_length=128)
    low = read_bool(raw, "lowConfidence", where, default=False)
    quantile = read_number(raw, "quantile", where, lo=0.0, hi=1.0) if "quantile" in raw else None
    pair_low = read_bool(raw, "pairLowConfidence", where, default=False)
    try:
        return PredictedUsage(
            util_mean, util_upper, mem_mean, mem_upper, version, low, quantile, pair_low
        )
    except ValidationError as exc:
        raise rebase(exc, "predicted", where) from None


def decode_predicted(text: str, where: str = "predicted") -> PredictedUsage:
    """Parse a ``horus.io/predicted`` annotation value; errors name ``where`` and the field."""
    return parse_predicted(load_json_object(text, where), where)
