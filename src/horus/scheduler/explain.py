"""Why a job was not placed, in a sentence a person can act on.

"Pods pending with no reason" is a top complaint about existing GPU schedulers, so every
refusal names the first filter that ruled the job out, with numbers and the best candidate
GPU: replaying the filters of one attempt in the order they apply (health, whole GPUs,
memory, job slots, core, the policy's cap and sharing rule, the gang) finds it. Kept apart
from the decisions because it runs only when a job did not fit (the simulator's fast path
skips it) and is all wording.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.predictor.interface import ResourcePrediction
from horus.scheduler.policies import Policy, ScoreContext
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray
from horus.scheduler.types import JobRequest, Refusal, RefusalCode


def gib(mib: float) -> str:
    """``12.3 GiB``: memory as the sentences print it."""
    return f"{mib / 1024:.1f} GiB"


def why_never(
    state: ClusterState,
    job: JobRequest,
    usable: BoolArray,
    predict: Callable[[JobRequest, str], ResourcePrediction],
    headroom_mib: int,
) -> str | None:
    """Why ``job`` can never run on the ``usable`` GPUs (even idle), or None when it could."""
    if job.gpu_count > int(usable.sum()):
        return _too_few_gpus(job, int(usable.sum()))
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
        pred = predict(job, model)
        mem = job.memory_mib or math.ceil(pred.memory_mib_upper)
        cap = int(state.mem_total[usable & (state.model_of == m)].max())
        if mem + headroom_mib <= cap:
            return None
    return _too_little_memory(state, job, predict)


def _too_few_gpus(job: JobRequest, usable: int) -> str:
    where = f" of model {', '.join(job.gpu_models)}" if job.gpu_models else ""
    if job.nodes is not None:
        where += " on the nodes its pod template allows"
    return (
        f"needs {job.gpu_count} GPUs ({job.replicas} replica(s) × "
        f"{job.gpus_per_replica}) but the cluster has {usable} healthy GPUs{where}"
    )


def _too_little_memory(
    state: ClusterState, job: JobRequest, predict: Callable[[JobRequest, str], ResourcePrediction]
) -> str:
    return (
        f"needs {gib(job.memory_mib or predict(job, state.models[0]).memory_mib_upper)} "
        f"per GPU but the largest GPU has {gib(state.largest_gpu_mib)}"
    )


@dataclass(frozen=True)
class Verdicts:
    """Which GPUs passed each common filter in one attempt, kept to explain a refusal."""

    usable: BoolArray  # healthy, of the job's models and nodes, not reserved for another job
    mem_ok: BoolArray
    core_ok: BoolArray
    slots_ok: BoolArray
    final: BoolArray  # what the policy's own filter and score left


def explain_refusal(
    ctx: ScoreContext, policy: Policy, verdicts: Verdicts, never: str | None
) -> Refusal:
    """The refusal of ``ctx.job``: ``never`` (why it can never fit, if so), else the first
    filter that left too few GPUs, with numbers and the best candidate."""
    if never is not None:
        return Refusal(ctx.job.name, never, RefusalCode.IMPOSSIBLE)
    return _Explainer(ctx, policy, verdicts).first_reason()


class _Explainer:
    """The filters of one attempt replayed in order; each step names its shortfall or None."""

    def __init__(self, ctx: ScoreContext, policy: Policy, verdicts: Verdicts) -> None:
        self.ctx, self.policy, self.v = ctx, policy, verdicts
        self.st, self.job, self.cfg = ctx.state, ctx.job, ctx.settings
        self.need = ctx.job.gpu_count
        self.n_usable = int(np.count_nonzero(verdicts.usable))
        self.plural = f"{self.need} GPUs" if self.need > 1 else "a GPU"

    def first_reason(self) -> Refusal:
        steps = (
            self._too_few_healthy,
            self._no_idle_gpu,
            self._memory,
            self._slots,
            self._core,
            self._sharing,
            self._gang,
        )
        for step in steps:
            found = step()
            if found is not None:
                return Refusal(self.job.name, found[0], found[1])
        return Refusal(self.job.name, *_no_suitable(self.plural, self.policy))

    def _too_few_healthy(self) -> tuple[str, RefusalCode] | None:
        if self.need <= self.n_usable:
            return None
        return _too_few_healthy(self.need, self.n_usable)

    def _no_idle_gpu(self) -> tuple[str, RefusalCode] | None:
        if not self.policy.whole_gpu:
            return None
        idle = int(np.count_nonzero(self.v.usable & (self.st.njobs == 0)))
        return _no_idle(self.plural, idle, self.n_usable, self.policy)

    def _memory(self) -> tuple[str, RefusalCode] | None:
        st, headroom = self.st, self.policy.memory_headroom_mib
        fits = int(np.count_nonzero(self.v.usable & self.v.mem_ok))
        if fits >= self.need:
            return None
        free = np.where(self.v.usable, st.mem_total - st.mem_used - headroom, -1)
        best = int(np.argmax(free))
        return _memory(self.ctx, headroom, self.need, fits, best, int(free[best]))

    def _slots(self) -> tuple[str, RefusalCode] | None:
        if int(np.count_nonzero(self.v.usable & self.v.mem_ok & self.v.slots_ok)) >= self.need:
            return None
        return _slots(self.ctx, self.policy)

    def _core(self) -> tuple[str, RefusalCode] | None:
        room = self.v.usable & self.v.mem_ok & self.v.slots_ok
        fits = room & self.v.core_ok
        if (n_fits := int(np.count_nonzero(fits))) >= self.need:
            return None
        if n_fits:  # some GPUs have room, too few for the gang
            return _too_few_core(self.ctx, n_fits, self.need, int(np.argmax(fits)))
        free = np.where(room, GPU_CORE_UNITS_PER_GPU - self.st.core_used, -1)
        best = int(np.argmax(free))
        return _core(self.ctx, self.plural, best, int(free[best]))

    def _sharing(self) -> tuple[str, RefusalCode] | None:
        """The policy's utilisation cap or sharing rule, when that (not room) kept it out."""
        n_ok = int(np.count_nonzero(self.v.final))
        if n_ok >= self.need or not self.policy.interference_aware:
            return None
        if self.ctx.gains is None:  # not scored: the utilisation cap left too few GPUs
            return _util_cap(self.ctx)
        turned_down = self.policy.turned_down(self.ctx)
        if turned_down is None:
            return None
        return _sharing(self.ctx, self.plural, n_ok, *turned_down)

    def _gang(self) -> tuple[str, RefusalCode] | None:
        job, st = self.job, self.st
        if job.gpus_per_replica == 1 and job.replicas == 1:
            return None
        per_node = np.bincount(st.node_of[self.v.final], minlength=len(st.node_names))
        best = int(np.argmax(per_node))
        return (
            f"gang of {job.replicas} replica(s) × {job.gpus_per_replica} GPU(s) on one node "
            f"each does not fit: {int(np.count_nonzero(self.v.final))} suitable GPUs, at most "
            f"{int(per_node[best])} on one node ({st.node_names[best]})",
            RefusalCode.GANG,
        )


