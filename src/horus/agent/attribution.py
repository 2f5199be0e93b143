"""Which context a pod's progress window is attributed to (alone, or next to one other pod's
kind), from what one node's sample shows of its job's replicas and their GPU neighbours."""

from __future__ import annotations

from collections.abc import Callable

from horus.agent.backend import NodeSample
from horus.agent.exporter import Snapshot
from horus.agent.pods import PodInfo
from horus.agent.progress import Context
from horus.predictor.interface import GraphProfile
from horus.scheduler import job_kind


def progress_contexts(
    sample: NodeSample,
    snap: Snapshot,
    replica_count: Callable[[PodInfo], int | None],
    profile_of: Callable[[PodInfo], GraphProfile | None],
) -> dict[str, Context | None]:
    """Per pod on this node, the context its progress window is attributed to
    (:class:`horus.agent.progress.Context`), or None where it cannot be.

    A pod's *unit* is itself, or for a gang replica every replica of its job: a gang runs
    at its slowest replica's pace, so its replicas are solo only when no replica shares a
    GPU, and a pair is attributed only where exactly one replica shares with exactly one
    other pod — to that replica. A gang with replicas this agent cannot see (other
    nodes) is not attributed at all (utilisation still is)."""
    pods = [snap.pods[uid] for uid in sample.pods]
    models = {g.index: g.model for g in sample.gpus}
    on_gpu: dict[tuple[str, int], list[PodInfo]] = {}
    for p in pods:
        for g in p.assignment.all_gpus:
            on_gpu.setdefault((p.node, g.gpu_index), []).append(p)
    out: dict[str, Context | None] = {}
    for p in pods:
        out[p.uid] = None
        replicas = replica_count(p)
        unit = [q for q in pods if q.job == p.job and q.namespace == p.namespace]
        if not p.job:
            unit = [p]
        if replicas is None or len(unit) != replicas:
            continue
        members = {q.uid for q in unit}
        sharing: list[tuple[PodInfo, PodInfo]] = []  # (replica, its neighbour)
        for q in unit:
            for g in q.assignment.all_gpus:
                for other in on_gpu.get((q.node, g.gpu_index), []):
                    if other.uid not in members and (q, other) not in sharing:
                        sharing.append((q, other))
        model = models.get(p.assignment.gpu_index, "")
        if not sharing:
            out[p.uid] = Context(model, p.assignment.core_percent)
        elif len(sharing) == 1 and sharing[0][0].uid == p.uid:
            profile = profile_of(sharing[0][1])
            if profile is not None:
                out[p.uid] = Context(
                    model, p.assignment.core_percent, sharing[0][1].uid, job_kind(profile)
                )
    return out
