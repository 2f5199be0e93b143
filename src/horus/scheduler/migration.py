"""Migration planner: which running jobs to move now, and where, so a placement that turned
out badly does not stay bad until a job ends.

Why: a placement is decided once, from a prediction, and the pair-speed predictions are the
weakest link (``docs/scheduler.md``). Once the node agent has *measured* how a job runs next
to its neighbours (``Scheduler.observe_pair``), the same scoring that placed it can say
whether it would do better elsewhere — Gandiva's introspection (OSDI '18), on Horus' model.

How a move is judged, in one unit — the cluster's summed normalised speed, counted per GPU as
placement gains are (a job at speed s on k GPUs counts k·s):

* ``before``: what the job adds where it runs now — its own speed there plus what it costs
  the jobs beside it — from :meth:`Scheduler.predicted_effect` with the job taken out;
* ``after``: the gain of the placement the scheduler picks for it on the other GPUs
  (:meth:`Scheduler.attempt`, the job's current GPUs and any GPU another move touches
  excluded, so both shares can count until the old pod is gone and nothing is over-committed);
* both sides lose the sharing rule's uncertainty margin for every pair term not yet measured
  (:meth:`Scheduler.share_margin`), so a move rests on measurements or on a margin, never
  on an unhedged prediction;
* the cost: ``move_cost_s`` seconds of the job's progress (checkpoint + restart + work since
  its last checkpoint) at up to full speed on each of its GPUs, spread over the horizon the
  gain lasts — the job's remaining run time (``remaining_s``, else its age clamped to
  ``[min_horizon_s, max_horizon_s]``), but no longer than the longest-lived job it now shares
  with (once they leave, it would run alone anyway): ``cost = move_cost_s × GPUs / horizon``.
  So a move of 30 s pays off only if it raises the summed speed by more than 30 s ÷ horizon;

and a move is made when ``after − before − margins > min_gain + cost``. Anti-flapping: no move
of a job before it is ``observed``, within ``min_interval_s`` of its last move, or beyond
``max_moves_per_job``; at most ``max_concurrent`` moves in flight cluster-wide; one job at a
time (a gang moves all its replicas or none); a job beside a move under way waits until that
settles.

For the operator (API; names and units are stable)::

    plan = plan_migrations(sched, state, running, now, MigrationSettings())
    for move in plan.moves:          # Move, best first
        move.job                     # DLJob name as in its JobRequest
        move.placement               # Placement, the shape Scheduler.place returns
        move.source                  # GpuShare tuple it holds now
        move.gain, move.cost         # summed normalised speed (per GPU), same unit
        move.horizon_s               # seconds the gain was counted over
        move.speed_before, move.speed_after   # the job's own normalised speed
        move.reason                  # MoveReason ("interference": metric label)
        move.message                 # the expected gain in words, for the Migrated Event
    plan.deferred                    # worth moving, but the concurrency cap is full

``running`` lists every running job as :class:`RunningJob` (``movable`` = policy
``OnCheckpoint``; jobs with ``moving=True`` count against the cap). ``state`` must hold every
running job (both shares of a job being moved). It is changed during the call and restored
before it returns (:mod:`horus.scheduler.scratch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from horus.scheduler.scheduler import Scheduler
from horus.scheduler.scratch import Scratch
from horus.scheduler.state import BoolArray, ClusterState
from horus.scheduler.types import (
    GpuShare,
    MigrationPlan,
    MigrationSettings,
    Move,
    MoveReason,
    Placement,
    RunningJob,
)


@dataclass(frozen=True)
class _Option:
    """A move worth making, as judged against the state when it was evaluated."""

    move: Move
    value: float  # pessimistic net gain minus cost: the ranking
    old_gpus: tuple[int, ...]
    new_gpus: tuple[int, ...]


def plan_migrations(
    sched: Scheduler,
    state: ClusterState,
    running: Sequence[RunningJob],
    now: float,
    settings: MigrationSettings | None = None,
    exclude: BoolArray | None = None,
) -> MigrationPlan:
    """The moves worth making now, best first (see the module docstring).

    ``exclude``: GPUs no job may move onto (e.g. those the starvation guard reserves:
    ``sched.reservation``). A policy that does not score interference (anything but
    ``horus``/``oracle``) plans no moves.
    """
    cfg = settings or MigrationSettings()
    if not (sched.policy.interference_aware and sched.estimates.has_pair_source):
        return MigrationPlan(())
    planner = _Planner(sched, state, running, now, cfg, exclude)
    return planner.plan()


class _Planner:
    """One call of :func:`plan_migrations`."""

    def __init__(
        self,
        sched: Scheduler,
        state: ClusterState,
        running: Sequence[RunningJob],
        now: float,
        cfg: MigrationSettings,
        exclude: BoolArray | None,
    ) -> None:
        self.sched, self.state, self.now, self.cfg = sched, state, now, cfg
        self.by_name = {r.request.name: r for r in running}
        self.scratch = Scratch(state)
        #: GPUs a move touches (both ends) or that hold a job being moved: no destination,
        #: and a job on one of them waits for the next pass.
        self.touched = np.zeros(state.gpu_count, dtype=np.bool_)
        for r in running:
            if r.moving and r.request.name in state.jobs:
                self.touched[state.jobs[r.request.name].gpus] = True
        #: GPUs no job may move onto: ``touched`` and the caller's ``exclude``.
        self.blocked = self.touched if exclude is None else self.touched | exclude
        self.blocked = self.blocked.copy()
        self.slots = cfg.max_concurrent - sum(1 for r in running if r.moving)

    def plan(self) -> MigrationPlan:
        if self.slots <= 0:
            return MigrationPlan(())
        try:
            options = [o for r in self._candidates() if (o := self._evaluate(r)) is not None]
            return self._choose(options)
        finally:
            self.scratch.undo()

    def _candidates(self) -> list[RunningJob]:
        """Running jobs that may move now: movable, observed, not too often, sharing a GPU."""
        cfg, st, now = self.cfg, self.state, self.now
        out = []
        for r in self.by_name.values():
            name = r.request.name
            if not (r.movable and r.observed and not r.moving and name in st.jobs):
                continue
            if r.moves >= cfg.max_moves_per_job:
                continue
            if r.last_moved is not None and now - r.last_moved < cfg.min_interval_s:
                continue
            gpus = st.jobs[name].gpus
            if self.touched[gpus].any() or not (st.njobs[gpus] > 1).any():
                continue  # beside a move under way, or alone: nothing to gain by leaving
            out.append(r)
        return sorted(out, key=lambda r: r.request.name)

    def _horizon(self, r: RunningJob) -> float:
        """Seconds the gain of moving ``r`` lasts: its remaining run time (or age), no
        longer than the longest-lived job beside it."""
        own = self._remaining(r)
        st = self.state
        others = {
            res.job
            for g in st.jobs[r.request.name].gpus
            for res in st.residents[g]
            if res.job != r.request.name
        }
        known = [self._remaining(self.by_name[o]) for o in others if o in self.by_name]
        return min(own, max(known)) if known else own

    def _remaining(self, r: RunningJob) -> float:
        cfg = self.cfg
        if r.remaining_s is not None:
            return max(r.remaining_s, 1.0)
        return min(cfg.max_horizon_s, max(cfg.min_horizon_s, r.elapsed_s))

    def _evaluate(self, r: RunningJob, blocked: BoolArray | None = None) -> _Option | None:
        """The best move of ``r`` if it is worth making; None otherwise."""
        sched, st, cfg = self.sched, self.state, self.cfg
        job, name = r.request, r.request.name
        old = tuple(st.jobs[name].gpus)
        source = st.shares_of(name)
        horizon = self._horizon(r)
        cost = r.move_cost_s * job.gpu_count / horizon
        self.scratch.release(name)
        try:
            before, speed_before, margin = 0.0, 1.0, 0.0
            for g in old:
                speed, gain = sched.predicted_effect(st, job, g)
                before += gain
                speed_before = min(speed_before, speed)
                sig = st.signatures[int(st.sig_id[g])]
                margin += sched.share_margin(job.kind, st.gpu_model[g], sig)
            if not math.isfinite(before):
                return None
            # Nowhere can the job add more than 1 per GPU (an idle GPU): prune cheaply.
            if job.gpu_count - before - margin <= cfg.min_gain + cost:
                return None
            excl = (self.blocked if blocked is None else blocked).copy()
            excl[list(old)] = True
            placed = sched.attempt(st, job, explain=False, exclude=excl)
            if not isinstance(placed, Placement):
                return None
            new = tuple(st.gpu_id(s.node, s.gpu_index) for s in placed.shares)
            for g in new:
                sig = st.signatures[int(st.sig_id[g])]
                margin += sched.share_margin(job.kind, st.gpu_model[g], sig)
        finally:
            self.scratch.restore(name)
        gain = placed.predicted_gain - before
        if not gain - margin > cfg.min_gain + cost:
            return None
        move = Move(
            job=name,
            placement=placed,
            source=source,
            gain=gain,
            cost=cost,
            horizon_s=horizon,
            speed_before=speed_before,
            speed_after=placed.predicted_speed,
            reason=MoveReason.INTERFERENCE,
            message=_message(name, source, placed, gain, horizon, r.move_cost_s, speed_before),
        )
        return _Option(move, gain - margin - cost, old, new)

    def _choose(self, options: list[_Option]) -> MigrationPlan:
        """Best first; each chosen move bars its GPUs to the rest (re-judged if their
        destination was one of them, skipped if they sit beside it)."""
        options.sort(key=lambda o: (-o.value, o.move.job))
        chosen: list[Move] = []
        deferred: list[str] = []
        while options:
            o = options.pop(0)
            if self.touched[list(o.old_gpus)].any():
                continue  # its neighbourhood is changing: judge it again next pass
            if self.blocked[list(o.new_gpus)].any():
                again = self._evaluate(self.by_name[o.move.job])
                if again is not None:
                    options.append(again)
                    options.sort(key=lambda x: (-x.value, x.move.job))
                continue
            if len(chosen) >= self.slots:
                deferred.append(o.move.job)
                continue
            chosen.append(o.move)
            for gpus in (o.old_gpus, o.new_gpus):
                self.touched[list(gpus)] = True
                self.blocked[list(gpus)] = True
        return MigrationPlan(tuple(chosen), tuple(deferred))


def _labels(shares: Sequence[GpuShare]) -> str:
    return ", ".join(f"{s.node}/gpu-{s.gpu_index}" for s in shares)


def _message(
    name: str,
    source: Sequence[GpuShare],
    placed: Placement,
    gain: float,
    horizon: float,
    cost_s: float,
    speed_before: float,
) -> str:
    return (
        f"move {name} from {_labels(source)} to {_labels(placed.shares)}: "
        f"expected +{gain:.2f} summed normalised speed ({name} {speed_before:.2f}× → "
        f"{placed.predicted_speed:.2f}×, its neighbours included), worth "
        f"{gain * horizon / 3600:.1f} GPU-hours over the next {horizon / 3600:.1f} h "
        f"against {cost_s:.0f} s of its progress lost to the move"
    )
