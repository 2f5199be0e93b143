"""What the scheduling core needs from a predictor — and nothing more.

The scheduler, the simulator and the operator code against :class:`Predictor`; the trained
regressors implement it. Keeping the contract this small lets the simulator swap in a
ground-truth "oracle" and lets tests use hand-made predictors behind the same interface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class GraphProfile:
    """The features of one training step of a model (what ``horus profile`` writes).

    ``features`` maps feature names (documented in :mod:`horus.predictor.schema`) to numbers;
    ``model`` is a human-readable name (``resnet50``), ``family`` the architecture family used
    for held-out evaluation.
    """

    model: str
    batch_size: int
    features: Mapping[str, float] = field(default_factory=dict)
    family: str = ""
    schema_version: int = 1


@dataclass(frozen=True)
class ResourcePrediction:
    """Predicted GPU use of one job alone on a GPU: means and a calibrated upper quantile."""

    util_mean: float  # percent of the GPU's compute, 0..100
    util_upper: float  # the ``quantile`` upper bound of util, 0..100
    memory_mib_mean: float
    memory_mib_upper: float
    quantile: float = 0.9
    low_confidence: bool = False  # features far outside the training data: intervals widened
    model_version: str = "unknown"


@runtime_checkable
class Predictor(Protocol):
    """Predicts one job's resource use and the slowdown of a pair of jobs sharing a GPU."""

    @property
    def version(self) -> str: ...

    def predict(self, profile: GraphProfile, gpu: str) -> ResourcePrediction:
        """Use of ``profile`` alone on a GPU of model ``gpu`` (e.g. ``"A100"``)."""
        ...

    def predict_many(
        self, profiles: Sequence[GraphProfile], gpu: str
    ) -> list[ResourcePrediction]: ...

    def pair_speed(self, job: GraphProfile, other: GraphProfile, gpu: str) -> float:
        """Normalised speed (0..1] of ``job`` while it shares a ``gpu`` with ``other``."""
        ...


#: How a user removes the pair low-confidence flag; one wording for the CLI and the operator.
PAIR_TEACH_HINT = (
    "pairs measured on this GPU teach it: horus predictor measure (or the agents' "
    "--pair-rows), then horus predictor train --extra-pair-rows"
)


def pair_extrapolated(predictor: object, gpu: str) -> bool:
    """True when ``predictor`` says its pair speeds on ``gpu`` are an extrapolation (its pair
    model learned from no pair measured on that GPU model). Predictors that keep no such record
    (stand-ins, older artifacts) are taken at their word: False."""
    known = getattr(predictor, "pair_gpu_known", None)
    if not callable(known):
        return False
    try:
        return known(gpu) is False
    except Exception:  # an unknown GPU name is the caller's error to report, not this flag's
        return False
