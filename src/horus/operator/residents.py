"""The live state's type: the scheduler's ClusterState and the jobs counted into it.

A :class:`LiveState` is what :func:`horus.operator.livestate.build_live_state` builds and
:mod:`horus.operator.livedelta` keeps: the ClusterState plus each resident (a DLJob, a plain
pod or a ResourceClaim holding GPU shares) and why anything was left out. The names residents
go by in the state live here too, so every builder and reader spells them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from horus.common.errors import ValidationError
from horus.predictor.interface import ResourcePrediction
from horus.scheduler import ClusterState, GpuShare, JobRequest

__all__ = [
    "MOVING_SUFFIX",
    "TERMINAL_POD_PHASES",
    "UNKNOWN_KIND",
    "LiveState",
    "Resident",
    "add_resident",
    "dljob_job_name",
    "pod_job_name",
]

TERMINAL_POD_PHASES = ("Succeeded", "Failed")
UNKNOWN_KIND = "unknown"
#: The live state's name for the placements a moving job leaves (``<job>`` + this).
MOVING_SUFFIX = "#moving-from"


def dljob_job_name(namespace: str, name: str) -> str:
    """The scheduler's name for DLJob ``namespace/name`` (its key in the ClusterState)."""
    return f"{namespace}/{name}"


def pod_job_name(namespace: str, name: str) -> str:
    """The scheduler's name for a plain pod (never equal to a DLJob's name: it has a prefix)."""
    return f"pod:{namespace}/{name}"


@dataclass(frozen=True)
class Resident:
    """One job (DLJob or plain pod) holding GPU shares in the live cluster."""

    name: str  # dljob_job_name / pod_job_name
    source: str  # "dljob-status" | "pods"
    request: JobRequest
    shares: tuple[GpuShare, ...]
    prediction: ResourcePrediction
    pods: tuple[str, ...] = ()  # "ns/name" of the pods the shares were read from


@dataclass
class LiveState:
    """A ClusterState plus what went into it, for the operator, the extender and tests."""

    state: ClusterState
    residents: dict[str, Resident] = field(default_factory=dict)
    #: node → why it contributes no GPUs (NotReady, unschedulable, bad inventory, …).
    excluded_nodes: dict[str, str] = field(default_factory=dict)
    #: Records that could not be counted, each a sentence naming the object and the cause.
    problems: list[str] = field(default_factory=list)
    #: Pair speeds the node agents measured (DLJob ``status.observed.pairs``, finished jobs
    #: too) as (job kind, neighbour kind, GPU model, speed, error), for
    #: ``Scheduler.observe_pair``; error is the reading's own (None: an agent that reports
    #: no error).
    observed_pairs: list[tuple[str, str, str, float, float | None]] = field(default_factory=list)
    #: DLJobs (``ns/name``) whose recorded decision an allocated claim overtook (DRA path):
    #: why, one sentence naming the claim and the GPU. Their record is not in :attr:`state`.
    overtaken: dict[str, str] = field(default_factory=dict)
    #: DLJobs (``ns/name``) a claim took capacity from before their claim there was allocated,
    #: kept because some of their pods run (nothing that runs is deleted for another's
    #: claim): why, one sentence. Their record stays in :attr:`state`, the claim counted up to
    #: each GPU's capacity.
    held_over: dict[str, str] = field(default_factory=dict)
    #: For each job in :attr:`overtaken`: the GPUs (UUIDs) of its decision the claim took.
    overtaken_on: dict[str, frozenset[str]] = field(default_factory=dict)

    def profiles(self) -> dict[str, JobRequest]:
        """Resident requests by kind (hand each to ``Scheduler.remember`` for pair speeds)."""
        return {r.request.kind: r.request for r in self.residents.values()}


def add_resident(
    live: LiveState,
    request: JobRequest,
    shares: list[GpuShare],
    prediction: ResourcePrediction,
    source: str,
    pods: tuple[str, ...],
    what: str,
) -> bool:
    # Only shares on GPUs the state offers are counted: a node that is NotReady, cordoned or
    # deleted (autoscaler scale-down, node replacement) contributes no capacity, so its shares
    # need no counting — but the job's shares on *other* nodes still hold those GPUs and must
    # be counted, never dropped with the vanished node's.
    kept = [s for s in shares if s.node in live.state.node_set]
    if not kept:
        return source == "dljob-status"  # recorded on nodes that are gone: still "recorded"
    try:
        live.state.add_job(request, kept, prediction)
    except ValidationError as exc:
        live.problems.append(f"{what}: share not counted: {exc}")
        return False
    live.residents[request.name] = Resident(
        request.name, source, request, tuple(kept), prediction, pods
    )
    return True
