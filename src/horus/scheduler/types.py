"""The values that go in and out of the placement core — its stable, public vocabulary.

The operator (live cluster), the scheduler extender and the simulator all speak these types,
so they are plain frozen dataclasses with no Kubernetes in them. A :class:`JobRequest` goes in;
a :class:`Placement` (where each replica runs, with its core % and memory MiB per GPU) or a
:class:`Refusal` (a sentence a person can act on) comes out. :class:`SchedulerSettings` holds
every tunable knob, each documented where it is declared; the run-time corrections (moves and
preemptions of running jobs) add what the migration and preemption planners take and give (:class:`MigrationSettings`,
:class:`RunningJob`, :class:`Move`, :class:`Preemption`, …).

Why one module: it is the core's whole public
vocabulary, imported by name by the operator, the extender, the simulator and the tests, and
read as one reference; most of its length is the documentation of each knob where it is
declared. Splitting it would give callers two places to look for one API.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile, ResourcePrediction


def job_kind(profile: GraphProfile) -> str:
    """The default job kind of a profile, ``model@batch``: what pair speeds are cached and
    measured under (the operator, the simulator and the node agent all name kinds this way)."""
    return f"{profile.model}@{profile.batch_size}"


@dataclass(frozen=True)
class JobRequest:
    """One job asking for GPUs: what it is, how much of it there is, and how urgent it is.

    ``replicas × gpus_per_replica`` GPUs are placed all-or-nothing (a gang); the GPUs of one
    replica always lie on one node (one pod), different replicas may use different nodes.
    ``core_percent``/``memory_mib`` left as ``None`` mean *auto*: the policy derives the share
    from the prediction (memory at the upper quantile). ``prediction`` may be given when the
    caller already has it (e.g. from the ``horus.io/predicted`` annotation); otherwise the
    scheduler asks its predictor once per (job kind, GPU model) and caches the answer.
    ``kind`` names the job's model configuration for caching pairwise slowdowns; jobs of one
    kind must have the same profile. ``gpu_models`` restricts placement to those GPU models,
    ``nodes`` to those nodes; ``avoid_gpus`` (GPU UUIDs) keeps the job off those GPUs.
    """

    name: str
    profile: GraphProfile
    replicas: int = 1
    gpus_per_replica: int = 1
    core_percent: int | None = None
    memory_mib: int | None = None
    priority: int = 0
    submit_time: float = 0.0
    prediction: ResourcePrediction | None = None
    kind: str = ""
    gpu_models: tuple[str, ...] = ()
    nodes: frozenset[str] | None = None
    avoid_gpus: frozenset[str] = frozenset()

    def shape(self) -> tuple[object, ...]:
        """What decides where this job may go and whether it fits: on one cluster state,
        jobs of one shape get the same answer (the queue pass remembers failures by it, the
        migration planner best destinations)."""
        return (
            self.kind,
            self.replicas,
            self.gpus_per_replica,
            self.core_percent,
            self.memory_mib,
            self.gpu_models,
            self.nodes,
            self.avoid_gpus,
            self.prediction,
        )

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("job name must not be empty")
        if self.replicas < 1:
            raise ValidationError(f"job {self.name}: replicas must be >= 1, got {self.replicas}")
        if self.gpus_per_replica < 1:
            raise ValidationError(
                f"job {self.name}: gpusPerReplica must be >= 1, got {self.gpus_per_replica}"
            )
        if self.core_percent is not None and not 1 <= self.core_percent <= GPU_CORE_UNITS_PER_GPU:
            raise ValidationError(
                f"job {self.name}: core percent must be 1..100 or auto, got {self.core_percent}"
            )
        if self.memory_mib is not None and self.memory_mib <= 0:
            raise ValidationError(f"job {self.name}: memory MiB must be > 0, got {self.memory_mib}")
        if not self.kind:
            object.__setattr__(self, "kind", job_kind(self.profile))

    @property
    def gpu_count(self) -> int:
        """GPUs the whole gang needs."""
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class GpuShare:
    """The part of one GPU given to one replica of a job."""

    node: str
    gpu_index: int
    gpu_uuid: str
    core_percent: int
    memory_mib: int


@dataclass(frozen=True)
class ReplicaPlacement:
    """Where replica ``replica`` (one pod) of a job runs: one node, one or more GPU shares."""

    replica: int
    node: str
    gpus: tuple[GpuShare, ...]


@dataclass(frozen=True)
class Placement:
    """A successful decision: the gang's replicas and what the policy expected of it.

    ``predicted_speed`` is the job's predicted normalised speed (1 = as fast as alone) given
    the jobs it joins; ``predicted_gain`` the predicted change of summed normalised speed
    of all jobs on the chosen GPUs (only meaningful for the interference-aware policies).
    """

    job: str
    replicas: tuple[ReplicaPlacement, ...]
    policy: str
    prediction: ResourcePrediction
    predicted_speed: float = 1.0
    predicted_gain: float = 1.0

    @property
    def shares(self) -> tuple[GpuShare, ...]:
        """Every GPU share of the gang, replica by replica."""
        return tuple(g for r in self.replicas for g in r.gpus)


class RefusalCode(StrEnum):
    """Why a job was not placed, as a category a program can act on.

    Modelled on kube-scheduler's ``framework.Code``: each code knows whether waiting on this
    cluster may resolve it (:attr:`resolvable`: jobs leave, GPUs free up — kube-scheduler's
    ``Unschedulable``) or not (the cluster as it is can never host the job; only a change to
    the cluster or to the job helps — its ``UnschedulableAndUnresolvable``), and the CamelCase
    reason the operator writes into the DLJob's ``Scheduled`` condition
    (:attr:`condition_reason`). The string values are stable: they appear in logs, metrics
    labels and tests, and a ``str`` enum compares equal to them.
    """

    #: Can never fit this cluster, even empty (too few GPUs, too little memory per GPU).
    IMPOSSIBLE = "impossible"
    #: No GPU node allows the pod template (nodeSelector, node affinity, tolerations).
    NODES = "nodes"
    #: Not enough free GPU memory right now.
    MEMORY = "memory"
    #: Not enough free core share right now (or the summed-utilisation cap).
    CORE = "core"
    #: Every GPU with room already runs the most jobs per GPU.
    SLOTS = "slots"
    #: Sharing would cost more than it gains; waiting for a better GPU.
    INTERFERENCE = "interference"
    #: No idle GPU (policies that run one job per GPU).
    BUSY = "busy"
    #: Not all replicas of the gang fit.
    GANG = "gang"
    #: Held back so that an older, starving job goes first.
    HELD = "held"
    #: Not examined this pass (behind the backfill depth).
    QUEUED = "queued"
    #: Already holds GPU shares in the state; never placed twice.
    RESIDENT = "resident"
    #: Not placed, reason not worked out (``Scheduler.schedule(explain=False)``).
    UNPLACED = "unplaced"

    @property
    def resolvable(self) -> bool:
        """Whether waiting on this cluster may let the job in (False: it never will as is)."""
        return self not in _UNRESOLVABLE

    @property
    def condition_reason(self) -> str:
        """The CamelCase reason of the DLJob's ``Scheduled=False`` condition."""
        return _CONDITION_REASONS[self]


