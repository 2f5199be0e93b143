"""Moving a running job to other GPUs, and preempting one for a higher-priority job.

Why the order below: a move must survive a ``kill -9`` of the operator at any instant and
never leave two live copies of a replica or lose the job, exactly like a placement.

**A move** (``start_move``):

1. the signed record first — the new placements, phase ``Scheduled`` (reason ``Migrating``),
   and ``status.migration`` holding the placements the job leaves, so *both* shares count until
   the old pods are gone (``committed_shares``), plus ``status.migrations`` (count, from → to, reason,
   time);
2. then the old pods are deleted, each with its own grace period: the job gets SIGTERM and
   writes its checkpoint (``spec.migration``);
3. every later pass finishes the move from the record: a pod that holds other GPUs than its
   record is deleted (``commit``), the recorded pod is created once its name is free (so never
   two pods per replica), and ``status.migration`` is removed once no old pod is left.

A crash after 1 leaves a record the next leader finishes; before 1, nothing happened.

**A preemption** (``preempt``): the victim's record first — back to ``Queued`` without
placements, ``status.migrations.preemptions`` + 1 — then its pods are deleted (their shares
count, from the pods, until they are gone). A queued job that still has pods is a preemption
a crash interrupted: the pass deletes them (``LeftoverCleanup.pods``). The victim keeps its
prediction and resumes from its checkpoint when it is placed again.

Which jobs move or are preempted is the scheduling core's decision (``horus.scheduler``); this
module only carries decisions out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.operator import status as st
from horus.operator import transitions as tr
from horus.operator.jobapi import JobApi
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.podspec import placement_record, pod_name
from horus.operator.writer import StatusWriter
from horus.scheduler import Placement

__all__ = ["describe", "preempt", "start_move"]

log = logging.getLogger(__name__)


def describe(records: Sequence[dict[str, Any]]) -> str:
    """``node/gpu-i`` of each replica's first GPU, e.g. ``n1/gpu-0, n2/gpu-3``."""
    seen: dict[int, str] = {}
    for r in records:
        seen.setdefault(int(r["replica"]), f"{r['node']}/gpu-{r['gpuIndex']}")
    return ", ".join(seen[k] for k in sorted(seen))


def _history(ctx: JobCtx) -> dict[str, Any]:
    raw = ctx.status.get("migrations")
    return dict(raw) if isinstance(raw, dict) else {}


def start_move(
    ctx: JobCtx,
    placement: Placement,
    reason: str,
    api: JobApi,
    writer: StatusWriter,
    report: PassReport,
) -> None:
    """Record the move (signed), then stop the job's old pods (see the module docstring)."""
    old = [dict(r) for r in ctx.status.get("placements") or []]
    new = [
        placement_record(r.replica, pod_name(ctx.name, r.replica), g.node, g)
        for r in placement.replicas
        for g in r.gpus
    ]
    now = now_rfc3339()
    src, dst = describe(old), describe(new)
    message = f"moving from {src} to {dst}: {reason}"
    history = _history(ctx)
    patch = {
        "phase": c.DLJOB_PHASE_SCHEDULED,
        "reason": "Migrating",
        "message": message[: tr.MAX_MESSAGE],
        "placements": new,
        "scheduledTime": now,
        "migration": {"from": old, "reason": reason[:1024], "startedTime": now},
        "migrations": {
            **history,
            "count": int(history.get("count") or 0) + 1,
            "lastFrom": src[:1024],
            "lastTo": dst[:1024],
            "lastReason": reason[:1024],
            "lastTime": now,
        },
        "conditions": st.set_condition(
            ctx.status.get("conditions") or [], st.COND_RUNNING, "False", "Migrating", message, now
        ),
    }
    writer.patch(ctx, patch)
    report.count("status_writes")
    writer.metrics.migrations.labels(reason="move").inc()
    writer.event(ctx, "Migrated", message)
    log.info("DLJob %s: %s", ctx.key, message)
    _stop_pods(ctx, api)


def preempt(ctx: JobCtx, by: str, api: JobApi, writer: StatusWriter, report: PassReport) -> None:
    """Send ``ctx`` back to the queue so ``by`` (a higher-priority job) can have its GPUs."""
    now = now_rfc3339()
    history = _history(ctx)
    message = (
        f"preempted by the higher-priority job {by}; back in the queue, it resumes from its "
        "checkpoint when placed again"
    )
    patch = {
        **tr.requeued(ctx.status, "Preempted", message, now),
        "migrations": {
            **history,
            "preemptions": int(history.get("preemptions") or 0) + 1,
            "lastReason": f"preempted by {by}"[:1024],
            "lastTime": now,
        },
    }
    writer.patch(ctx, patch)
    report.count("status_writes")
    writer.metrics.migrations.labels(reason="preemption").inc()
    writer.event(ctx, "Preempted", message, warning=True)
    _stop_pods(ctx, api)


def _stop_pods(ctx: JobCtx, api: JobApi) -> None:
    """Delete the job's pods with their grace period (SIGTERM: they write their checkpoint)."""
    for pod in list(ctx.pods.values()):
        meta = pod.get("metadata") or {}
        name = str(meta.get("name"))
        try:
            api.delete_pod(ctx.namespace, name, str(meta.get("uid") or ""))
        except Exception as exc:  # the next pass deletes it (the record says it must go)
            log.warning("DLJob %s: cannot delete pod %s yet: %s", ctx.key, name, exc)
    ctx.leaving.extend(ctx.pods.values())
    ctx.pods.clear()
