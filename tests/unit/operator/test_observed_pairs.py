"""Pair speeds node agents measured (DLJob status.observed.pairs) reach the scheduler, through
the placement session both placers use."""

from __future__ import annotations

from opfixtures import dljob, node, share

from horus.operator.livestate import build_live_state
from horus.operator.placement_rules import UNKNOWN_PAIR_SPEED, PlacementSession
from horus.predictor import load_default_predictor


def test_measured_pairs_become_observations_under_the_jobs_kind() -> None:
    session = PlacementSession("horus", load_default_predictor())
    measured = dljob("a", [share("n1", 0)], phase="Running")
    measured["status"]["observed"] = {
        "util": 30.0,
        "pairs": [
            {"other": "bert@8", "gpuModel": "H100", "speed": 0.7, "samples": 5},
            {"other": "resnet50@64", "gpuModel": "A100", "speed": 0.9, "samples": 3},
        ],
    }
    plain = dljob("b", [share("n1", 1)], phase="Running")
    plain["status"]["observed"] = {"util": 10.0}
    broken = dljob("c", phase="Running")
    broken["spec"]["profile"] = {"configMapRef": {"name": "unread"}}  # profile unknown here
    broken["status"]["observed"] = measured["status"]["observed"]
    live = build_live_state([node("n1")], [], [measured, plain, broken])
    assert session.observe(live) == 2
    kind = "resnet50@64"  # the example profile's model@batch, as JobRequest names kinds
    assert session.scheduler.observed_pairs == {
        (kind, "bert@8", "H100"): 0.7,
        (kind, "resnet50@64", "A100"): 0.9,
    }


def test_a_resident_nobody_profiled_gets_the_pessimistic_pair_speed() -> None:
    session = PlacementSession("horus", load_default_predictor())
    live = build_live_state([node("n1")], [], [dljob("a", [share("n1", 0)], phase="Running")])
    session.observe(live)
    assert session.pair_speed("resnet50@64", "unknown", "H100") == UNKNOWN_PAIR_SPEED
    known = session.pair_speed("resnet50@64", "resnet50@64", "H100")
    assert 0.0 < known <= 1.0 and known != UNKNOWN_PAIR_SPEED


def test_a_measured_pairs_error_reaches_the_scheduler() -> None:
    """Issue 26: the agent's error of each reading is the pair's margin; an entry without one
    (an older agent) keeps the scheduler's default."""
    session = PlacementSession("horus", load_default_predictor())
    job = dljob("a", [share("n1", 0)], phase="Running")
    job["status"]["observed"] = {
        "pairs": [
            {
                "other": "bert@8",
                "gpuModel": "H100",
                "speed": 0.7,
                "samples": 5,
                "error": 0.03,
                "source": "progress",
            },
            {"other": "lstm@32", "gpuModel": "H100", "speed": 0.8, "samples": 4},
        ],
    }
    session.observe(build_live_state([node("n1")], [], [job]))
    kind = "resnet50@64"
    assert session.scheduler.observed_pair_error(kind, "bert@8", "H100") == 0.03
    # an older agent's entry keeps the scheduler's default error for measured pairs (0)
    assert session.scheduler.observed_pair_error(kind, "lstm@32", "H100") == 0.0
