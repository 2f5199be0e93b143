"""Per-node answers for the scheduler extender (:meth:`Scheduler.evaluate`): for each named
node, how a job would be placed on that node's GPUs alone, or why it would not.

The job's needs and the common filters are worked out once per GPU (kube-scheduler's
PreFilter; for a plain pod only on the candidate nodes' GPUs), the policy refines and scores
each GPU once, then each node is judged on its own GPUs alone (its Filter and Score) — the
same answer :meth:`Scheduler.place` gives when that node is the only one usable, because a
policy's filter and score judge each GPU by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from horus.predictor.interface import ResourcePrediction
from horus.scheduler.explain import NodeFilters, explain_nodes
from horus.scheduler.policies import ScoreContext
from horus.scheduler.prepared import Prepared
from horus.scheduler.state import BoolArray, ClusterState, FloatArray, IntArray, NodeSubset
from horus.scheduler.types import GpuShare, JobRequest, Placement, Refusal, ReplicaPlacement

if TYPE_CHECKING:
    from horus.scheduler.scheduler import Scheduler


def evaluate(
    sched: Scheduler, state: ClusterState, job: JobRequest, nodes: Iterable[str]
) -> dict[str, Placement | Refusal]:
    """For each of ``nodes``, how ``job`` would be placed on that node's GPUs alone, or
    why it would not: exactly what :meth:`Scheduler.place` answers when that node is the only
    usable one (same filters, margins, scores and reasons; a node the state does not
    know has no GPUs). Nothing is applied to ``state``.

    The job's needs, the common filters, the policy's filter and its score are computed
    once per GPU (kube-scheduler's PreFilter) — for a one-GPU job (every plain pod) and
    a policy that judges each GPU by its own figures (``Policy.per_gpu``), only on the
    named nodes' GPUs (a :class:`~horus.scheduler.state.NodeSubset`: kube-scheduler
    names 500 of 5,000 nodes by default), otherwise on every GPU. A one-GPU job then
    finds the nodes it fits in one vectorised step and takes each such node's best GPU
    from its few scores. The nodes it does not fit get their reasons — each a function
    of that node's GPUs alone and of figures of the whole cluster the subset carries
    (its largest GPU, the job's largest need), the sentence the per-node replay of the
    filters (:func:`evaluate_each`) gives — from one vectorised step over all of them
    (:func:`~horus.scheduler.explain.explain_nodes`); only a node whose sentence hangs on
    an over-committed GPU (the replay then names another node's GPU) is replayed, on the
    whole state.
    """
    names = list(nodes)
    if job.gpu_count != 1 or not names:
        pre = sched._prefilter(state, job)
        return {name: decide_on(sched, pre, state.node_bounds, name) for name in names}
    if not sched.policy.per_gpu:
        return _one_gpu_answers(sched, sched._prefilter(state, job), names, None)
    # kube-scheduler's candidates only (500 of 5,000 nodes by default): their GPUs judged
    # alone give each of them the answer judging every GPU gives (Policy.per_gpu), and
    # whatever needs the whole cluster — a node the state lacks, a sentence the replay
    # takes from another node's GPU — is answered from the whole state, worked out once
    # and only then.
    picked = [n for n in map(state.node_index, names) if n >= 0]  # NodeSubset sorts them
    if not picked:
        return _one_gpu_answers(sched, sched._prefilter(state, job), names, None)
    held: list[Prepared] = []

    def whole(name: str) -> Placement | Refusal:
        if not held:
            held.append(sched._prefilter(state, job))
        return decide_on(sched, held[0], state.node_bounds, name)

    subset = sched._prefilter(NodeSubset(state, picked), job)
    return _one_gpu_answers(sched, subset, names, whole)


def _one_gpu_answers(
    sched: Scheduler,
    pre: Prepared,
    names: list[str],
    whole: Callable[[str], Placement | Refusal] | None,
) -> dict[str, Placement | Refusal]:
    """:func:`evaluate` of a one-GPU job prepared on ``pre.state`` (the whole state, or a
    :class:`NodeSubset` of the named nodes, where ``whole`` answers a name from the whole
    state: one the subset lacks, or one left to the replay)."""
    state, job = pre.state, pre.job
    bounds = state.node_bounds

    def replay(name: str) -> Placement | Refusal:
        return decide_on(sched, pre, bounds, name) if whole is None else whole(name)

    refined = pre.refined() if pre.room.any() else pre.room
    fits = refined & pre.finite() if refined.any() else refined
    per_node = np.concatenate(([0], np.cumsum(fits, dtype=np.int64)))
    has = per_node[bounds[1:]] > per_node[bounds[:-1]]
    best = _best_per_node(fits, pre.score(), bounds) if fits.any() else None
    out: dict[str, Placement | Refusal] = {}
    placed: list[tuple[str, int]] = []
    refused: list[tuple[str, int]] = []
    for name in names:
        n = state.node_index(name)
        if n >= 0 and has[n] and best is not None:
            placed.append((name, n))
        elif n < 0:
            out[name] = replay(name)
        else:
            refused.append((name, n))
    if placed and best is not None:
        ctx = replace(pre.ctx, gains=None, admissible=None)  # as _decide's for one node
        gpus = best[np.array([n for _, n in placed], dtype=np.int64)]
        made = _one_gpu_placements(sched, state, job, gpus, ctx, pre.preds)
        for (name, _), placement in zip(placed, made, strict=True):
            out[name] = placement
    if refused:
        filters = NodeFilters(
            pre.allowed,
            pre.usable,
            pre.mem_ok,
            pre.core_ok,
            pre.slots_ok,
            pre.room,
            refined if pre.room.any() else None,
        )
        at = np.array([n for _, n in refused], dtype=np.int64)
        told = explain_nodes(pre.ctx, sched.policy, filters, bounds, at, sched.predict)
        for (name, _), refusal in zip(refused, told, strict=True):
            # None: an over-committed GPU decides the sentence; the replay knows it
            out[name] = refusal if refusal is not None else replay(name)
    return {name: out[name] for name in names}


def evaluate_each(
    sched: Scheduler, state: ClusterState, job: JobRequest, nodes: Iterable[str]
) -> dict[str, Placement | Refusal]:
    """:func:`evaluate` by a full replay of the filters for every node (the reference
    the vectorised answer is tested and benchmarked against)."""
    pre = sched._prefilter(state, job)
    return {name: decide_on(sched, pre, state.node_bounds, name) for name in nodes}


def decide_on(sched: Scheduler, pre: Prepared, bounds: IntArray, name: str) -> Placement | Refusal:
    """``Scheduler._decide`` on node ``name``'s GPUs alone (GPUs are numbered in node order,
    so node n's GPUs are ``bounds[n]:bounds[n + 1]``)."""
    st = pre.state
    n = st.node_index(name)
    only = np.zeros(st.gpu_count, dtype=np.bool_)
    if n >= 0:
        only[bounds[n] : bounds[n + 1]] = True
    return sched._decide(pre, only, explain=True)


def _one_gpu_placements(
    sched: Scheduler,
    st: ClusterState,
    job: JobRequest,
    gpus: IntArray,
    ctx: ScoreContext,
    preds: list[ResourcePrediction],
) -> list[Placement]:
    """``Scheduler._placement(st, job, [[g]], ctx, preds)`` for each GPU ``g`` of ``gpus``,
    the same objects, made with fewer steps: :func:`evaluate` makes one per node a one-GPU
    job fits (hundreds per pod), so each figure is read for all of them at once and the
    predicted effect once per (GPU model, residents' signature)."""
    memory = st.mem_total if sched.policy.whole_gpu else ctx.mem_need
    models, sigs = st.model_of[gpus].tolist(), st.sig_id[gpus].tolist()
    nodes, cores = st.node_of[gpus].tolist(), ctx.core_need[gpus].tolist()
    mibs = memory[gpus].tolist()
    effects: dict[tuple[int, int], tuple[float, float]] = {}
    out: list[Placement] = []
    for i, g in enumerate(gpus.tolist()):
        look = (models[i], sigs[i])
        effect = effects.get(look)
        if effect is None:
            effect = effects[look] = sched.predicted_effect(st, job, g)
        node = st.node_names[nodes[i]]
        share = GpuShare(node, st.gpu_index[g], st.gpu_uuid[g], cores[i], mibs[i])
        out.append(
            Placement(
                job=job.name,
                replicas=(ReplicaPlacement(0, node, (share,)),),
                policy=sched.policy.name,
                prediction=preds[models[i]],
                predicted_speed=min(1.0, effect[0]),
                predicted_gain=0.0 + effect[1],
            )
        )
    return out


def _best_per_node(fits: BoolArray, score: FloatArray, bounds: IntArray) -> IntArray:
    """Per node, its GPU with the highest ``score`` among ``fits`` — the first (lowest GPU)
    among ties, as ``argmax`` over the node's GPUs gives it — or −1 where none fits; for every
    node at once (GPUs are numbered in node order: node n's are ``bounds[n]:bounds[n + 1]``)."""
    count = len(fits)
    out = np.full(len(bounds) - 1, -1, dtype=np.int64)
    full = bounds[:-1] < bounds[1:]
    starts = bounds[:-1][full]  # the nodes with GPUs tile 0..count without a gap
    masked = np.where(fits, score, -np.inf)
    top = np.maximum.reduceat(masked, starts)
    sizes = np.diff(np.append(starts, count))
    at_top = fits & (masked == np.repeat(top, sizes))
    first = np.minimum.reduceat(np.where(at_top, np.arange(count), count), starts)
    out[full] = np.where(first < count, first, -1)
    return out