# --- the sentences, shared by the replay above and the per-node explanation below ----------
Reason = tuple[str, RefusalCode]


def _no_suitable(plural: str, policy: Policy) -> Reason:
    return f"no suitable GPU for {plural} under policy {policy.name}", RefusalCode.CORE


def _too_few_healthy(need: int, usable: int) -> Reason:
    return (
        f"needs {need} GPUs but only {usable} are healthy right now",
        RefusalCode.IMPOSSIBLE,
    )


def _no_idle(plural: str, idle: int, usable: int, policy: Policy) -> Reason:
    return (
        f"no idle GPU for {plural}: {idle} of {usable} healthy GPUs are idle "
        f"(policy {policy.name} runs one job per GPU)",
        RefusalCode.BUSY,
    )


def _memory(ctx: ScoreContext, headroom: int, need: int, fits: int, best: int, free: int) -> Reason:
    want = int(ctx.mem_need[best])
    extra = f" (+{headroom} MiB headroom)" if headroom else ""
    head = (
        f"no GPU with {gib(want)}{extra} free"
        if need == 1
        else f"only {fits} GPUs have {gib(want)}{extra} free, needs {need}"
    )
    return (
        f"{head}; best candidate {ctx.state.label(best)} has {gib(max(0, free))}",
        RefusalCode.MEMORY,
    )


