"""Priority preemption: fewest and lowest-priority victims, only strictly lower priorities
whose policy allows it, and the state it is given comes back unchanged."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sched_helpers import TablePredictor, cluster, job

from horus.common.errors import ValidationError
from horus.scheduler import (
    ClusterState,
    Placement,
    PreemptionSettings,
    RunningJob,
    Scheduler,
    plan_preemption,
    plan_preemptions,
)

pytestmark = pytest.mark.unit

# "Big" needs 20 GiB of a 24 GiB GPU: it shares with nothing. Small jobs need 6 GiB.
USAGE = {"Big": (90.0, 20000.0), "S": (40.0, 6000.0)}
PRED = TablePredictor(USAGE, default_speed=0.9)


def full(layout: list[list[tuple[str, int]]], nodes: int = 1) -> tuple[Scheduler, ClusterState]:
    """One GPU per entry of ``layout``, each running small jobs (name, priority)."""
    per_node = len(layout) // nodes
    state = cluster(nodes, per_node)
    sched = Scheduler("horus", PRED)
    for g, jobs in enumerate(layout):
        for name, prio in jobs:
            only = {state.node_names[int(state.node_of[g])]}
            j = job(name, "S", priority=prio)
            mask = [x != g for x in range(state.gpu_count)]
            placed = sched.attempt(state, j, exclude=__import__("numpy").array(mask))
            assert isinstance(placed, Placement), (name, only)
            state.apply(j, placed)
    return sched, state


def running(state: ClusterState, movable: bool = True) -> list[RunningJob]:
    return [RunningJob(p.request, movable=movable, move_cost_s=30.0) for p in state.jobs.values()]


def test_lowest_priority_victim_on_the_cheapest_gpu() -> None:
    sched, state = full([[("a", 1)], [("b", 0)], [("c", 0), ("d", 0)]])
    views = state.views()
    p = plan_preemption(sched, state, job("hi", "Big", priority=5), running(state))
    assert state.views() == views
    assert p is not None and p.job == "hi"
    assert p.victims == ("b",)  # priority 0 beats a's 1; one victim beats c and d
    assert [(s.node, s.gpu_index) for s in p.placement.shares] == [("node-0", 1)]
    assert "hi (priority 5) preempts b (priority 0)" in p.message


def test_fewest_victims_even_if_a_unit_holds_two() -> None:
    sched, state = full([[("c", 0), ("d", 0)], [("a", 3)]])
    p = plan_preemption(sched, state, job("hi", "Big", priority=5), running(state))
    assert p is not None and p.victims == ("c", "d")  # both must go: no other way


def test_only_the_victims_it_needs() -> None:
    """A small job fits beside one of two residents: it evicts one, not both."""
    sched, state = full([[("c", 0), ("d", 0), ("e", 0)]])  # three per GPU: the slot cap
    p = plan_preemption(sched, state, job("hi", "S", priority=1), running(state))
    assert p is not None and len(p.victims) == 1


@pytest.mark.parametrize(
    ("prio", "movable"),
    [(0, True), (-1, True), (5, False)],  # equal, lower, or victims with policy Never
)
def test_no_preemption(prio: int, movable: bool) -> None:
    sched, state = full([[("a", 0)], [("b", 0)]])
    hi = job("hi", "Big", priority=prio)
    assert plan_preemption(sched, state, hi, running(state, movable)) is None


def test_no_preemption_when_it_fits_or_never_would() -> None:
    sched, state = full([[("a", 0)], []])
    assert plan_preemption(sched, state, job("hi", "Big", priority=5), running(state)) is None
    # fits nowhere even with every victim gone (two replicas on a one-GPU cluster)
    sched, state = full([[("a", 0)]])
    gang = job("hi", "Big", priority=5, replicas=2)
    assert plan_preemption(sched, state, gang, running(state)) is None


def test_a_gang_clears_a_node() -> None:
    sched, state = full([[("a", 0)], [("b", 0)], [("c", 2)], [("d", 0)]], nodes=2)
    gang = job("hi", "Big", priority=5, gpus_per_replica=2)
    p = plan_preemption(sched, state, gang, running(state))
    assert p is not None and p.victims == ("a", "b")
    assert {s.node for s in p.placement.shares} == {"node-0"}


def test_a_pass_never_evicts_a_job_twice_and_respects_its_cap() -> None:
    sched, state = full([[("a", 0)], [("b", 0)], [("c", 0)]])
    waiting = [job(f"h{i}", "Big", priority=5, submit=float(i)) for i in range(3)]
    views = state.views()
    out = plan_preemptions(
        sched, state, waiting, running(state), PreemptionSettings(max_per_pass=2)
    )
    assert state.views() == views
    assert [p.job for p in out] == ["h0", "h1"]
    victims = [v for p in out for v in p.victims]
    assert len(victims) == len(set(victims)) == 2
    assert {s.gpu_index for p in out for s in p.placement.shares} == {0, 1}


def test_max_victims() -> None:
    sched, state = full([[("c", 0), ("d", 0)]])
    hi = job("hi", "Big", priority=5)
    assert (
        plan_preemption(sched, state, hi, running(state), PreemptionSettings(max_victims=1)) is None
    )
    with pytest.raises(ValidationError, match="max_victims"):
        PreemptionSettings(max_victims=0)


@settings(max_examples=50, deadline=None)
@given(
    gpus=st.integers(1, 4),
    residents=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans()), max_size=10),
    prio=st.integers(0, 4),
    big=st.booleans(),
)
def test_preemption_rules_hold(gpus: int, residents: list, prio: int, big: bool) -> None:
    state = cluster(1, gpus)
    sched = Scheduler("horus", PRED)
    meta = {}
    import numpy as np

    for i, (g, p, movable) in enumerate(residents):
        j = job(f"r{i}", "S", priority=p)
        placed = sched.attempt(state, j, exclude=np.arange(gpus) != g % gpus)
        if isinstance(placed, Placement):
            state.apply(j, placed)
            meta[j.name] = RunningJob(j, movable=movable)
    hi = job("hi", "Big" if big else "S", priority=prio)
    views = state.views()
    p = plan_preemption(sched, state, hi, list(meta.values()))
    assert state.views() == views
    event(f"victims: {0 if p is None else len(p.victims)}")
    if p is None:
        return
    assert not isinstance(sched.attempt(state, hi), Placement)  # it did not fit as it was
    for v in p.victims:
        assert meta[v].movable and meta[v].request.priority < prio
    for v in p.victims:  # it fits once they are gone, where the plan says
        state.release(v)
    state.apply(hi, p.placement)
    assert (state.core_used <= 100).all() and (state.mem_used <= state.mem_total).all()
