"""The admission phase: which new DLJobs a pass admits, and what it does with each verdict.

Every new job is validated, given its priority, predicted once and dry-run
(:class:`~horus.operator.admission.Admission`), each on the pass's pool. Under the per-pass
cap the jobs not tried yet go first (highest priority, then oldest), then those tried longest
ago: jobs that stay Pending for a reason of their own (a missing PriorityClass, a quota)
cannot hold the cap's places pass after pass and starve newer jobs, whoever created them.
An admitted job's new status is not written here: the pass's decision for it carries it (one
status write per job).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from horus.api.dljob import parse_dljob
from horus.api.inventory import decode_inventory
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.node.claim_checks import slice_gpus
from horus.operator.admission import Admission, Verdict
from horus.operator.guards import JobGuard
from horus.operator.jobapi import JobApi
from horus.operator.metrics import OperatorMetrics
from horus.operator.node_gpus import slices_by_node
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.priority import PriorityClasses
from horus.operator.writer import StatusWriter
from horus.scheduler import ClusterState

__all__ = ["NewJobs"]

log = logging.getLogger(__name__)


class NewJobs:
    """Admits a pass's new jobs under the cap, remembering whose turn comes next."""

    def __init__(
        self,
        api: JobApi,
        admission: Admission,
        writer: StatusWriter,
        metrics: OperatorMetrics,
        pool: ThreadPoolExecutor,
        guard: JobGuard,
        is_leader: Callable[[], bool],
        max_jobs_per_pass: Callable[[], int],
    ) -> None:
        self.api = api
        self.admission = admission
        self.writer = writer
        self.metrics = metrics
        self.pool = pool
        self.guard = guard
        self.is_leader = is_leader
        self.max_jobs_per_pass = max_jobs_per_pass
        #: New (never admitted) job UID → the admission round that last tried it.
        self._admission_tries: dict[str, int] = {}
        self._admission_round = 0

    def admit(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        nodes: list[dict[str, Any]],
        slices: list[dict[str, Any]] | None,
        report: PassReport,
        restores: Sequence[Future[None]],
    ) -> None:
        """New jobs: validate, resolve the priority, predict once, dry-run (in parallel: each
        is its own write). Waits for them and for the pass's ``restores``."""
        model, max_gpu_mib = _main_model(state), _max_gpu_memory(nodes, slices)
        new = [
            ctx
            for ctx in ctxs.values()
            if ctx.phase in (None, c.DLJOB_PHASE_PENDING) and not ctx.status.get("placements")
        ]
        classes = self._priority_classes() if new else None
        new = self._admission_turn(new, classes, report)
        admitted = [
            self.pool.submit(self.guard.step, self._admit, ctx, model, max_gpu_mib, classes, report)
            for ctx in new
        ]
        for f in (*restores, *admitted):
            f.result()

    def _admission_turn(
        self, new: list[JobCtx], classes: PriorityClasses | None, report: PassReport
    ) -> list[JobCtx]:
        """The new jobs this pass admits: all of them, or under the cap the jobs not tried
        yet (highest priority, then oldest, first), then those tried longest ago.

        Only untried jobs held back call for the next pass at once (``held_back``): a pass
        whose leftovers were all tried before (they stay Pending for a reason of their own)
        must not start the next at once, or a thousand such jobs keep the operator passing
        back to back, each pass dry-running them again."""
        self._admission_round += 1
        tries = self._admission_tries
        cap = self.max_jobs_per_pass()
        if len(new) > cap:
            new.sort(key=lambda ctx: (tries.get(ctx.uid, -1), *_admission_rank(ctx, classes)))
            behind = new[cap:]
            report.count("held_back", sum(1 for ctx in behind if ctx.uid not in tries))
            new_tries = {ctx.uid: tries[ctx.uid] for ctx in behind if ctx.uid in tries}
            new = new[:cap]
        else:
            new_tries = {}
        # Kept only for jobs still new: an admitted or deleted job leaves the map.
        new_tries.update((ctx.uid, self._admission_round) for ctx in new)
        self._admission_tries = new_tries
        return new

    def _priority_classes(self) -> PriorityClasses:
        """The cluster's PriorityClasses, listed once per pass that admits jobs (few objects).
        Unreadable: new jobs wait (Pending) rather than being admitted at a wrong priority."""
        try:
            return PriorityClasses.from_objects(self.api.list_priority_classes())
        except Exception as exc:
            log.warning("cannot list PriorityClasses (%s); new jobs wait", exc)
            return PriorityClasses(error=f"{type(exc).__name__}: {exc}"[:300])

    def _admit(
        self,
        ctx: JobCtx,
        model: str,
        max_gpu_mib: int | None,
        classes: PriorityClasses | None,
        report: PassReport,
    ) -> None:
        if not self.is_leader() or ctx.meta.get("deletionTimestamp"):
            return
        verdict: Verdict = self.admission.admit(ctx, model, max_gpu_mib, classes)
        if verdict.outcome == "failed":
            assert verdict.patch is not None
            self.writer.write(ctx, verdict.patch, report, (verdict.reason, verdict.message, True))
            report.count("failed")
            self.metrics.failures.labels(reason=verdict.reason).inc()
            return
        if verdict.outcome == "pending":
            event = (verdict.reason, verdict.message, True)
            self.writer.write(ctx, verdict.patch, report, event)
            return
        if verdict.warning is not None:
            self.writer.event(ctx, "ShareBelowPrediction", verdict.warning, warning=True)
        # Not written yet: the decision of this pass carries it (one write per job).
        ctx.pending = dict(verdict.patch or {})
        ctx.status.update(ctx.pending)
        with contextlib.suppress(ValidationError):
            ctx.job = parse_dljob({**ctx.obj, "status": ctx.status})  # with predicted


