"""Priority preemption: which running jobs a waiting higher-priority job may evict.

Why: the queue already serves higher priorities first, but a job that cannot be placed waits
for running jobs to finish, however urgent it is. Volcano and KAI-Scheduler evict lower
priorities for it; Horus does the same for jobs whose migration policy lets Horus stop them
(``OnCheckpoint``: they checkpoint, go back to the queue — never Failed — and resume).

Rules: only running jobs of *strictly* lower priority that are ``movable`` and not already
being moved are victims (equal priorities never preempt, so a victim can never preempt its
preemptor back: no cycles); fewest and lowest-priority victims first; nothing is evicted
unless the waiting job then fits.

How (greedy, not an exhaustive search): candidate victims are grouped by the unit one
replica needs — a GPU for single-GPU replicas, a node for larger ones — and units are cleared
cheapest first (lowest highest-victim priority, then fewest victims, then least
``move_cost_s``) until the scheduler places the job (:meth:`Scheduler.attempt`, same policy
and rules as any placement). Then each victim, highest priority first, is given back if the
job still fits without evicting it. At most ``max_victims`` victims; at most ``max_per_pass``
preemptions per pass (:func:`plan_preemptions`).

For the operator (API; names and units are stable)::

    for p in plan_preemptions(sched, state, waiting_jobs, running, PreemptionSettings()):
        p.job          # the waiting job's name (its JobRequest.name)
        p.victims      # names of the running jobs to evict (checkpoint, back to the queue)
        p.placement    # Placement the job gets once they are gone (shape of Scheduler.place)
        p.message      # in words, for Events on both sides

``waiting_jobs`` in queue order (``sched.new_queue`` order: priority, then FIFO); ``running``
as for :func:`horus.scheduler.migration.plan_migrations`. ``state`` is changed during the call
and restored before it returns (:mod:`horus.scheduler.scratch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from horus.scheduler.scheduler import Scheduler
from horus.scheduler.scratch import Scratch
from horus.scheduler.state import BoolArray, ClusterState
from horus.scheduler.types import (
    JobRequest,
    Placement,
    Preemption,
    PreemptionSettings,
    RunningJob,
)


def plan_preemption(
    sched: Scheduler,
    state: ClusterState,
    job: JobRequest,
    running: Sequence[RunningJob],
    settings: PreemptionSettings | None = None,
    exclude: BoolArray | None = None,
) -> Preemption | None:
    """What ``job`` (waiting) may evict to start now, or None when it fits without evicting
    anything, or cannot fit even so (``exclude``: GPUs it may not use)."""
    scratch = Scratch(state)
    try:
        return _plan_one(sched, scratch, job, running, settings or PreemptionSettings(), exclude)
    finally:
        scratch.undo()


def plan_preemptions(
    sched: Scheduler,
    state: ClusterState,
    waiting: Iterable[JobRequest],
    running: Sequence[RunningJob],
    settings: PreemptionSettings | None = None,
) -> list[Preemption]:
    """Preemptions for the ``waiting`` jobs in their order, at most ``max_per_pass``; each
    is planned on the state the earlier ones leave (their victims gone, their jobs placed),
    so no two evict the same job or take the same GPUs."""
    cfg = settings or PreemptionSettings()
    lowest = min((r.request.priority for r in running if _may_evict(r)), default=None)
    if lowest is None or cfg.max_per_pass == 0:
        return []
    scratch = Scratch(state)
    out: list[Preemption] = []
    gone: set[str] = set()
    try:
        for job in waiting:
            if len(out) >= cfg.max_per_pass:
                break
            if job.priority <= lowest or job.name in state.jobs:
                continue
            left = [r for r in running if r.request.name not in gone]
            p = _plan_one(sched, scratch, job, left, cfg, None)
            if p is None:
                continue
            out.append(p)
            for v in p.victims:
                scratch.release(v)
                gone.add(v)
            scratch.apply(job, p.placement)
    finally:
        scratch.undo()
    return out


def _may_evict(r: RunningJob) -> bool:
    return r.movable and not r.moving


def _plan_one(
    sched: Scheduler,
    scratch: Scratch,
    job: JobRequest,
    running: Sequence[RunningJob],
    cfg: PreemptionSettings,
    exclude: BoolArray | None,
) -> Preemption | None:
    st = scratch.state
    if job.name in st.jobs or isinstance(
        sched.attempt(st, job, explain=False, exclude=exclude), Placement
    ):
        return None  # already placed, or fits without evicting anyone
    allowed = sched.allowed_gpus(st, job) & st.healthy
    cands = {
        r.request.name: r
        for r in running
        if _may_evict(r)
        and r.request.priority < job.priority
        and r.request.name in st.jobs
        and allowed[st.jobs[r.request.name].gpus].any()
    }
    if not cands:
        return None
    base = set(scratch.released)
    try:
        victims = _clear_units(sched, scratch, job, cands, allowed, exclude)
        if victims is None:
            return None
        placed = _give_back(sched, scratch, job, victims, cands, exclude)
    finally:
        for name in set(scratch.released) - base:
            scratch.restore(name)
    if placed is None or len(victims) > cfg.max_victims:
        return None
    names = tuple(sorted(victims))
    gpus = ", ".join(f"{s.node}/gpu-{s.gpu_index}" for s in placed.shares)
    evicted = ", ".join(f"{n} (priority {cands[n].request.priority})" for n in names)
    return Preemption(
        job=job.name,
        placement=placed,
        victims=names,
        message=(
            f"{job.name} (priority {job.priority}) preempts {evicted} to start on {gpus}; "
            "the evicted jobs checkpoint and go back to the queue"
        ),
    )


def _clear_units(
    sched: Scheduler,
    scratch: Scratch,
    job: JobRequest,
    cands: dict[str, RunningJob],
    allowed: BoolArray,
    exclude: BoolArray | None,
) -> list[str] | None:
    """Release candidates unit by unit, cheapest unit first, until ``job`` fits; the
    released names, or None (all released again) when it never fits."""
    st = scratch.state
    per_node = job.gpus_per_replica > 1
    units: dict[int, set[str]] = {}
    for name in cands:
        for g in st.jobs[name].gpus:
            if allowed[g]:
                unit = int(st.node_of[g]) if per_node else g
                units.setdefault(unit, set()).add(name)

    def cost(u: int) -> tuple[float, ...]:
        vs = [cands[n] for n in units[u]]
        top = max(v.request.priority for v in vs)
        return (top, len(vs), sum(v.move_cost_s for v in vs), u)

    released: list[str] = []
    for u in sorted(units, key=cost):
        for name in sorted(units[u]):
            if name not in scratch.released:
                scratch.release(name)
                released.append(name)
        if isinstance(sched.attempt(st, job, explain=False, exclude=exclude), Placement):
            return released
    for name in released:
        scratch.restore(name)
    return None


def _give_back(
    sched: Scheduler,
    scratch: Scratch,
    job: JobRequest,
    victims: list[str],
    cands: dict[str, RunningJob],
    exclude: BoolArray | None,
) -> Placement | None:
    """Keep running every victim the job does not need gone (highest priority and
    costliest first); ``victims`` shrinks in place. The job's placement without them."""
    st = scratch.state
    order = sorted(
        victims,
        key=lambda n: (-cands[n].request.priority, -cands[n].move_cost_s, n),
    )
    for name in order:
        scratch.restore(name)
        if isinstance(sched.attempt(st, job, explain=False, exclude=exclude), Placement):
            victims.remove(name)
        else:
            scratch.release(name)
    placed = sched.attempt(st, job, explain=False, exclude=exclude)
    return placed if isinstance(placed, Placement) else None
