"""Trial changes to a cluster state that a planner undoes before it returns.

Why not ``ClusterState.copy()``: the migration and preemption planners ask "what if this job
were not here" once per candidate, and a copy of a 1,000-node state per question would cost
more than the question. Releasing a job and adding it back touches only its GPUs, and the
state keeps its token, so the policies' per-state caches stay valid. The caller's state is
changed *during* a planner call only, and restored (same shares, predictions and order of
each GPU's jobs; only the order of ``state.jobs`` may differ) before the call returns, also
when it raises; it is not safe to read from another thread meanwhile.
"""

from __future__ import annotations

from horus.predictor.interface import ResourcePrediction
from horus.scheduler.state import ClusterState
from horus.scheduler.types import GpuShare, JobRequest, Placement

#: A released job: its request, shares and prediction.
_Held = tuple[JobRequest, tuple[GpuShare, ...], ResourcePrediction]


class Scratch:
    """Releases and placements on ``state``, each undone by :meth:`undo`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        #: Jobs released here, with what it takes to put them back.
        self.released: dict[str, _Held] = {}
        #: Jobs placed here (released again by :meth:`undo`).
        self.placed: list[str] = []
        #: Each touched GPU's jobs in their original order (restored by :meth:`undo`).
        self.order: dict[int, list[str]] = {}

    def release(self, name: str) -> None:
        """Take ``name`` out of the state (it must be placed there)."""
        st = self.state
        placed = st.jobs[name]
        for g in placed.gpus:
            self.order.setdefault(g, [r.job for r in st.residents[g]])
        self.released[name] = (placed.request, st.shares_of(name), placed.prediction)
        st.release(name)

    def restore(self, name: str) -> None:
        """Put a job released here back with its old shares."""
        request, shares, prediction = self.released.pop(name)
        self.state.add_job(request, shares, prediction)

    def apply(self, job: JobRequest, placement: Placement) -> None:
        """Place ``job`` (a placement the scheduler just returned on this state)."""
        self.state.apply(job, placement)
        self.placed.append(job.name)

    def undo(self) -> None:
        """Every change made here, reversed: placements released, releases restored."""
        st = self.state
        for name in reversed(self.placed):
            if name in st.jobs:
                st.release(name)
        self.placed.clear()
        for name in list(self.released):
            self.restore(name)
        for g, names in self.order.items():
            rank = {n: i for i, n in enumerate(names)}
            st.residents[g].sort(key=lambda r: rank.get(r.job, len(rank)))
        self.order.clear()
