"""Every change the operator makes to a DLJob's status, as named, pure transitions.

Each function takes the job's current status (for its conditions) and what happened, and
returns the JSON merge patch of the operator's own fields (``status.observed`` is never
touched: it is the node agent's). A ``None`` value deletes the field. The reconciler signs
and writes these patches (:meth:`horus.operator.writer.StatusWriter.patch`); because
they are pure, every transition is unit-tested without a cluster, and a newcomer finds all
of the status life cycle in one place:

``admitted`` (→ Queued) · ``pending`` · ``refused`` (still Queued, with the reason) ·
``placed`` (→ Scheduled, with placements) · ``progressed`` (→ Running / Succeeded / Failed
from the pods) · ``failed`` · ``requeued`` (Scheduled → Queued, share given back) ·
``restored`` (a record someone else wrote, put back from the pods or reset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from horus.api.assignment import PredictedUsage
from horus.common import constants as c
from horus.operator import status as st

__all__ = [
    "MAX_MESSAGE",
    "admitted",
    "failed",
    "pending",
    "placed",
    "progressed",
    "refused",
    "requeued",
    "restored",
]

#: Messages are cut here (the CRD allows 4096; Events show the first kilobyte well).
MAX_MESSAGE = 1024
Patch = dict[str, Any]


def _conds(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = status.get("conditions")
    return [x for x in raw if isinstance(x, dict)] if isinstance(raw, list) else []


def admitted(
    status: Mapping[str, Any],
    message: str,
    predicted: PredictedUsage,
    now: str,
    generation: int | None,
    share_warning: str | None = None,
) -> Patch:
    """Validated and predicted: Queued (with ``ShareSufficient=False`` when an explicit
    share is below the prediction)."""
    conditions = st.set_condition(
        _conds(status), st.COND_SCHEDULED, "False", "Queued", message, now, generation
    )
    if share_warning is not None:
        conditions = st.set_condition(
            conditions,
            st.COND_SHARE_SUFFICIENT,
            "False",
            "MemoryBelowPrediction",
            share_warning,
            now,
        )
    patch: Patch = {
        "phase": c.DLJOB_PHASE_QUEUED,
        "reason": "Queued",
        "message": message[:MAX_MESSAGE],
        "predicted": predicted.to_json(),
        "queuedTime": now,
        "conditions": conditions,
    }
    if generation is not None:
        patch["observedGeneration"] = generation
    return patch


def pending(status: Mapping[str, Any], reason: str, message: str, now: str) -> Patch | None:
    """Waiting for something outside the cluster's GPUs (a ConfigMap, quota); None when the
    status already says exactly this."""
    if status.get("reason") == reason and status.get("message") == message[:MAX_MESSAGE]:
        return None
    return {
        "phase": c.DLJOB_PHASE_PENDING,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "conditions": st.set_condition(
            _conds(status), st.COND_SCHEDULED, "False", reason, message, now
        ),
    }


def refused(
    status: Mapping[str, Any], reason: str, message: str, now: str, generation: int | None
) -> Patch:
    """Queued and not placed this pass, with the scheduler's reason (the phase stays)."""
    return {
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "conditions": st.set_condition(
            _conds(status), st.COND_SCHEDULED, "False", reason, message, now, generation
        ),
    }


def placed(
    status: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    message: str,
    now: str,
    generation: int | None,
) -> Patch:
    """The durable placement record: Scheduled, with one entry per replica and GPU."""
    return {
        "phase": c.DLJOB_PHASE_SCHEDULED,
        "reason": "Placed",
        "message": message[:MAX_MESSAGE],
        "placements": [dict(r) for r in records],
        "scheduledTime": now,
        "conditions": st.set_condition(
            _conds(status), st.COND_SCHEDULED, "True", "Placed", message, now, generation
        ),
    }


def progressed(status: Mapping[str, Any], prog: st.Progress, now: str) -> Patch | None:
    """The phase the pods give a placed job, when it moved to Running or a final phase
    (None otherwise: Scheduled → Scheduled is not worth a write)."""
    if prog.phase == status.get("phase"):
        return None
    conds = _conds(status)
    patch: Patch = {"phase": prog.phase, "reason": prog.reason, "message": prog.message}
    if prog.phase == c.DLJOB_PHASE_RUNNING:
        patch["startTime"] = status.get("startTime") or now
        conds = st.set_condition(conds, st.COND_RUNNING, "True", prog.reason, prog.message, now)
    elif prog.phase in (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED):
        patch["completionTime"] = now
        conds = st.set_condition(conds, st.COND_RUNNING, "False", prog.reason, prog.message, now)
        conds = st.set_condition(conds, st.COND_FINISHED, "True", prog.reason, prog.message, now)
    else:
        return None
    patch["conditions"] = conds
    return patch


def failed(status: Mapping[str, Any], reason: str, message: str, now: str) -> Patch:
    """Final: the job cannot run (bad spec or profile, never fits, pods refused or stuck)."""
    return {
        "phase": c.DLJOB_PHASE_FAILED,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "completionTime": now,
        "conditions": st.set_condition(
            _conds(status), st.COND_FINISHED, "True", reason, message, now
        ),
    }


def requeued(status: Mapping[str, Any], reason: str, message: str, now: str) -> Patch:
    """Back to the queue without placements: the share is given back (only for a job that
    has no pod, so nothing else holds it)."""
    return {
        "phase": c.DLJOB_PHASE_QUEUED,
        "placements": None,
        "scheduledTime": None,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "conditions": st.set_condition(
            _conds(status), st.COND_SCHEDULED, "False", reason, message, now
        ),
    }


def restored(
    status: Mapping[str, Any],
    phase: str | None,
    records: Sequence[Mapping[str, Any]] | None,
    message: str,
    now: str,
) -> Patch:
    """A record the operator did not sign, put back: from the job's pods (``records`` and
    the ``phase`` they give), or reset (both None) so the job is admitted again."""
    patch: Patch = {
        "phase": phase,
        "placements": [dict(r) for r in records] if records else None,
        "reason": "StatusRestored",
        "message": message[:MAX_MESSAGE],
        "conditions": st.set_condition(
            _conds(status),
            st.COND_SCHEDULED,
            "True" if phase else "False",
            "StatusRestored",
            message,
            now,
        ),
    }
    if phase is None:
        patch["scheduledTime"] = None
    return patch
