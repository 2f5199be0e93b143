"""GPU scoring policies behind one interface, selectable by name.

A policy answers three questions for a job and the vector of all GPUs: how big a share the
job gets (core %, memory MiB), which GPUs it may go on (a boolean mask on top of the common
memory/core/health filter), and how good each allowed GPU is (a score; higher is better).
The scheduler does the rest (gangs, queue, reasons), identically for every policy, so a
comparison between policies compares only these decisions.

* ``exclusive`` — one job per GPU, first fit: what a plain ``nvidia.com/gpu: 1`` cluster does.
* ``binpack`` / ``spread`` — HAMi-style scores on core and memory usage after placement
  (HAMi ``pkg/scheduler/policy``: binpack prefers the fullest GPU, spread the emptiest).
  Auto-sized jobs request their predicted upper-quantile utilisation and memory.
* ``horus-original`` — the thesis prototype's cost, reimplemented faithfully:
  G. Yeung, D. Borowiec, R. Yang, A. Friday, R. Harper, P. Garraghan, "Horus: Interference-
  Aware and Prediction-Based Scheduling in Deep Learning Systems", IEEE TPDS 33(1), 2022, and
  G. Yeung's PhD thesis (Lancaster University, 2022); prototype source
  github.com/matthewygf/GPUSchedule, ``core/scheduling/horus.py`` (``horus_score``: cost =
  1.3·mem_cost + util_cost/100 + running_tasks, util_cost = |cur + pred − 100|, ×1.6 when
  the sum exceeds 100) and ``infra/device.py`` (``can_fit``: at most 3 tasks per GPU, 500 MiB
  memory headroom). Its queue is a min-heap on predicted utilisation with look-ahead 5.
* ``horus`` — ours: the GPU that maximises predicted cluster throughput, i.e. the rise in the
  sum of normalised speeds of the new job and the jobs it joins (pairwise interference model;
  for three or more jobs the pairwise speeds multiply), subject to memory fit at the upper
  quantile, a cap on summed predicted utilisation and a floor on every job's speed. An idle
  GPU gains 1.0 and wins whenever there is one; otherwise the alternative to a share is
  waiting (gain 0), so a share is taken unless even its optimistic bound — the predicted
  pair speeds plus ``uncertainty_z`` × the predictor's own held-out pair error — does not
  beat ``min_gain``/``min_speed``.
* ``oracle`` — ``horus`` driven by the measured pair tables instead of the predictor (the
  simulator passes a ground-truth pair-speed source): an upper reference, not deployable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.common.errors import ConfigError
from horus.predictor.interface import ResourcePrediction
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray
from horus.scheduler.types import JobRequest, SchedulerSettings

#: ``speed(kind_a, kind_b, gpu_model)``: normalised speed of a job of ``kind_a`` sharing a GPU
#: with one of ``kind_b``.
PairSpeed = Callable[[str, str, str], float]


@dataclass
class ScoreContext:
    """Everything a policy may look at to score one job on every GPU."""

    state: ClusterState
    job: JobRequest
    mem_need: IntArray  # per GPU: memory MiB the job would get there
    core_need: IntArray  # per GPU: core % the job would get there
    util_need: FloatArray  # per GPU: predicted mean utilisation of the job there
    settings: SchedulerSettings
    pair_speed: PairSpeed
    #: Error of one pair speed from ``pair_speed`` × ``settings.uncertainty_z``.
    pair_margin: float = 0.0
    #: Pairs whose speed was measured (``Scheduler.observe_pair``): (kind, other, GPU model)
    #: → the measurement's own error. Their margin is ``observed_z`` × that error; every
    #: other pair keeps its GPU model's margin.
    observed: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    #: Per GPU model, a margin learned from measured pairs (``Scheduler.model_pair_error``
    #: × ``uncertainty_z``); models not in it keep ``pair_margin``.
    model_margin: Mapping[str, float] = field(default_factory=dict)
    #: What a measured pair's error is multiplied by to make its margin (``uncertainty_z``).
    observed_z: float = 0.0

    def signature_margin(self, kind: str, model: str, sig: tuple[str, ...]) -> float:
        """Margin of one pair term when ``kind`` joins a GPU running ``sig``: the mean over
        the pair terms the share adds (its speed next to each job, each job's next to it),
        each measured one with its measurement's own margin."""
        margin = self.model_margin.get(model, self.pair_margin)
        return term_margin(margin, self.observed, kind, model, sig, self.observed_z)

    #: The job's largest memory need (MiB) and predicted utilisation over every GPU of the
    #: cluster, where the arrays above cover only some of its GPUs (``Scheduler.evaluate``
    #: scores the candidate nodes' alone); None: they cover every GPU. What a refusal
    #: sentence quotes, so it reads the same either way.
    cluster_need: tuple[int, float] | None = None

    def largest_mem_need(self) -> int:
        """The memory the job needs on the GPU where it needs most, cluster-wide."""
        return self.cluster_need[0] if self.cluster_need is not None else int(self.mem_need.max())

    def largest_util_need(self) -> float:
        """The job's predicted utilisation on the GPU where it is highest, cluster-wide."""
        return (
            self.cluster_need[1] if self.cluster_need is not None else float(self.util_need.max())
        )

    # Filled by the interference-aware policies' ``score``, read only to explain a refusal:
    #: predicted gain per GPU, −inf off the scored mask;
    gains: FloatArray | None = None
    #: the gain where the sharing rule admits the GPU, else −inf.
    admissible: FloatArray | None = None


def unmeasured_fraction(
    observed: Mapping[tuple[str, str, str], float] | AbstractSet[tuple[str, str, str]],
    kind: str,
    model: str,
    sig: tuple[str, ...],
) -> float:
    """The fraction of the pair terms ``kind`` joining ``sig`` adds (its speed next to each
    job, each job's next to it) that are not measured (``observed``)."""
    if not observed or not sig:
        return 1.0
    unmeasured = sum(
        ((kind, r, model) not in observed) + ((r, kind, model) not in observed) for r in sig
    )
    return unmeasured / (2 * len(sig))


def measured_error(
    observed: Mapping[tuple[str, str, str], float], kind: str, model: str, sig: tuple[str, ...]
) -> float:
    """The errors of the measured pair terms that ``kind`` joining ``sig`` adds, summed and
    divided by all its terms (unmeasured ones count 0): the measured part of the mean
    margin before ``uncertainty_z``."""
    if not observed or not sig:
        return 0.0
    total = 0.0
    for r in sig:
        total += observed.get((kind, r, model), 0.0) + observed.get((r, kind, model), 0.0)
    return total / (2 * len(sig))


def term_margin(
    margin: float,
    observed: Mapping[tuple[str, str, str], float],
    kind: str,
    model: str,
    sig: tuple[str, ...],
    observed_z: float = 0.0,
) -> float:
    """The mean margin of the pair terms that ``kind`` joining ``sig`` adds: ``margin`` for a
    predicted one, ``observed_z`` × its measurement's own error for a measured one
    (``observed``: measured pair → error)."""
    frac = unmeasured_fraction(observed, kind, model, sig)
    return margin * frac + observed_z * measured_error(observed, kind, model, sig)


class Policy:
    """Base policy: first fit on the common filter. Subclasses override the hooks.

    ``refine`` and ``score`` judge each GPU by itself: a GPU's verdict and score may depend
    on the state and the job, never on which other GPUs are in the mask. That is what lets
    ``Scheduler.evaluate`` score every GPU once and answer per node.

    Where ``per_gpu`` holds they go further: a GPU's verdict and score read only that GPU's
    own figures, the state's signatures and the job (its number only through its order among
    its node's GPUs) — no other GPU of the state, no cluster-wide sum, maximum or rank. Then
    ``Scheduler.evaluate`` scores only the candidate nodes' GPUs (a
    :class:`~horus.scheduler.state.NodeSubset`), with the same answers. A policy with a
    cluster-wide term sets it False and is scored on every GPU.
    """

    name = "base"
    #: Jobs that may share one GPU; ``None`` means ``settings.max_jobs_per_gpu``.
    max_jobs: int | None = None
    #: Memory that must stay free on a GPU after placement (MiB).
    memory_headroom_mib = 0
    #: Backfill look-ahead; ``None`` means ``settings.backfill_depth``.
    lookahead: int | None = None
    #: The job gets the whole GPU (core 100 %, all memory).
    whole_gpu = False
    #: Scores GPUs by predicted interference (pair speeds), under a cap on the summed
    #: predicted utilisation (``refine``) and a sharing rule (``turned_down``); a refusal
    #: then names the cap or the rule when they, not room, kept the job out.
    interference_aware = False
    #: ``refine`` and ``score`` read each GPU's own figures only (see the class docstring).
    per_gpu = True

    def max_jobs_per_gpu(self, settings: SchedulerSettings) -> int:
        return settings.max_jobs_per_gpu if self.max_jobs is None else self.max_jobs

    def core_share(
        self, job: JobRequest, pred: ResourcePrediction, settings: SchedulerSettings
    ) -> int:
        """Core % an auto-sized job gets (explicit requests are honoured by the caller)."""
        return _clamp_core(pred.util_upper, settings)

    def memory_share(self, job: JobRequest, pred: ResourcePrediction) -> int:
        """Memory MiB an auto-sized job gets: the upper quantile of its prediction."""
        return max(1, math.ceil(pred.memory_mib_upper))

    def queue_key(self, job: JobRequest, pred: ResourcePrediction | None) -> tuple[float, ...]:
        """Order of the queue: higher priority first, then FIFO by submit time."""
        return (-job.priority, job.submit_time)

    def refine(self, ctx: ScoreContext, mask: BoolArray) -> BoolArray:
        """Policy-specific filter on top of the common one (default: none)."""
        return mask

    def score(self, ctx: ScoreContext, mask: BoolArray) -> FloatArray:
        """Score of every GPU (only entries where ``mask`` holds matter); default first fit."""
        return -np.arange(ctx.state.gpu_count, dtype=np.float64)

    def turned_down(self, ctx: ScoreContext) -> tuple[int, float, float] | None:
        """The best GPU this policy's sharing rule refused after ``score``, as (GPU, gain,
        slowest speed there); None when it refused none (default: it has no such rule)."""
        refused = self.refused_gains(ctx)
        if refused is None:
            return None
        gpu = int(np.argmax(refused))
        if not np.isfinite(refused[gpu]):
            return None
        return gpu, float(refused[gpu]), self.slowest(ctx, gpu)

    def refused_gains(self, ctx: ScoreContext) -> FloatArray | None:
        """Per GPU, the predicted gain where ``score`` scored it but the sharing rule refused
        it, −inf elsewhere; None without such a rule or before ``score``. What
        :meth:`turned_down` reads, for the whole cluster or one node's GPUs alike."""
        return None

    def slowest(self, ctx: ScoreContext, gpu: int) -> float:
        """The slowest job's speed on ``gpu`` once ``ctx.job`` joined it (a refusal's
        sentence)."""
        return math.nan

    def forget_pairs(self, pair: tuple[str, str] | None = None) -> None:
        """Drop whatever was derived from pair speeds: from the speed of ``pair`` (kind,
        other) when only it changed, else from any."""


def _clamp_core(util: float, settings: SchedulerSettings) -> int:
    return int(min(GPU_CORE_UNITS_PER_GPU, max(settings.min_core_percent, math.ceil(util))))


class Exclusive(Policy):
    """One job per GPU, FIFO, first fit (lowest node, lowest index)."""

    name = "exclusive"
    max_jobs = 1
    whole_gpu = True

    def core_share(
        self, job: JobRequest, pred: ResourcePrediction, settings: SchedulerSettings
    ) -> int:
        return GPU_CORE_UNITS_PER_GPU


class Binpack(Policy):
    """HAMi-style binpack: the GPU whose core and memory use after placement is highest."""

    name = "binpack"
    sign = 1.0

    def score(self, ctx: ScoreContext, mask: BoolArray) -> FloatArray:
        st = ctx.state
        core = (st.core_used + ctx.core_need) / GPU_CORE_UNITS_PER_GPU
        mem = (st.mem_used + ctx.mem_need) / st.mem_total
        return np.asarray(self.sign * (core + mem), dtype=np.float64)


class Spread(Binpack):
    """HAMi-style spread: the GPU whose core and memory use after placement is lowest."""

    name = "spread"
    sign = -1.0


class HorusOriginal(Policy):
    """The thesis prototype's cost (see the module docstring for the source).

    cost = 1.3·mem_cost + util_cost/100 + running_tasks with mem_cost the memory fraction in
    use after placement and util_cost = |current_util + predicted_util − 100|, multiplied by
    1.6 when the sum exceeds 100; the lowest cost wins. ``can_fit``: fewer than 3 tasks and
    more than 500 MiB left. The prototype uses the job's *maximum* predicted utilisation and
    memory (our upper quantile) and the GPU's current utilisation (our summed means). It has
    no core shares; we give each job 33 % so that three always fit the 100 % accounting.
    """

    name = "horus-original"
    max_jobs = 3
    memory_headroom_mib = 500
    lookahead = 5
    UTIL_COST = 1.6
    MEM_COST = 1.3

    def core_share(
        self, job: JobRequest, pred: ResourcePrediction, settings: SchedulerSettings
    ) -> int:
        return GPU_CORE_UNITS_PER_GPU // 3

    def queue_key(self, job: JobRequest, pred: ResourcePrediction | None) -> tuple[float, ...]:
        util = pred.util_upper if pred is not None else 0.0
        return (-job.priority, util, job.submit_time)

    def score(self, ctx: ScoreContext, mask: BoolArray) -> FloatArray:
        st = ctx.state
        mem_cost = (st.mem_used + ctx.mem_need) / st.mem_total
        over = st.util_sum + ctx.util_need - 100.0
        util_cost = np.where(over > 0, np.abs(over) * self.UTIL_COST, np.abs(over))
        cost = mem_cost * self.MEM_COST + util_cost / 100.0 + st.njobs
        return np.asarray(-cost, dtype=np.float64)


class _SigTable:
    """What joining each signature id of one state means for one job kind on one GPU model:
    gain, the new job's speed, the slowest resident's, the number of residents and the
    fraction of pair terms not measured (NaN gain: not computed yet). Margins are applied
    when a GPU is scored, so a measurement only invalidates the signatures it concerns."""

    def __init__(self, kind_sigs: Mapping[str, AbstractSet[int]]) -> None:
        #: The state's index: kind → ids of the signatures holding it.
        self.kind_sigs = kind_sigs
        self.gain: FloatArray = np.empty(0)
        self.speed: FloatArray = np.empty(0)
        self.slowest: FloatArray = np.empty(0)
        self.unmeasured: FloatArray = np.empty(0)
        self.measured_err: FloatArray = np.empty(0)
        self.size: IntArray = np.empty(0, dtype=np.int64)

    def grow(self, n: int) -> None:
        have = len(self.gain)
        if have >= n:
            return
        pad = np.full(n - have, np.nan)
        self.gain = np.concatenate([self.gain, pad])
        self.speed = np.concatenate([self.speed, pad])
        self.slowest = np.concatenate([self.slowest, pad])
        self.unmeasured = np.concatenate([self.unmeasured, pad])
        self.measured_err = np.concatenate([self.measured_err, pad])
        self.size = np.concatenate([self.size, np.zeros(n - have, dtype=np.int64)])

    def forget(self, a: str, b: str) -> None:
        """The speed of ``a`` next to ``b`` changed: the gains of signatures holding both
        (the kind of this table is neither) are stale."""
        both = self.kind_sigs.get(a, set())
        if a != b:
            both = both & self.kind_sigs.get(b, set())
        stale = [sid for sid in both if sid < len(self.gain)]
        if stale:
            self.gain[stale] = np.nan


class Horus(Policy):
    """Maximise the predicted rise in summed normalised speed on the chosen GPU."""

    name = "horus"
    interference_aware = True

    def __init__(self) -> None:
        # (kind, gpu model, signature) -> (gain, new job's speed, slowest resident after)
        self._gain_cache: dict[tuple[str, str, tuple[str, ...]], tuple[float, float, float]] = {}
        # kind -> keys of _gain_cache whose gain reads a pair speed of that kind
        self._gain_keys: dict[str, set[tuple[str, str, tuple[str, ...]]]] = {}
        # (state token, kind, model id) -> what joining each signature id means
        self._tables_cache: dict[tuple[int, str, int], _SigTable] = {}

    def forget_pairs(self, pair: tuple[str, str] | None = None) -> None:
        if pair is None:
            self._gain_cache.clear()
            self._gain_keys.clear()
            self._tables_cache.clear()
            return
        # A gain reads the speed of (a, b) only when both kinds are among the new job's
        # and the GPU's: drop just those (measurements arrive one pair at a time, and
        # recomputing every gain after each was most of an observing simulation's time).
        a, b = pair
        keys = self._gain_keys.get(a, set())
        stale = keys if a == b else keys & self._gain_keys.get(b, set())
        for key in stale:
            self._gain_cache.pop(key, None)
        for tkey, table in list(self._tables_cache.items()):
            if tkey[1] in pair:  # its own pairs: gains and which terms are measured
                del self._tables_cache[tkey]
            else:
                table.forget(a, b)

    def core_share(
        self, job: JobRequest, pred: ResourcePrediction, settings: SchedulerSettings
    ) -> int:
        # Scaled so that "summed core ≤ 100" is exactly "summed predicted util ≤ util_cap".
        return _clamp_core(pred.util_mean * GPU_CORE_UNITS_PER_GPU / settings.util_cap, settings)

    def gain(
        self, kind: str, model: str, sig: tuple[str, ...], pair_speed: PairSpeed
    ) -> tuple[float, float, float]:
        """(gain, new job speed, slowest resident speed after) for joining ``sig``.

        Speeds of three or more co-runners are the product of pairwise speeds (documented
        fallback: only pairs were measured).
        """
        key = (kind, model, sig)
        hit = self._gain_cache.get(key)
        if hit is not None:
            return hit
        before = 0.0
        after = 0.0
        slowest = 1.0
        new_speed = 1.0
        for i, r in enumerate(sig):
            s = 1.0
            for j, o in enumerate(sig):
                if i != j:
                    s *= pair_speed(r, o, model)
            before += s
            s_after = s * pair_speed(r, kind, model)
            after += s_after
            slowest = min(slowest, s_after)
            new_speed *= pair_speed(kind, r, model)
        after += new_speed
        result = (after - before, new_speed, slowest)
        self._gain_cache[key] = result
        for k in {kind, *sig}:
            self._gain_keys.setdefault(k, set()).add(key)
        return result

    def refine(self, ctx: ScoreContext, mask: BoolArray) -> BoolArray:
        st = ctx.state
        return mask & (st.util_sum + ctx.util_need <= ctx.settings.util_cap + 1e-9)

    def _table(self, ctx: ScoreContext, model_id: int, needed: IntArray) -> _SigTable:
        """What joining each signature id means for ``ctx.job``'s kind, filled in for the
        signatures in ``needed`` (those on candidate GPUs), so signatures that once existed
        but no longer occur cost nothing."""
        st = ctx.state
        key = (st.token, ctx.job.kind, model_id)
        table = self._tables_cache.get(key)
        if table is None:
            if len(self._tables_cache) >= 4096:
                # A caller that builds a new state per pass (the operator) leaves tables of
                # old states behind: keep the cache bounded.
                self._tables_cache.clear()
            table = self._tables_cache[key] = _SigTable(st.kind_sigs)
        table.grow(len(st.signatures))
        todo = needed[np.isnan(table.gain[needed])]
        if len(todo):
            kind, model = ctx.job.kind, st.models[model_id]
            for sid in np.unique(todo).tolist():
                sig = st.signatures[sid]
                gain, speed, slowest = self.gain(kind, model, sig, ctx.pair_speed)
                table.gain[sid], table.speed[sid], table.slowest[sid] = gain, speed, slowest
                table.size[sid] = len(sig)
                table.unmeasured[sid] = unmeasured_fraction(ctx.observed, kind, model, sig)
                table.measured_err[sid] = measured_error(ctx.observed, kind, model, sig)
        return table

    def score(self, ctx: ScoreContext, mask: BoolArray) -> FloatArray:
        st, cfg = ctx.state, ctx.settings
        raw_g = np.full(st.gpu_count, np.nan)
        score = np.full(st.gpu_count, -np.inf)
        one_model = len(st.models) == 1
        for m in range(len(st.models)):
            sel = np.ones(st.gpu_count, np.bool_) if one_model else st.model_of == m
            table = self._table(ctx, m, st.sig_id[sel & mask])
            raw_g[sel] = table.gain[st.sig_id[sel]]
            idx = np.nonzero(sel & mask)[0]
            sids = st.sig_id[idx]
            gain, n = table.gain[sids], table.size[sids]
            # Optimistic bounds: every pair speed may be ``margin`` too low (a predicted
            # term its model's margin, a measured one its measurement's own). The new job's
            # speed has len(sig) pair terms, the summed gain twice as many.
            frac = table.unmeasured[sids]
            margin = ctx.model_margin.get(st.models[m], ctx.pair_margin)
            mrg = margin * frac + ctx.observed_z * table.measured_err[sids]
            bad = (n > 0) & (
                (gain + 2 * n * mrg < cfg.min_gain)
                | (table.speed[sids] + n * mrg < cfg.min_speed)
                | (table.slowest[sids] + mrg < cfg.min_speed)
            )
            score[idx] = np.where(bad, -np.inf, gain)
        ctx.gains = np.where(mask, raw_g, -np.inf)  # raw_g is NaN only off the mask
        ctx.admissible = score
        # Among equal gains prefer the fuller GPU (keeps idle GPUs whole for big gangs).
        return np.asarray(score + 1e-3 * st.core_used / GPU_CORE_UNITS_PER_GPU, dtype=np.float64)

    def refused_gains(self, ctx: ScoreContext) -> FloatArray | None:
        if ctx.gains is None or ctx.admissible is None:
            return None
        return np.where(np.isfinite(ctx.admissible), -np.inf, ctx.gains)

    def slowest(self, ctx: ScoreContext, gpu: int) -> float:
        st = ctx.state
        sig = st.signatures[int(st.sig_id[gpu])]
        _, speed, slowest = self.gain(ctx.job.kind, st.gpu_model[gpu], sig, ctx.pair_speed)
        return min(speed, slowest)


class Oracle(Horus):
    """``horus`` with the true pair speeds (the scheduler is given a ground-truth source)."""

    name = "oracle"


POLICIES: dict[str, type[Policy]] = {
    "exclusive": Exclusive,
    "binpack": Binpack,
    "spread": Spread,
    "horus-original": HorusOriginal,
    "horus": Horus,
    "oracle": Oracle,
}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def get_policy(name: str) -> Policy:
    """A fresh policy by name; unknown names are a :class:`ConfigError` listing the known."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ConfigError(
            f"unknown scheduling policy {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        ) from None