_UNRESOLVABLE = frozenset({RefusalCode.IMPOSSIBLE, RefusalCode.NODES})
_CONDITION_REASONS: dict[RefusalCode, str] = {
    RefusalCode.IMPOSSIBLE: "NeverFits",
    RefusalCode.NODES: "NoMatchingNode",
    RefusalCode.MEMORY: "InsufficientGPUMemory",
    RefusalCode.CORE: "InsufficientGPUCore",
    RefusalCode.SLOTS: "GPUJobSlotsFull",
    RefusalCode.INTERFERENCE: "InterferenceTooHigh",
    RefusalCode.BUSY: "NoIdleGPU",
    RefusalCode.GANG: "GangDoesNotFit",
    RefusalCode.HELD: "HeldForOlderJob",
    RefusalCode.QUEUED: "WaitingInQueue",
    RefusalCode.RESIDENT: "AlreadyHoldsGPUShares",
    RefusalCode.UNPLACED: "Unschedulable",
}


@dataclass(frozen=True)
class Refusal:
    """A job that could not be placed now, and why, in words a person can act on.

    ``code`` is the machine-readable category (:class:`RefusalCode`, which says whether
    waiting may resolve it); ``reason`` the sentence, with numbers and the best candidate.
    """

    job: str
    reason: str
    code: RefusalCode

    def __post_init__(self) -> None:
        if not isinstance(self.code, RefusalCode):
            try:
                object.__setattr__(self, "code", RefusalCode(self.code))
            except ValueError:
                raise ValidationError(
                    f"refusal of job {self.job}: unknown code {self.code!r}; use one of "
                    f"{', '.join(c.value for c in RefusalCode)}"
                ) from None


