"""The scheduling core as both placers use it: one set of rules around ``Scheduler``.

The operator (DLJobs) and the scheduler extender (plain pods) place on the same GPUs with the
same core, so everything *around* the core must be the same too, or the two can score one
GPU differently. This session is that one place:

* **residents nobody profiled** (a plain pod without ``horus.io/graph-profile``): their pair
  speed with anyone is :data:`UNKNOWN_PAIR_SPEED`, pessimistic enough that Horus prefers idle
  GPUs; known profiles get the predictor's pair speed, measured pairs beat both;
* **measured pair speeds** (DLJobs' ``status.observed.pairs``, collected by the live state)
  are handed to the core on every :meth:`observe`;
* **the uncertainty margin** stays the predictor's published held-out pair error (the
  pair-speed wrapper only adds a guess for unknown kinds, as in the simulator);
* **prediction ↔ record**: :meth:`predicted_usage` is the one conversion of a prediction into
  the ``status.predicted`` / ``horus.io/predicted`` record, rounded and clamped.

A session lives as long as its placer (the scheduler's caches with it); a reloaded predictor
replaces the core (:meth:`set_predictor`).
"""

from __future__ import annotations

from collections.abc import Iterable

from horus.api.assignment import PredictedUsage
from horus.operator.residents import UNKNOWN_KIND, LiveState
from horus.predictor.interface import (
    GraphProfile,
    Predictor,
    ResourcePrediction,
    pair_extrapolated,
)
from horus.scheduler import JobRequest, Scheduler, SchedulerSettings, published_pair_error

__all__ = ["UNKNOWN_PAIR_SPEED", "PlacementSession"]

#: Pair speed assumed next to a resident whose profile nobody knows (a plain pod without a
#: graph-profile annotation): pessimistic enough that Horus prefers idle GPUs.
UNKNOWN_PAIR_SPEED = 0.6


class PlacementSession:
    """One :class:`Scheduler` with the placers' shared rules (see the module docstring)."""

    def __init__(
        self,
        policy: str,
        predictor: Predictor,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.policy = policy
        self.settings = settings
        self._kind_profiles: dict[str, GraphProfile] = {}
        self.predictor = predictor
        self.scheduler = self._new_scheduler()

    def _new_scheduler(self) -> Scheduler:
        return Scheduler(
            self.policy,
            self.predictor,
            self.settings,
            pair_speed=self.pair_speed,
            pair_error=published_pair_error(self.predictor),
        )

    def set_predictor(self, predictor: Predictor) -> None:
        """Place with ``predictor`` from now on: the core starts afresh (its caches hold the
        old model's answers); measured pairs come back at the next :meth:`observe`."""
        self.predictor = predictor
        self.scheduler = self._new_scheduler()

    def pair_speed(self, kind: str, other: str, gpu_model: str) -> float:
        """Predicted speed of ``kind`` next to ``other`` (the unknown-resident rule)."""
        a, b = self._kind_profiles.get(kind), self._kind_profiles.get(other)
        if a is None or b is None or not a.features or not b.features:
            return UNKNOWN_PAIR_SPEED
        return self.predictor.pair_speed(a, b, gpu_model)

    def remember(self, request: JobRequest) -> None:
        """Learn ``request``'s profile under its kind (for pair speeds with it)."""
        if request.kind != UNKNOWN_KIND and request.profile.features:
            self._kind_profiles.setdefault(request.kind, request.profile)
        self.scheduler.remember(request)

    def observe(self, live: LiveState, residents: Iterable[str] | None = None) -> int:
        """Take in one live state: the residents' profiles and every measured pair speed.
        Returns how many measured pairs were handed to the core.

        ``residents``: only these names' profiles (a state kept up to date from one this
        session already took in: the rest were remembered then, and remembering is
        first-one-wins per kind, so taking them in again changes nothing)."""
        names = live.residents if residents is None else residents
        for name in names:
            resident = live.residents.get(name)
            if resident is not None:
                self.remember(resident.request)
        for kind, other, model, speed, error in live.observed_pairs:
            # the agent's own error of that reading sets its margin; an entry
            # from an older agent has none and keeps the scheduler's observed_error
            self.scheduler.observe_pair(kind, other, model, speed, error)
        return len(live.observed_pairs)

    def predicted_usage(self, pred: ResourcePrediction, gpu_model: str) -> PredictedUsage:
        """The record of a prediction on ``gpu_model`` (``status.predicted``, and the pods'
        ``horus.io/predicted``): clamped to 0..100 % and ≥ 0 MiB, uppers ≥ means, rounded."""
        return PredictedUsage(
            util_mean=round(min(100.0, max(0.0, pred.util_mean)), 3),
            util_upper=round(min(100.0, max(0.0, pred.util_mean, pred.util_upper)), 3),
            memory_mib_mean=round(max(0.0, pred.memory_mib_mean), 1),
            memory_mib_upper=round(max(0.0, pred.memory_mib_mean, pred.memory_mib_upper), 1),
            model_version=pred.model_version or self.predictor.version,
            low_confidence=pred.low_confidence,
            quantile=pred.quantile if 0.0 < pred.quantile < 1.0 else None,
            pair_low_confidence=pair_extrapolated(self.predictor, gpu_model),
        )
