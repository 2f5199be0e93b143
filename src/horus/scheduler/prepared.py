"""One job judged against every GPU, worked out once (kube-scheduler's PreFilter).

Why apart from :mod:`horus.scheduler.scheduler`: :meth:`Scheduler.place` uses it once, while
:meth:`Scheduler.evaluate` (the extender's per-node answers) and the migration planner's
:meth:`Scheduler.best_gains` reuse one :class:`Prepared` for many questions; the lazily
computed filter and score it carries are what makes the per-node answer cheap. The
scheduler builds it (``Scheduler._prefilter``); this module holds what it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from horus.predictor.interface import ResourcePrediction
from horus.scheduler.policies import Policy, ScoreContext
from horus.scheduler.state import BoolArray, ClusterState, FloatArray
from horus.scheduler.types import JobRequest


@dataclass
class Prepared:
    """One job against every GPU, worked out once (kube-scheduler's PreFilter): its needs,
    the common filters, and — on demand, once — the policy's filter and score."""

    state: ClusterState
    job: JobRequest
    policy: Policy
    preds: list[ResourcePrediction]
    ctx: ScoreContext
    allowed: BoolArray  # of the job's GPU models and nodes
    usable: BoolArray  # healthy, allowed, not excluded
    mem_ok: BoolArray
    core_ok: BoolArray
    slots_ok: BoolArray
    room: BoolArray  # all four
    _refined: BoolArray | None = None
    _score: FloatArray | None = None
    _finite: BoolArray | None = None

    def refined(self) -> BoolArray:
        """``room`` after the policy's own filter."""
        if self._refined is None:
            self._refined = self.policy.refine(self.ctx, self.room)
        return self._refined

    def score(self) -> FloatArray:
        """The policy's score of every GPU of :meth:`refined` (fills ``ctx.gains``)."""
        if self._score is None:
            self._score = self.policy.score(self.ctx, self.refined())
        return self._score

    def finite(self) -> BoolArray:
        """Where :meth:`score` is finite (the policy did not rule the GPU out)."""
        if self._finite is None:
            self._finite = np.isfinite(self.score())
        return self._finite


def scored_on(ctx: ScoreContext, scored: ScoreContext, only: BoolArray) -> None:
    """Give ``ctx`` what scoring every GPU left in ``scored``, as if only ``only`` had been
    scored (what a refusal's explanation reads)."""
    if scored.gains is not None:
        ctx.gains = np.where(only, scored.gains, -np.inf)
    if scored.admissible is not None:
        ctx.admissible = np.where(only, scored.admissible, -np.inf)
