"""Invariants on random clusters: no GPU over 100 % core or over memory, gangs all-or-nothing,
no job lost or placed twice — for every policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import cluster, job, synthetic_predictor

from horus.scheduler import POLICY_NAMES, Scheduler

pytestmark = pytest.mark.unit

PRED = synthetic_predictor(
    [(10, 2000), (35, 3000), (60, 6000), (90, 9000), (99, 20000), (50, 12000)], 0.3, 8
)
MODELS = PRED.usage

job_spec = st.tuples(
    st.sampled_from(sorted(MODELS)),
    st.integers(1, 3),  # replicas
    st.sampled_from([1, 1, 1, 2]),  # GPUs per replica
    st.one_of(st.none(), st.integers(5, 100)),  # core %
    st.integers(0, 3),  # priority
)


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(POLICY_NAMES),
    nodes=st.integers(1, 4),
    gpus=st.integers(1, 4),
    specs=st.lists(job_spec, min_size=1, max_size=25),
    release=st.lists(st.integers(0, 30), max_size=8),
)
def test_invariants(policy: str, nodes: int, gpus: int, specs: list, release: list[int]) -> None:
    state = cluster(nodes, gpus, memory_mib=24576)
    sched = Scheduler(policy, PRED)
    jobs = [
        job(f"j{i}", kind, float(i), replicas=r, gpus_per_replica=k, core_percent=c, priority=p)
        for i, (kind, r, k, c, p) in enumerate(specs)
    ]
    queue = sched.new_queue(state, jobs)
    placed: dict[str, int] = {}
    for step in range(3):
        res = sched.schedule(state, queue, now=float(step))
        for p in res.placed:
            assert p.job not in placed, "placed twice"
            j = next(x for x in jobs if x.name == p.job)
            assert len(p.replicas) == j.replicas
            assert all(len(r.gpus) == j.gpus_per_replica for r in p.replicas)
            assert all(len({g.node for g in r.gpus}) == 1 for r in p.replicas)
            assert len({(g.node, g.gpu_index) for g in p.shares}) == j.gpu_count
            placed[p.job] = step
        # every queued job is either placed or refused with a reason, never lost
        names = {p.job for p in res.placed} | {r.job for r in res.refused}
        assert names | set(placed) >= {j.name for j in queue} | {p.job for p in res.placed}
        assert all(r.reason for r in res.refused)
        assert (state.core_used <= 100).all()
        assert (state.mem_used <= state.mem_total).all()
        assert (state.core_used >= 0).all() and (state.njobs >= 0).all()
        if policy == "exclusive":
            assert (state.njobs <= 1).all()
        for i in release:
            name = f"j{i}"
            if name in state.jobs:
                state.release(name)
    assert set(placed).isdisjoint(set(j.name for j in queue))
    assert len(placed) + len(queue) == len(jobs)
