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
  with its own GPUs excluded, the job's presence there changes no other GPU's score, so the
  state is not changed to ask;
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
    for move in plan.moves:          # Move; the job that could gain most is judged first
        move.job                     # DLJob name as in its JobRequest
        move.placement               # Placement, the shape Scheduler.place returns
        move.source                  # GpuShare tuple it holds now
        move.gain, move.cost         # summed normalised speed (per GPU), same unit
        move.horizon_s               # seconds the gain was counted over
        move.speed_before, move.speed_after   # the job's own normalised speed
        move.reason                  # MoveReason ("interference": metric label)
        move.message                 # the expected gain in words, for the Migrated Event
    plan.deferred                    # might be worth moving; not judged this pass (caps)
    plan.hopeless                    # cannot pay even onto idle GPUs: skip them until the
                                     # jobs beside them or the measured pairs change
    plan.nowhere                     # no GPU they fit now would do: skip until GPUs free

``running`` lists every running job as :class:`RunningJob` (``movable`` = policy
``OnCheckpoint``; jobs with ``moving=True`` count against the cap). ``state`` must hold every
running job (both shares of a job being moved); it is only read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from horus.scheduler.scheduler import Scheduler
from horus.scheduler.state import BoolArray, ClusterState, FloatArray
from horus.scheduler.types import (
    GpuShare,
    MigrationPlan,
    MigrationSettings,
    Move,
    MoveReason,
    Placement,
    Refusal,
    RunningJob,
)


@dataclass(frozen=True)
class _Here:
    """What a job adds where it runs now (judged without moving it)."""

    old: tuple[int, ...]
    before: float  # its own speed there plus what it costs its neighbours (per GPU summed)
    speed_before: float
    margin: float  # uncertainty of ``before``


@dataclass(frozen=True)
class _Candidate:
    """A job worth judging: where it is, what it could reach, and what a move costs."""

    job: RunningJob
    here: _Here
    horizon: float
    cost: float  # the move's cost in summed normalised speed over ``horizon``
    reach: float  # the most it could add elsewhere: its best GPUs' gains summed


#: Caller-kept memory of :class:`_Here` per job between calls (``plan_migrations(memo=…)``),
#: valid while the job's GPUs hold the same kinds and the scheduler's beliefs are unchanged.
Memo = dict[str, tuple[tuple[int, ...], int, _Here]]


