"""The simulated operator's corrections: what a move and a preemption cost, when the agent
has measured enough, and that the model's constants are what they claim to be."""

from __future__ import annotations

import pytest

from horus.common.errors import ValidationError
from horus.sim.config import MoveCosts, SimConfig
from horus.sim.engine import Simulator
from horus.sim.groundtruth import GroundTruth, JobType
from horus.sim.observation import (
    AGENT_MIN_SAMPLES,
    AgentObserver,
    ObservationModel,
)
from horus.sim.predictors import ProfiledPredictor
from horus.sim.traces import TraceJob

pytestmark = pytest.mark.unit


def bad_pairs() -> GroundTruth:
    """a and b slow each other to 0.55 (together 1.1: worth sharing rather than waiting,
    far from worth staying together once a GPU is free), so do b and c; 2 GiB each."""
    kinds = [JobType(k, k.upper(), 32, util=40.0, memory_mib=2000.0) for k in "abc"]
    measured = {
        ("a", "b"): 0.55,
        ("b", "a"): 0.55,
        ("c", "b"): 0.55,
        ("b", "c"): 0.55,
        ("a", "c"): 0.9,
        ("c", "a"): 0.9,
    }
    return GroundTruth("tiny", "RTX3090", 24576, kinds, measured)


def run(trace: list[TraceJob], policy: str, gpus: int, **cfg: object):  # type: ignore[no-untyped-def]
    t = bad_pairs()
    sim = Simulator(trace, t, policy, ProfiledPredictor(t), SimConfig(gpus=gpus, **cfg))  # type: ignore[arg-type]
    res = sim.run()
    return sim, {r.job_id: r for r in res.records}, res


# x (a) and z (c) start on the two GPUs; y (b) shares with x (the first GPU among equals)
# at 0.55 each. At the first migration pass (60 s) x moves beside z, where a and c run at
# 0.9: summed speed 0.1 → 0.8 on those GPUs.
TRACE = [
    TraceJob("x", 0.0, 5000.0, 1, "a"),
    TraceJob("z", 0.0, 200.0, 1, "c"),
    TraceJob("y", 1.0, 5000.0, 1, "b"),
]


def test_oracle_moves_a_bad_pair_apart_and_pays_the_restart() -> None:
    _, still, _ = run(TRACE, "oracle", 2)
    _, moved, res = run(TRACE, "oracle+migrate", 2, migration_interval_s=60.0)
    assert sum(r.moves for r in moved.values()) == 1
    assert still["y"].start == 1.0 and still["x"].finish > 5000 / 0.55 - 1000  # they shared
    m = res.metrics()
    assert m["migrations_per_job"] == pytest.approx(1 / 3) and m["migrations_max_per_job"] == 1
    mover = next(r for r in moved.values() if r.moves)
    # both shared at 0.55 until the move; then alone: far sooner than staying together
    assert moved["x"].finish < still["x"].finish and moved["y"].finish < still["y"].finish
    # the mover made no progress for the restart (30 s), in which it would have run at 0.9
    # beside z: it finishes 27 s later than if the move were free; the others not at all
    _, free, _ = run(
        TRACE, "oracle+migrate", 2, migration_interval_s=60.0, costs=MoveCosts(restart_s=0.0)
    )
    other = "y" if mover.job_id == "x" else "x"
    assert mover.job_id == "x"
    assert mover.finish == pytest.approx(free[mover.job_id].finish + 30.0 * 0.9)
    assert moved[other].finish == pytest.approx(free[other].finish)


def test_lost_progress_is_redone() -> None:
    _, free, _ = run(
        TRACE, "oracle+migrate", 2, migration_interval_s=60.0, costs=MoveCosts(restart_s=0.0)
    )
    _, lost, _ = run(
        TRACE,
        "oracle+migrate",
        2,
        migration_interval_s=60.0,
        costs=MoveCosts(restart_s=0.0, lost_progress_s=100.0),
    )
    mover = next(j for j, r in free.items() if r.moves)
    # 100 s at 0.55 is 55 s of work, redone alone at full speed
    assert lost[mover].finish == pytest.approx(free[mover].finish + 55.0)


