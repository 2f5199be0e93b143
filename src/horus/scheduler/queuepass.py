"""One scheduling pass over the queue: order, backfill depth, and the starvation guard.

Why apart from placing one job (:mod:`horus.scheduler.scheduler`): the queue discipline is
its own set of rules, and the simulator's speed depends on them. Jobs are tried in the
policy's order (priority, then FIFO). After the first job that does not fit, at most
``backfill_depth`` more are tried (backfill); a job of a shape that already failed in this
pass fails again without being tried. If the first blocked job has waited longer than
``starvation_seconds``, it gets a reservation (:mod:`horus.scheduler.reservation`) that
backfill cannot touch, and a job kept out only by it is "held back".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

import numpy as np

from horus.scheduler.queue import JobQueue
from horus.scheduler.state import BoolArray, ClusterState
from horus.scheduler.types import JobRequest, Placement, Refusal, RefusalCode, ScheduleResult

if TYPE_CHECKING:
    from horus.scheduler.scheduler import Scheduler


class QueuePass:
    """The bookkeeping of one pass; :meth:`run` tries the jobs and applies placements."""

    def __init__(
        self,
        sched: Scheduler,
        state: ClusterState,
        queue: JobQueue,
        now: float | None,
        explain: bool,
    ) -> None:
        self.sched, self.state, self.queue = sched, state, queue
        self.now, self.explain = now, explain
        lookahead = sched.policy.lookahead
        #: Jobs tried behind the first blocked one.
        self.depth = lookahead if lookahead is not None else sched.settings.backfill_depth
        self.placed: list[Placement] = []
        self.refused: list[Refusal] = []
        self.failed_shapes: dict[tuple[object, ...], Refusal] = {}
        self.blocked = 0
        #: The starving job GPUs are reserved for, and the GPUs backfill may not touch.
        self.barrier: JobRequest | None = None
        self.protect: BoolArray | None = None

    def run(self, only: Collection[str] | None, limit: int | None = None) -> ScheduleResult:
        """Try the queue (``only``: just those jobs); see ``Scheduler.schedule``. With
        ``limit``, the pass ends once that many jobs are placed: the jobs after that point
        are neither placed nor refused (the caller's next pass takes them up)."""
        for pos, job in enumerate(self._jobs(only)):
            if limit is not None and len(self.placed) >= limit:
                break
            if not self._consider(pos, job):
                break
        if self.barrier is None:
            self.sched.reservation.clear()
        return ScheduleResult(tuple(self.placed), tuple(self.refused))

    def _jobs(self, only: Collection[str] | None) -> Iterable[JobRequest]:
        """The jobs of this pass in order; with ``only``, a reservation from an earlier pass
        still binds them."""
        q = self.queue
        if only is None:
            return q
        held = self.sched.reservation.job
        if held is not None and held not in only:
            waiting = q.jobs([held])
            if waiting:
                self._reserve_for(waiting[0])
        return sorted(q.jobs(only), key=q.key_of)

    def _consider(self, pos: int, job: JobRequest) -> bool:
        """Try one job; False ends the pass."""
        if job.name in self.state.jobs:
            # Already holds shares (e.g. its pods exist but the caller's record lost the
            # placement): placing it again would count it twice. Not a blocker for others.
            self.refused.append(_resident(job))
            return True
        if self.blocked > self.depth:
            if not self.explain:
                return False
            self.refused.append(_beyond_depth(job, pos, self.depth))
            return True
        if self.protect is not None and not self.explain and not self._backfill_room():
            return False
        shape = job.shape()
        hit = self.failed_shapes.get(shape)
        if hit is not None:
            self.refused.append(Refusal(job.name, hit.reason, hit.code))
            self.blocked += 1
            return True
        result = self.sched.attempt(self.state, job, self.explain, exclude=self.protect)
        if isinstance(result, Placement):
            self.state.apply(job, result)
            self.queue.remove(job.name)
            self.placed.append(result)
            return True
        refusal = self._held_back(job, result)
        self.failed_shapes[shape] = refusal
        self.refused.append(refusal)
        self.blocked += 1
        if self.blocked == 1 and self._starving(job) and refusal.code.resolvable:
            self._reserve_for(job)
        return True

    def _reserve_for(self, job: JobRequest) -> None:
        self.barrier = job
        self.protect = self.sched.reservation.protect(self.state, job)

    def _backfill_room(self) -> bool:
        """Whether any unreserved GPU has a free job slot (else no backfill can fit)."""
        assert self.protect is not None
        st = self.state
        slots = self.sched.policy.max_jobs_per_gpu(self.sched.settings)
        return bool(np.any(st.healthy & ~self.protect & (st.njobs < slots)))

    def _starving(self, job: JobRequest) -> bool:
        now = self.now
        return now is not None and now - job.submit_time > self.sched.settings.starvation_seconds

    def _held_back(self, job: JobRequest, refusal: Refusal) -> Refusal:
        """``refusal``, or "held back" when only the reservation kept ``job`` out."""
        if self.barrier is None or not self.explain:
            return refusal
        if isinstance(self.sched.attempt(self.state, job, explain=False), Placement):
            return Refusal(
                job.name,
                f"held back: the GPUs it could use are reserved for the older job "
                f"{self.barrier.name}, which has waited longer than "
                f"{self.sched.settings.starvation_seconds:.0f} s and goes first",
                RefusalCode.HELD,
            )
        return refusal


def _resident(job: JobRequest) -> Refusal:
    return Refusal(
        job.name,
        f"job {job.name} already holds GPU shares in the cluster; it is not "
        "placed a second time until those shares are released",
        RefusalCode.RESIDENT,
    )


def _beyond_depth(job: JobRequest, pos: int, depth: int) -> Refusal:
    return Refusal(
        job.name,
        f"waiting in queue at position {pos + 1}; this pass tried "
        f"{depth} jobs behind the first blocked one",
        RefusalCode.QUEUED,
    )
