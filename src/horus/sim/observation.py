"""What the node agent tells the scheduler about pairs, when, and how wrong — in the simulator.

Why: feeding the scheduler the true pair speeds the moment two jobs meet (what
``horus+observed`` did before) is an upper bound, not what a cluster gets. The agent
(``horus.agent.feedback.PairSpeeds``) samples each pod every ``--interval-seconds`` (5 s),
needs ``MIN_PAIR_SAMPLES`` (3) samples of the pod *alone* on its GPU (its baseline) and 3 next
to exactly one other Horus pod, and writes what it has every ``--feedback-interval-seconds``
(60 s); its figure is the pod's utilisation in the pair over its utilisation alone, which is
not the true speed. This module models exactly that:

* **When.** Per job (its first GPU, as the agent counts a pod's pairs), the seconds it has
  spent alone and next to each neighbour kind are accumulated from the simulated
  co-locations (three or more jobs on a GPU: the agent measures nothing). A pair becomes
  known once both reach ``min_samples × sample_interval_s``, at the next feedback write
  (writes at multiples of ``feedback_interval_s``). A move or preemption starts a new pod,
  so its samples start again.
* **How wrong** (``error="agent"``, the default): where the ground truth has the GPU's
  utilisation in the pair (Lucid), exactly what the utilisation ratio reads given it
  (:meth:`GroundTruth.util_ratio_speed`, 0.19 below the true speed on average); elsewhere
  (Gavel, unmeasured pairs) the true speed plus an error drawn once per ordered pair from
  N(``error_bias``, ``error_sd``) with the bias and spread ``benchmarks/pair_signal.py``
  measures for that ratio on Lucid's 1,388 pairs (−0.189, 0.198), clipped to the agent's
  [0.05, 1]. ``error="exact"``: the true speed (an upper bound on what feedback gives).

A kind pair is reported once (by the first job that measures it); the operator would pass
the same figure to ``Scheduler.observe_pair`` on every pass.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Literal

from horus.common.constants import MIN_OBSERVED_PAIR_SPEED
from horus.common.errors import ValidationError
from horus.sim.groundtruth import GroundTruth

#: The agent's ``horus.agent.feedback.MIN_PAIR_SAMPLES`` (the simulator sits below the agent
#: in the layers, so it cannot import it; a unit test checks they agree).
AGENT_MIN_SAMPLES = 3
#: Bias and spread of the agent's utilisation-ratio speed against the true speed,
#: ``benchmarks/pair_signal.py`` on Lucid (``benchmarks/results/pair-signal.json``:
#: ``proxy_bias``, ``proxy_error_sd``); a unit test recomputes them from the data.
AGENT_ERROR_BIAS = -0.189
AGENT_ERROR_SD = 0.198
#: Its mean absolute error (``proxy_mae``): what the scheduler is told a measured pair may
#: be off by (``Scheduler(observed_error=…)``), as the operator would tell it.
AGENT_ERROR_MAE = 0.192

ErrorMode = Literal["agent", "exact"]


@dataclass(frozen=True)
class ObservationModel:
    """How the simulated agent measures pairs (defaults: the agent's own defaults)."""

    #: The agent's sampling period (``--interval-seconds``).
    sample_interval_s: float = 5.0
    #: Samples alone and in the pair before a speed is given (``MIN_PAIR_SAMPLES``).
    min_samples: int = AGENT_MIN_SAMPLES
    #: How often the agent writes ``status.observed`` (``--feedback-interval-seconds``).
    feedback_interval_s: float = 60.0
    #: ``agent``: the utilisation ratio's error (module docstring); ``exact``: none.
    error: ErrorMode = "agent"
    error_bias: float = AGENT_ERROR_BIAS
    error_sd: float = AGENT_ERROR_SD
    #: What the scheduler is told one measured pair may be off by (its margin); ``exact``
    #: runs tell it 0.
    error_mae: float = AGENT_ERROR_MAE
    #: Seed of the per-pair errors drawn where the truth has no pair utilisation.
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("sample_interval_s", "feedback_interval_s", "error_sd", "error_mae"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValidationError(f"observation model: {name} must be >= 0, got {v}")
        if self.min_samples < 1:
            raise ValidationError(
                f"observation model: min_samples must be >= 1, got {self.min_samples}"
            )
        if self.error not in ("agent", "exact"):
            raise ValidationError(
                f"observation model: error must be agent or exact, got {self.error!r}"
            )
        if not (math.isfinite(self.error_bias) and abs(self.error_bias) < 1):
            raise ValidationError(
                f"observation model: error_bias must be in (-1, 1), got {self.error_bias}"
            )

    @property
    def needed_s(self) -> float:
        """Seconds of samples needed alone, and in a pair, before a speed is known."""
        return self.min_samples * self.sample_interval_s


@dataclass
class _Pod:
    """What the agent has accumulated about one job's current pod."""

    kind: str
    context: str | None = None  # "" alone, a neighbour kind, None: nothing measurable
    since: float = 0.0  # accumulated up to here
    context_since: float = 0.0  # the current neighbours arrived here
    neighbours: tuple[str, ...] | None = None
    alone_s: float = 0.0
    pair_s: dict[str, float] = field(default_factory=dict)

    def close(self, now: float) -> None:
        dt = max(0.0, now - self.since)
        if self.context == "":
            self.alone_s += dt
        elif self.context is not None:
            self.pair_s[self.context] = self.pair_s.get(self.context, 0.0) + dt
        self.since = now

    def totals(self, now: float) -> tuple[float, dict[str, float]]:
        dt = max(0.0, now - self.since)
        alone, pairs = self.alone_s, dict(self.pair_s)
        if self.context == "":
            alone += dt
        elif self.context is not None:
            pairs[self.context] = pairs.get(self.context, 0.0) + dt
        return alone, pairs


class AgentObserver:
    """Turns simulated co-locations into the pair speeds the agent would report, and when."""

    def __init__(self, model: ObservationModel, truth: GroundTruth) -> None:
        self.model, self.truth = model, truth
        self.pods: dict[str, _Pod] = {}
        #: Kind pairs already reported: (kind, other) → the reported speed.
        self.reported: dict[tuple[str, str], float] = {}
        #: (time, sequence, job): when a job's samples may complete a pair.
        self.timers: list[tuple[float, int, str]] = []
        self._seq = 0
        self._errors: dict[tuple[str, str], float] = {}
        #: Written by the agent, not yet read by the operator.
        self.pending: list[tuple[str, str, float]] = []

    def next_time(self) -> float:
        return self.timers[0][0] if self.timers else math.inf

    def place(self, job: str, kind: str, now: float, neighbours: list[str]) -> None:
        """``job`` runs (again, or in a new pod) next to ``neighbours`` (kinds) from ``now``."""
        pod = self.pods.get(job)
        if pod is None:
            pod = self.pods[job] = _Pod(kind, since=now)
        pod.close(now)
        pod.context = "" if not neighbours else neighbours[0] if len(neighbours) == 1 else None
        where = tuple(sorted(neighbours))
        if where != pod.neighbours:
            pod.neighbours, pod.context_since = where, now
        self._arm(job, pod, now)

    def settled(self, job: str, now: float) -> bool:
        """Whether ``job``'s current pod has been sampled long enough where it is now for the
        agent to say anything about it (the planners' "observed", with the pairs known)."""
        pod = self.pods.get(job)
        return pod is not None and now - pod.context_since >= self.model.needed_s - 1e-9

    def new_pod(self, job: str) -> None:
        """A move or preemption: the next pod starts its samples from nothing."""
        self.pods.pop(job, None)

    def gone(self, job: str) -> None:
        self.pods.pop(job, None)

    def is_known(self, kind: str, other: str) -> bool:
        return (kind, other) in self.reported

    def due(self, now: float) -> bool:
        """Collect what the agent has written by ``now`` (:meth:`take` hands it out, as the
        operator reads it on its next pass); whether anything new was written."""
        before = len(self.pending)
        self.pending.extend(self._written(now))
        return len(self.pending) > before

    def take(self) -> list[tuple[str, str, float]]:
        """The (kind, other, reported speed) written since the last call."""
        out, self.pending = self.pending, []
        return out

    def _written(self, now: float) -> list[tuple[str, str, float]]:
        out = []
        while self.timers and self.timers[0][0] <= now:
            _, _, job = heapq.heappop(self.timers)
            pod = self.pods.get(job)
            if pod is None:
                continue
            alone, pairs = pod.totals(now)
            need = self.model.needed_s - 1e-9
            if alone < need:
                continue
            for other, secs in pairs.items():
                key = (pod.kind, other)
                if secs >= need and key not in self.reported:
                    self.reported[key] = self._reading(pod.kind, other)
                    out.append((pod.kind, other, self.reported[key]))
        return out

    def _arm(self, job: str, pod: _Pod, now: float) -> None:
        """A timer at the feedback write after the current context completes a pair."""
        need = self.model.needed_s
        if pod.context is None:
            return
        if pod.context == "":
            pending = [k for k, s in pod.pair_s.items() if s >= need - 1e-9]
            if not pending or all((pod.kind, k) in self.reported for k in pending):
                return
            ready = now + max(0.0, need - pod.alone_s)
        else:
            if (pod.kind, pod.context) in self.reported:
                return
            ready = now + max(0.0, need - pod.pair_s.get(pod.context, 0.0))
            if pod.alone_s < need - 1e-9:
                return  # no baseline yet: armed again once it runs alone
        f = self.model.feedback_interval_s
        at = math.ceil(ready / f) * f if f > 0 else ready
        self._seq += 1
        heapq.heappush(self.timers, (max(at, now), self._seq, job))

    def _reading(self, kind: str, other: str) -> float:
        truth, m = self.truth, self.model
        true = truth.speed(kind, other)
        if m.error == "exact":
            return true
        value = truth.util_ratio_speed(kind, other)
        if value is None:
            err = self._errors.get((kind, other))
            if err is None:
                rng = random.Random(f"{m.seed}|{kind}|{other}")
                err = self._errors[(kind, other)] = rng.gauss(m.error_bias, m.error_sd)
            value = true + err
        return min(1.0, max(MIN_OBSERVED_PAIR_SPEED, value))
