"""What the scheduler believes about jobs: resource predictions and pair speeds, and how sure.

Why apart from the decisions: every placement reads the same beliefs — a job's predicted
utilisation and memory per GPU model, the normalised speed of a job kind next to another,
and the error margin of each pair speed — and they change on their own clock: the predictor
is asked once per (job kind, GPU model) and per pair, a node agent's measurements
(:meth:`Estimates.observe_pair`) replace predicted pairs and teach the margin of the pairs
still unmeasured. :class:`~horus.scheduler.scheduler.Scheduler` owns one and exposes it
through its public methods; the decisions never touch the caches directly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

from horus.common.errors import HorusError, ValidationError
from horus.predictor.interface import Predictor, ResourcePrediction
from horus.scheduler.policies import PairSpeed
from horus.scheduler.state import ClusterState
from horus.scheduler.types import JobRequest, SchedulerSettings

PairKey = tuple[str, str, str]  # (kind, other kind, GPU model)


def published_pair_error(predictor: Predictor | None) -> float:
    """The held-out pair-speed MAE in the predictor's model card (0 when it publishes none)."""
    card = getattr(predictor, "card", None)
    metrics = card.get("metrics_heldout_family", {}) if isinstance(card, Mapping) else {}
    mae = metrics.get("pair_heldout_mae", 0.0) if isinstance(metrics, Mapping) else 0.0
    return float(mae) if isinstance(mae, int | float) and mae > 0 else 0.0


