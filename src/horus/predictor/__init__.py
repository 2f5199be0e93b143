"""The Horus predictor: from a model's computation-graph features to GPU utilisation, memory and
co-location slowdown, before the job runs (Horus thesis, Lancaster 2022).

The scheduling core depends only on :mod:`horus.predictor.interface`. What it calls:

* :func:`load_default_predictor` — the shipped, trained :class:`~horus.predictor.model.HorusPredictor`
  (implements :class:`~horus.predictor.interface.Predictor`), loaded once and cached.
* :mod:`horus.predictor.catalog` — ``measured_job_types(source)`` / ``job_type(...)``: the
  Gavel and Lucid job types with their graph profiles, for trace-driven simulation.

Neither needs torch; only ``horus profile`` (:mod:`horus.predictor.features`,
:mod:`horus.predictor.zoo`) does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from horus.predictor.interface import GraphProfile, Predictor, ResourcePrediction

if TYPE_CHECKING:
    from horus.predictor.model import HorusPredictor

__all__ = [
    "GraphProfile",
    "Predictor",
    "ResourcePrediction",
    "load_default_predictor",
    "load_predictor",
]


def load_default_predictor() -> HorusPredictor:
    """The shipped predictor artifact (GPUMemNet + Gavel), loaded once per process."""
    from horus.predictor.model import load_default_predictor as _load

    return _load()


def load_predictor(path: str) -> HorusPredictor:
    """A predictor artifact written by ``horus predictor train -o PATH``."""
    from pathlib import Path

    from horus.predictor.model import load_predictor as _load

    return _load(Path(path))
