"""How wrong each pair-speed signal is, measured from Lucid's data — never typed in.

Why: the simulated node agent (:mod:`horus.sim.observation`) must charge each signal the
error it really has, or the simulator flatters (or punishes) run-time measurement. Three
signals exist, and each error model here is computed from ``data/noncommercial/lucid`` when
first asked for (cached), so every figure traces back to the committed data:

* ``progress`` — the job's own steps or samples per second in the pair over alone
  (the agent's progress files). Its only error is measurement noise: Lucid ran 56 jobs beside
  a copy of themselves, where both copies have the same true speed, so the difference of
  their two measured speeds is twice the noise of one reading. The reading's noise sd is
  ``sd(s1 − s2) / √2`` over those self-pairs (speeds clipped to 1 as the ground truth
  clips them), unbiased. Lucid's measuring window is not published, so the noise is not
  scaled by window length (the agent's progress window is of the same order: ~100 steps).
* ``util-split`` — the utilisation ratio (a pod's utilisation in the pair over alone), if
  each job's part of the GPU's measured pair utilisation ``U`` is in proportion to
  ``u·s`` (the split model): it reads ``s · U / (u1 s1 + u2 s2)``.
* ``util-overlap`` — the same ratio if the two jobs' busy periods overlap independently,
  so the GPU is busy ``1 − (1 − u1 s1)(1 − u2 s2)`` of the time and each process's own
  utilisation is ``u·s`` scaled by how far the measured ``U`` departs from that: it reads
  ``s · U / U_overlap``.

Which of the two utilisation models NVML's per-process figures follow depends on the GPU and
driver, so both are kept. A utilisation signal's error depends on the true speed
(its bias grows towards 1×), so it is modelled as a function of the true speed: every
reading draws afresh one of the measured errors of the Lucid pair readings nearest in true
speed (``NEIGHBOURS`` of them, the square root of the readings), never one fixed draw per kind
pair. Each signal also publishes its own mean absolute error (what the agent tells the
scheduler its figure may be off by; the scheduler's margin on a measured pair).
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from horus.common.constants import MIN_OBSERVED_PAIR_SPEED
from horus.common.errors import ValidationError
from horus.sim.datasets import LUCID, dataset_file

Signal = Literal["exact", "progress", "util-split", "util-overlap"]
SIGNALS: tuple[Signal, ...] = ("exact", "progress", "util-split", "util-overlap")
#: The utilisation-ratio signals (their error is a function of the true speed).
UTIL_SIGNALS: tuple[Signal, ...] = ("util-split", "util-overlap")
#: The agent's clip of a reading below (1 above: sharing never speeds a job up).
_LOW = MIN_OBSERVED_PAIR_SPEED


@dataclass(frozen=True)
class LucidPairs:
    """Lucid's measured pairs, one row per ordered reading (both jobs of every pair)."""

    speed: np.ndarray  # true speed of the job (clipped to 1)
    other_speed: np.ndarray  # its neighbour's
    util: np.ndarray  # the job's utilisation alone (%)
    other_util: np.ndarray
    pair_util: np.ndarray  # the GPU's measured mean utilisation while they shared it (%)
    self_pair_diff: np.ndarray  # s1 − s2 for each job beside a copy of itself


