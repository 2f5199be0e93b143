"""What a simulated run is: the cluster, which run of which policy, and what corrections cost.

Why apart from the engine: the CLI, the benchmark and the tests name runs and settings
without needing the event loop, and a run's name is a small grammar worth one place.

**Run names.** A policy of :mod:`horus.scheduler.policies`, optionally followed by features
joined with ``+``:

* ``+observed`` — the scheduler is told the pair speeds the node agent reports, when and as
  wrong as it reports them (:mod:`horus.sim.observation`), read from the jobs' progress;
  ``+observed-split`` / ``+observed-overlap``: read from the utilisation ratio under the
  split or the overlap model of pair utilisation (:mod:`horus.sim.signals`);
  ``+observed-exact``: the true speeds at the agent's timing (an upper bound on feedback);
* ``+migrate`` — running jobs are moved when it pays (:func:`horus.scheduler.plan_migrations`);
* ``+preempt`` — a waiting job may evict lower-priority ones
  (:func:`horus.scheduler.plan_preemptions`).

``horus`` alone is the whole system, ``horus+observed+migrate+preempt`` (progress signal);
``horus-predict-only`` is the ``horus`` policy on its predictions alone, without run-time
corrections. ``+observed`` exists for ``horus`` (the only policy that reads pair
speeds and learns from them); ``+migrate`` for ``horus`` with ``+observed`` (no move before a
job is observed) and for ``oracle`` (its pair speeds are exact already); ``+preempt`` for
every policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from horus.common.errors import ConfigError, ValidationError
from horus.scheduler import MigrationSettings, PreemptionSettings
from horus.scheduler.policies import get_policy
from horus.sim.observation import ObservationModel
from horus.sim.signals import Signal

#: Policies that use pair speeds, so that feeding them measurements means something.
OBSERVABLE_POLICIES = ("horus",)
#: Policies that may migrate (they score interference).
MIGRATING_POLICIES = ("horus", "oracle")
#: The whole system, and the prediction-only ablation.
FULL_SYSTEM = "horus"
PREDICT_ONLY = "horus-predict-only"
#: ``+observed…`` feature → the signal the agent reads pairs from.
OBSERVE_FEATURES: dict[str, Signal] = {
    "observed": "progress",
    "observed-exact": "exact",
    "observed-split": "util-split",
    "observed-overlap": "util-overlap",
}
_FEATURES = (*OBSERVE_FEATURES, "migrate", "preempt")
#: The largest simulated cluster (the arrays of the cluster state scale with it).
MAX_SIM_GPUS = 1_000_000


@dataclass(frozen=True)
class RunSpec:
    """A run: the placement policy and which run-time features are on."""

    name: str
    policy: str
    observe: Signal | None = None
    migrate: bool = False
    preempt: bool = False


def parse_run(name: str) -> RunSpec:
    """The run a name stands for (module docstring); unknown or meaningless combinations
    are a :class:`ConfigError` that says what exists."""
    if name == FULL_SYSTEM:
        return RunSpec(name, "horus", OBSERVE_FEATURES["observed"], migrate=True, preempt=True)
    base, *features = name.split("+")
    policy = "horus" if base == PREDICT_ONLY else base
    get_policy(policy)  # raises ConfigError listing the known names
    if len(set(features)) != len(features):
        raise ConfigError(f"{name!r}: a feature is named twice")
    for f in features:
        if f == "observed-util":
            raise ConfigError(
                f"{name!r}: +observed-util is now +observed-split or +observed-overlap (the "
                "utilisation ratio under either model of pair utilisation); +observed reads "
                "the jobs' progress"
            )
        if f not in _FEATURES:
            raise ConfigError(f"{name!r}: unknown feature +{f}; use {', +'.join(_FEATURES)}")
    observe: Signal | None = None
    chosen = [f for f in features if f in OBSERVE_FEATURES]
    if chosen:
        if policy not in OBSERVABLE_POLICIES:
            raise ConfigError(
                f"{name!r}: only {', '.join(OBSERVABLE_POLICIES)} uses pair speeds, so only "
                f"{', '.join(p + '+observed' for p in OBSERVABLE_POLICIES)} can learn from "
                "observed ones"
            )
        if len(chosen) > 1:
            raise ConfigError(f"{name!r}: choose one of +{', +'.join(OBSERVE_FEATURES)}")
        observe = OBSERVE_FEATURES[chosen[0]]
    migrate = "migrate" in features
    if migrate and policy not in MIGRATING_POLICIES:
        raise ConfigError(
            f"{name!r}: only {', '.join(MIGRATING_POLICIES)} score interference, so only they "
            "can judge a move"
        )
    if migrate and policy == "horus" and observe is None:
        raise ConfigError(f"{name!r}: horus moves only observed jobs; add +observed")
    return RunSpec(name, policy, observe, migrate, "preempt" in features)


@dataclass(frozen=True)
class MoveCosts:
    """What a move or a preemption costs the job that is stopped (seconds of its time)."""

    #: Seconds a moved, preempted-and-resumed or preempting job makes no progress
    #: (checkpoint + restart). 30 s is what Pollux's simulator charges every re-allocation,
    #: a checkpoint-restart (Qiao et al., OSDI '21; petuum/adaptdl ``simulator/simulator.py``,
    #: ``Job.reallocate``: ``rescale_time = 30``).
    restart_s: float = 30.0
    #: Seconds of progress redone after each move or preemption (work since the last
    #: checkpoint). 0: a job whose ``spec.migration.policy`` is ``OnCheckpoint`` checkpoints
    #: when told (SIGTERM), so only the step in flight is lost; a job that checkpoints every
    #: T seconds instead loses T/2 on average — set this to model it.
    lost_progress_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("restart_s", "lost_progress_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 1e7):
                raise ValidationError(f"move cost {name} must be 0..1e7 seconds, got {v}")

    @property
    def per_move_s(self) -> float:
        """What the planners are told a move costs (``RunningJob.move_cost_s``)."""
        return self.restart_s + self.lost_progress_s


@dataclass(frozen=True)
class SimConfig:
    """How the simulated cluster looks, what the run records, and its corrections' rules."""

    gpus: int = 1024
    gpus_per_node: int = 8
    #: Points kept for the utilisation-over-time plot.
    timeline_points: int = 1000
    #: A job counts as "slowed" when its mean speed is below this fraction of solo speed.
    slow_threshold: float = 0.8
    progress: bool = False
    #: Skip (and count in ``SimResult.rejected``) jobs that can never fit the cluster, e.g.
    #: whose predicted memory exceeds every GPU, instead of failing the run.
    drop_impossible: bool = False
    #: The node agent's sampling and error (``+observed``).
    observation: ObservationModel = field(default_factory=ObservationModel)
    #: What moves and preemptions cost (``+migrate``, ``+preempt``).
    costs: MoveCosts = field(default_factory=MoveCosts)
    migration: MigrationSettings = field(default_factory=MigrationSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    #: Corrections are planned at most this often (seconds): the operator's pass is
    #: rate-limited the same way (``+migrate``, ``+preempt``).
    pass_interval_s: float = 60.0
    #: Migration is planned at most this often (seconds). Moves pay off over hours, the
    #: agent needs a minute to measure a new pair, and a pass judges every job in a pair:
    #: five minutes keeps the simulator's cost in bounds (docs/scheduler.md measures it
    #: against 60 s).
    migration_interval_s: float = 300.0

    def __post_init__(self) -> None:
        if not (1 <= self.gpus <= MAX_SIM_GPUS and 1 <= self.gpus_per_node <= 1024):
            raise ValidationError(
                f"need 1..{MAX_SIM_GPUS} GPUs (--gpus) and 1..1024 GPUs per node "
                f"(--gpus-per-node), got {self.gpus}, {self.gpus_per_node}"
            )
        if not 1 <= self.timeline_points <= 1_000_000:
            raise ValidationError(f"timeline_points must be 1..1000000, got {self.timeline_points}")
        if not (math.isfinite(self.slow_threshold) and 0 < self.slow_threshold <= 1):
            raise ValidationError(f"slow_threshold must be in (0, 1], got {self.slow_threshold}")
        for name in ("pass_interval_s", "migration_interval_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 1e6):
                raise ValidationError(f"{name} must be 0..1e6 seconds, got {v}")
