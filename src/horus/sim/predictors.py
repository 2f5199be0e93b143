"""Stand-in predictors for the simulator when the trained one is not wanted or not there.

``ProfiledPredictor`` is what a scheduler could know from *profiling each job type alone*:
its measured solo utilisation and memory, and for pairs only the fallback model of
:mod:`horus.sim.groundtruth` (each job's mean sensitivity × its partner's mean
aggressiveness) — never the measured speed of the specific pair. It needs measured
utilisation and memory, so it supports the ``lucid`` ground truth only. Unit tests and quick
runs use it; the benchmarks use the trained predictor (``horus.predictor``).
"""

from __future__ import annotations

from collections.abc import Sequence

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.sim.groundtruth import GroundTruth


class ProfiledPredictor:
    """Measured solo use per job type; pair speeds from the sensitivity × aggressiveness model."""

    def __init__(self, truth: GroundTruth, upper_factor: float = 1.1) -> None:
        missing = [t.kind for t in truth.types if t.util is None or t.memory_mib is None]
        if missing:
            raise ValidationError(
                f"the profiled stand-in predictor needs measured utilisation and memory; "
                f"{truth.source} has none for {missing[0]} (use the trained predictor)"
            )
        self.truth = truth
        self.upper_factor = upper_factor
        self._kind = {(t.profile.model, t.profile.batch_size): t.kind for t in truth.types}
        self._mean = truth.mean_speed
        self._fallback = GroundTruth(
            truth.source, truth.gpu_model, truth.gpu_memory_mib, truth.types, {}
        )
        self._fallback._sens, self._fallback._aggr = truth._sens, truth._aggr
        self._fallback.mean_speed = truth.mean_speed

    @property
    def version(self) -> str:
        return f"profiled-{self.truth.source}"

    def kind_of(self, profile: GraphProfile) -> str:
        try:
            return self._kind[(profile.model, profile.batch_size)]
        except KeyError:
            raise ValidationError(
                f"no measured job type for {profile.model} batch {profile.batch_size}"
            ) from None

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        t = self.truth.by_kind[self.kind_of(profile)]
        assert t.util is not None and t.memory_mib is not None
        return ResourcePrediction(
            util_mean=t.util,
            util_upper=min(100.0, t.util * self.upper_factor),
            memory_mib_mean=t.memory_mib,
            memory_mib_upper=t.memory_mib * self.upper_factor,
            model_version=self.version,
        )

    def predict_many(self, profiles: Sequence[GraphProfile], gpu: str) -> list[ResourcePrediction]:
        return [self.predict(p, gpu) for p in profiles]

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        return self._fallback.speed(self.kind_of(job), self.kind_of(other))