class Estimates:
    """Predictions per (job kind, GPU model) and pair speeds, cached, with measured pairs.

    ``pair_speed`` overrides the predictor's pair speeds (the simulator's measured tables for
    ``oracle``); ``pair_error`` is the typical error of one pair speed (see
    :attr:`pair_error`).
    """

    def __init__(
        self,
        predictor: Predictor | None,
        settings: SchedulerSettings,
        pair_speed: PairSpeed | None = None,
        pair_error: float | None = None,
        observed_error: float = 0.0,
    ) -> None:
        if pair_error is not None and not (math.isfinite(pair_error) and pair_error >= 0):
            raise ValidationError(f"pair_error must be a finite number >= 0, got {pair_error}")
        if not (math.isfinite(observed_error) and 0 <= observed_error <= 1):
            raise ValidationError(f"observed_error must be in [0, 1], got {observed_error}")
        #: Typical error of a measured pair speed whose caller gave none (0: exact).
        self.observed_error = observed_error
        self.predictor = predictor
        self.settings = settings
        self._pair_error = pair_error
        self._pair_override = pair_speed
        self._pred_cache: dict[tuple[str, str], ResourcePrediction] = {}
        self._pair_cache: dict[PairKey, float] = {}
        #: Measured pair speeds (:meth:`observe_pair`); they win over any other source.
        self._observed: dict[PairKey, float] = {}
        #: Each measured pair's own error (what its margin is made from).
        self._observed_error: dict[PairKey, float] = {}
        #: The predicted speed of each measured pair, at the time it was first measured.
        self._observed_predicted: dict[PairKey, float] = {}
        #: Caches of :meth:`model_pair_error` and of the margins made from it (None: stale).
        self._model_error: dict[str, float] | None = None
        self._model_margin: dict[str, float] | None = None
        #: One job per kind: the profiles the predictor is asked about pairs with.
        self._profiles: dict[str, JobRequest] = {}
        #: The state last decided on: jobs recorded there with ``add_job`` never passed
        #: through the scheduler, so their profiles are learnt from it when a pair needs them.
        self._state: ClusterState | None = None

    @property
    def pair_error(self) -> float:
        """Typical error of one pair speed: as given to the constructor; else 0 for an
        explicit source (``oracle``'s measured tables), else the predictor's published one."""
        if self._pair_error is None:  # asked on every decision: read the card once
            self._pair_error = (
                0.0 if self._pair_override is not None else published_pair_error(self.predictor)
            )
        return self._pair_error

    @property
    def has_pair_source(self) -> bool:
        """Whether pair speeds can be had at all (an override or a predictor)."""
        return self._pair_override is not None or self.predictor is not None

    # --- what a job uses ------------------------------------------------------------------
    def predict(self, job: JobRequest, gpu_model: str) -> ResourcePrediction:
        """The job's prediction on ``gpu_model`` (its own if it carries one; cached by kind)."""
        if job.prediction is not None:
            return job.prediction
        key = (job.kind, gpu_model)
        hit = self._pred_cache.get(key)
        if hit is None:
            if self.predictor is None:
                raise ValidationError(
                    f"job {job.name} carries no prediction and the scheduler has no predictor"
                )
            hit = self.predictor.predict(job.profile, gpu_model)
            self._pred_cache[key] = hit
        return hit

    def remember(self, job: JobRequest) -> None:
        """Record ``job``'s profile under its kind (needed to ask the predictor about pairs)."""
        self._profiles.setdefault(job.kind, job)

    def residents_from(self, state: ClusterState) -> None:
        """Look up the profiles of jobs already running in ``state`` when a pair needs them."""
        self._state = state

    # --- how a pair shares a GPU ----------------------------------------------------------
    def pair_speed(self, kind: str, other: str, gpu_model: str) -> float:
        """Predicted normalised speed of ``kind`` next to ``other`` (cached)."""
        key = (kind, other, gpu_model)
        hit = self._pair_cache.get(key)
        if hit is None:
            if self._pair_override is not None:
                hit = self._pair_override(kind, other, gpu_model)
            else:
                hit = self._predicted_pair(kind, other, gpu_model)
            hit = float(min(1.0, max(0.0, hit)))
            self._pair_cache[key] = hit
        return hit

    def _predicted_pair(self, kind: str, other: str, gpu_model: str) -> float:
        """Ask the predictor about a pair; with a batched predictor, about every known kind
        against ``kind`` at once (the answers go straight into the cache)."""
        if self.predictor is None:
            raise ValidationError("policy needs pair speeds but there is no predictor")
        a, b = self._profiles.get(kind), self._profiles.get(other)
        if (a is None or b is None) and self._state is not None:
            # jobs recorded with ClusterState.add_job never passed through the scheduler
            for placed in self._state.jobs.values():
                self.remember(placed.request)
            a, b = self._profiles.get(kind), self._profiles.get(other)
        if a is None or b is None:
            raise ValidationError(f"no profile known for job kind {kind!r} or {other!r}")
        batch = getattr(self.predictor, "pair_speeds", None)
        if callable(batch):
            # One batched call for this kind against every known kind, both ways:
            # the trained model costs ~1 ms per call but little more per extra row.
            todo = [(kind, o) for o in self._profiles] + [
                (o, kind) for o in self._profiles if o != kind
            ]
            todo = [t for t in todo if (*t, gpu_model) not in self._pair_cache]
            pairs = [(self._profiles[x].profile, self._profiles[y].profile) for x, y in todo]
            for (x, y), v in zip(todo, batch(pairs, gpu_model), strict=True):
                self._pair_cache[(x, y, gpu_model)] = float(min(1.0, max(0.0, v)))
            if (kind, other, gpu_model) in self._pair_cache:
                return self._pair_cache[(kind, other, gpu_model)]
        return self.predictor.pair_speed(a.profile, b.profile, gpu_model)

    def observe_pair(
        self, kind: str, other: str, gpu_model: str, speed: float, error: float | None = None
    ) -> bool:
        """Record a *measured* pair speed and its error (see ``Scheduler.observe_pair``);
        True when it changed what is known (so whatever was derived from pair speeds is
        stale)."""
        if not (math.isfinite(speed) and 0.0 < speed <= 1.0):
            raise ValidationError(
                f"observed pair speed of {kind!r} next to {other!r} on {gpu_model!r} must be "
                f"in (0, 1], got {speed}"
            )
        if error is None:
            error = self.observed_error
        elif not (math.isfinite(error) and 0.0 <= error <= 1.0):
            raise ValidationError(
                f"error of the observed pair speed of {kind!r} next to {other!r} on "
                f"{gpu_model!r} must be in [0, 1], got {error}"
            )
        key = (kind, other, gpu_model)
        if self._observed.get(key) == speed and self._observed_error.get(key) == error:
            return False
        if key not in self._observed:
            # What was predicted before the measurement replaces it (none for a kind whose
            # profile is not known: no error sample).
            with contextlib.suppress(HorusError):
                self._observed_predicted[key] = self.pair_speed(kind, other, gpu_model)
        self._observed[key] = speed
        self._observed_error[key] = error
        self._pair_cache[key] = speed
        self._model_error = self._model_margin = None
        return True

    @property
    def observed_pairs(self) -> Mapping[PairKey, float]:
        """Every measured pair speed so far, by (kind, other, GPU model)."""
        return self._observed

    @property
    def observed_errors(self) -> Mapping[PairKey, float]:
        """Each measured pair's own error, by (kind, other, GPU model)."""
        return self._observed_error

    # --- how sure ---------------------------------------------------------------------------
    def model_pair_error(self) -> dict[str, float]:
        """Per GPU model, the pair error learned from measured pairs (see
        ``Scheduler.model_pair_error``)."""
        if self._model_error is None:
            sums: dict[str, list[float]] = {}
            for key, predicted in self._observed_predicted.items():
                acc = sums.setdefault(key[2], [0.0, 0.0])
                acc[0] += abs(self._observed[key] - predicted)
                acc[1] += 1
            prior, k = self.pair_error, self.settings.pair_error_prior_pairs
            self._model_error = {m: (k * prior + e) / (k + n) for m, (e, n) in sums.items()}
        return self._model_error

    def model_margins(self) -> dict[str, float]:
        """:meth:`model_pair_error` × ``uncertainty_z``: the per-model margins of a decision."""
        if self._model_margin is None:
            z = self.settings.uncertainty_z
            self._model_margin = {m: z * e for m, e in self.model_pair_error().items()}
        return self._model_margin