def _slots(ctx: ScoreContext, policy: Policy) -> Reason:
    return (
        f"every GPU with {gib(ctx.largest_mem_need())} free already runs "
        f"{policy.max_jobs_per_gpu(ctx.settings)} jobs (the most per GPU)",
        RefusalCode.SLOTS,
    )


def _core(ctx: ScoreContext, plural: str, best: int, free: int) -> Reason:
    return (
        f"no GPU with {int(ctx.core_need[best])}% core free for {plural} among "
        f"those with enough memory; best candidate {ctx.state.label(best)} has "
        f"{free}% free",
        RefusalCode.CORE,
    )


def _too_few_core(ctx: ScoreContext, fits: int, need: int, gpu: int) -> Reason:
    """``gpu``: one of the ``fits`` GPUs with room; the share named is what the job needs
    on it."""
    return (
        f"only {fits} GPUs have {int(ctx.core_need[gpu])}% core free among those with enough "
        f"memory, needs {need}",
        RefusalCode.CORE,
    )


def _util_cap(ctx: ScoreContext) -> Reason:
    return (
        f"every GPU with room would exceed the summed-utilisation cap of "
        f"{ctx.settings.util_cap:.0f}% (job predicted at {ctx.largest_util_need():.0f}%)",
        RefusalCode.CORE,
    )


def _sharing(
    ctx: ScoreContext, plural: str, n_ok: int, gpu: int, gain: float, worst: float
) -> Reason:
    """``gpu``: the best GPU the sharing rule refused, its ``gain`` and slowest speed."""
    st, cfg = ctx.state, ctx.settings
    sig = st.signatures[int(st.sig_id[gpu])]
    margin = ctx.signature_margin(ctx.job.kind, st.gpu_model[gpu], sig)
    head = (
        "sharing would not pay"
        if n_ok == 0
        else f"needs {plural} but only {n_ok} qualify (idle, or sharing pays "
        "there); sharing would not pay on the rest"
    )
    allowing = f", even allowing ±{margin:.2f} predictor error per pair" if margin > 0 else ""
    return (
        f"{head}: the best candidate {st.label(gpu)} gains "
        f"{gain:.2f} in summed speed (needs ≥ {cfg.min_gain:.2f}) "
        f"and its slowest job would run at {worst:.2f}× "
        f"(needs ≥ {cfg.min_speed:.2f}×){allowing}; waiting for a better GPU",
        RefusalCode.INTERFERENCE,
    )


# --- one one-GPU job refused on many nodes, each judged on its own GPUs --------------------
@dataclass(frozen=True)
class NodeFilters:
    """What the per-node explanation reads of one job judged against every GPU (the
    scheduler's :class:`~horus.scheduler.prepared.Prepared`): the common filters and the
    policy's filter (None: nothing had room, so it never ran)."""

    allowed: BoolArray
    usable: BoolArray
    mem_ok: BoolArray
    core_ok: BoolArray
    slots_ok: BoolArray
    room: BoolArray
    refined: BoolArray | None


