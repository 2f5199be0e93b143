"""DLJob status as a pure function of the job's pods — and the conditions and reasons it shows.

Why pure: the rules ("Running when every replica runs", "Failed as soon as one replica fails",
"keep lastTransitionTime unless the status flips") are what users read in ``kubectl get
dljobs``; they must be exact and are cheapest to prove without a cluster. The reconciler only
turns their result into a JSON merge patch of the fields the operator owns (never
``status.observed``, which the node agent writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from horus.common import constants as c
from horus.scheduler import RefusalCode

# Condition types the operator writes on a DLJob.
COND_SCHEDULED = "Scheduled"
COND_RUNNING = "Running"
COND_FINISHED = "Finished"
#: False when an explicit share is below the job's predicted need (a warning, not a refusal).
COND_SHARE_SUFFICIENT = "ShareSufficient"

#: Owned top-level status fields (a merge patch touches nothing else).
OWNED_FIELDS = (
    "phase",
    "reason",
    "message",
    "observedGeneration",
    "placements",
    "placementSignature",
    "placementEpoch",
    "migrations",
    "migration",
    "predicted",
    "conditions",
    "queuedTime",
    "scheduledTime",
    "startTime",
    "completionTime",
)


def refusal_reason(code: str) -> str:
    """The condition reason for a scheduler refusal code (:class:`RefusalCode` or its string
    value; ``Unschedulable`` when unknown)."""
    try:
        return RefusalCode(code).condition_reason
    except ValueError:
        return "Unschedulable"


@dataclass(frozen=True)
class PodView:
    """What the status logic needs of one replica pod."""

    name: str
    replica: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    node: str | None
    deleting: bool = False
    reason: str = ""

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodView | None:
        """None when the pod has no readable replica index."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        try:
            replica = int(labels.get(c.LABEL_REPLICA_INDEX, ""))
        except ValueError:
            return None
        status = pod.get("status") or {}
        reason = str(status.get("reason") or "")
        if not reason:
            for cs in status.get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or {}
                if term.get("reason"):
                    reason = str(term["reason"])
                    break
        return cls(
            name=str(meta.get("name", "")),
            replica=replica,
            phase=str(status.get("phase") or "Pending"),
            node=(pod.get("spec") or {}).get("nodeName"),
            deleting=bool(meta.get("deletionTimestamp")),
            reason=reason,
        )


@dataclass(frozen=True)
class Progress:
    """The job's phase as its pods tell it, with a reason and a message for people."""

    phase: str
    reason: str
    message: str


def progress(replicas: int, pods: Iterable[PodView], current_phase: str | None) -> Progress:
    """Phase of a placed job (one that has ``status.placements``) from its replica pods.

    * any replica Failed → Failed (a job's pods use restartPolicy Never/OnFailure, so a Failed
      pod is final);
    * every replica Succeeded → Succeeded;
    * every replica Running (or done) → Running;
    * a replica pod missing after the job was Running → Failed (someone deleted it);
    * otherwise → Scheduled (pods being created, bound, or starting).
    Succeeded and Failed are final: nothing moves a job out of them.
    """
    if current_phase in (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED):
        return Progress(current_phase, "", "")
    by_replica: dict[int, PodView] = {}
    for p in pods:
        if 0 <= p.replica < replicas:
            by_replica.setdefault(p.replica, p)
    failed = sorted((p for p in by_replica.values() if p.phase == "Failed"), key=lambda p: p.name)
    if failed:
        f = failed[0]
        why = f" ({f.reason})" if f.reason else ""
        return Progress(
            c.DLJOB_PHASE_FAILED,
            "ReplicaFailed",
            f"replica {f.replica} (pod {f.name}) failed{why}",
        )
    present = [by_replica.get(i) for i in range(replicas)]
    if all(p is not None and p.phase == "Succeeded" for p in present):
        return Progress(
            c.DLJOB_PHASE_SUCCEEDED, "AllReplicasSucceeded", f"all {replicas} replica(s) succeeded"
        )
    missing = [i for i, p in enumerate(present) if p is None]
    if missing and current_phase == c.DLJOB_PHASE_RUNNING:
        return Progress(
            c.DLJOB_PHASE_FAILED,
            "ReplicaPodDeleted",
            f"the pod of replica {missing[0]} was deleted while the job was running",
        )
    if not missing and all(p is not None and p.phase in ("Running", "Succeeded") for p in present):
        return Progress(
            c.DLJOB_PHASE_RUNNING, "AllReplicasRunning", f"all {replicas} replica(s) running"
        )
    waiting = [i for i, p in enumerate(present) if p is None or p.phase not in ("Running",)]
    return Progress(
        c.DLJOB_PHASE_SCHEDULED,
        "ReplicasStarting",
        f"{replicas - len(waiting)} of {replicas} replica(s) running",
    )


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """``conditions`` with ``type_`` set; lastTransitionTime moves only when status flips."""
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            out.append(dict(cond))
            continue
        found = True
        new: dict[str, Any] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:32768],
        }
        new["lastTransitionTime"] = (
            cond.get("lastTransitionTime", now) if cond.get("status") == status else now
        )
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found:
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": now,
        }
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    return out


def condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((cd for cd in conditions if cd.get("type") == type_), None)


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The owned fields of ``new`` that differ from ``old`` (empty: nothing to write)."""
    return {k: new[k] for k in OWNED_FIELDS if k in new and old.get(k) != new[k]}
