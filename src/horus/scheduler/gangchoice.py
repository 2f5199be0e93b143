"""Which GPUs a job gets, once every GPU has a score: the gang's all-or-nothing choice.

Why apart from :mod:`horus.scheduler.scheduler`: choosing GPUs from a mask and a score is
pure array work that depends on no policy, prediction or belief — a replica of ``k`` GPUs
lives on one node (the node whose ``k`` best GPUs score highest), ties go to the lowest GPU
number so that a decision is deterministic. The scheduler decides *what* may be used and
how good it is; this module only picks.
"""

from __future__ import annotations

import numpy as np

from horus.scheduler.state import BoolArray, ClusterState, FloatArray
from horus.scheduler.types import JobRequest


def choose_gpus(
    st: ClusterState, job: JobRequest, mask: BoolArray, score: FloatArray
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
        gpus = best_node_gpus(st, avail, score, k)
        if gpus is None:
            return None
        out.append(gpus)
        avail[gpus] = False
    return out


def best_node_gpus(
    st: ClusterState, avail: BoolArray, score: FloatArray, k: int
) -> list[int] | None:
    """One replica of ``k`` GPUs: the node whose ``k`` best available GPUs score highest in
    sum (its best ``k``); None when no node has ``k`` available."""
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
    node_sum = np.bincount(nodes[top], weights=score[idx[top]], minlength=len(st.node_names))
    node_cnt = np.bincount(nodes[top], minlength=len(st.node_names))
    node_sum[node_cnt < k] = -np.inf
    best = int(np.argmax(node_sum))
    if not np.isfinite(node_sum[best]):
        return None
    return [int(g) for g in idx[top & (nodes == best)]]