def plan_migrations(
    sched: Scheduler,
    state: ClusterState,
    running: Sequence[RunningJob],
    now: float,
    settings: MigrationSettings | None = None,
    exclude: BoolArray | None = None,
    memo: Memo | None = None,
) -> MigrationPlan:
    """The moves worth making now (see the module docstring).

    ``exclude``: GPUs no job may move onto (e.g. those the starvation guard reserves or a
    waiting job will start on). ``memo``: an empty dict the caller keeps between calls with
    the same scheduler, so a job whose GPUs and the beliefs about them did not change is
    not worked out again (optional: the answer is the same). A policy that does not score
    interference (anything but ``horus``/``oracle``) plans no moves.
    """
    cfg = settings or MigrationSettings()
    if not (sched.policy.interference_aware and sched.estimates.has_pair_source):
        return MigrationPlan(())
    planner = _Planner(sched, state, running, now, cfg, exclude, memo)
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
        memo: Memo | None,
    ) -> None:
        self.sched, self.state, self.now, self.cfg = sched, state, now, cfg
        self.memo: Memo = {} if memo is None else memo
        self.by_name = {r.request.name: r for r in running}
        #: Best destination per job shape in this pass (see :meth:`_judge`), and the best
        #: gains on the GPUs it fits (what a move of that shape could gain at most).
        self.best: dict[tuple[object, ...], Placement | Refusal] = {}
        self.top: dict[tuple[object, ...], FloatArray] = {}
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
        """Jobs in the order of the most a move could gain onto idle GPUs; for each, what
        it could reach on the GPUs it fits now (per job shape, once a pass), and a
        placement attempt if that could pay — while the cap has room, at most
        ``max_judged`` attempts. So a pass costs a few attempts however many jobs could
        move, and jobs beyond are named in ``deferred`` for a later pass."""
        if self.slots <= 0:
            return MigrationPlan(())
        self.sched.estimates.residents_from(self.state)
        ranked: list[tuple[float, str, RunningJob, _Here]] = []
        hopeless: list[str] = []
        for r in self._eligible():
            here = self._here(r)
            idle = r.request.gpu_count - here.before - here.margin  # all onto idle GPUs
            if not math.isfinite(idle) or idle <= self.cfg.min_gain:
                hopeless.append(r.request.name)
            else:
                ranked.append((-idle, r.request.name, r, here))
        ranked.sort(key=lambda x: (x[0], x[1]))
        gone = tuple(sorted(hopeless))
        chosen: list[Move] = []
        nowhere: list[str] = []
        judged = 0
        for i, (_, _, r, here) in enumerate(ranked):
            if len(chosen) >= self.slots or judged >= self.cfg.max_judged:
                rest = tuple(x[1] for x in ranked[i:])
                return MigrationPlan(tuple(chosen), rest, gone, tuple(nowhere))
            if self.touched[list(here.old)].any():
                continue  # beside a move chosen just now: judged again next pass
            c = self._candidate(r, here)
            if c is None:
                nowhere.append(r.request.name)
                continue
            judged += 1
            move = self._judge(c)
            if move is not None:
                chosen.append(move)
                new = [self.state.gpu_id(s.node, s.gpu_index) for s in move.placement.shares]
                for gpus in (list(here.old), new):
                    self.touched[gpus] = True
                    self.blocked[gpus] = True
                self.best.clear()  # destinations were just taken
                self.top.clear()
        return MigrationPlan(tuple(chosen), (), gone, tuple(nowhere))

    def _eligible(self) -> list[RunningJob]:
        """Running jobs that may move now: movable, observed, not too often, sharing a GPU."""
        cfg, st, now = self.cfg, self.state, self.now
        shared = (st.njobs > 1).tolist()
        touched = self.touched.tolist()
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
            if any(touched[g] for g in gpus) or not any(shared[g] for g in gpus):
                continue  # beside a move under way, or alone: nothing to gain by leaving
            out.append(r)
        return out

    def _here(self, r: RunningJob) -> _Here:
        """What ``r`` adds where it runs now, from the signatures of its GPUs without it."""
        sched, st = self.sched, self.state
        job = r.request
        old = tuple(st.jobs[job.name].gpus)
        sigs = old + tuple(int(st.sig_id[g]) for g in old)  # its GPUs and what they run
        hit = self.memo.get(job.name)
        if hit is not None and hit[0] == sigs and hit[1] == sched.beliefs_version:
            return hit[2]
        before, speed_before, margin = 0.0, 1.0, 0.0
        for g in old:
            sig = _without(st.signatures[int(st.sig_id[g])], job.kind)
            model = st.gpu_model[g]
            speed, gain = sched.joining_effect(job.kind, model, sig)
            before += gain
            speed_before = min(speed_before, speed)
            margin += sched.share_margin(job.kind, model, sig)
        here = _Here(old, before, speed_before, margin)
        if len(self.memo) > 100_000:
            self.memo.clear()
        self.memo[job.name] = (sigs, sched.beliefs_version, here)
        return here

    def _candidate(self, r: RunningJob, here: _Here) -> _Candidate | None:
        """``r`` with what it could reach now on the GPUs it fits and what a move would
        cost; None when even its best GPUs could not clear ``min_gain``."""
        job = r.request
        key = job.shape()
        top = self.top.get(key)
        if top is None:
            top = self.top[key] = self.sched.best_gains(self.state, job, self.blocked)
        reach = float(top[: job.gpu_count].sum()) if len(top) >= job.gpu_count else -math.inf
        if reach - here.before - here.margin <= self.cfg.min_gain:
            return None  # not now: nowhere it fits would do
        horizon = self._horizon(r)
        cost = r.move_cost_s * job.gpu_count / horizon
        if reach - here.before - here.margin - cost <= self.cfg.min_gain:
            return None
        return _Candidate(r, here, horizon, cost, reach)

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

    def _judge(self, c: _Candidate) -> Move | None:
        """The best move of ``c`` (a placement on GPUs no other move touches), if it is
        worth making.

        No state change is needed: with the job's own GPUs excluded, the job's presence on
        them changes no other GPU's score. And jobs of one shape share the best destination
        of a pass (cached): if it avoids this job's GPUs, excluding them changes nothing."""
        sched, st, cfg = self.sched, self.state, self.cfg
        job, name = c.job.request, c.job.request.name
        key = job.shape()
        best = self.best.get(key)
        if best is None:
            best = self.best[key] = sched.attempt(st, job, explain=False, exclude=self.blocked)
        if not isinstance(best, Placement):
            return None  # nowhere, even counting the GPUs it holds
        placed = best
        old = set(c.here.old)
        if any(st.gpu_id(s.node, s.gpu_index) in old for s in best.shares):
            excl = self.blocked.copy()
            excl[list(c.here.old)] = True
            again = sched.attempt(st, job, explain=False, exclude=excl)
            if not isinstance(again, Placement):
                return None
            placed = again
        margin = c.here.margin
        for share in placed.shares:
            g = st.gpu_id(share.node, share.gpu_index)
            sig = st.signatures[int(st.sig_id[g])]
            margin += sched.share_margin(job.kind, st.gpu_model[g], sig)
        gain = placed.predicted_gain - c.here.before
        if not gain - margin > cfg.min_gain + c.cost:
            return None
        source = st.shares_of(name)
        return Move(
            job=name,
            placement=placed,
            source=source,
            gain=gain,
            cost=c.cost,
            horizon_s=c.horizon,
            speed_before=c.here.speed_before,
            speed_after=placed.predicted_speed,
            reason=MoveReason.INTERFERENCE,
            message=_message(
                name,
                source,
                placed,
                gain,
                c.horizon,
                c.job.move_cost_s,
                c.here.speed_before,
            ),
        )


def _without(sig: tuple[str, ...], kind: str) -> tuple[str, ...]:
    """A GPU's signature with one job of ``kind`` taken out (still sorted)."""
    i = sig.index(kind)
    return sig[:i] + sig[i + 1 :]


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
