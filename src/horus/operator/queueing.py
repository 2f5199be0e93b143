"""From queued DLJobs to the scheduling core's requests, and back to refusals a user reads.

A queued job becomes a :class:`~horus.scheduler.JobRequest` with its recorded prediction
(admission predicted it once) and the nodes its pod template allows
(:class:`NodeEligibility`, ``horus.api.nodematch``). A job no node allows, or that can never
fit this cluster, is refused here without entering the core's queue, so it never blocks the
jobs behind it. A refusal is written only when its reason or sentence changed, and its Event
only when the reason changed, so a job that waits for an hour does not flood the apiserver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from horus.api.nodematch import NodeConstraints, constraints_of
from horus.common.clock import now_rfc3339, timestamp
from horus.operator import status as st
from horus.operator import transitions as tr
from horus.operator.object_reads import resource_prediction
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.writer import StatusWriter
from horus.predictor.interface import GraphProfile
from horus.scheduler import JobRequest, RefusalCode

__all__ = ["NodeEligibility", "job_request", "refuse", "stable_refusal"]


def job_request(ctx: JobCtx, profile: GraphProfile) -> JobRequest:
    """The core's request for a queued job (its recorded prediction, explicit share if any)."""
    assert ctx.job is not None
    spec = ctx.job.spec
    pred = ctx.job.status.predicted
    return JobRequest(
        name=ctx.key,
        profile=profile,
        replicas=spec.replicas,
        gpus_per_replica=spec.gpus_per_replica,
        core_percent=spec.gpu.core_percent if spec.gpu.explicit else None,
        memory_mib=spec.gpu.memory_mib if spec.gpu.explicit else None,
        # Resolved from spec.priorityClassName at admission (horus.operator.priority).
        priority=ctx.job.status.priority or 0,
        submit_time=timestamp(ctx.meta.get("creationTimestamp")),
        prediction=resource_prediction(pred) if pred is not None else None,
    )


class NodeEligibility:
    """Which GPU nodes each pod template allows (``horus.api.nodematch``), once per distinct
    set of constraints in a pass: most jobs share one (none at all)."""

    def __init__(self, nodes: list[dict[str, Any]], gpu_nodes: list[str]) -> None:
        wanted = set(gpu_nodes)
        self._nodes = [n for n in nodes if (n.get("metadata") or {}).get("name") in wanted]
        self._all = frozenset(wanted)
        self._cache: dict[NodeConstraints, tuple[frozenset[str] | None, str]] = {}

    def allowed(self, template: Mapping[str, Any]) -> tuple[frozenset[str] | None, str]:
        """(the nodes allowed, or None for all of them; why none is, when none is)."""
        constraints = constraints_of(template)
        hit = self._cache.get(constraints)
        if hit is None:
            hit = self._compute(constraints)
            self._cache[constraints] = hit
        return hit

    def _compute(self, constraints: NodeConstraints) -> tuple[frozenset[str] | None, str]:
        ok: set[str] = set()
        why: Counter[str] = Counter()
        for node in self._nodes:
            reason = constraints.why_not(node)
            if reason is None:
                ok.add(str(node["metadata"]["name"]))
            else:
                why[reason] += 1
        if ok == self._all:
            return None, ""
        parts = [f"{n} node{'s' if n > 1 else ''}: {r}" for r, n in why.most_common(4)]
        message = (
            f"no GPU node allows the pod template ({'; '.join(parts)}); waiting until a node "
            "matches its nodeSelector, node affinity and tolerations"
        )
        return frozenset(ok), message


def stable_refusal(reason: str, code: str) -> str:
    """The refusal text, without the parts that change every pass (queue positions)."""
    if code == RefusalCode.QUEUED:
        return "waiting in queue: jobs ahead of it do not fit yet (backfill depth reached)"
    return reason


def refuse(
    ctx: JobCtx, writer: StatusWriter, reason: str, message: str, report: PassReport
) -> None:
    """Record why a queued job was not placed (only when that changed; Event on a new reason)."""
    cond = st.condition(ctx.status.get("conditions") or [], st.COND_SCHEDULED) or {}
    if (
        ctx.pending is None
        and cond.get("reason") == reason
        and ctx.status.get("message") == message
    ):
        return
    writer.metrics.decisions.labels(outcome=reason).inc()
    patch = tr.refused(ctx.status, reason, message, now_rfc3339(), ctx.generation)
    event = (reason, message, True) if cond.get("reason") != reason else None
    writer.write(ctx, patch, report, event)
