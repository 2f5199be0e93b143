"""A DLJob's ``status`` as typed values, and its parser: what the operator and the node agent
write, read back by the operator, the extender, the agent and tests.

Kept apart from the spec (:mod:`horus.api.dljob`): the spec is the user's, validated once at
admission; the status is written by Horus alone (the operator signs its part, the agent
writes ``observed``) and read on every pass. Errors are :class:`ValidationError` naming the
field path, e.g. ``status.placements[0].corePercent: must be 1..100, got 101``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from horus.api._fields import (
    read_int,
    read_number,
    read_str,
    reject_unknown,
    require_object,
    type_name,
)
from horus.api.assignment import GpuAssignment, PredictedUsage, parse_predicted
from horus.common.constants import (
    DLJOB_PHASES,
    GPU_CORE_UNITS_PER_GPU,
    MAX_DLJOB_REPLICAS,
    MAX_GPU_MEMORY_MIB,
    MAX_OBSERVED_PAIRS,
    MIN_OBSERVED_PAIR_SPEED,
    OBSERVED_PAIR_SOURCES,
)
from horus.common.errors import ValidationError

__all__ = [
    "DLJobStatus",
    "JobCondition",
    "MeasuredPair",
    "MigrationHistory",
    "MigrationInProgress",
    "ObservedUsage",
    "PlacementRecord",
    "format_time",
    "parse_dljob_status",
]

_CONDITION_REASON = re.compile(r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$")
_CONDITION_STATUSES = ("True", "False", "Unknown")


@dataclass(frozen=True)
class PlacementRecord:
    """Where one replica runs: one entry per replica and GPU in ``status.placements``."""

    replica: int
    node: str
    gpu_uuid: str
    gpu_index: int
    core_percent: int
    memory_mib: int
    pod: str | None = None

    @classmethod
    def from_assignment(
        cls, assignment: GpuAssignment, replica: int, pod: str | None = None
    ) -> PlacementRecord:
        return cls(
            replica=replica,
            node=assignment.node,
            gpu_uuid=assignment.gpu_uuid,
            gpu_index=assignment.gpu_index,
            core_percent=assignment.core_percent,
            memory_mib=assignment.memory_mib,
            pod=pod,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"replica": self.replica}
        if self.pod is not None:
            out["pod"] = self.pod
        out.update(
            node=self.node,
            gpuUUID=self.gpu_uuid,
            gpuIndex=self.gpu_index,
            corePercent=self.core_percent,
            memoryMiB=self.memory_mib,
        )
        return out


@dataclass(frozen=True)
class MeasuredPair:
    """The job's measured normalised speed next to one other job kind on one GPU model."""

    other: str  # the neighbour's job kind (model@batch)
    gpu_model: str
    speed: float  # MIN_OBSERVED_PAIR_SPEED..1
    samples: int
    #: The reading's typical absolute error in speed units (0..1); the scheduler's margin on
    #: this pair is z × error. None: written by an older agent that reports no error.
    error: float | None = None
    #: What the speed was measured from: "progress" (the job's own steps/samples per second)
    #: or "utilisation" (NVML utilisation in the pair over alone). None: an older agent
    #: (utilisation was then the only source).
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "other": self.other,
            "gpuModel": self.gpu_model,
            "speed": self.speed,
            "samples": self.samples,
        }
        if self.error is not None:
            out["error"] = self.error
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class ObservedUsage:
    """Measured GPU use of the job, written by the node agent."""

    util: float | None = None  # mean percent of the GPU's compute over the replicas
    memory_mib: float | None = None  # peak MiB of the largest replica
    sampled_at: datetime | None = None
    util_peak: float | None = None  # highest percent one replica reached
    memory_mib_mean: float | None = None  # mean MiB over the replicas
    pairs: tuple[MeasuredPair, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.util is not None:
            out["util"] = self.util
        if self.util_peak is not None:
            out["utilPeak"] = self.util_peak
        if self.memory_mib is not None:
            out["memoryMiB"] = self.memory_mib
        if self.memory_mib_mean is not None:
            out["memoryMiBMean"] = self.memory_mib_mean
        if self.sampled_at is not None:
            out["sampledAt"] = format_time(self.sampled_at)
        if self.pairs:
            out["pairs"] = [p.to_json() for p in self.pairs]
        return out


@dataclass(frozen=True)
class JobCondition:
    """A metav1.Condition-shaped entry of ``status.conditions``."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        if self.last_transition_time is not None:
            out["lastTransitionTime"] = format_time(self.last_transition_time)
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


@dataclass(frozen=True)
class MigrationHistory:
    """How often Horus moved (or preempted) the job, and its last move (``status.migrations``)."""

    count: int = 0
    preemptions: int = 0
    last_from: str = ""
    last_to: str = ""
    last_reason: str = ""
    last_time: datetime | None = None


@dataclass(frozen=True)
class MigrationInProgress:
    """A move not finished yet (``status.migration``): the placements the job leaves, which
    still hold their GPUs until the job's old pods are gone."""

    source: tuple[PlacementRecord, ...]
    started_time: datetime
    reason: str = ""


@dataclass(frozen=True)
class DLJobStatus:
    """What Horus reports about a DLJob. A new object has the empty status (phase None)."""

    phase: str | None = None
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    placements: tuple[PlacementRecord, ...] = ()
    predicted: PredictedUsage | None = None
    observed: ObservedUsage | None = None
    conditions: tuple[JobCondition, ...] = ()
    #: The operator's signature over uid, phase and placements (horus.api.signing).
    placement_signature: str = ""
    migrations: MigrationHistory = field(default_factory=MigrationHistory)
    migration: MigrationInProgress | None = None
    queued_time: datetime | None = None
    scheduled_time: datetime | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    #: spec.priorityClassName's value, resolved by the operator at admission (as the apiserver
    #: resolves a pod's spec.priority); None: admitted before Horus recorded it (0).
    priority: int | None = None

    def condition(self, type_: str) -> JobCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def to_json(self) -> dict[str, Any]:
        """The ``status`` object for a status-subresource patch (unset fields left out)."""
        out: dict[str, Any] = {}
        if self.phase is not None:
            out["phase"] = self.phase
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        if self.placements:
            out["placements"] = [p.to_json() for p in self.placements]
        if self.placement_signature:
            out["placementSignature"] = self.placement_signature
        if self.predicted is not None:
            out["predicted"] = self.predicted.to_json()
        if self.observed is not None:
            out["observed"] = self.observed.to_json()
        if self.conditions:
            out["conditions"] = [c.to_json() for c in self.conditions]
        if self.priority is not None:
            out["priority"] = self.priority
        for key, value in (
            ("queuedTime", self.queued_time),
            ("scheduledTime", self.scheduled_time),
            ("startTime", self.start_time),
            ("completionTime", self.completion_time),
        ):
            if value is not None:
                out[key] = format_time(value)
        return out


_STATUS_KEYS = (
    "phase",
    "placementSignature",
    "placementEpoch",
    "priority",
    "reason",
    "message",
    "observedGeneration",
    "placements",
    "predicted",
    "observed",
    "conditions",
    "queuedTime",
    "scheduledTime",
    "startTime",
    "completionTime",
    "migrations",
    "migration",
)
_PLACEMENT_KEYS = ("replica", "pod", "node", "gpuUUID", "gpuIndex", "corePercent", "memoryMiB")


def parse_dljob_status(value: object, path: str = "status") -> DLJobStatus:
    """Validate and type a DLJob ``status`` (as the operator wrote it)."""
    raw = require_object(value, path)
    reject_unknown(raw, _STATUS_KEYS, path)
    phase = raw.get("phase")
    if phase is not None and phase not in DLJOB_PHASES:
        raise ValidationError(
            f"{path}.phase: must be one of {', '.join(DLJOB_PHASES)}, got {phase!r}"
        )
    placements_raw = raw.get("placements", [])
    if not isinstance(placements_raw, list):
        raise ValidationError(f"{path}.placements: must be a list, got {type_name(placements_raw)}")
    placements = tuple(
        _parse_placement(p, f"{path}.placements[{i}]") for i, p in enumerate(placements_raw)
    )
    predicted = (
        parse_predicted(require_object(raw["predicted"], f"{path}.predicted"), f"{path}.predicted")
        if "predicted" in raw
        else None
    )
    observed = _parse_observed(raw["observed"], f"{path}.observed") if "observed" in raw else None
    conditions_raw = raw.get("conditions", [])
    if not isinstance(conditions_raw, list):
        raise ValidationError(f"{path}.conditions: must be a list, got {type_name(conditions_raw)}")
    conditions = tuple(
        _parse_condition(c, f"{path}.conditions[{i}]") for i, c in enumerate(conditions_raw)
    )
    types = [c.type for c in conditions]
    if len(set(types)) != len(types):
        raise ValidationError(f"{path}.conditions: duplicate condition type in {types}")
    return DLJobStatus(
        phase=phase,
        reason=read_str(raw, "reason", path, max_length=128, default="", allow_empty=True),
        message=read_str(raw, "message", path, max_length=4096, default="", allow_empty=True),
        observed_generation=(
            read_int(raw, "observedGeneration", path, lo=0) if "observedGeneration" in raw else None
        ),
        placements=placements,
        predicted=predicted,
        observed=observed,
        conditions=conditions,
        placement_signature=read_str(
            raw, "placementSignature", path, max_length=128, default="", allow_empty=True
        ),
        queued_time=_read_time(raw, "queuedTime", path),
        scheduled_time=_read_time(raw, "scheduledTime", path),
        start_time=_read_time(raw, "startTime", path),
        completion_time=_read_time(raw, "completionTime", path),
        priority=(
            read_int(raw, "priority", path, lo=-(2**31), hi=2**31 - 1)
            if "priority" in raw
            else None
        ),
        migrations=_parse_migrations(raw.get("migrations", {}), f"{path}.migrations"),
        migration=(
            _parse_migration(raw["migration"], f"{path}.migration") if "migration" in raw else None
        ),
    )


def _parse_migrations(value: object, path: str) -> MigrationHistory:
    raw = require_object(value, path)
    keys = ("count", "preemptions", "lastFrom", "lastTo", "lastReason", "lastTime")
    reject_unknown(raw, keys, path)
    return MigrationHistory(
        count=read_int(raw, "count", path, lo=0, default=0),
        preemptions=read_int(raw, "preemptions", path, lo=0, default=0),
        last_from=read_str(raw, "lastFrom", path, max_length=1024, default="", allow_empty=True),
        last_to=read_str(raw, "lastTo", path, max_length=1024, default="", allow_empty=True),
        last_reason=read_str(
            raw, "lastReason", path, max_length=1024, default="", allow_empty=True
        ),
        last_time=_read_time(raw, "lastTime", path),
    )


def _parse_migration(value: object, path: str) -> MigrationInProgress:
    raw = require_object(value, path)
    reject_unknown(raw, ("from", "reason", "startedTime"), path)
    items = raw.get("from")
    if not isinstance(items, list) or not items:
        raise ValidationError(f"{path}.from: must be a non-empty list of placements")
    started = _read_time(raw, "startedTime", path)
    if started is None:
        raise ValidationError(f"{path}.startedTime: required")
    return MigrationInProgress(
        source=tuple(_parse_placement(p, f"{path}.from[{i}]") for i, p in enumerate(items)),
        started_time=started,
        reason=read_str(raw, "reason", path, max_length=1024, default="", allow_empty=True),
    )


def _parse_placement(value: object, path: str) -> PlacementRecord:
    raw = require_object(value, path)
    reject_unknown(raw, _PLACEMENT_KEYS, path)
    return PlacementRecord(
        replica=read_int(raw, "replica", path, lo=0, hi=MAX_DLJOB_REPLICAS - 1),
        node=read_str(raw, "node", path, max_length=253),
        gpu_uuid=read_str(raw, "gpuUUID", path, max_length=128),
        gpu_index=read_int(raw, "gpuIndex", path, lo=0, hi=1023),
        core_percent=read_int(raw, "corePercent", path, lo=1, hi=GPU_CORE_UNITS_PER_GPU),
        memory_mib=read_int(raw, "memoryMiB", path, lo=1, hi=MAX_GPU_MEMORY_MIB),
        pod=read_str(raw, "pod", path, max_length=253) if "pod" in raw else None,
    )


def _parse_observed(value: object, path: str) -> ObservedUsage:
    raw = require_object(value, path)
    reject_unknown(
        raw, ("util", "utilPeak", "memoryMiB", "memoryMiBMean", "sampledAt", "pairs"), path
    )

    def number(key: str, hi: float) -> float | None:
        return read_number(raw, key, path, lo=0.0, hi=hi) if key in raw else None

    pairs: list[MeasuredPair] = []
    if "pairs" in raw:
        items = raw["pairs"]
        if not isinstance(items, list) or len(items) > MAX_OBSERVED_PAIRS:
            raise ValidationError(
                f"{path}.pairs: must be a list of at most {MAX_OBSERVED_PAIRS} entries"
            )
        for i, item in enumerate(items):
            where = f"{path}.pairs[{i}]"
            entry = require_object(item, where)
            reject_unknown(
                entry, ("other", "gpuModel", "speed", "samples", "error", "source"), where
            )
            source = entry.get("source")
            if source is not None and source not in OBSERVED_PAIR_SOURCES:
                raise ValidationError(
                    f"{where}.source: must be one of {OBSERVED_PAIR_SOURCES}, got {source!r:.40}"
                )
            pairs.append(
                MeasuredPair(
                    other=read_str(entry, "other", where, max_length=256),
                    gpu_model=read_str(entry, "gpuModel", where, max_length=64),
                    speed=read_number(entry, "speed", where, lo=MIN_OBSERVED_PAIR_SPEED, hi=1.0),
                    samples=read_int(entry, "samples", where, lo=1),
                    error=(
                        read_number(entry, "error", where, lo=0.0, hi=1.0)
                        if "error" in entry
                        else None
                    ),
                    source=source,
                )
            )
    return ObservedUsage(
        util=number("util", 100.0),
        memory_mib=number("memoryMiB", float(MAX_GPU_MEMORY_MIB)),
        sampled_at=_read_time(raw, "sampledAt", path),
        util_peak=number("utilPeak", 100.0),
        memory_mib_mean=number("memoryMiBMean", float(MAX_GPU_MEMORY_MIB)),
        pairs=tuple(pairs),
    )


def _parse_condition(value: object, path: str) -> JobCondition:
    raw = require_object(value, path)
    reject_unknown(
        raw,
        ("type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"),
        path,
    )
    status = raw.get("status")
    if status not in _CONDITION_STATUSES:
        raise ValidationError(
            f"{path}.status: must be one of {', '.join(_CONDITION_STATUSES)}, got {status!r}"
        )
    reason = read_str(raw, "reason", path, max_length=1024, default="", allow_empty=True)
    if not _CONDITION_REASON.match(reason):
        raise ValidationError(
            f"{path}.reason: must be CamelCase letters, digits, '_', ',' or ':', got {reason!r}"
        )
    return JobCondition(
        type=read_str(raw, "type", path, max_length=316),
        status=str(status),
        reason=reason,
        message=read_str(raw, "message", path, max_length=32768, default="", allow_empty=True),
        last_transition_time=_read_time(raw, "lastTransitionTime", path),
        observed_generation=(
            read_int(raw, "observedGeneration", path, lo=0) if "observedGeneration" in raw else None
        ),
    )


def _read_time(raw: dict[str, Any], key: str, path: str) -> datetime | None:
    if key not in raw:
        return None
    value = raw[key]
    where = f"{path}.{key}"
    if isinstance(value, datetime):  # YAML loaders may already have parsed it
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(
                f"{where}: must be an RFC 3339 time like YYYY-MM-DDThh:mm:ssZ, got {value!r}"
            ) from None
    else:
        raise ValidationError(f"{where}: must be an RFC 3339 time string, got {type_name(value)}")
    if stamp.tzinfo is None:
        raise ValidationError(f"{where}: must carry a time zone (e.g. a trailing Z), got {value!r}")
    return stamp


def format_time(stamp: datetime) -> str:
    """RFC 3339 in UTC with a trailing Z, second precision — as Kubernetes writes times."""
    if stamp.tzinfo is None:
        raise ValidationError(f"time {stamp.isoformat()} has no time zone")
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