def explain_nodes(
    ctx: ScoreContext,
    policy: Policy,
    f: NodeFilters,
    bounds: IntArray,
    nodes: IntArray,
    predict: Callable[[JobRequest, str], ResourcePrediction],
) -> list[Refusal | None]:
    """The refusal of the one-GPU job ``ctx.job`` on each of ``nodes`` (node numbers that no
    GPU of theirs fits; node n's GPUs are ``bounds[n]:bounds[n + 1]``), as the replay of the
    filters on that node's GPUs alone gives it (:func:`why_never`, then
    :func:`explain_refusal` with the node's verdicts), in one vectorised step over all of
    them — kube-scheduler's Filter run per node from its PreFilter's state.

    Each filter's verdict is counted per node once, the first filter that leaves a node no
    GPU names the refusal, and only the node's best candidate GPU is looked up, so a refused
    node costs a few array reads instead of a replay of the placement. None for a
    node whose best free amount is below −1 (a GPU with less memory left than the policy's
    headroom: the replay's candidate is then a GPU of another node): the caller replays it.
    """
    st, job = ctx.state, ctx.job
    assert job.gpu_count == 1, "explain_nodes answers for one-GPU jobs"
    lo, hi = bounds[nodes], bounds[nodes + 1]

    def count(mask: BoolArray) -> IntArray:
        total = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
        return np.asarray(total[hi] - total[lo], dtype=np.int64)

    headroom = policy.memory_headroom_mib
    healthy_allowed = st.healthy & f.allowed
    never_mem = np.array(
        [job.memory_mib or math.ceil(predict(job, m).memory_mib_upper) for m in st.models],
        dtype=np.int64,
    )
    could = healthy_allowed & (never_mem[st.model_of] + headroom <= st.mem_total)
    usable_mem = f.usable & f.mem_ok
    with_slots = usable_mem & f.slots_ok
    n_hok, n_could, n_usable = count(healthy_allowed), count(could), count(f.usable)
    n_mem, n_slots, n_room = count(usable_mem), count(with_slots), count(f.room)
    n_refined = count(f.refined) if f.refined is not None else np.zeros(len(nodes), np.int64)
    idle = count(f.usable & (st.njobs == 0)) if policy.whole_gpu else n_usable
    mem_free = np.where(f.usable, st.mem_total - st.mem_used - headroom, np.iinfo(np.int64).min)
    core_free = np.where(with_slots, GPU_CORE_UNITS_PER_GPU - st.core_used, np.iinfo(np.int64).min)
    refused = policy.refused_gains(ctx) if policy.interference_aware else None
    out: list[Refusal | None] = []
    for i in range(len(nodes)):
        a, b = int(lo[i]), int(hi[i])
        found: Reason | None
        if n_hok[i] < 1:
            found = (_too_few_gpus(job, 0), RefusalCode.IMPOSSIBLE)
        elif n_could[i] < 1:
            found = (_too_little_memory(st, job, predict), RefusalCode.IMPOSSIBLE)
        elif n_usable[i] < 1:
            found = _too_few_healthy(1, int(n_usable[i]))
        elif policy.whole_gpu:
            found = _no_idle("a GPU", int(idle[i]), int(n_usable[i]), policy)
        elif n_mem[i] < 1:
            best = _best(mem_free, a, b)
            found = None if best < 0 else _memory(ctx, headroom, 1, 0, best, int(mem_free[best]))
        elif n_slots[i] < 1:
            found = _slots(ctx, policy)
        elif n_room[i] < 1:
            best = _best(core_free, a, b)
            found = None if best < 0 else _core(ctx, "a GPU", best, int(core_free[best]))
        elif not policy.interference_aware:
            found = _no_suitable("a GPU", policy)
        elif n_refined[i] < 1:  # not scored on this node: the cap left it no GPU
            found = _util_cap(ctx)
        else:
            gpu = _turned_down_on(refused, a, b)
            found = (
                _no_suitable("a GPU", policy)
                if gpu is None or refused is None
                else _sharing(ctx, "a GPU", 0, gpu, float(refused[gpu]), policy.slowest(ctx, gpu))
            )
        out.append(None if found is None else Refusal(job.name, *found))
    return out


def _best(free: IntArray, a: int, b: int) -> int:
    """The replay's best candidate on GPUs ``a:b`` — the first with the most free (the
    others count −1 there) — or −1 when that would not be one of them (nothing above −1)."""
    part = free[a:b]
    best = int(np.argmax(part))
    return a + best if int(part[best]) > -1 else -1


def _turned_down_on(refused: FloatArray | None, a: int, b: int) -> int | None:
    """The GPU of ``a:b`` the replay's ``turned_down`` names (argmax, NaN first), or None."""
    if refused is None or b <= a:
        return None
    part = refused[a:b]
    gpu = int(np.argmax(part))
    return a + gpu if np.isfinite(part[gpu]) else None