@dataclass(frozen=True)
class ScheduleResult:
    """The outcome of one scheduling pass: what was placed and why the rest was not."""

    placed: tuple[Placement, ...]
    refused: tuple[Refusal, ...]

    def reason_for(self, job: str) -> str | None:
        """The refusal reason of ``job``, or None when it was placed or not in the queue."""
        for r in self.refused:
            if r.job == job:
                return r.reason
        return None


@dataclass(frozen=True)
class SchedulerSettings:
    """Tunable knobs of the placement core (section ``scheduler`` in the config file).

    Defaults are what the benchmarks in ``docs/scheduler.md`` were measured with.
    """

    #: ``horus``/``oracle``: cap on the summed predicted mean utilisation (%) of one GPU.
    #: Above 100 deliberately overcommits compute: the measured pair tables show that many
    #: pairs whose utilisations sum past 100 still finish more work together than apart.
    util_cap: float = 200.0
    #: ``horus``/``oracle``: share a GPU only when the predicted summed normalised speed of
    #: all jobs on it rises by at least this much. An idle GPU gains 1.0 and always wins when
    #: there is one, so this threshold only decides *share now* against *wait* (a waiting job
    #: runs at speed 0): 0 takes every share that beats waiting. Chosen on a synthetic trace
    #: (seed 7, 256 GPUs) and reported unchanged on every benchmark trace (docs/scheduler.md).
    min_gain: float = 0.0
    #: ``horus``/``oracle``: never place a job where any job on the GPU is predicted to run
    #: slower than this fraction of its solo speed (chosen as ``min_gain``).
    min_speed: float = 0.3
    #: ``horus``/``oracle``: how many times the pair-speed source's own error (the
    #: predictor card's held-out pair MAE; 0 for the measured tables ``oracle`` uses) a share
    #: may fall short of ``min_gain``/``min_speed`` and still be taken. A share is refused
    #: only when even its optimistic bound (each predicted pair speed + ``uncertainty_z`` ×
    #: error) does not beat waiting. Chosen with ``min_gain`` on the same selection trace.
    uncertainty_z: float = 1.0
    #: ``horus``: once pairs have been measured on a GPU model (``Scheduler.observe_pair``),
    #: the error behind the margin of that model's unmeasured pairs becomes the mean
    #: |measured − predicted| of its measured ones, shrunk towards the published error as if
    #: that were this many more pairs: (k × published + Σ|error|) / (k + n). Fixed a priori
    #: at 20, not tuned (docs/scheduler.md); larger trusts the published error longer.
    pair_error_prior_pairs: float = 20.0
    #: Most jobs that may share one GPU (``horus``, ``binpack``, ``spread``).
    max_jobs_per_gpu: int = 3
    #: Smallest core share given to an auto-sized job on a shared GPU.
    min_core_percent: int = 5
    #: How many jobs behind the first blocked one a pass still tries (backfill depth).
    backfill_depth: int = 16
    #: A blocked job that has waited longer than this (seconds) gets a reservation: the GPUs
    #: it will start on are held for it, and backfill may only use GPUs that neither are
    #: reserved nor host a job running on a reserved GPU, so backfill can never delay it
    #: (bounded waiting) while the rest of the cluster keeps working.
    starvation_seconds: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if self.util_cap <= 0:
            raise ValidationError(f"util_cap must be > 0, got {self.util_cap}")
        if self.max_jobs_per_gpu < 1:
            raise ValidationError(f"max_jobs_per_gpu must be >= 1, got {self.max_jobs_per_gpu}")
        if self.uncertainty_z < 0:
            raise ValidationError(f"uncertainty_z must be >= 0, got {self.uncertainty_z}")
        if not (math.isfinite(self.pair_error_prior_pairs) and self.pair_error_prior_pairs >= 0):
            raise ValidationError(
                f"pair_error_prior_pairs must be a finite number >= 0, got "
                f"{self.pair_error_prior_pairs}"
            )
        if not 0 <= self.min_speed <= 1:
            raise ValidationError(f"min_speed must be in [0, 1], got {self.min_speed}")
        if not 1 <= self.min_core_percent <= GPU_CORE_UNITS_PER_GPU:
            raise ValidationError(f"min_core_percent must be 1..100, got {self.min_core_percent}")
        if self.backfill_depth < 0:
            raise ValidationError(f"backfill_depth must be >= 0, got {self.backfill_depth}")
        if self.starvation_seconds <= 0:
            raise ValidationError(f"starvation_seconds must be > 0, got {self.starvation_seconds}")


