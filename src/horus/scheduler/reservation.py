"""The starvation guard: GPUs held for the oldest blocked job, so backfill cannot delay it.

Why: with backfill, small jobs that fit keep starting while a big one waits; without a bound
the big one may wait forever. Once the first blocked job of a pass has waited longer than
``starvation_seconds``, the GPUs it will start on are reserved for it, and backfill may use
neither those nor the other GPUs of any job running on them (sharing those would slow a job
the reserved GPUs wait for). The reserved job still starts anywhere earlier if it fits,
since it is tried before any backfill in every pass, so waiting is bounded while the rest of
the cluster keeps working.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.scheduler.policies import Policy
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray
from horus.scheduler.types import JobRequest, SchedulerSettings

#: Chooses the GPUs to reserve for a job (see :func:`soonest_free`).
Pick = Callable[[ClusterState, JobRequest], list[int]]


class Reservation:
    """The GPUs held for one starving job, kept across passes while it stays blocked."""

    def __init__(self, pick: Pick) -> None:
        #: Chooses the GPUs when a job needs a (new) reservation.
        self._pick = pick
        #: (job, state token, GPUs); None when nothing is reserved.
        self._held: tuple[str, int, list[int]] | None = None

    @property
    def job(self) -> str | None:
        """The job GPUs are reserved for, if any."""
        return self._held[0] if self._held is not None else None

    def clear(self) -> None:
        self._held = None

    def protect(self, st: ClusterState, job: JobRequest) -> BoolArray:
        """GPUs backfill may not touch while ``job`` (starving, blocked) waits.

        The reservation made for ``job`` on this state is kept (so its residents only ever
        leave) unless one of its GPUs has become unhealthy; otherwise it is chosen anew.
        Protected are the reserved GPUs and every GPU of a job running on one of them.
        """
        keep = self._held
        gpus: list[int] | None = None
        if keep is not None and keep[0] == job.name and keep[1] == st.token:
            gpus = [g for g in keep[2] if st.healthy[g]]
            if len(gpus) != job.gpu_count:
                gpus = None
        if gpus is None:
            gpus = self._pick(st, job)
            self._held = (job.name, st.token, gpus)
        protect = np.zeros(st.gpu_count, dtype=np.bool_)
        protect[gpus] = True
        for g in gpus:
            for r in st.residents[g]:
                placed = st.jobs.get(r.job)
                if placed is not None:
                    protect[placed.gpus] = True
        return protect


def soonest_free(
    st: ClusterState,
    job: JobRequest,
    policy: Policy,
    settings: SchedulerSettings,
    needs: tuple[IntArray, IntArray],
    allowed: BoolArray,
) -> list[int]:
    """The gang's GPUs that will be free soonest as far as the scheduler can tell without
    runtime estimates: GPUs that already fit the job cost 0, others the number of jobs that
    must leave them; per replica the node whose ``gpus_per_replica`` cheapest GPUs cost least.

    ``needs`` is the job's (memory MiB, core %) per GPU; ``allowed`` the GPUs of its models
    and nodes.
    """
    cost = _wait_cost(st, policy, settings, needs, allowed)
    k, reps = job.gpus_per_replica, job.replicas
    if k == 1:
        order = np.lexsort((np.arange(st.gpu_count), cost))[:reps]
        return [int(g) for g in order if np.isfinite(cost[g])]
    out: list[int] = []
    taken = np.zeros(len(st.node_names), dtype=np.bool_)
    for _ in range(reps):
        best_node, best_gpus = _cheapest_node(st, cost, k, taken)
        if best_node < 0:
            break
        taken[best_node] = True
        out.extend(int(g) for g in best_gpus)
    return out


def _wait_cost(
    st: ClusterState,
    policy: Policy,
    settings: SchedulerSettings,
    needs: tuple[IntArray, IntArray],
    allowed: BoolArray,
) -> FloatArray:
    """Per GPU: 0 when the job fits now, else the jobs that must leave; ∞ where it never can."""
    mem_need, core_need = needs
    headroom = policy.memory_headroom_mib
    usable = st.healthy & allowed
    usable &= mem_need + headroom <= st.mem_total  # could ever host it
    fits = (
        (st.mem_used + mem_need + headroom <= st.mem_total)
        & (st.core_used + core_need <= GPU_CORE_UNITS_PER_GPU)
        & (st.njobs < policy.max_jobs_per_gpu(settings))
    )
    if policy.whole_gpu:
        fits &= st.njobs == 0
    cost = np.where(fits, 0.0, st.njobs.astype(np.float64))
    return np.where(usable, cost, np.inf)


def _cheapest_node(
    st: ClusterState, cost: FloatArray, k: int, taken: BoolArray
) -> tuple[int, IntArray]:
    """The free node whose ``k`` cheapest GPUs cost least (-1 when none has ``k`` at all)."""
    best_node, best_cost, best_gpus = -1, np.inf, np.empty(0, dtype=np.int64)
    for n in range(len(st.node_names)):
        if taken[n]:
            continue
        idx = np.nonzero(st.node_of == n)[0]
        c = cost[idx]
        top = idx[np.argsort(c, kind="stable")[:k]]
        total = float(cost[top].sum()) if len(top) == k else np.inf
        if total < best_cost:
            best_node, best_cost, best_gpus = n, total, top
    return best_node, best_gpus
