"""The migration planner: moves that pay, never one that over-commits, flaps or touches a
``Never`` job; the state it is given comes back unchanged."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sched_helpers import TablePredictor, cluster, job, synthetic_predictor

from horus.common.errors import ValidationError
from horus.scheduler import (
    ClusterState,
    GpuShare,
    MigrationSettings,
    Placement,
    RunningJob,
    Scheduler,
    SchedulerSettings,
    plan_migrations,
)

pytestmark = pytest.mark.unit

USAGE = {"A": (60.0, 6000.0), "B": (60.0, 6000.0), "C": (30.0, 3000.0)}


def bad_pair(speed: float = 0.5, gpus: int = 2) -> tuple[Scheduler, ClusterState]:
    """a (A) and b (B) share node-0/gpu-0, each at ``speed`` (measured); the rest idle."""
    pred = TablePredictor(USAGE, {("A", "B"): speed, ("B", "A"): speed})
    sched = Scheduler("horus", pred)
    state = cluster(1, gpus)
    for name, model in (("a", "A"), ("b", "B")):
        j = job(name, model)
        state.add_job(j, [_share(state, 0, 30, 6000)], pred.predict(j.profile, "RTX3090"))
    sched.observe_pair("A@32", "B@32", "RTX3090", speed)
    sched.observe_pair("B@32", "A@32", "RTX3090", speed)
    return sched, state


def _share(state: ClusterState, g: int, core: int, memory: int) -> GpuShare:
    node = state.node_names[int(state.node_of[g])]
    return GpuShare(node, state.gpu_index[g], state.gpu_uuid[g], core, memory)


def running(state: ClusterState, **kw: object) -> list[RunningJob]:
    base: dict[str, object] = dict(movable=True, observed=True, elapsed_s=3600.0, move_cost_s=30.0)
    base.update(kw)
    return [RunningJob(p.request, **base) for p in state.jobs.values()]  # type: ignore[arg-type]


def test_a_bad_measured_pair_is_split_onto_the_idle_gpu() -> None:
    sched, state = bad_pair(0.5)
    before = state.views()
    plan = plan_migrations(sched, state, running(state), now=10_000.0)
    assert state.views() == before  # restored
    assert len(plan.moves) == 1  # one at a time: the other one sits beside the move
    m = plan.moves[0]
    assert m.job == "a"  # equal value: by name
    assert isinstance(m.placement, Placement) and m.placement.job == "a"
    assert [(s.node, s.gpu_index) for s in m.source] == [("node-0", 0)]
    assert [(s.node, s.gpu_index) for s in m.placement.shares] == [("node-0", 1)]
    # a adds 0.5 and costs b 0.5 where it is (net 0); alone it adds 1.0
    assert m.gain == pytest.approx(1.0)
    assert m.speed_before == pytest.approx(0.5) and m.speed_after == pytest.approx(1.0)
    assert m.cost == pytest.approx(30.0 / 3600.0)
    assert m.reason == "interference"
    assert "+1.00 summed normalised speed" in m.message and "node-0/gpu-1" in m.message


def test_a_good_pair_stays() -> None:
    sched, state = bad_pair(0.95)  # 1.9 together against 2.0 apart: below min_gain 0.2
    plan = plan_migrations(sched, state, running(state), now=10_000.0)
    assert plan.moves == ()
    assert plan.hopeless == ("a", "b")  # not worth judging again until something changes
    sched, state = bad_pair(0.5)
    assert plan_migrations(sched, state, running(state), 10_000.0).hopeless == ()


@pytest.mark.parametrize(
    ("kw", "now"),
    [
        ({"movable": False}, 10_000.0),  # spec.migration.policy: Never
        ({"observed": False}, 10_000.0),  # the agent has not measured it yet
        ({"moves": 2}, 10_000.0),  # max_moves_per_job
        ({"last_moved": 9_000.0}, 10_000.0),  # within min_interval_s
        ({"elapsed_s": 0.0, "move_cost_s": 600.0}, 10_000.0),  # cost ≥ gain over 10 min
    ],
)
def test_no_move_when_a_rule_forbids_it(kw: dict[str, object], now: float) -> None:
    sched, state = bad_pair(0.5)
    assert plan_migrations(sched, state, running(state, **kw), now=now).moves == ()


def test_moves_in_flight_fill_the_cap_and_block_their_neighbours() -> None:
    sched, state = bad_pair(0.5, gpus=3)
    jobs = running(state)
    # b is being moved already: a sits beside a move under way, and the cap is 1
    jobs[1] = RunningJob(jobs[1].request, movable=True, observed=True, moving=True)
    cfg = MigrationSettings(max_concurrent=1)
    assert plan_migrations(sched, state, jobs, 10_000.0, cfg).moves == ()
    cfg = MigrationSettings(max_concurrent=2)
    assert plan_migrations(sched, state, jobs, 10_000.0, cfg).moves == ()  # a waits


def test_without_an_observation_the_margin_stops_a_predicted_move() -> None:
    """Kind-level pairs not measured: the predicted gain (1.0) minus the margin of the
    pair terms must still clear min_gain."""
    pred = TablePredictor(USAGE, {("A", "B"): 0.5, ("B", "A"): 0.5})
    pred_card = {"metrics_heldout_family": {"pair_heldout_mae": 0.3}}
    pred.card = pred_card  # type: ignore[attr-defined]
    sched = Scheduler("horus", pred)
    state = cluster(1, 2)
    for name, model in (("a", "A"), ("b", "B")):
        j = job(name, model)
        state.add_job(j, [_share(state, 0, 30, 6000)], pred.predict(j.profile, "RTX3090"))
    # margin: 2 terms × 0.3 = 0.6 at the old GPU → 1.0 − 0.6 − cost > 0.2: still moves
    assert len(plan_migrations(sched, state, running(state), 10_000.0).moves) == 1
    sched = Scheduler("horus", pred, SchedulerSettings(uncertainty_z=2.0))
    # 2 × 2 × 0.3 = 1.2 > 1.0: no longer worth it
    assert plan_migrations(sched, state, running(state), 10_000.0).moves == ()


def test_settings_are_validated() -> None:
    with pytest.raises(ValidationError, match="min_gain"):
        MigrationSettings(min_gain=-1)
    with pytest.raises(ValidationError, match="horizon"):
        MigrationSettings(min_horizon_s=10, max_horizon_s=5)
    with pytest.raises(ValidationError, match="move_cost_s"):
        RunningJob(job("x", "A"), move_cost_s=float("nan"))


def test_policies_without_pair_speeds_plan_nothing() -> None:
    _, state = bad_pair(0.5)
    sched = Scheduler("binpack", TablePredictor(USAGE))
    assert plan_migrations(sched, state, running(state), 10_000.0).moves == ()


PRED = synthetic_predictor([(10, 2000), (35, 3000), (60, 6000), (90, 9000), (40, 12000)], 0.2, 8)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 3),
    gpus=st.integers(2, 4),
    specs=st.lists(
        st.tuples(
            st.sampled_from(sorted(PRED.usage)),
            st.sampled_from([1, 1, 1, 2]),  # GPUs per replica
            st.sampled_from([True, True, True, False]),  # movable
            st.sampled_from([True, True, True, False]),  # observed
            st.integers(0, 2),  # moves so far
            st.sampled_from([False, False, False, True]),  # moving
            st.integers(0, 11),  # first GPU it is put on: jobs are put, not placed, so
            # that bad pairs and idle GPUs exist side by side
        ),
        min_size=1,
        max_size=12,
    ),
    cap=st.integers(0, 4),
    observe=st.booleans(),
)
def test_planned_moves_keep_every_rule(
    nodes: int, gpus: int, specs: list, cap: int, observe: bool
) -> None:
    state = cluster(nodes, gpus)
    sched = Scheduler("horus", PRED)
    meta = {}
    for i, (model, k, movable, observed, moves, moving, first) in enumerate(specs):
        j = job(f"j{i}", model, gpus_per_replica=k)
        g0 = first % state.gpu_count
        gpus = list(range(g0, min(g0 + k, state.gpu_count)))
        if len(gpus) < k or len({int(state.node_of[g]) for g in gpus}) > 1:
            continue
        util, mem = PRED.usage[model]
        shares = [_share(state, g, int(util // 2), int(mem)) for g in gpus]
        try:
            state.add_job(j, shares, PRED.predict(j.profile, "RTX3090"))
        except ValidationError:
            continue  # does not fit there
        meta[j.name] = RunningJob(j, movable, observed, moves, None, 7200.0, 60.0, None, moving)
    if observe:  # every pair measured as predicted: no margins
        for a in PRED.usage:
            for b in PRED.usage:
                sched.observe_pair(f"{a}@32", f"{b}@32", "RTX3090", PRED.pairs[(a, b)])
    cfg = MigrationSettings(max_concurrent=cap, max_moves_per_job=2, min_gain=0.0)
    views = state.views()
    plan = plan_migrations(sched, state, list(meta.values()), 1e6, cfg)
    assert state.views() == views
    event(f"moves: {len(plan.moves)}")
    in_flight = sum(r.moving for r in meta.values())
    assert len(plan.moves) <= max(0, cap - in_flight)
    used: set[tuple[str, int]] = set()
    for m in plan.moves:
        r = meta[m.job]
        assert r.movable and r.observed and not r.moving and r.moves < 2
        src = {(s.node, s.gpu_index) for s in m.source}
        dst = {(s.node, s.gpu_index) for s in m.placement.shares}
        assert not src & dst and not (src | dst) & used  # one job at a time, no shared GPU
        used |= src | dst
        assert len(m.placement.shares) == r.request.gpu_count  # the whole gang
        assert m.gain - m.cost > 0
    # Both shares count until the old pods are gone: applying every new placement on top
    # of the state as it is never over-commits a GPU (add_job would raise).
    for m in plan.moves:
        state.add_job(
            meta[m.job].request.__class__(**{**meta[m.job].request.__dict__, "name": m.job + "'"}),
            m.placement.shares,
            m.placement.prediction,
        )
    assert (state.core_used <= 100).all() and (state.mem_used <= state.mem_total).all()