@dataclass(frozen=True)
class GpuView:
    """A read-only snapshot of one GPU and what runs on it (for reasons, metrics, tests)."""

    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    healthy: bool
    memory_used_mib: int
    core_used_percent: int
    util_sum: float
    jobs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        return f"{self.node}/gpu-{self.index}"


# --- run-time corrections: migration and priority preemption ------------------------------


@dataclass(frozen=True)
class MigrationSettings:
    """Knobs of the migration planner (:func:`horus.scheduler.migration.plan_migrations`).

    A move of a running job is made only when the summed normalised speed it buys, kept over
    the job's expected remaining run time, beats the work the move throws away by more than
    ``min_gain`` — and only within the anti-flapping limits below. Defaults are what the
    benchmarks in ``docs/scheduler.md`` were measured with; none was tuned on a benchmark
    trace (each says why it is what it is).
    """

    #: Hysteresis: the predicted rise of the cluster's summed normalised speed (after the
    #: move's cost and the uncertainty margin of unmeasured pairs) must exceed this. 0.2 is
    #: a fifth of an idle GPU: a move must win clearly more than the noise of the agent's
    #: pair estimate (``benchmarks/pair_signal.py``: MAE 0.19 per pair speed) on the one pair
    #: it usually turns on, so a move never rests on estimation noise alone.
    min_gain: float = 0.2
    #: A job is not moved again within this many seconds of its last move: a move changes the
    #: co-locations the agent measures, and the new ones need time to be measured (the agent
    #: samples every 5 s and writes every 60 s) before a second judgement. One hour is well
    #: above that and below the run time of the jobs worth moving (hours to days).
    min_interval_s: float = 3600.0
    #: Most moves in flight cluster-wide (checkpointing, restarting): moves cost I/O and
    #: restart time, and a burst of them would judge each against a cluster that is changing.
    max_concurrent: int = 4
    #: Most moves of one job over its life (the issue's "at most N times"): a job that keeps
    #: being judged better elsewhere is more likely mis-measured than unlucky twice.
    max_moves_per_job: int = 2
    #: Bounds (seconds) on the horizon over which a move's gain is counted when the job's
    #: remaining run time is unknown. The estimate is the job's age (time run so far): for
    #: the heavy-tailed run times of DL clusters (Philly, Alibaba) the expected remaining
    #: time grows with the time already run, as schedulers that rank by attained service use
    #: (Tiresias, NSDI '19). The floor keeps a just-started job from looking free to move
    #: for nothing; the ceiling (one day) keeps an old job from justifying any move.
    min_horizon_s: float = 600.0
    max_horizon_s: float = 86_400.0
    #: Most jobs judged per call (a placement attempt each), in the order of the most a
    #: move could gain: bounds what one pass costs on a large busy cluster, where most
    #: jobs in a bad pair have nowhere better to go. The rest wait for a later pass
    #: (``MigrationPlan.deferred``). Twice the concurrency cap.
    max_judged: int = 8

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_gain) and self.min_gain >= 0):
            raise ValidationError(
                f"migration min_gain must be a finite number >= 0, got {self.min_gain}"
            )
        if not (math.isfinite(self.min_interval_s) and self.min_interval_s >= 0):
            raise ValidationError(
                f"migration min_interval_s must be a finite number >= 0, got {self.min_interval_s}"
            )
        if self.max_judged < 1:
            raise ValidationError(f"migration max_judged must be >= 1, got {self.max_judged}")
        if self.max_concurrent < 0 or self.max_moves_per_job < 0:
            raise ValidationError(
                "migration max_concurrent and max_moves_per_job must be >= 0, got "
                f"{self.max_concurrent}, {self.max_moves_per_job}"
            )
        if not (
            math.isfinite(self.min_horizon_s)
            and math.isfinite(self.max_horizon_s)
            and 0 < self.min_horizon_s <= self.max_horizon_s
        ):
            raise ValidationError(
                "migration horizons need 0 < min_horizon_s <= max_horizon_s (finite), got "
                f"{self.min_horizon_s}, {self.max_horizon_s}"
            )


