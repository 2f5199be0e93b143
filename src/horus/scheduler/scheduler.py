"""The scheduler: turns a queue of jobs into placements, or into reasons a person can read.

One code path for every policy: predict (cached per job kind and GPU model), filter GPUs on
health, model, memory, core and job slots, let the policy refine and score, then place the
gang all-or-nothing. When a job does not fit, the filters are replayed to find the first one
that rules it out, and the refusal says which, with numbers and the best candidate GPU —
"pods pending with no reason" is a top complaint about existing GPU schedulers.

Queue discipline (:meth:`Scheduler.schedule`): jobs are tried in the policy's order
(priority, then FIFO). After the first job that does not fit, at most ``backfill_depth`` more
are tried (backfill). If the first blocked job has waited longer than ``starvation_seconds``,
it gets a reservation (:meth:`Scheduler._reserve`): the GPUs it will start on are held for it
and backfill only uses GPUs that cannot delay it — waiting is bounded, small jobs cannot
starve a large one, and the rest of the cluster keeps working meanwhile.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.common.errors import HorusError, ValidationError
from horus.predictor.interface import Predictor, ResourcePrediction
from horus.scheduler.policies import PairSpeed, Policy, ScoreContext, get_policy
from horus.scheduler.queue import JobQueue
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray
from horus.scheduler.types import (
    GpuShare,
    JobRequest,
    Placement,
    Refusal,
    ReplicaPlacement,
    ScheduleResult,
    SchedulerSettings,
)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


@dataclass
class _Attempt:
    placement: Placement | None
    refusal: Refusal | None


def published_pair_error(predictor: Predictor | None) -> float:
    """The held-out pair-speed MAE in the predictor's model card (0 when it publishes none)."""
    card = getattr(predictor, "card", None)
    metrics = card.get("metrics_heldout_family", {}) if isinstance(card, Mapping) else {}
    mae = metrics.get("pair_heldout_mae", 0.0) if isinstance(metrics, Mapping) else 0.0
    return float(mae) if isinstance(mae, int | float) and mae > 0 else 0.0