@lru_cache(maxsize=4)
def lucid_pairs(data_dir: Path | None = None) -> LucidPairs:
    """Read Lucid's single-job utilisation and its pair table (``data_dir``: the data folder,
    default :func:`horus.sim.datasets.data_dir`)."""
    solo: dict[tuple[str, str, str], float] = {}
    with dataset_file(LUCID, "single_data.csv", data_dir).open(newline="") as fh:
        for r in csv.DictReader(fh):
            solo[(r["model"], r["batchsize"], r["amp"])] = float(r["gpu_util"])
    s1, s2, u1, u2, up, diff = [], [], [], [], [], []
    path = dataset_file(LUCID, "colocate_info.csv", data_dir)
    with path.open(newline="") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            a = (r["model1"], r["batchsize1"], r["amp1"])
            b = (r["model2"], r["batchsize2"], r["amp2"])
            if a not in solo or b not in solo:
                raise ValidationError(f"{path} line {line}: pair {a} / {b} has no single run")
            x, y = min(1.0, float(r["speed1"])), min(1.0, float(r["speed2"]))
            s1.append(x)
            s2.append(y)
            u1.append(solo[a])
            u2.append(solo[b])
            up.append(float(r["gpu_util"]))
            if a == b:
                diff.append(x - y)
    v = [np.asarray(z, dtype=np.float64) for z in (s1, s2, u1, u2, up)]
    if not all(np.isfinite(z).all() for z in v) or len(diff) < 2:
        raise ValidationError(f"{path}: non-finite values or fewer than 2 self-pairs")

    def both(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Both orders of every pair."""
        return np.concatenate([a, b])

    return LucidPairs(
        speed=both(v[0], v[1]),
        other_speed=both(v[1], v[0]),
        util=both(v[2], v[3]),
        other_util=both(v[3], v[2]),
        pair_util=both(v[4], v[4]),
        self_pair_diff=np.asarray(diff, dtype=np.float64),
    )


def split_readings(p: LucidPairs) -> np.ndarray:
    """What the utilisation ratio reads on each Lucid reading under the split model."""
    premise = p.util * p.speed + p.other_util * p.other_speed
    return np.asarray(np.clip(p.speed * p.pair_util / premise, _LOW, 1.0), dtype=np.float64)


def overlap_pair_util(p: LucidPairs) -> np.ndarray:
    """The GPU utilisation (%) the overlap model predicts for each reading's pair."""
    b1, b2 = p.util * p.speed / 100.0, p.other_util * p.other_speed / 100.0
    busy = 1.0 - (1.0 - np.minimum(b1, 1.0)) * (1.0 - np.minimum(b2, 1.0))
    return np.asarray(100.0 * busy, dtype=np.float64)


def overlap_readings(p: LucidPairs) -> np.ndarray:
    """What the utilisation ratio reads on each Lucid reading under the overlap model."""
    read = np.clip(p.speed * p.pair_util / overlap_pair_util(p), _LOW, 1.0)
    return np.asarray(read, dtype=np.float64)


@dataclass(frozen=True)
class SignalError:
    """One signal's error model (module docstring), computed from the data."""

    signal: Signal
    #: ``progress``: the sd of one reading's Gaussian noise; else 0.
    noise_sd: float
    #: Utilisation signals: the true speeds of the Lucid readings, sorted, and each one's
    #: error (reading − true speed) in the same order; empty for the others.
    speeds: np.ndarray
    errors: np.ndarray
    #: Readings drawn from around a true speed (utilisation signals; all of those at exactly
    #: that speed where there are more).
    neighbours: int
    #: The signal's mean absolute error: what the agent says its figure may be off by.
    published_error: float

    def read(self, true: float, rng: random.Random) -> float:
        """One fresh reading of a pair whose true speed is ``true``."""
        if self.signal == "exact":
            return true
        if self.signal == "progress":
            value = true + rng.gauss(0.0, self.noise_sd)
        else:
            n, k = len(self.speeds), self.neighbours
            left = int(np.searchsorted(self.speeds, true, "left"))
            right = int(np.searchsorted(self.speeds, true, "right"))
            if right - left >= k:  # many readings at exactly this speed (1×): those
                lo, k = left, right - left
            else:
                lo = min(max(0, (left + right) // 2 - k // 2), n - k)
            value = true + float(self.errors[lo + rng.randrange(k)])
        return min(1.0, max(_LOW, value))


@lru_cache(maxsize=16)
def signal_error(signal: Signal, data_dir: Path | None = None) -> SignalError:
    """The error model of ``signal``, computed from Lucid's data (cached)."""
    empty = np.empty(0)
    if signal == "exact":
        return SignalError(signal, 0.0, empty, empty, 0, 0.0)
    p = lucid_pairs(data_dir)
    if signal == "progress":
        sd = float(np.std(p.self_pair_diff, ddof=1) / math.sqrt(2.0))
        # E|N(0, sd)|: the mean absolute error of an unbiased Gaussian reading
        return SignalError(signal, sd, empty, empty, 0, sd * math.sqrt(2.0 / math.pi))
    if signal == "util-split":
        reading = split_readings(p)
    elif signal == "util-overlap":
        reading = overlap_readings(p)
    else:
        raise ValidationError(f"unknown pair signal {signal!r}; choose one of {SIGNALS}")
    order = np.argsort(p.speed, kind="stable")
    speeds, errors = p.speed[order], (reading - p.speed)[order]
    k = max(1, round(math.sqrt(len(speeds))))
    return SignalError(signal, 0.0, speeds, errors, k, float(np.abs(errors).mean()))


def signal_stats(errors: np.ndarray, true: np.ndarray, readings: np.ndarray) -> dict[str, float]:
    """Bias, sd, MAE, p95 |error| and "slowed below 0.85×" accuracy of readings."""
    slow_true, slow_read = true < 0.85, readings < 0.85
    return {
        "n": float(len(errors)),
        "bias": float(errors.mean()),
        "sd": float(errors.std()),
        "mae": float(np.abs(errors).mean()),
        "p95_abs": float(np.percentile(np.abs(errors), 95)),
        "slowed_accuracy": float((slow_true == slow_read).mean()),
    }
