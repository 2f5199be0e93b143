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
from horus.scheduler.state import BoolArray, ClusterState
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
        pred = predict(job, model)
        mem = job.memory_mib or math.ceil(pred.memory_mib_upper)
        cap = int(state.mem_total[usable & (state.model_of == m)].max())
        if mem + headroom_mib <= cap:
            return None
    return (
        f"needs {gib(job.memory_mib or predict(job, state.models[0]).memory_mib_upper)} "
        f"per GPU but the largest GPU has {gib(int(state.mem_total.max(initial=0)))}"
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
        return Refusal(
            self.job.name,
            f"no suitable GPU for {self.plural} under policy {self.policy.name}",
            RefusalCode.CORE,
        )

    def _too_few_healthy(self) -> tuple[str, RefusalCode] | None:
        if self.need <= self.n_usable:
            return None
        return (
            f"needs {self.need} GPUs but only {self.n_usable} are healthy right now",
            RefusalCode.IMPOSSIBLE,
        )

    def _no_idle_gpu(self) -> tuple[str, RefusalCode] | None:
        if not self.policy.whole_gpu:
            return None
        idle = int(np.count_nonzero(self.v.usable & (self.st.njobs == 0)))
        return (
            f"no idle GPU for {self.plural}: {idle} of {self.n_usable} healthy GPUs are idle "
            f"(policy {self.policy.name} runs one job per GPU)",
            RefusalCode.BUSY,
        )

    def _memory(self) -> tuple[str, RefusalCode] | None:
        st, headroom = self.st, self.policy.memory_headroom_mib
        fits = int(np.count_nonzero(self.v.usable & self.v.mem_ok))
        if fits >= self.need:
            return None
        free = np.where(self.v.usable, st.mem_total - st.mem_used - headroom, -1)
        best = int(np.argmax(free))
        want = int(self.ctx.mem_need[best])
        extra = f" (+{headroom} MiB headroom)" if headroom else ""
        head = (
            f"no GPU with {gib(want)}{extra} free"
            if self.need == 1
            else f"only {fits} GPUs have {gib(want)}{extra} free, needs {self.need}"
        )
        return (
            f"{head}; best candidate {st.label(best)} has {gib(max(0, int(free[best])))}",
            RefusalCode.MEMORY,
        )

    def _slots(self) -> tuple[str, RefusalCode] | None:
        if int(np.count_nonzero(self.v.usable & self.v.mem_ok & self.v.slots_ok)) >= self.need:
            return None
        return (
            f"every GPU with {gib(int(self.ctx.mem_need.max()))} free already runs "
            f"{self.policy.max_jobs_per_gpu(self.cfg)} jobs (the most per GPU)",
            RefusalCode.SLOTS,
        )

    def _core(self) -> tuple[str, RefusalCode] | None:
        room = self.v.usable & self.v.mem_ok & self.v.slots_ok
        if int(np.count_nonzero(room & self.v.core_ok)) >= self.need:
            return None
        free = np.where(room, GPU_CORE_UNITS_PER_GPU - self.st.core_used, -1)
        best = int(np.argmax(free))
        return (
            f"no GPU with {int(self.ctx.core_need[best])}% core free for {self.plural} among "
            f"those with enough memory; best candidate {self.st.label(best)} has "
            f"{int(free[best])}% free",
            RefusalCode.CORE,
        )

    def _sharing(self) -> tuple[str, RefusalCode] | None:
        """The policy's utilisation cap or sharing rule, when that (not room) kept it out."""
        n_ok = int(np.count_nonzero(self.v.final))
        if n_ok >= self.need or not self.policy.interference_aware:
            return None
        ctx, cfg = self.ctx, self.cfg
        if ctx.gains is None:  # not scored: the utilisation cap left too few GPUs
            return (
                f"every GPU with room would exceed the summed-utilisation cap of "
                f"{cfg.util_cap:.0f}% (job predicted at {float(ctx.util_need.max()):.0f}%)",
                RefusalCode.CORE,
            )
        turned_down = self.policy.turned_down(ctx)
        if turned_down is None:
            return None
        gpu, gain, worst = turned_down  # the best GPU the sharing rule refused
        sig = self.st.signatures[int(self.st.sig_id[gpu])]
        margin = ctx.signature_margin(self.job.kind, self.st.gpu_model[gpu], sig)
        head = (
            "sharing would not pay"
            if n_ok == 0
            else f"needs {self.plural} but only {n_ok} qualify (idle, or sharing pays "
            "there); sharing would not pay on the rest"
        )
        allowing = f", even allowing ±{margin:.2f} predictor error per pair" if margin > 0 else ""
        return (
            f"{head}: the best candidate {self.st.label(gpu)} gains "
            f"{gain:.2f} in summed speed (needs ≥ {cfg.min_gain:.2f}) "
            f"and its slowest job would run at {worst:.2f}× "
            f"(needs ≥ {cfg.min_speed:.2f}×){allowing}; waiting for a better GPU",
            RefusalCode.INTERFERENCE,
        )

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