class Scheduler:
    """Places jobs on a :class:`ClusterState` with one policy.

    ``predictor`` supplies resource predictions (unless a job carries its own) and, for the
    interference-aware policies, pairwise speeds. ``pair_speed`` overrides the predictor's
    pair speeds — the simulator passes the measured tables for ``oracle``. ``pair_error`` is
    the typical error of one pair speed (see :attr:`pair_error`); a caller whose override
    only wraps the predictor (the operator) passes :func:`published_pair_error` so the
    uncertainty margin is the same as without an override.
    """

    def __init__(
        self,
        policy: str | Policy = "horus",
        predictor: Predictor | None = None,
        settings: SchedulerSettings | None = None,
        pair_speed: PairSpeed | None = None,
        pair_error: float | None = None,
    ) -> None:
        if pair_error is not None and not (math.isfinite(pair_error) and pair_error >= 0):
            raise ValidationError(f"pair_error must be a finite number >= 0, got {pair_error}")
        self._pair_error = pair_error
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.predictor = predictor
        self.settings = settings or SchedulerSettings()
        self._pair_override = pair_speed
        self._pred_cache: dict[tuple[str, str], ResourcePrediction] = {}
        self._pair_cache: dict[tuple[str, str, str], float] = {}
        #: Measured pair speeds (:meth:`observe_pair`); they win over any other source.
        self._observed: dict[tuple[str, str, str], float] = {}
        #: The predicted speed of each measured pair, at the time it was first measured.
        self._observed_predicted: dict[tuple[str, str, str], float] = {}
        #: Caches of :meth:`model_pair_error` and of the margins made from it (None: stale).
        self._model_error: dict[str, float] | None = None
        self._model_margin: dict[str, float] | None = None
        self._profiles: dict[str, JobRequest] = {}
        self._queue_model: str | None = None
        #: (job, state token, GPUs) reserved for a starving job; see :meth:`_reserve`.
        self._reservation: tuple[str, int, list[int]] | None = None
        self._last_state: ClusterState | None = None  # to find profiles of residents
        self._needs_cache: dict[
            tuple[object, ...], tuple[list[ResourcePrediction], IntArray, IntArray, FloatArray]
        ] = {}

    @property
    def pair_error(self) -> float:
        """Typical error of one pair speed: as given to the constructor; else 0 for an
        explicit source (``oracle``'s measured tables), else the predictor's published one."""
        if self._pair_error is not None:
            return self._pair_error
        if self._pair_override is not None:
            return 0.0
        return published_pair_error(self.predictor)

    # --- predictions ----------------------------------------------------------------------
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

    def pair_speed(self, kind: str, other: str, gpu_model: str) -> float:
        """Predicted normalised speed of ``kind`` next to ``other`` (cached)."""
        key = (kind, other, gpu_model)
        hit = self._pair_cache.get(key)
        if hit is None:
            if self._pair_override is not None:
                hit = self._pair_override(kind, other, gpu_model)
            else:
                if self.predictor is None:
                    raise ValidationError("policy needs pair speeds but there is no predictor")
                a, b = self._profiles.get(kind), self._profiles.get(other)
                if (a is None or b is None) and self._last_state is not None:
                    # jobs recorded with ClusterState.add_job never passed through here
                    for placed in self._last_state.jobs.values():
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
                    pairs = [
                        (self._profiles[x].profile, self._profiles[y].profile) for x, y in todo
                    ]
                    for (x, y), v in zip(todo, batch(pairs, gpu_model), strict=True):
                        self._pair_cache[(x, y, gpu_model)] = float(min(1.0, max(0.0, v)))
                    cached = self._pair_cache.get(key)
                    if cached is not None:
                        return cached
                hit = self.predictor.pair_speed(a.profile, b.profile, gpu_model)
            hit = float(min(1.0, max(0.0, hit)))
            self._pair_cache[key] = hit
        return hit

    def observe_pair(self, kind: str, other: str, gpu_model: str, speed: float) -> None:
        """Record a *measured* normalised speed of ``kind`` while it shares a ``gpu_model``
        with ``other`` (what a node agent sees where Horus runs). From then on it replaces
        the predicted speed of that pair, and the pair gets no uncertainty margin. How far
        it is from the prediction also teaches the margin of the pairs on that GPU model
        that are still unmeasured (:meth:`model_pair_error`)."""
        if not (math.isfinite(speed) and 0.0 < speed <= 1.0):
            raise ValidationError(
                f"observed pair speed of {kind!r} next to {other!r} on {gpu_model!r} must be "
                f"in (0, 1], got {speed}"
            )
        key = (kind, other, gpu_model)
        if self._observed.get(key) == speed:
            return
        if key not in self._observed:
            # What was predicted before the measurement replaces it (none for a kind whose
            # profile is not known: no error sample).
            with contextlib.suppress(HorusError):
                self._observed_predicted[key] = self.pair_speed(kind, other, gpu_model)
        self._observed[key] = speed
        self._pair_cache[key] = speed
        self._model_error = self._model_margin = None
        self.policy.forget_pairs()

    def model_pair_error(self) -> dict[str, float]:
        """Per GPU model, the pair error learned from measured pairs (:meth:`observe_pair`):
        the mean |measured − predicted| over that model's measured pairs, shrunk towards
        :attr:`pair_error` as if that were ``settings.pair_error_prior_pairs`` more pairs.
        Models without a measured pair are absent (they keep :attr:`pair_error`)."""
        if self._model_error is None:
            sums: dict[str, list[float]] = {}
            for key, predicted in self._observed_predicted.items():
                acc = sums.setdefault(key[2], [0.0, 0.0])
                acc[0] += abs(self._observed[key] - predicted)
                acc[1] += 1
            prior, k = self.pair_error, self.settings.pair_error_prior_pairs
            self._model_error = {m: (k * prior + e) / (k + n) for m, (e, n) in sums.items()}
        return self._model_error

    def _model_margins(self) -> dict[str, float]:
        """:meth:`model_pair_error` × ``uncertainty_z``: the per-model margins of a decision."""
        if self._model_margin is None:
            z = self.settings.uncertainty_z
            self._model_margin = {m: z * e for m, e in self.model_pair_error().items()}
        return self._model_margin

    @property
    def observed_pairs(self) -> Mapping[tuple[str, str, str], float]:
        """Every measured pair speed so far, by (kind, other, GPU model)."""
        return self._observed

    def remember(self, job: JobRequest) -> None:
        """Record ``job``'s profile under its kind (needed to ask the predictor about pairs)."""
        self._profiles.setdefault(job.kind, job)

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
        attempt = self._attempt(state, job, explain=True)
        if attempt.placement is not None:
            state.apply(job, attempt.placement)
            return attempt.placement
        assert attempt.refusal is not None
        return attempt.refusal

    def check_possible(self, state: ClusterState, job: JobRequest) -> str | None:
        """Why ``job`` can never run on this cluster (even empty), or None when it could."""
        ok_model = self._model_mask(state, job)
        usable = state.healthy & ok_model
        if job.gpu_count > int(usable.sum()):
            where = f" of model {', '.join(job.gpu_models)}" if job.gpu_models else ""
            if job.nodes is not None:
                where += " on the nodes its pod template allows"
            return (
                f"needs {job.gpu_count} GPUs ({job.replicas} replica(s) × "
                f"{job.gpus_per_replica}) but the cluster has {int(usable.sum())} healthy GPUs{where}"
            )
        if job.gpus_per_replica > 1:
            per_node = np.bincount(state.node_of[usable], minlength=len(state.node_names))
            if int(per_node.max(initial=0)) < job.gpus_per_replica:
                return (
                    f"needs {job.gpus_per_replica} GPUs on one node per replica but no node has "
                    f"more than {int(per_node.max(initial=0))} healthy GPUs"
                )
        for m, model in enumerate(state.models):
            if not np.any(usable & (state.model_of == m)):
                continue
            pred = self.predict(job, model)
            mem = job.memory_mib or math.ceil(pred.memory_mib_upper)
            cap = int(state.mem_total[usable & (state.model_of == m)].max())
            if mem + self.policy.memory_headroom_mib <= cap:
                return None
        return (
            f"needs {_gib(job.memory_mib or self.predict(job, state.models[0]).memory_mib_upper)} "
            f"per GPU but the largest GPU has {_gib(int(state.mem_total.max(initial=0)))}"
        )

    def _model_mask(self, state: ClusterState, job: JobRequest) -> BoolArray:
        """The GPUs ``job`` may use at all: of its GPU models, on its allowed nodes."""
        ok_gpu = np.ones(state.gpu_count, dtype=np.bool_)
        if job.gpu_models:
            ok = [m in job.gpu_models for m in state.models]
            ok_gpu &= np.array(ok, dtype=np.bool_)[state.model_of]
        if job.nodes is not None:
            allowed = np.array([n in job.nodes for n in state.node_names], dtype=np.bool_)
            ok_gpu &= allowed[state.node_of] if len(allowed) else ok_gpu
        return ok_gpu

    def _needs(
        self, st: ClusterState, job: JobRequest
    ) -> tuple[list[ResourcePrediction], IntArray, IntArray, FloatArray]:
        """Per-GPU memory, core and utilisation of ``job`` (cached: they depend on no state)."""
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

    def _attempt(
        self,
        state: ClusterState,
        job: JobRequest,
        explain: bool,
        exclude: BoolArray | None = None,
    ) -> _Attempt:
        """Try ``job`` on every GPU (``exclude``: GPUs it may not use, e.g. a reservation)."""
        st, pol, cfg = state, self.policy, self.settings
        self.remember(job)
        self._last_state = st
        preds, mem_need, core_need, util_need = self._needs(st, job)
        max_jobs = pol.max_jobs_per_gpu(cfg)

        restricted = job.gpu_models or job.nodes is not None
        usable = st.healthy & self._model_mask(st, job) if restricted else st.healthy
        if exclude is not None:
            usable = usable & ~exclude
        mem_ok = st.mem_used + mem_need + pol.memory_headroom_mib <= st.mem_total
        core_ok = st.core_used + core_need <= GPU_CORE_UNITS_PER_GPU
        slots_ok = st.njobs < max_jobs
        mask = usable & mem_ok & core_ok & slots_ok
        ctx = ScoreContext(
            st,
            job,
            mem_need,
            core_need,
            util_need,
            cfg,
            self.pair_speed,
            pair_margin=cfg.uncertainty_z * self.pair_error,
            observed=self._observed.keys(),
            model_margin=self._model_margins(),
        )
        need = job.gpu_count
        if int(np.count_nonzero(mask)) >= need:
            mask = pol.refine(ctx, mask)
        if int(np.count_nonzero(mask)) >= need:
            score = pol.score(ctx, mask)
            mask = mask & np.isfinite(score)
            chosen = self._choose(st, job, mask, score) if np.count_nonzero(mask) >= need else None
            if chosen is not None:
                return _Attempt(self._placement(st, job, chosen, ctx, preds), None)
        if not explain:
            return _Attempt(None, Refusal(job.name, "", "unplaced"))
        return _Attempt(None, self._explain(st, job, ctx, usable, mem_ok, core_ok, slots_ok, mask))

    def _choose(
        self, st: ClusterState, job: JobRequest, mask: BoolArray, score: FloatArray
    ) -> list[list[int]] | None:
        """GPUs per replica (all-or-nothing), best score first; None when the gang won't fit."""
        k, reps = job.gpus_per_replica, job.replicas
        idx = np.nonzero(mask)[0]
        if k == 1:
            if len(idx) < reps:
                return None
            s = score[idx]
            if reps == 1:
                return [[int(idx[int(np.argmax(s))])]]  # first (lowest GPU) among ties
            # stable: best score first, lowest GPU number among ties
            order = np.lexsort((idx, -s))[:reps]
            return [[int(idx[i])] for i in order]
        per_node = np.bincount(st.node_of[idx], minlength=len(st.node_names))
        if int(np.count_nonzero(per_node >= k)) < reps:
            return None  # fast refusal: not enough nodes with k suitable GPUs
        avail = mask.copy()
        out: list[list[int]] = []
        for _ in range(reps):
            idx = np.nonzero(avail)[0]
            if len(idx) < k:
                return None
            nodes = st.node_of[idx]
            order = np.lexsort((idx, -score[idx], nodes))
            idx, nodes = idx[order], nodes[order]
            starts = np.r_[0, np.nonzero(np.diff(nodes))[0] + 1]
            counts = np.diff(np.r_[starts, len(idx)])
            rank = np.arange(len(idx)) - np.repeat(starts, counts)
            top = rank < k
            node_sum = np.bincount(
                nodes[top], weights=score[idx[top]], minlength=len(st.node_names)
            )
            node_cnt = np.bincount(nodes[top], minlength=len(st.node_names))
            node_sum[node_cnt < k] = -np.inf
            best = int(np.argmax(node_sum))
            if not np.isfinite(node_sum[best]):
                return None
            gpus = [int(g) for g in idx[top & (nodes == best)]]
            out.append(gpus)
            avail[gpus] = False
        return out

    def _placement(
        self,
        st: ClusterState,
        job: JobRequest,
        chosen: list[list[int]],
        ctx: ScoreContext,
        preds: list[ResourcePrediction],
    ) -> Placement:
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
                s, gn = self._predicted_effect(st, job, g)
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

    def _predicted_effect(self, st: ClusterState, job: JobRequest, g: int) -> tuple[float, float]:
        """(new job's predicted speed, summed-speed gain) on GPU ``g``; (1, 1) when alone."""
        sig = st.signatures[int(st.sig_id[g])]
        if not sig:
            return 1.0, 1.0
        if self._pair_override is None and self.predictor is None:
            return math.nan, math.nan
        model = st.gpu_model[g]
        speed = 1.0
        for o in sig:
            speed *= self.pair_speed(job.kind, o, model)
        before = after = 0.0
        for i, r in enumerate(sig):
            s = 1.0
            for j, o in enumerate(sig):
                if i != j:
                    s *= self.pair_speed(r, o, model)
            before += s
            after += s * self.pair_speed(r, job.kind, model)
        return speed, after + speed - before

    # --- reasons --------------------------------------------------------------------------
    def _explain(
        self,
        st: ClusterState,
        job: JobRequest,
        ctx: ScoreContext,
        usable: BoolArray,
        mem_ok: BoolArray,
        core_ok: BoolArray,
        slots_ok: BoolArray,
        final: BoolArray,
    ) -> Refusal:
        need = job.gpu_count
        n_usable = int(np.count_nonzero(usable))
        why = self.check_possible(st, job)
        if why is not None:
            return Refusal(job.name, why, "impossible")
        if need > n_usable:
            return Refusal(
                job.name,
                f"needs {need} GPUs but only {n_usable} are healthy right now",
                "impossible",
            )
        plural = f"{need} GPUs" if need > 1 else "a GPU"
        if self.policy.whole_gpu:
            idle = int(np.count_nonzero(usable & (st.njobs == 0)))
            return Refusal(
                job.name,
                f"no idle GPU for {plural}: {idle} of {n_usable} healthy GPUs are idle "
                f"(policy {self.policy.name} runs one job per GPU)",
                "busy",
            )
        stage = usable & mem_ok
        if int(np.count_nonzero(stage)) < need:
            free = np.where(
                usable, st.mem_total - st.mem_used - self.policy.memory_headroom_mib, -1
            )
            best = int(np.argmax(free))
            want = int(ctx.mem_need[best])
            extra = (
                f" (+{self.policy.memory_headroom_mib} MiB headroom)"
                if self.policy.memory_headroom_mib
                else ""
            )
            head = (
                f"no GPU with {_gib(want)}{extra} free"
                if need == 1
                else f"only {int(np.count_nonzero(stage))} GPUs have {_gib(want)}{extra} free, needs {need}"
            )
            return Refusal(
                job.name,
                f"{head}; best candidate {st.label(best)} has {_gib(max(0, int(free[best])))}",
                "memory",
            )
        stage2 = stage & slots_ok
        if int(np.count_nonzero(stage2)) < need:
            return Refusal(
                job.name,
                f"every GPU with {_gib(int(ctx.mem_need.max()))} free already runs "
                f"{self.policy.max_jobs_per_gpu(self.settings)} jobs (the most per GPU)",
                "slots",
            )
        stage3 = stage2 & core_ok
        if int(np.count_nonzero(stage3)) < need:
            free = np.where(stage2, GPU_CORE_UNITS_PER_GPU - st.core_used, -1)
            best = int(np.argmax(free))
            return Refusal(
                job.name,
                f"no GPU with {int(ctx.core_need[best])}% core free for {plural} among those with "
                f"enough memory; best candidate {st.label(best)} has {int(free[best])}% free",
                "core",
            )
        n_ok = int(np.count_nonzero(final))
        if n_ok < need and self.policy.name in ("horus", "oracle"):
            if ctx.gains is None:  # not scored: the utilisation cap left too few GPUs
                util = float(ctx.util_need.max())
                return Refusal(
                    job.name,
                    f"every GPU with room would exceed the summed-utilisation cap of "
                    f"{self.settings.util_cap:.0f}% (job predicted at {util:.0f}%)",
                    "core",
                )
            turned_down = self.policy.turned_down(ctx)
            if turned_down is not None:
                gpu, gain, worst = turned_down  # the best GPU the sharing rule refused
                sig = st.signatures[int(st.sig_id[gpu])]
                margin = ctx.signature_margin(job.kind, st.gpu_model[gpu], sig)
                head = (
                    "sharing would not pay"
                    if n_ok == 0
                    else f"needs {plural} but only {n_ok} qualify (idle, or sharing pays "
                    "there); sharing would not pay on the rest"
                )
                return Refusal(
                    job.name,
                    f"{head}: the best candidate {st.label(gpu)} gains "
                    f"{gain:.2f} in summed speed (needs ≥ {self.settings.min_gain:.2f}) "
                    f"and its slowest job would run at {worst:.2f}× "
                    f"(needs ≥ {self.settings.min_speed:.2f}×)"
                    + (
                        f", even allowing ±{margin:.2f} predictor error per pair"
                        if margin > 0
                        else ""
                    )
                    + "; waiting for a better GPU",
                    "interference",
                )
        if job.gpus_per_replica > 1 or job.replicas > 1:
            per_node = np.bincount(st.node_of[final], minlength=len(st.node_names))
            best = int(np.argmax(per_node))
            return Refusal(
                job.name,
                f"gang of {job.replicas} replica(s) × {job.gpus_per_replica} GPU(s) on one node "
                f"each does not fit: {int(np.count_nonzero(final))} suitable GPUs, at most "
                f"{int(per_node[best])} on one node ({st.node_names[best]})",
                "gang",
            )
        return Refusal(
            job.name, f"no suitable GPU for {plural} under policy {self.policy.name}", "core"
        )

    # --- reservations (the starvation guard) ----------------------------------------------
    @property
    def reserved_for(self) -> str | None:
        """The starving job that GPUs are reserved for after the last pass, if any."""
        return self._reservation[0] if self._reservation is not None else None

    def _reserve(self, st: ClusterState, job: JobRequest) -> BoolArray:
        """GPUs backfill may not touch while ``job`` (starving, blocked) waits.

        The reservation is the gang's GPUs that will be free soonest as far as the scheduler
        can tell without runtime estimates: GPUs that already fit the job cost 0, others the
        number of jobs that must leave them; per replica the node whose ``gpus_per_replica``
        cheapest GPUs cost least. It is kept across passes while the same job stays blocked
        (so its residents only ever leave). Backfill may use neither the reserved GPUs nor the
        other GPUs of any job running on them (sharing those would slow a job the reserved
        GPUs wait for), so backfill cannot delay the reserved job; it still starts anywhere
        earlier if it fits, since it is tried before any backfill in every pass.
        """
        keep = self._reservation
        gpus: list[int] | None = None
        if keep is not None and keep[0] == job.name and keep[1] == st.token:
            gpus = [g for g in keep[2] if st.healthy[g]]
            if len(gpus) != job.gpu_count:
                gpus = None
        if gpus is None:
            gpus = self._pick_reservation(st, job)
            self._reservation = (job.name, st.token, gpus)
        protect = np.zeros(st.gpu_count, dtype=np.bool_)
        protect[gpus] = True
        for g in gpus:
            for r in st.residents[g]:
                placed = st.jobs.get(r.job)
                if placed is not None:
                    protect[placed.gpus] = True
        return protect

    def _pick_reservation(self, st: ClusterState, job: JobRequest) -> list[int]:
        pol, cfg = self.policy, self.settings
        _, mem_need, core_need, _ = self._needs(st, job)
        usable = st.healthy & self._model_mask(st, job)
        usable &= mem_need + pol.memory_headroom_mib <= st.mem_total  # could ever host it
        fits = (
            (st.mem_used + mem_need + pol.memory_headroom_mib <= st.mem_total)
            & (st.core_used + core_need <= GPU_CORE_UNITS_PER_GPU)
            & (st.njobs < pol.max_jobs_per_gpu(cfg))
        )
        if pol.whole_gpu:
            fits &= st.njobs == 0
        cost = np.where(fits, 0.0, st.njobs.astype(np.float64))
        cost = np.where(usable, cost, np.inf)
        k, reps = job.gpus_per_replica, job.replicas
        if k == 1:
            order = np.lexsort((np.arange(st.gpu_count), cost))[:reps]
            return [int(g) for g in order if np.isfinite(cost[g])]
        out: list[int] = []
        taken = np.zeros(len(st.node_names), dtype=np.bool_)
        for _ in range(reps):
            best_node, best_cost, best_gpus = -1, np.inf, np.empty(0, dtype=np.int64)
            for n in range(len(st.node_names)):
                if taken[n]:
                    continue
                idx = np.nonzero(st.node_of == n)[0]
                c = cost[idx]
                top = idx[np.argsort(c, kind="stable")[:k]]
                total = float(cost[top].sum()) if len(top) == k else np.inf
                if total < best_cost:
                    best_node, best_cost, best_gpus = n, total, top
            if best_node < 0:
                break
            taken[best_node] = True
            out.extend(int(g) for g in best_gpus)
        return out

    # --- the queue ------------------------------------------------------------------------
    def schedule(
        self,
        state: ClusterState,
        queue: JobQueue | Iterable[JobRequest],
        now: float | None = None,
        explain: bool = True,
        only: Collection[str] | None = None,
    ) -> ScheduleResult:
        """One scheduling pass over ``queue``; placements are applied to ``state``.

        A :class:`JobQueue` made by :meth:`new_queue` loses the jobs that were placed; any
        other iterable is ordered by the policy first. ``now`` (seconds, same clock as the
        jobs' ``submit_time``) enables the starvation guard. With ``explain=False`` refusals
        carry no reason (the simulator's fast path). ``only`` restricts the pass to those job
        names, for a caller that knows the others already failed against an unchanged state
        (a reservation made by an earlier pass still binds them).
        """
        q = queue if isinstance(queue, JobQueue) else self.new_queue(state, queue)
        depth = (
            self.policy.lookahead
            if self.policy.lookahead is not None
            else self.settings.backfill_depth
        )
        placed: list[Placement] = []
        refused: list[Refusal] = []
        failed_shapes: dict[tuple[object, ...], Refusal] = {}
        blocked = 0
        barrier: JobRequest | None = None
        protect: BoolArray | None = None  # GPUs backfill may not touch (the reservation)
        jobs: Iterable[JobRequest] = q
        if only is not None:
            jobs = sorted((j for j in q.jobs(only)), key=q.key_of)
            held = self._reservation
            if held is not None and held[0] not in only:
                waiting = q.jobs([held[0]])
                if waiting:  # a reservation from an earlier pass still binds these jobs
                    barrier = waiting[0]
                    protect = self._reserve(state, barrier)
        for pos, job in enumerate(jobs):
            if job.name in state.jobs:
                # Already holds shares (e.g. its pods exist but the caller's record lost the
                # placement): placing it again would count it twice. Not a blocker for others.
                refused.append(
                    Refusal(
                        job.name,
                        f"job {job.name} already holds GPU shares in the cluster; it is not "
                        "placed a second time until those shares are released",
                        "resident",
                    )
                )
                continue
            if blocked > depth:
                if not explain:
                    break
                refused.append(
                    Refusal(
                        job.name,
                        f"waiting in queue at position {pos + 1}; this pass tried "
                        f"{depth} jobs behind the first blocked one",
                        "queued",
                    )
                )
                continue
            shape = (
                job.kind,
                job.replicas,
                job.gpus_per_replica,
                job.core_percent,
                job.memory_mib,
                job.gpu_models,
                job.prediction,
            )
            if protect is not None and not explain:
                # cheap exit: no unreserved GPU has a free job slot, so no backfill can fit
                slots = self.policy.max_jobs_per_gpu(self.settings)
                if not np.any(state.healthy & ~protect & (state.njobs < slots)):
                    break
            hit = failed_shapes.get(shape)
            if hit is not None:
                refused.append(Refusal(job.name, hit.reason, hit.code))
                blocked += 1
                continue
            attempt = self._attempt(state, job, explain, exclude=protect)
            if attempt.placement is not None:
                state.apply(job, attempt.placement)
                q.remove(job.name)
                placed.append(attempt.placement)
                continue
            assert attempt.refusal is not None
            refusal = attempt.refusal
            if barrier is not None and explain:
                free = self._attempt(state, job, explain=False)
                if free.placement is not None:
                    refusal = Refusal(
                        job.name,
                        f"held back: the GPUs it could use are reserved for the older job "
                        f"{barrier.name}, which has waited longer than "
                        f"{self.settings.starvation_seconds:.0f} s and goes first",
                        "held",
                    )
            failed_shapes[shape] = refusal
            refused.append(refusal)
            blocked += 1
            if (
                blocked == 1
                and now is not None
                and now - job.submit_time > self.settings.starvation_seconds
                and refusal.code != "impossible"
            ):
                barrier = job
                protect = self._reserve(state, job)
        if barrier is None:
            self._reservation = None
        return ScheduleResult(tuple(placed), tuple(refused))