@dataclass(frozen=True)
class PreemptionSettings:
    """Knobs of the preemption planner (:func:`horus.scheduler.preemption.plan_preemption`).

    A waiting job may evict running jobs of strictly lower priority whose migration policy
    allows it (equal priorities never preempt, so no two jobs can preempt each other back).
    """

    #: Most victims one preemption may evict: beyond it the job waits instead. Eight is a
    #: node's worth of single-GPU jobs, what one 8-GPU replica needs at most on a full node.
    max_victims: int = 8
    #: Most preemptions one pass plans: each evicts, checkpoints and restarts jobs, so a burst
    #: of high-priority arrivals is served over a few passes rather than all at once.
    max_per_pass: int = 4

    def __post_init__(self) -> None:
        if self.max_victims < 1 or self.max_per_pass < 0:
            raise ValidationError(
                "preemption needs max_victims >= 1 and max_per_pass >= 0, got "
                f"{self.max_victims}, {self.max_per_pass}"
            )


@dataclass(frozen=True)
class RunningJob:
    """A running job as the migration and preemption planners see it (the caller's view).

    ``request`` must be placed in the :class:`ClusterState` handed to the planner.
    ``movable``: its ``spec.migration.policy`` lets Horus stop it (``OnCheckpoint``); a
    ``Never`` job is neither moved nor preempted. ``observed``: the node agent has measured
    its current co-location (no move before that). ``moves`` so far and ``last_moved`` (the
    time of the last move, same clock as ``now``; None: never). ``elapsed_s``: seconds it
    has run so far (its age, the remaining-time estimate when ``remaining_s`` is None).
    ``move_cost_s``: seconds of its progress a move or preemption throws away — checkpoint
    + restart + progress since its last checkpoint. ``moving``: a move or eviction of it is
    under way (it counts against the concurrency cap and is never planned again meanwhile).
    """

    request: JobRequest
    movable: bool = False
    observed: bool = False
    moves: int = 0
    last_moved: float | None = None
    elapsed_s: float = 0.0
    move_cost_s: float = 0.0
    remaining_s: float | None = None
    moving: bool = False

    def __post_init__(self) -> None:
        name = self.request.name
        for field_name in ("elapsed_s", "move_cost_s"):
            v = getattr(self, field_name)
            if not (math.isfinite(v) and v >= 0):
                raise ValidationError(f"running job {name}: {field_name} must be >= 0, got {v}")
        if self.remaining_s is not None and not (
            math.isfinite(self.remaining_s) and self.remaining_s >= 0
        ):
            raise ValidationError(
                f"running job {name}: remaining_s must be >= 0 or None, got {self.remaining_s}"
            )
        if self.moves < 0:
            raise ValidationError(f"running job {name}: moves must be >= 0, got {self.moves}")


class MoveReason(StrEnum):
    """Why a job is moved (the ``reason`` label of ``horus_migrations_total``)."""

    #: It, or a job it shares a GPU with, runs measurably slower there than the jobs would
    #: run after the move (the cluster's summed normalised speed rises).
    INTERFERENCE = "interference"


@dataclass(frozen=True)
class Move:
    """One planned move: every replica of ``job`` from ``source`` to ``placement``.

    ``placement`` has the shape :meth:`Scheduler.place` returns (record it, then create the
    new pods; the old ones go once it is recorded). ``gain`` is the predicted rise of the
    cluster's summed normalised speed (per GPU, as placement gains are counted) and ``cost``
    the move's cost in the same unit (``move_cost_s`` × GPUs ÷ ``horizon_s``); ``message``
    says it in words for an Event.
    """

    job: str
    placement: Placement
    source: tuple[GpuShare, ...]
    gain: float
    cost: float
    horizon_s: float
    speed_before: float
    speed_after: float
    reason: MoveReason
    message: str


@dataclass(frozen=True)
class MigrationPlan:
    """The moves worth making now (at most the concurrency cap allows), in the order they
    were found (the job whose move could gain most is judged first), and the jobs that might
    also be worth moving but were not judged (the concurrency cap was full, or
    ``max_judged`` reached); a later pass will."""

    moves: tuple[Move, ...]
    deferred: tuple[str, ...] = ()
    #: Jobs that could move but whose move could not pay even onto idle GPUs at no cost
    #: (their current co-location is good enough): a caller may leave them out of later
    #: calls until the jobs beside them or the measured pairs change.
    hopeless: tuple[str, ...] = ()
    #: Jobs whose move could pay onto idle GPUs, but no GPU they fit now would do: a caller
    #: may leave them out until GPUs are freed (or as for ``hopeless``).
    nowhere: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preemption:
    """A waiting ``job`` that starts with ``placement`` once ``victims`` (running jobs of
    lower priority, evicted to the queue) are gone; ``message`` in words for Events."""

    job: str
    placement: Placement
    victims: tuple[str, ...]
    message: str
