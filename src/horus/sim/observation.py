"""What the node agent tells the scheduler about pairs, when, and how wrong — in the simulator.

Why: feeding the scheduler the true pair speeds the moment two jobs meet is an upper bound,
not what a cluster gets. The agent (``horus.agent``) samples each pod every ``--interval-seconds`` (5 s), needs
``MIN_PAIR_SAMPLES`` (3) samples of the pod *alone* on its GPU (its baseline) and 3 next to
exactly one other Horus pod, and writes what it has every ``--feedback-interval-seconds``
(60 s), with the reading's own error. This module models exactly that:

* **When.** Per job (its first GPU, as the agent counts a pod's pairs), the seconds it has
  spent alone and next to each neighbour kind are accumulated from the simulated
  co-locations (three or more jobs on a GPU: the agent measures nothing). A pair becomes
  known once both reach ``min_samples × sample_interval_s``, at the next feedback write
  (writes at multiples of ``feedback_interval_s``). A move or preemption starts a new pod,
  so its samples start again. **Every pod** that measures a pair reports its own reading
  (the operator passes each kind pair's latest one to ``Scheduler.observe_pair``), so a
  pair is re-measured as often as jobs of those kinds meet.
* **How wrong**: each reading is drawn afresh from the signal's error model
  (:mod:`horus.sim.signals`, computed from Lucid's data): ``progress`` (the job's own step
  rate; noise from Lucid's self-pairs), ``util-split`` / ``util-overlap`` (the utilisation
  ratio under the two models of how two jobs' utilisation combines; error a function of
  the true speed) or ``exact``. With each reading goes the signal's published error, which
  the scheduler turns into that pair's margin.

The simulated agent can only report a pair both of whose jobs it sees, as the real one.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from horus.common.errors import ValidationError
from horus.sim.groundtruth import GroundTruth
from horus.sim.signals import SIGNALS, Signal, SignalError, signal_error

#: The agent's ``horus.agent.feedback.MIN_PAIR_SAMPLES`` (the simulator sits below the agent
#: in the layers, so it cannot import it; a unit test checks they agree).
AGENT_MIN_SAMPLES = 3
#: The signal the whole system measures with: jobs report their progress.
DEFAULT_SIGNAL: Signal = "progress"
#: The signal's former name, kept for callers that still use it.
ErrorMode = Signal


@dataclass(frozen=True)
class ObservationModel:
    """How the simulated agent measures pairs (defaults: the agent's own defaults)."""

    #: The agent's sampling period (``--interval-seconds``).
    sample_interval_s: float = 5.0
    #: Samples alone and in the pair before a speed is given (``MIN_PAIR_SAMPLES``).
    min_samples: int = AGENT_MIN_SAMPLES
    #: How often the agent writes ``status.observed`` (``--feedback-interval-seconds``).
    feedback_interval_s: float = 60.0
    #: Which signal the agent reads a pair's speed from (:mod:`horus.sim.signals`).
    error: Signal = DEFAULT_SIGNAL
    #: Seed of the readings' errors.
    seed: int = 0
    #: Where the data the error models are computed from lives (default: the data folder).
    data_dir: Path | None = None

    def __post_init__(self) -> None:
        for name in ("sample_interval_s", "feedback_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValidationError(f"observation model: {name} must be >= 0, got {v}")
        if self.min_samples < 1:
            raise ValidationError(
                f"observation model: min_samples must be >= 1, got {self.min_samples}"
            )
        if self.error not in SIGNALS:
            raise ValidationError(
                f"observation model: error must be one of {', '.join(SIGNALS)}, got {self.error!r}"
            )

    @property
    def needed_s(self) -> float:
        """Seconds of samples needed alone, and in a pair, before a speed is known."""
        return self.min_samples * self.sample_interval_s

    def signal(self) -> SignalError:
        """The error model of this run's signal (computed from the data once, cached)."""
        return signal_error(self.error, self.data_dir)


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
    #: Neighbour kinds this pod has reported a reading for.
    reported: set[str] = field(default_factory=set)

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
        self.signal = model.signal()
        self._rng = random.Random(f"{model.seed}|{model.error}")
        self.pods: dict[str, _Pod] = {}
        #: Kind pairs reported so far: (kind, other) → the latest reading.
        self.reported: dict[tuple[str, str], float] = {}
        #: How many readings were made (each pod's own).
        self.readings = 0
        #: (time, sequence, job): when a job's samples may complete a pair.
        self.timers: list[tuple[float, int, str]] = []
        self._seq = 0
        #: Written by the agent, not yet read by the operator: (kind, other, speed, error).
        self.pending: list[tuple[str, str, float, float]] = []

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

    def take(self) -> list[tuple[str, str, float, float]]:
        """The (kind, other, reported speed, its error) written since the last call."""
        out, self.pending = self.pending, []
        return out

    def _written(self, now: float) -> list[tuple[str, str, float, float]]:
        out = []
        err = self.signal.published_error
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
                if secs >= need and other not in pod.reported:
                    pod.reported.add(other)
                    value = self._reading(pod.kind, other)
                    self.reported[(pod.kind, other)] = value
                    self.readings += 1
                    out.append((pod.kind, other, value, err))
        return out

    def _arm(self, job: str, pod: _Pod, now: float) -> None:
        """A timer at the feedback write after the current context completes a pair."""
        need = self.model.needed_s
        if pod.context is None:
            return
        if pod.context == "":
            pending = [k for k, s in pod.pair_s.items() if s >= need - 1e-9]
            if not pending or all(k in pod.reported for k in pending):
                return
            ready = now + max(0.0, need - pod.alone_s)
        else:
            if pod.context in pod.reported:
                return
            ready = now + max(0.0, need - pod.pair_s.get(pod.context, 0.0))
            if pod.alone_s < need - 1e-9:
                return  # no baseline yet: armed again once it runs alone
        f = self.model.feedback_interval_s
        at = math.ceil(ready / f) * f if f > 0 else ready
        self._seq += 1
        heapq.heappush(self.timers, (max(at, now), self._seq, job))

    def _reading(self, kind: str, other: str) -> float:
        """One fresh reading of ``kind`` next to ``other`` by this run's signal."""
        return self.signal.read(self.truth.speed(kind, other), self._rng)