def _admission_rank(ctx: JobCtx, classes: PriorityClasses | None) -> tuple[int, str, str]:
    """Among new jobs tried equally long ago: the highest priority its class resolves to
    first (a class that does not exist last: the job will wait anyway), then creation time
    (RFC 3339 in UTC, set by the apiserver, so the text sorts as the time), then the key.
    A tenant may name any class; one the quota forbids costs a single early try, after
    which the job queues behind every job not tried yet."""
    name = (ctx.obj.get("spec") or {}).get("priorityClassName")
    value: int | None = 0
    if classes is not None and classes.error is None:
        value = classes.resolve(name if isinstance(name, str) else None)
    rank = -value if value is not None else 2**62
    return (rank, str(ctx.meta.get("creationTimestamp") or ""), ctx.key)


def _main_model(state: ClusterState) -> str:
    """The GPU model predictions are made for: the cluster's most common one."""
    if not state.gpu_model:
        return "H100"
    return Counter(state.gpu_model).most_common(1)[0][0]


def _max_gpu_memory(
    nodes: list[dict[str, Any]], slices: list[dict[str, Any]] | None = None
) -> int | None:
    """The largest GPU of any inventory node (Ready or not) — on the DRA path, of any node's
    ResourceSlice; None when there is none."""
    best: int | None = None
    if slices is not None:
        for name, items in slices_by_node(slices).items():
            for gpu in slice_gpus(items, name):
                best = max(best or 0, gpu.memory_mib)
        return best
    for node in nodes:
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(
            c.ANNOTATION_GPU_INVENTORY
        )
        if not text:
            continue
        largest = _largest_gpu_mib(text)
        if largest is not None:
            best = max(best or 0, largest)
    return best


@functools.lru_cache(maxsize=16384)
def _largest_gpu_mib(inventory: str) -> int | None:
    """The largest GPU of one inventory annotation (None: unreadable or empty), decoded once
    per text: the node's annotation is the same string from pass to pass."""
    try:
        return max((gpu.memory_mib for gpu in decode_inventory(inventory)), default=None)
    except ValidationError:
        return None