def test_the_whole_system_moves_only_observed_jobs() -> None:
    """horus moves a job only once the agent has measured it beside its neighbour: 15 s of
    samples alone (its baseline), 15 s beside it, and the 60 s write."""
    # x runs alone for 30 s before y joins: its pair is written at 60 s, and it moves then
    late = [TRACE[0], TRACE[1], TraceJob("y", 30.0, 5000.0, 1, "b")]
    sim, recs, _ = run(late, "horus", 2, migration_interval_s=60.0)
    assert ("a", "b", "RTX3090") in sim.scheduler.observed_pairs
    assert recs["x"].moves == 1 and recs["y"].moves == 0
    # x never ran alone for 15 s: never measured, never moved
    sim, recs, _ = run(TRACE, "horus", 2, migration_interval_s=60.0)
    assert sim.scheduler.observed_pairs == {}
    assert all(r.moves == 0 for r in recs.values())
    _, plain, _ = run(late, "horus+observed", 2)  # measures, but never moves
    assert all(r.moves == 0 for r in plain.values())


def test_preemption_evicts_a_lower_priority_job_that_resumes_later() -> None:
    trace = [TraceJob("low", 0.0, 1000.0, 1, "a", 0), TraceJob("high", 10.0, 100.0, 1, "a", 1)]
    _, plain, _ = run(trace, "exclusive", 1)
    assert plain["high"].wait == pytest.approx(990.0)
    _, pre, res = run(trace, "exclusive+preempt", 1)
    # the pass at high's arrival is not allowed before 60 s (one per pass_interval_s, the
    # first at low's arrival): high preempts then, starts after the victim's checkpoint
    # (30 s) and runs 100 s; low goes back to the queue with 940 s left and resumes after
    # a 30 s restart
    assert pre["high"].start == pytest.approx(60.0)
    assert pre["high"].finish == pytest.approx(190.0)
    assert pre["low"].preemptions == 1 and res.metrics()["preemptions"] == 1
    assert pre["low"].start == 0.0 and pre["low"].finish == pytest.approx(190 + 30 + 940)
    # equal priority never preempts
    same = [TraceJob("low", 0.0, 1000.0, 1, "a", 1), TraceJob("high", 10.0, 100.0, 1, "a", 1)]
    _, eq, _ = run(same, "exclusive+preempt", 1)
    assert eq["low"].preemptions == 0 and eq["high"].wait == pytest.approx(990.0)


def test_agent_timing() -> None:
    """A pair is known once 3 samples 5 s apart alone and 3 beside the neighbour are in,
    at the next 60 s write; a pod that moves starts again."""
    obs = AgentObserver(ObservationModel(error="exact"), bad_pairs())
    obs.place("x", "a", 0.0, [])  # alone from 0: its baseline is in by 15 s
    obs.place("x", "a", 20.0, ["b"])  # beside b from 20: 15 s of samples by 35
    assert not obs.due(59.0)
    assert obs.due(60.0)  # written at the next 60 s write
    assert obs.take() == [("a", "b", 0.55, 0.0)]
    # a baseline 5 s short: nothing beside c until it runs alone long enough
    obs.place("w", "c", 0.0, [])
    obs.place("w", "c", 10.0, ["b"])
    assert not obs.due(600.0)
    obs.place("w", "c", 600.0, [])
    assert not obs.due(659.0) and obs.due(660.0)
    assert obs.take() == [("c", "b", 0.55, 0.0)]
    # a pod that moved starts its samples again
    obs.place("y", "b", 0.0, ["a"])
    obs.new_pod("y")
    obs.place("y", "b", 100.0, [])
    assert not obs.due(1000.0)  # its new pod never shared: nothing
    assert obs.settled("y", 115.0) and not obs.settled("y", 114.0)
    # every pod measures afresh: a second job of kind a beside b reports again
    obs.place("x2", "a", 1000.0, [])
    obs.place("x2", "a", 1020.0, ["b"])
    assert obs.due(1080.0) and obs.take() == [("a", "b", 0.55, 0.0)]
    assert obs.readings == 3


def test_constants_match_the_agent() -> None:
    from horus.agent.feedback import MIN_PAIR_SAMPLES

    assert AGENT_MIN_SAMPLES == MIN_PAIR_SAMPLES


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValidationError, match="restart_s"):
        MoveCosts(restart_s=-1)
    with pytest.raises(ValidationError, match="migration_interval_s"):
        SimConfig(migration_interval_s=float("nan"))
    with pytest.raises(ValidationError, match="min_samples"):
        ObservationModel(min_samples=0)
    with pytest.raises(ValidationError, match="error must be one of"):
        ObservationModel(error="agent")  # type: ignore[arg-type]
