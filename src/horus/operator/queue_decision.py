"""The queue phase: queued DLJobs refused or placed by the core in one decision per pass.

A job that can never run here (its pod names taken, no node its template allows, larger
than any node) is refused at once with the reason, so it never blocks the jobs behind it;
the rest go to :meth:`~horus.scheduler.Scheduler.schedule` together, up to the pass's cap.
Each placement and refusal is written on the pass's pool; :class:`QueueOutcome` holds those
writes for the commit phase to wait on, and what the later phases need of the decision.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from horus.api.dljob import parse_dljob
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator import status as st
from horus.operator.admission import Admission
from horus.operator.claimcommit import (
    REASON_AVOIDING,
    REASON_CLAIM_NAME_TAKEN,
    ClaimNameTaken,
    avoiding_message,
)
from horus.operator.guards import JobGuard
from horus.operator.jobapi import REASON_POD_NAME_TAKEN, ProfileUnavailable, taken_message
from horus.operator.metrics import OperatorMetrics
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.placement_rules import PlacementSession
from horus.operator.queueing import NodeEligibility, job_request, refuse, stable_refusal
from horus.operator.writer import StatusWriter
from horus.scheduler import ClusterState, JobRequest, RefusalCode

__all__ = ["QueueOutcome", "QueuePhase"]

log = logging.getLogger(__name__)


@dataclass
class QueueOutcome:
    """What the queue phase decided, before it is written."""

    futures: list[Future[None]] = field(default_factory=list)
    by_reason: Counter[str] = field(default_factory=Counter)
    #: Jobs the core could not place this pass (for preemption), highest priority first.
    waiting: list[JobRequest] = field(default_factory=list)
    #: Which nodes each pod template allows this pass (set by the queue phase, every pass;
    #: used for queued jobs, then for moves).
    eligible: NodeEligibility | None = None


class QueuePhase:
    """Decides a pass's queued jobs: refusals at once, the rest by the core together."""

    def __init__(
        self,
        session: Callable[[], PlacementSession],
        admission: Admission,
        writer: StatusWriter,
        metrics: OperatorMetrics,
        pool: ThreadPoolExecutor,
        guard: JobGuard,
        is_leader: Callable[[], bool],
        claims_taken: Callable[[JobCtx], list[str]],
        max_jobs_per_pass: Callable[[], int],
    ) -> None:
        self.session = session
        self.admission = admission
        self.writer = writer
        self.metrics = metrics
        self.pool = pool
        self.guard = guard
        self.is_leader = is_leader
        #: The claim names of a job's replicas held by claims Horus did not make for it
        #: (none on the device-plugin path).
        self.claims_taken = claims_taken
        self.max_jobs_per_pass = max_jobs_per_pass
        #: The GPUs (UUIDs) a job keeps off for now (the DRA path: those it was overtaken
        #: on, :meth:`horus.operator.claimcommit.ClaimPath.avoided`); none elsewhere.
        self.avoided: Callable[[JobCtx], frozenset[str]] = lambda ctx: frozenset()

    def place(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        nodes: list[dict[str, Any]],
        report: PassReport,
    ) -> QueueOutcome:
        """Queued jobs: refuse what can never run here, place the rest with the core."""
        queue = QueueOutcome()
        queued = [
            x
            for x in ctxs.values()
            if x.phase == c.DLJOB_PHASE_QUEUED
            and x.job is not None
            and not x.status.get("placements")
            and not x.meta.get("deletionTimestamp")
        ]
        for ctx in ctxs.values():  # e.g. a job queued before an upgrade that refuses its spec
            if ctx.phase == c.DLJOB_PHASE_QUEUED and ctx.job is None and self.is_leader():
                queue.futures.append(
                    self.pool.submit(self.guard.step, _invalid, ctx, self.writer, report)
                )
        requests = self._requests(queued, state, nodes, queue, report)
        if requests and state.gpu_count and self.is_leader():
            self._decide(ctxs, state, requests, queue, report)
        elif requests:
            why = "no Ready node offers GPUs (horus.io/gpu-inventory) yet"
            for ctx in queued:
                self._refuse(ctx, "NoGPUNodes", why, queue, report)
        report.queued = len(requests)
        return queue

    def _requests(
        self,
        queued: list[JobCtx],
        state: ClusterState,
        nodes: list[dict[str, Any]],
        queue: QueueOutcome,
        report: PassReport,
    ) -> dict[str, JobRequest]:
        eligible = queue.eligible = NodeEligibility(nodes, state.node_names)
        session = self.session()
        requests: dict[str, JobRequest] = {}
        for ctx in queued:
            if ctx.taken:  # placed, it would hold a GPU for a pod it cannot create
                why = taken_message(ctx.namespace, ctx.taken)
                self._refuse(ctx, REASON_POD_NAME_TAKEN, why, queue, report)
                continue
            claims_taken = self.claims_taken(ctx)
            if claims_taken:
                why = str(ClaimNameTaken(ctx.namespace, ", ".join(claims_taken)))
                self._refuse(ctx, REASON_CLAIM_NAME_TAKEN, why, queue, report)
                continue
            try:
                req = job_request(ctx, self.admission.profile(ctx))
            except (ProfileUnavailable, ValidationError) as exc:
                log.warning("DLJob %s: profile unavailable while queued: %s", ctx.key, exc)
                continue
            session.remember(req)
            assert ctx.job is not None
            allowed, why_none = eligible.allowed(ctx.job.spec.template)
            if allowed is not None and not allowed and state.gpu_count:
                self._refuse(ctx, RefusalCode.NODES.condition_reason, why_none, queue, report)
                continue
            if allowed is not None:
                req = dataclasses.replace(req, nodes=allowed)
            # A job that can never fit this cluster must not block the queue behind it.
            never = session.scheduler.check_possible(state, req) if state.gpu_count else None
            if never is not None:
                self._refuse(ctx, RefusalCode.IMPOSSIBLE.condition_reason, never, queue, report)
                continue
            avoid = self.avoided(ctx)
            if avoid:  # overtaken there lately: kept off those GPUs for a while
                req = dataclasses.replace(req, avoid_gpus=avoid)
                if session.scheduler.check_possible(state, req) is not None:
                    self._refuse(ctx, REASON_AVOIDING, avoiding_message(len(avoid)), queue, report)
                    continue
            requests[req.name] = req
        return requests

    def _decide(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        requests: Mapping[str, JobRequest],
        queue: QueueOutcome,
        report: PassReport,
    ) -> None:
        t1 = time.perf_counter()
        result = self.session().scheduler.schedule(
            state, list(requests.values()), now=time.time(), limit=self.max_jobs_per_pass()
        )
        decided = {p.job for p in result.placed} | {r.job for r in result.refused}
        unreached = [name for name in requests if name not in decided]
        if unreached:  # past the pass's placements: decided (and written) next pass
            report.count("held_back", len(unreached))
        for name in unreached:  # still waiting: counted under their last refusal's reason
            queue.by_reason[str(ctxs[name].status.get("reason") or c.DLJOB_PHASE_QUEUED)] += 1
        self.metrics.latency.observe(time.perf_counter() - t1)
        report.timings["schedule"] = time.perf_counter() - t1
        for placement in result.placed:
            self.metrics.decisions.labels(outcome="placed").inc()
            queue.futures.append(
                self.pool.submit(self.guard.commit, ctxs[placement.job], placement, report)
            )
            report.count("placed")
        queue.waiting = sorted(
            (requests[r.job] for r in result.refused if r.code.resolvable),
            key=lambda req: (-req.priority, req.submit_time),
        )
        for refusal in result.refused:
            reason = st.refusal_reason(refusal.code)
            message = stable_refusal(refusal.reason, refusal.code)
            self._refuse(ctxs[refusal.job], reason, message, queue, report)

    def _refuse(
        self, ctx: JobCtx, reason: str, message: str, queue: QueueOutcome, report: PassReport
    ) -> None:
        queue.by_reason[reason] += 1
        queue.futures.append(
            self.pool.submit(self.guard.step, refuse, ctx, self.writer, reason, message, report)
        )
        report.count("refused")


def _invalid(ctx: JobCtx, writer: StatusWriter, report: PassReport) -> None:
    """A queued job whose spec no longer parses (it was admitted by an older version; spec
    edits are validated by the CRD) fails with the parser's sentence instead of waiting
    silently for ever."""
    try:
        parse_dljob(ctx.obj)
    except ValidationError as exc:
        writer.fail(ctx, "InvalidSpec", f"invalid DLJob: {exc}", report)
