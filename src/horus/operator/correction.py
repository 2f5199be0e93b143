"""Correcting placements at run time: moving jobs whose measured neighbours slow them, and
preempting lower-priority jobs for a waiting one.

Why: a placement is decided once, from a prediction, and predictions of how two jobs slow
each other are the weakest part of Horus. The node agents *measure* it (``status.observed``);
every ``correction_period`` seconds the leader hands the running jobs to the scheduling core's
planners (:func:`horus.scheduler.migration.plan_migrations`,
:func:`horus.scheduler.preemption.plan_preemptions`) — the same scoring that placed them, now
with measurements — and carries out what they decide (:mod:`horus.operator.moves`: the record
first, then the pods). Only jobs whose ``spec.migration.policy`` is ``OnCheckpoint`` are ever
moved or preempted, and not once they reached their own ``spec.migration.maxMigrations``;
the planners hold the anti-flapping limits (``MigrationSettings``). A job moves only onto
nodes its pod template allows (node selector, affinity, tolerations), as it was placed.

A job's move cost, in seconds of its progress: the time it gets to write its checkpoint
(``spec.migration.gracePeriodSeconds``, an upper bound) plus ``restart_seconds`` (the
operator's setting: pod start, process and framework start, loading the checkpoint).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence

from horus.common import constants as c
from horus.common.clock import timestamp
from horus.operator.jobapi import JobApi
from horus.operator.moves import preempt, start_move
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.placement_rules import PlacementSession
from horus.operator.priority import PriorityClasses
from horus.operator.queueing import NodeEligibility
from horus.operator.residents import LiveState
from horus.operator.writer import StatusWriter
from horus.scheduler import JobRequest
from horus.scheduler.migration import plan_migrations
from horus.scheduler.preemption import plan_preemptions
from horus.scheduler.types import MigrationSettings, PreemptionSettings, RunningJob

__all__ = ["Corrector"]

log = logging.getLogger(__name__)


class Corrector:
    """Plans and starts moves and preemptions, at most every ``period_s`` seconds."""

    def __init__(
        self,
        api: JobApi,
        writer: StatusWriter,
        migration: MigrationSettings | None = None,
        preemption: PreemptionSettings | None = None,
        period_s: float = 30.0,
        restart_s: float = 60.0,
    ) -> None:
        self.api, self.writer = api, writer
        self.migration = migration or MigrationSettings()
        self.preemption = preemption or PreemptionSettings()
        self.period_s, self.restart_s = period_s, restart_s
        self._last = float("-inf")

    def due(self, now: float) -> bool:
        return now - self._last >= self.period_s

    def correct(
        self,
        session: PlacementSession,
        ctxs: Mapping[str, JobCtx],
        live: LiveState,
        waiting: Sequence[JobRequest],
        eligible: NodeEligibility,
        report: PassReport,
    ) -> None:
        """One round: preemptions for ``waiting`` jobs (not placed this pass), then moves."""
        now = time.time()
        if not self.due(time.monotonic()):
            return
        self._last = time.monotonic()
        running = self.running_jobs(ctxs, live, now, eligible)
        if not running:
            return
        by_key = {x.key: x for x in ctxs.values()}
        waiting = self._may_preempt(waiting, by_key)
        for p in plan_preemptions(session.scheduler, live.state, waiting, running, self.preemption):
            for victim in p.victims:
                preempt(by_key[victim], p.job, self.api, self.writer, report)
            if p.job in by_key:
                self.writer.event(by_key[p.job], "Preempting", p.message)
            running = [r for r in running if r.request.name not in p.victims]
        plan = plan_migrations(session.scheduler, live.state, running, now, self.migration)
        for move in plan.moves:
            ctx = by_key.get(move.job)
            if ctx is not None:
                start_move(ctx, move.placement, move.message, self.api, self.writer, report)
        if plan.deferred:
            log.info("moves waiting for a free slot: %s", ", ".join(plan.deferred[:8]))

    def _may_preempt(
        self, waiting: Sequence[JobRequest], by_key: Mapping[str, JobCtx]
    ) -> list[JobRequest]:
        """The waiting jobs whose class allows preempting (``preemptionPolicy`` not
        ``Never``; read when some job waits). Unreadable classes: none preempts — a
        preemption costs a job its progress since its last checkpoint."""
        if not waiting:
            return []
        try:
            classes = PriorityClasses.from_objects(self.api.list_priority_classes())
        except Exception as exc:
            log.warning("cannot list PriorityClasses (%s); no preemption this round", exc)
            return []
        out = []
        for req in waiting:
            ctx = by_key.get(req.name)
            klass = ctx.job.spec.priority_class_name if ctx and ctx.job else None
            if classes.may_preempt(klass):
                out.append(req)
        return out

    def running_jobs(
        self,
        ctxs: Mapping[str, JobCtx],
        live: LiveState,
        now: float,
        eligible: NodeEligibility | None = None,
    ) -> list[RunningJob]:
        """Every running DLJob as the planners see it (see the module docstring), limited to
        the nodes its pod template allows (``eligible``)."""
        out: list[RunningJob] = []
        for ctx in ctxs.values():
            resident = live.residents.get(ctx.key)
            moving = bool(ctx.status.get("migration"))
            if ctx.job is None or resident is None or not ctx.trusted:
                continue
            if ctx.phase != c.DLJOB_PHASE_RUNNING and not moving:
                continue
            status, spec = ctx.job.status, ctx.job.spec
            started = timestamp(ctx.status.get("startTime")) or now
            last_move = status.migrations.last_time
            observed = status.observed
            measured_after = last_move.timestamp() if last_move is not None else started
            seen = (
                observed is not None
                and observed.sampled_at is not None
                and observed.sampled_at.timestamp() >= measured_after
            )
            cap = spec.migration.max_migrations
            within_cap = cap is None or status.migrations.count < cap
            # The planners weigh victims by priority: the value recorded at admission (the
            # live state rebuilds requests from placements, which carry none).
            request = dataclasses.replace(resident.request, priority=status.priority or 0)
            if eligible is not None:
                allowed, _ = eligible.allowed(spec.template)
                if allowed is not None:
                    request = dataclasses.replace(request, nodes=allowed)
            out.append(
                RunningJob(
                    request=request,
                    movable=spec.migration.movable and within_cap,
                    observed=seen,
                    moves=status.migrations.count,
                    last_moved=last_move.timestamp() if last_move is not None else None,
                    elapsed_s=max(0.0, now - started),
                    move_cost_s=spec.migration.grace_period_seconds + self.restart_s,
                    moving=moving,
                )
            )
        return out
