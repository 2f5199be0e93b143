"""The scheduler: turns a queue of jobs into placements, or into reasons a person can read.

One code path for every policy: predict (cached per job kind and GPU model), filter GPUs on
health, model, memory, core and job slots, let the policy refine and score, then place the
gang all-or-nothing. When a job does not fit, the refusal names the filter that ruled it out
(:mod:`horus.scheduler.explain`). The job judged against every GPU once is
:class:`horus.scheduler.prepared.Prepared`; the gang's choice of GPUs from their scores is
:mod:`horus.scheduler.gangchoice`.

A pass over the queue (:meth:`Scheduler.schedule`: order, backfill, the starvation guard)
is :mod:`horus.scheduler.queuepass`.

Per-node answers (:meth:`Scheduler.evaluate`, for the scheduler extender) are
:mod:`horus.scheduler.nodeanswers`: each node judged on its own GPUs alone gets the answer
:meth:`Scheduler.place` gives when that node is the only one usable.

What the scheduler believes about jobs (predictions, pair speeds, measured pairs, margins)
lives in :mod:`horus.scheduler.estimates`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

import numpy as np

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.predictor.interface import Predictor, ResourcePrediction
from horus.scheduler import nodeanswers
from horus.scheduler.estimates import Estimates, PairKey
from horus.scheduler.explain import (
    Verdicts,
    explain_refusal,
    why_never,
)
from horus.scheduler.gangchoice import choose_gpus
from horus.scheduler.policies import PairSpeed, Policy, ScoreContext, get_policy, term_margin
from horus.scheduler.prepared import Prepared, scored_on
from horus.scheduler.queue import JobQueue
from horus.scheduler.queuepass import QueuePass
from horus.scheduler.reservation import Reservation, soonest_free
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray, NodeSubset
from horus.scheduler.types import (
    GpuShare,
    JobRequest,
    Placement,
    Refusal,
    RefusalCode,
    ReplicaPlacement,
    ScheduleResult,
    SchedulerSettings,
)

_Needs = tuple[list[ResourcePrediction], IntArray, IntArray, FloatArray]


class Scheduler:
    """Places jobs on a :class:`ClusterState` with one policy.

    ``predictor`` supplies resource predictions (unless a job carries its own) and, for the
    interference-aware policies, pairwise speeds. ``pair_speed`` overrides the predictor's
    pair speeds — the simulator passes the measured tables for ``oracle``. ``pair_error`` is
    the typical error of one pair speed (see :attr:`pair_error`); a caller whose override
    only wraps the predictor (the operator) passes :func:`published_pair_error` so the
    uncertainty margin is the same as without an override. ``observed_error`` is the
    error of a *measured* pair speed whose :meth:`observe_pair` call names none: 0 (the
    default) treats such measurements as exact. Callers that know each measurement's own
    error (the node agent publishes one per pair) pass it to :meth:`observe_pair` instead,
    so each measured pair keeps the margin its signal earns.
    """

    def __init__(
        self,
        policy: str | Policy = "horus",
        predictor: Predictor | None = None,
        settings: SchedulerSettings | None = None,
        pair_speed: PairSpeed | None = None,
        pair_error: float | None = None,
        observed_error: float = 0.0,
    ) -> None:
        self.settings = settings or SchedulerSettings()
        self.estimates = Estimates(predictor, self.settings, pair_speed, pair_error, observed_error)
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self._queue_model: str | None = None
        #: GPUs held for the starving job at the head of the queue (the starvation guard).
        self.reservation = Reservation(self._pick_reservation)
        self._needs_cache: dict[tuple[object, ...], _Needs] = {}
        #: Bumped whenever a measurement changes what the scheduler believes (callers
        #: that remember derived figures compare it).
        self.beliefs_version = 0
        #: share_margin by (kind, GPU model, signature); emptied by each measurement.
        self._margins: dict[tuple[str, str, tuple[str, ...]], float] = {}

    # --- what the scheduler believes (horus.scheduler.estimates) --------------------------
    @property
    def predictor(self) -> Predictor | None:
        return self.estimates.predictor

    @property
    def pair_error(self) -> float:
        """Typical error of one pair speed: as given to the constructor; else 0 for an
        explicit source (``oracle``'s measured tables), else the predictor's published one."""
        return self.estimates.pair_error

    def predict(self, job: JobRequest, gpu_model: str) -> ResourcePrediction:
        """The job's prediction on ``gpu_model`` (its own if it carries one; cached by kind)."""
        return self.estimates.predict(job, gpu_model)

    def pair_speed(self, kind: str, other: str, gpu_model: str) -> float:
        """Predicted normalised speed of ``kind`` next to ``other`` (cached)."""
        return self.estimates.pair_speed(kind, other, gpu_model)

    def observe_pair(
        self, kind: str, other: str, gpu_model: str, speed: float, error: float | None = None
    ) -> None:
        """Record a *measured* normalised speed of ``kind`` while it shares a ``gpu_model``
        with ``other`` (what a node agent sees where Horus runs), with the measurement's own
        typical absolute error ``error`` (speed units, 0..1; None: the constructor's
        ``observed_error``). From then on it replaces the predicted speed of that pair, and
        the pair's uncertainty margin is ``uncertainty_z`` × ``error`` — the signal's error,
        not the predictor's. A later call for the same pair replaces speed and error (the
        agent pools its own samples). How far it is from the prediction also teaches the
        margin of the pairs on that GPU model that are still unmeasured
        (:meth:`model_pair_error`)."""
        if self.estimates.observe_pair(kind, other, gpu_model, speed, error):
            self.beliefs_version += 1
            self.policy.forget_pairs((kind, other))
            self._margins.clear()  # the learnt error moved every model's margin

    def model_pair_error(self) -> dict[str, float]:
        """Per GPU model, the pair error learned from measured pairs (:meth:`observe_pair`):
        the mean |measured − predicted| over that model's measured pairs, shrunk towards
        :attr:`pair_error` as if that were ``settings.pair_error_prior_pairs`` more pairs.
        Models without a measured pair are absent (they keep :attr:`pair_error`)."""
        return self.estimates.model_pair_error()

    def share_margin(self, kind: str, gpu_model: str, sig: tuple[str, ...]) -> float:
        """How far the predicted gain of ``kind`` joining a ``gpu_model`` GPU that runs
        ``sig`` may be off (the bound the sharing rule uses): 2 × len(sig) pair terms, each
        with its model's margin (``uncertainty_z`` × pair error); a measured one with
        ``uncertainty_z`` × its measurement's own error."""
        key = (kind, gpu_model, sig)
        hit = self._margins.get(key)
        if hit is None:
            margin = self.estimates.model_margins().get(
                gpu_model, self.settings.uncertainty_z * self.pair_error
            )
            observed = self.estimates.observed_errors
            z = self.settings.uncertainty_z
            hit = 2 * len(sig) * term_margin(margin, observed, kind, gpu_model, sig, z)
            if len(self._margins) > 100_000:
                self._margins.clear()
            self._margins[key] = hit
        return hit

    @property
    def observed_pairs(self) -> Mapping[PairKey, float]:
        """Every measured pair speed so far, by (kind, other, GPU model)."""
        return self.estimates.observed_pairs

    def observed_pair_error(self, kind: str, other: str, gpu_model: str) -> float | None:
        """The error recorded with a measured pair (:meth:`observe_pair`), None if unmeasured."""
        return self.estimates.observed_errors.get((kind, other, gpu_model))

    def remember(self, job: JobRequest) -> None:
        """Record ``job``'s profile under its kind (needed to ask the predictor about pairs)."""
        self.estimates.remember(job)

    # --- the queue's order ----------------------------------------------------------------
    def queue_key(self, job: JobRequest) -> tuple[float, ...]:
        """The job's position key in this policy's queue order."""
        pred = job.prediction
        if pred is None and self._queue_model is not None and self.predictor is not None:
            pred = self.predict(job, self._queue_model)
        return self.policy.queue_key(job, pred)

    def new_queue(
        self, state: ClusterState | None = None, jobs: Iterable[JobRequest] = ()
    ) -> JobQueue:
        """An empty queue ordered the way this policy wants, filled with ``jobs``.

        ``state`` tells which GPU model predictions used for ordering refer to (its first).
        """
        if state is not None and state.models:
            self._queue_model = state.models[0]
        q = JobQueue(self.queue_key)
        for job in jobs:
            self.remember(job)
            q.push(job)
        return q

    # --- one job --------------------------------------------------------------------------
    def place(self, state: ClusterState, job: JobRequest) -> Placement | Refusal:
        """Try to place one job now; on success the placement is applied to ``state``."""
        result = self.attempt(state, job)
        if isinstance(result, Placement):
            state.apply(job, result)
        return result

    def evaluate(
        self, state: ClusterState, job: JobRequest, nodes: Iterable[str]
    ) -> dict[str, Placement | Refusal]:
        """For each of ``nodes``, how ``job`` would be placed on that node's GPUs alone, or
        why it would not: exactly what :meth:`place` answers when that node is the only
        usable one. Nothing is applied to ``state``. How it is worked out once per GPU and
        judged per node: :func:`horus.scheduler.nodeanswers.evaluate`."""
        return nodeanswers.evaluate(self, state, job, nodes)

    def evaluate_each(
        self, state: ClusterState, job: JobRequest, nodes: Iterable[str]
    ) -> dict[str, Placement | Refusal]:
        """:meth:`evaluate` by a full replay of the filters for every node (the reference
        the vectorised answer is tested and benchmarked against)."""
        return nodeanswers.evaluate_each(self, state, job, nodes)

    def best_gains(
        self, state: ClusterState, job: JobRequest, exclude: BoolArray | None = None
    ) -> FloatArray:
        """The policy's predicted gain on every GPU ``job`` fits now (its filters, not its
        sharing rule), best first: the sum of the first ``job.gpu_count`` bounds what any
        placement of it can gain (the migration planner's cheap test). Empty for a policy
        that does not score interference."""
        if not self.policy.interference_aware:
            return np.empty(0)
        pre = self._prefilter(state, job, exclude)
        mask = pre.refined()
        if not mask.any():
            return np.empty(0)
        pre.score()
        assert pre.ctx.gains is not None
        return np.sort(pre.ctx.gains[mask])[::-1]

    def check_possible(self, state: ClusterState, job: JobRequest) -> str | None:
        """Why ``job`` can never run on this cluster (even empty), or None when it could."""
        usable = state.healthy & self.allowed_gpus(state, job)
        return why_never(state, job, usable, self.predict, self.policy.memory_headroom_mib)

    def allowed_gpus(self, state: ClusterState, job: JobRequest) -> BoolArray:
        """The GPUs ``job`` may use at all (healthy or not): of its GPU models, on its
        allowed nodes, not one it avoids."""
        ok_gpu = np.ones(state.gpu_count, dtype=np.bool_)
        if job.gpu_models:
            ok = [m in job.gpu_models for m in state.models]
            ok_gpu &= np.array(ok, dtype=np.bool_)[state.model_of]
        if job.nodes is not None:
            allowed = np.array([n in job.nodes for n in state.node_names], dtype=np.bool_)
            ok_gpu &= allowed[state.node_of] if len(allowed) else ok_gpu
        if job.avoid_gpus:
            ok_gpu &= np.array([u not in job.avoid_gpus for u in state.gpu_uuid], dtype=np.bool_)
        return ok_gpu

    def _needs(self, st: ClusterState, job: JobRequest) -> _Needs:
        """Per-GPU memory, core and utilisation of ``job`` (cached: they depend on no state);
        a subset's are the whole state's, gathered."""
        if isinstance(st, NodeSubset):
            preds, mem, core, util = self._needs(st.whole, job)
            return preds, mem[st.gpus], core[st.gpus], util[st.gpus]
        key = (st.layout_token, job.kind, job.memory_mib, job.core_percent, job.prediction)
        hit = self._needs_cache.get(key)
        if hit is not None:
            return hit
        pol, cfg = self.policy, self.settings
        preds = [self.predict(job, m) for m in st.models]
        if pol.whole_gpu:
            mem_by_model = np.array([math.ceil(p.memory_mib_upper) for p in preds], dtype=np.int64)
            core_by_model = np.full(len(preds), GPU_CORE_UNITS_PER_GPU, dtype=np.int64)
        else:
            mem_by_model = np.array(
                [job.memory_mib or pol.memory_share(job, p) for p in preds], dtype=np.int64
            )
            core_by_model = np.array(
                [job.core_percent or pol.core_share(job, p, cfg) for p in preds], dtype=np.int64
            )
        util_by_model = np.array([p.util_mean for p in preds], dtype=np.float64)
        hit = (
            preds,
            mem_by_model[st.model_of],
            core_by_model[st.model_of],
            util_by_model[st.model_of],
        )
        if len(self._needs_cache) > 10_000:
            self._needs_cache.clear()
        self._needs_cache[key] = hit
        return hit

    def _prefilter(
        self, st: ClusterState, job: JobRequest, exclude: BoolArray | None = None
    ) -> Prepared:
        """``job``'s needs and the common filters on every GPU (``exclude``: GPUs it may not
        use, e.g. a reservation)."""
        pol, cfg = self.policy, self.settings
        self.remember(job)
        self.estimates.residents_from(st)
        preds, mem_need, core_need, util_need = self._needs(st, job)
        restricted = job.gpu_models or job.nodes is not None or job.avoid_gpus
        allowed = self.allowed_gpus(st, job) if restricted else np.ones(st.gpu_count, np.bool_)
        usable = st.healthy & allowed if restricted else st.healthy
        if exclude is not None:
            usable = usable & ~exclude
        mem_ok = st.mem_used + mem_need + pol.memory_headroom_mib <= st.mem_total
        core_ok = st.core_used + core_need <= GPU_CORE_UNITS_PER_GPU
        slots_ok = st.njobs < pol.max_jobs_per_gpu(cfg)
        ctx = ScoreContext(
            st,
            job,
            mem_need,
            core_need,
            util_need,
            cfg,
            self.pair_speed,
            pair_margin=cfg.uncertainty_z * self.pair_error,
            observed=self.estimates.observed_errors,
            model_margin=self.estimates.model_margins(),
            observed_z=cfg.uncertainty_z,
        )
        if isinstance(st, NodeSubset):  # the sentences quote the cluster's largest needs
            _, mem_all, _, util_all = self._needs(st.whole, job)
            ctx.cluster_need = (int(mem_all.max()), float(util_all.max()))
        room = usable & mem_ok & core_ok & slots_ok
        return Prepared(st, job, pol, preds, ctx, allowed, usable, mem_ok, core_ok, slots_ok, room)

    def attempt(
        self,
        state: ClusterState,
        job: JobRequest,
        explain: bool = True,
        exclude: BoolArray | None = None,
    ) -> Placement | Refusal:
        """What :meth:`place` would answer, without applying it (``exclude``: GPUs the job
        may not use, e.g. a reservation; ``explain=False``: refusals carry no reason)."""
        return self._decide(self._prefilter(state, job, exclude), None, explain)

    def _decide(self, pre: Prepared, only: BoolArray | None, explain: bool) -> Placement | Refusal:
        """Place ``pre.job`` on the GPUs in ``only`` (None: every GPU), or say why not."""
        st, job, need = pre.state, pre.job, pre.job.gpu_count
        ctx = pre.ctx if only is None else replace(pre.ctx, gains=None, admissible=None)
        mask = pre.room if only is None else pre.room & only
        if int(np.count_nonzero(mask)) >= need:
            mask = pre.refined() if only is None else pre.refined() & only
        scored = int(np.count_nonzero(mask)) >= need
        if scored:
            score = pre.score()
            mask = mask & pre.finite()
            chosen = choose_gpus(st, job, mask, score) if np.count_nonzero(mask) >= need else None
            if chosen is not None:
                return self._placement(st, job, chosen, ctx, pre.preds)
        if not explain:
            return Refusal(job.name, "", RefusalCode.UNPLACED)
        if only is not None and scored:
            scored_on(ctx, pre.ctx, only)
        allowed, usable = pre.allowed, pre.usable
        if only is not None:
            allowed, usable = allowed & only, usable & only
        never = why_never(
            st, job, st.healthy & allowed, self.predict, self.policy.memory_headroom_mib
        )
        verdicts = Verdicts(usable, pre.mem_ok, pre.core_ok, pre.slots_ok, mask)
        return explain_refusal(ctx, self.policy, verdicts, never)

    def _placement(
        self,
        st: ClusterState,
        job: JobRequest,
        chosen: list[list[int]],
        ctx: ScoreContext,
        preds: list[ResourcePrediction],
        effects: dict[tuple[int, int], tuple[float, float]] | None = None,
    ) -> Placement:
        """``effects``: :meth:`predicted_effect` by (GPU model, residents' signature) for
        one state and job, kept by a caller that builds many placements of it."""
        replicas = []
        speed, gain = 1.0, 0.0
        for r, gpus in enumerate(chosen):
            shares = []
            for g in gpus:
                mem = int(st.mem_total[g]) if self.policy.whole_gpu else int(ctx.mem_need[g])
                shares.append(
                    GpuShare(
                        node=st.node_names[int(st.node_of[g])],
                        gpu_index=st.gpu_index[g],
                        gpu_uuid=st.gpu_uuid[g],
                        core_percent=int(ctx.core_need[g]),
                        memory_mib=mem,
                    )
                )
                if effects is None:
                    s, gn = self.predicted_effect(st, job, g)
                else:
                    look = (int(st.model_of[g]), int(st.sig_id[g]))
                    if look not in effects:
                        effects[look] = self.predicted_effect(st, job, g)
                    s, gn = effects[look]
                speed, gain = min(speed, s), gain + gn
            replicas.append(ReplicaPlacement(r, shares[0].node, tuple(shares)))
        pred = preds[int(st.model_of[chosen[0][0]])]
        return Placement(
            job=job.name,
            replicas=tuple(replicas),
            policy=self.policy.name,
            prediction=pred,
            predicted_speed=speed,
            predicted_gain=gain,
        )

    def predicted_effect(self, st: ClusterState, job: JobRequest, g: int) -> tuple[float, float]:
        """What ``job`` joining GPU ``g`` as it is in ``st`` does, as (the job's predicted
        speed there, the rise of the GPU's summed normalised speed); (1, 1) on an idle GPU,
        (NaN, NaN) without a pair-speed source. Pair speeds as :meth:`pair_speed` gives them
        (measured ones first). The migration planner uses it for a job's current GPUs with
        the job taken out of the state: what the job adds where it runs now."""
        sig = st.signatures[int(st.sig_id[g])]
        if not sig:
            return 1.0, 1.0
        if not self.estimates.has_pair_source:
            return math.nan, math.nan
        self.remember(job)
        self.estimates.residents_from(st)
        return self._effect(job.kind, st.gpu_model[g], sig)

    def joining_effect(
        self, kind: str, gpu_model: str, sig: tuple[str, ...]
    ) -> tuple[float, float]:
        """:meth:`predicted_effect` of a job of ``kind`` joining a ``gpu_model`` GPU that
        runs the job kinds ``sig`` (sorted), from the policy's cached gains when it keeps
        them (``horus``/``oracle``). The kinds' profiles must be known to the scheduler (it
        has seen them, or the state it last decided on holds them)."""
        if not sig:
            return 1.0, 1.0
        if not self.estimates.has_pair_source:
            return math.nan, math.nan
        gain = getattr(self.policy, "gain", None)
        if callable(gain):
            rise, speed, _ = gain(kind, gpu_model, sig, self.pair_speed)
            return float(speed), float(rise)
        return self._effect(kind, gpu_model, sig)

    def _effect(self, kind: str, model: str, sig: tuple[str, ...]) -> tuple[float, float]:
        speed = 1.0
        for o in sig:
            speed *= self.pair_speed(kind, o, model)
        before = after = 0.0
        for i, r in enumerate(sig):
            s = 1.0
            for j, o in enumerate(sig):
                if i != j:
                    s *= self.pair_speed(r, o, model)
            before += s
            after += s * self.pair_speed(r, kind, model)
        return speed, after + speed - before

    # --- reservations (the starvation guard) ----------------------------------------------
    @property
    def reserved_for(self) -> str | None:
        """The starving job that GPUs are reserved for after the last pass, if any."""
        return self.reservation.job

    def _pick_reservation(self, st: ClusterState, job: JobRequest) -> list[int]:
        _, mem_need, core_need, _ = self._needs(st, job)
        allowed = self.allowed_gpus(st, job)
        return soonest_free(st, job, self.policy, self.settings, (mem_need, core_need), allowed)

    # --- the queue ------------------------------------------------------------------------
    def schedule(
        self,
        state: ClusterState,
        queue: JobQueue | Iterable[JobRequest],
        now: float | None = None,
        explain: bool = True,
        only: Collection[str] | None = None,
        limit: int | None = None,
    ) -> ScheduleResult:
        """One scheduling pass over ``queue``; placements are applied to ``state``.

        A :class:`JobQueue` made by :meth:`new_queue` loses the jobs that were placed; any
        other iterable is ordered by the policy first. ``now`` (seconds, same clock as the
        jobs' ``submit_time``) enables the starvation guard. With ``explain=False`` refusals
        carry no reason (the simulator's fast path). ``only`` restricts the pass to those job
        names, for a caller that knows the others already failed against an unchanged state
        (a reservation made by an earlier pass still binds them). ``limit``: at most that many
        placements; the jobs the pass did not reach are in neither list of the result.
        """
        q = queue if isinstance(queue, JobQueue) else self.new_queue(state, queue)
        return QueuePass(self, state, q, now, explain).run(only, limit)
