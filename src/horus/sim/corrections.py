"""The simulated operator's pass: measurements in, then the core's planners, and what they
plan happens.

Why apart from the event loop: this is the simulated operator's side of the run-time
corrections — when a pass runs (rate-limited like the operator's), what it tells the planners about each running
job, and what a move or an eviction does to the job (``MoveCosts``) — while the engine only
keeps time. The decisions themselves are the core's (:func:`horus.scheduler.plan_migrations`,
:func:`horus.scheduler.plan_preemptions`), exactly as the operator calls them.

When: after an iteration of the event loop in which something changed (jobs came or went, the
agent wrote a pair), at most once per ``pass_interval_s`` (migration: ``migration_interval_s``);
a change inside the interval arms a timer for its end. A pass first hands the scheduler the pair speeds the agents wrote
since the last one (``+observed``), as the operator reads ``status.observed.pairs``; placement
itself stays event-driven. What the planners are told: every job is ``OnCheckpoint``
(movable), costs ``MoveCosts.per_move_s`` to stop, and is ``observed`` once its pod has been
sampled where it is for the agent's ``min_samples × sample_interval_s`` and (``+observed``)
the pair speed of each job beside it on its first GPU is known. Its age is the time it has
run (the planner's horizon estimate); its true remaining time is never used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from horus.scheduler import (
    Move,
    Preemption,
    RunningJob,
    plan_migrations,
    plan_preemptions,
)
from horus.scheduler.migration import Memo
from horus.scheduler.state import BoolArray

if TYPE_CHECKING:
    from horus.sim.engine import _Run, _Running


class Corrections:
    """The simulated operator's migration and preemption passes for one run."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.spec = run.sim.spec
        #: A pass is owed (something changed since the last one), and a migration pass.
        self.want = False
        self.want_moves = False
        #: When the next pass and the next migration pass may run, and the timer that
        #: brings the loop back then.
        self.next_allowed = -math.inf
        self.next_moves = -math.inf
        self.due: float | None = None
        #: Jobs whose move the planner found could not pay where they are
        #: (``MigrationPlan.hopeless``): left out until their neighbours or the measured
        #: pairs change, as an operator may.
        self.hopeless: set[str] = set()
        #: And those it found had nowhere to go now (``MigrationPlan.nowhere``): left out
        #: until GPUs are freed.
        self.nowhere: set[str] = set()
        #: The planner's memory between passes (``plan_migrations(memo=…)``).
        self.memo: Memo = {}

    def neighbours_changed(self, jobs: Iterable[str]) -> None:
        """The engine: these jobs' GPUs changed (jobs came, went or moved)."""
        self.hopeless.difference_update(jobs)
        self.nowhere.difference_update(jobs)

    def gpus_freed(self) -> None:
        """The engine: jobs left GPUs (finished, moved, evicted): new destinations."""
        self.nowhere.clear()

    def next_time(self) -> float:
        return self.due if self.due is not None else math.inf

    def run_pass(self, changed: bool) -> set[int]:
        """A pass if one is owed and allowed now; the GPUs whose jobs it moved or evicted."""
        now, cfg = self.run.now, self.run.cfg
        if changed:
            self.want = self.want_moves = True
        touched: set[int] = set()
        if self.want and now >= self.next_allowed:
            self.want = False
            self.next_allowed = now + cfg.pass_interval_s
            self._ingest()
            if self.spec.preempt:
                touched |= self._preempt()
        if self.spec.migrate and self.want_moves and now >= self.next_moves:
            self.want_moves = False
            self.next_moves = now + cfg.migration_interval_s
            touched |= self._migrate()
        later = [self.next_allowed] if self.want else []
        if self.spec.migrate and self.want_moves:
            later.append(self.next_moves)
        self.due = min(later) if later and min(later) > now else None
        return touched

    def _ingest(self) -> None:
        """``+observed``: the operator hands the scheduler what the agents wrote."""
        run = self.run
        if run.observer is None:
            return
        reports = run.observer.take()
        if reports:
            self.hopeless.clear()  # beliefs changed
            self.nowhere.clear()
        if self.spec.observe:
            for kind, other, speed, error in reports:
                run.sched.observe_pair(kind, other, run.truth.gpu_model, speed, error)

    # --- preemption -----------------------------------------------------------------------
    def _preempt(self) -> set[int]:
        run = self.run
        head = run.queue.head()
        if head is None or not run.running:
            return set()
        lowest = min(r.request.priority for r in run.running.values())
        if head.priority <= lowest:
            return set()
        jobs = [
            self._view(name, r, observed=False)
            for name, r in run.running.items()
            if r.request.priority < head.priority
        ]
        waiting = itertools.takewhile(lambda j: j.priority > lowest, run.queue)
        plans = plan_preemptions(run.sched, run.st, waiting, jobs, run.cfg.preemption)
        touched: set[int] = set()
        for p in plans:
            touched |= self._evict(p)
        return touched

    def _evict(self, p: Preemption) -> set[int]:
        run, costs, now = self.run, self.run.cfg.costs, self.run.now
        touched: set[int] = set()
        for name in p.victims:
            r = run.running.pop(name)
            r.progress_to(now)
            run.suspended[name] = (r.remaining + costs.lost_progress_s * r.rate, r.elapsed(now))
            r.rec.preemptions += 1
            touched.update(run.vacate(name))
            if run.observer is not None:
                run.observer.new_pod(name)
            run.queue.push(r.request)
        job = run.queue.remove(p.job)
        run.st.apply(job, p.placement)
        # it starts once the victims have checkpointed: charged as a restart
        touched.update(run.launch(p.job, costs.restart_s))
        return touched

    # --- migration ------------------------------------------------------------------------
    def _migrate(self) -> set[int]:
        run, now, cfg = self.run, self.run.now, self.run.cfg.migration
        st = run.st
        eligible: dict[str, _Running] = {}
        views: dict[str, RunningJob] = {}
        shared = (st.njobs > 1).tolist()
        skip = self.hopeless | self.nowhere
        for name, r in run.running.items():
            if r.last > now:  # a move under way: it counts against the cap
                views[name] = self._view(name, r, observed=False, moving=True)
                continue
            if name in skip:
                continue
            if r.rec.moves >= cfg.max_moves_per_job:
                continue
            if r.last_moved is not None and now - r.last_moved < cfg.min_interval_s:
                continue
            if not any(shared[g] for g in r.gpus):
                continue
            if self._observed(name, r):
                eligible[name] = r
            else:
                self.want_moves = True  # it may be observed by the next pass
        if not eligible:
            return set()
        for name, r in eligible.items():
            views[name] = self._view(name, r, observed=True)
            for g in r.gpus:  # its neighbours: how long the gain of leaving them lasts
                for res in st.residents[g]:
                    if res.job not in views:
                        views[res.job] = self._view(res.job, run.running[res.job], False)
        plan = plan_migrations(
            run.sched, st, list(views.values()), now, cfg, self._reserved(), self.memo
        )
        if plan.deferred:
            self.want_moves = True
        self.hopeless.update(plan.hopeless)
        self.nowhere.update(plan.nowhere)
        touched: set[int] = set()
        for m in plan.moves:
            touched |= self._move(m)
        return touched

    def _move(self, m: Move) -> set[int]:
        run, costs, now = self.run, self.run.cfg.costs, self.run.now
        r = run.running[m.job]
        r.progress_to(now)
        r.remaining += costs.lost_progress_s * r.rate
        old = run.vacate(m.job)
        run.st.apply(r.request, m.placement)
        r.gpus = run.st.gpus_of(m.job)
        r.last = now + costs.restart_s
        r.last_moved = now
        r.rec.moves += 1
        if run.observer is not None:
            run.observer.new_pod(m.job)
        return set(old) | set(r.gpus)

    def _reserved(self) -> BoolArray | None:
        """GPUs the starvation guard holds for the starving head of the queue, if any."""
        run = self.run
        held = run.sched.reserved_for
        if held is None:
            return None
        waiting = run.queue.jobs([held])
        return run.sched.reservation.protect(run.st, waiting[0]) if waiting else None

    # --- what the planners are told -------------------------------------------------------
    def _observed(self, name: str, r: _Running) -> bool:
        obs, now = self.run.observer, self.run.now
        if obs is None or not obs.settled(name, now):
            return False
        if not self.spec.observe:
            return True  # oracle: its pair speeds are exact; only the agent's timing applies
        kind = r.request.kind
        here = self.run.st.residents[r.gpus[0]]
        return all(obs.is_known(kind, x.kind) for x in here if x.job != name)

    def _view(self, name: str, r: _Running, observed: bool, moving: bool = False) -> RunningJob:
        now = self.run.now
        return RunningJob(
            r.request,
            movable=True,
            observed=observed,
            moves=r.rec.moves,
            last_moved=r.last_moved,
            elapsed_s=max(0.0, r.elapsed(now)),
            move_cost_s=self.run.cfg.costs.per_move_s,
            moving=moving or r.last > now,
        )
