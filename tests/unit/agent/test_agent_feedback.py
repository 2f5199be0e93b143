"""Training rows the agent writes are exactly what ``horus predictor train --extra-rows`` reads."""

import math
from pathlib import Path

import pytest
from agent_helpers import ROOT, pod

from horus.agent.feedback import (
    PAIR_FILE_COLUMNS,
    ROW_COLUMNS,
    Feedback,
    PairSpeeds,
    append_rows,
    pair_rows,
    training_row,
)
from horus.predictor.schema import load_profile
from horus.predictor.userdata import load_extra_pair_rows, load_extra_rows

MIB = 2**20


def _stats() -> Feedback:
    fb = Feedback()
    a, b = pod("a", job="j1"), pod("b", job="j1", gpu=1)
    for u, m in ((0.30, 1000), (0.50, 1200)):
        fb.add(a, "H100", "simulated", u, m * MIB)
        fb.add(b, "H100", "simulated", u / 2, m * MIB / 2)
    fb.add(pod("plain"), "H100", "simulated", None, 10 * MIB)
    return fb


def test_job_observed_mean_util_and_peak_memory() -> None:
    obs = _stats().job_observed()
    assert list(obs) == [("ns", "j1")]
    o = obs[("ns", "j1")]
    assert o["util"] == pytest.approx((40.0 + 20.0) / 2)
    assert o["memoryMiB"] == 1200.0 and o["sampledAt"].endswith("Z")
    # Peaks and means of both: a reached 50 % and 1100 MiB on average, b 25 % and 550 MiB.
    assert o["utilPeak"] == pytest.approx(50.0)
    assert o["memoryMiBMean"] == pytest.approx((1100.0 + 550.0) / 2)


def test_rows_are_accepted_by_the_predictor(tmp_path: Path) -> None:
    profile = load_profile(ROOT / "examples" / "profiles" / "resnet50-bs64.yaml")
    fb = _stats()
    gone = fb.finished(["uid-plain"])
    rows = [r for st in gone if (r := training_row(st, profile)) is not None]
    path = tmp_path / "rows.csv"
    assert append_rows(path, rows) == 2
    assert append_rows(path, rows[:1]) == 1  # appends without a second header
    assert path.read_text().splitlines()[0].split(",") == ROW_COLUMNS
    table = load_extra_rows(path, keep_simulated=True)  # rows of the simulated backend
    assert len(table.rows) == 3
    assert table.util[0] == pytest.approx(40.0) and table.memory_mib[0] == pytest.approx(1200.0)
    assert not any(math.isnan(v) for r in table.rows for v in r.values())


def test_rows_train_a_predictor(tmp_path: Path) -> None:
    from horus.predictor.train import train_artifact

    profile = load_profile(ROOT / "examples" / "profiles" / "resnet50-bs64.yaml")
    path = tmp_path / "rows.csv"
    append_rows(path, [r for st in _stats().drain() if (r := training_row(st, profile))])
    art = train_artifact(extra_rows=path, n_estimators=5, keep_simulated=True)
    assert any("observed rows rows.csv" in s for s in art["card"]["trained_on"])


def test_foreign_header_is_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n1,2\n")
    profile = load_profile(ROOT / "examples" / "profiles" / "resnet50-bs64.yaml")
    rows = [r for st in _stats().drain() if (r := training_row(st, profile))]
    assert append_rows(path, rows) == 0


def _feed(ps: PairSpeeds, group: list[tuple[str, str | None, float | None]], n: int) -> None:
    for _ in range(n):
        ps.add("H100", group)


def test_pair_speed_is_shared_over_solo_utilisation() -> None:
    ps = PairSpeeds(min_samples=3)
    _feed(ps, [("a", None, 0.80)], 3)  # a alone at 80 %
    _feed(ps, [("b", None, 0.50)], 3)  # b alone at 50 %
    _feed(ps, [("a", "a@32", 0.60), ("b", "b@8", 0.50)], 4)  # together (uid, own kind, util)
    assert ps.speeds("a") == {("b@8", "H100"): (pytest.approx(0.75), 4)}
    assert ps.speeds("b") == {("a@32", "H100"): (1.0, 4)}  # b was not GPU-bound
    # three on one GPU is not a pair: nothing recorded for it
    _feed(ps, [("a", "a@32", 0.1), ("b", "b@8", 0.1), ("c", "c@1", 0.1)], 5)
    assert ps.speeds("a")[("b@8", "H100")] == (pytest.approx(0.75), 4)


def test_no_pair_speed_without_enough_samples_or_a_solo_baseline() -> None:
    ps = PairSpeeds(min_samples=3)
    _feed(ps, [("a", "a@32", 0.4), ("b", "b@8", 0.4)], 5)
    assert ps.speeds("a") == {}  # never alone: no baseline
    _feed(ps, [("a", None, 0.8)], 2)
    assert ps.speeds("a") == {}  # 2 solo samples < 3
    _feed(ps, [("a", None, 0.8)], 1)
    assert ps.speeds("a") == {("b@8", "H100"): (pytest.approx(0.5), 5)}
    _feed(ps, [("c", None, None)], 5)  # a backend without per-pod utilisation
    assert ps.speeds("c") == {}
    ps.forget(["b"])
    assert ps.speeds("a") == {} and "a" not in ps.shared


def test_job_observed_reports_measured_pairs() -> None:
    fb = Feedback()
    a = pod("a", job="j1")
    fb.add(a, "H100", "simulated", 0.4, 1000 * MIB)
    _feed(fb.pairs, [(a.uid, None, 0.8)], 3)
    _feed(fb.pairs, [(a.uid, "resnet@64", 0.2), ("uid-x", "bert@8", 0.5)], 3)
    pairs = fb.job_observed()[("ns", "j1")]["pairs"]
    # a utilisation reading never claims less error than the proxy's measured one (issue 26)
    assert pairs == [
        {
            "other": "bert@8",
            "gpuModel": "H100",
            "speed": 0.25,
            "samples": 3,
            "error": 0.192,
            "source": "utilisation",
        }
    ]


def test_pair_rows_are_accepted_by_the_predictor(tmp_path: Path) -> None:
    """A finished pod's measured pair speeds become rows ``--extra-pair-rows`` reads: A's
    features from its own profile, B's from the neighbour kind's profile."""
    mine = load_profile(ROOT / "examples" / "profiles" / "resnet50-bs64.yaml")
    theirs = load_profile(ROOT / "examples" / "profiles" / "bert-base-bs16.yaml")
    fb = Feedback()
    a = pod("a", job="j1")
    fb.add(a, "H100", "simulated", 0.4, 1000 * MIB)
    _feed(fb.pairs, [(a.uid, None, 0.8)], 3)
    fb.pairs.know("bert@16", theirs)
    _feed(fb.pairs, [(a.uid, "resnet@64", 0.6), ("uid-x", "bert@16", 0.5)], 3)
    _feed(fb.pairs, [(a.uid, "resnet@64", 0.2), ("uid-y", "mystery@1", 0.5)], 3)  # no profile
    (st,) = fb.finished(["uid-x", "uid-y"])
    rows = pair_rows(st, mine)
    assert [(r["other"], r["speed"], r["samples"]) for r in rows] == [("bert@16", 0.75, 3)]
    path = tmp_path / "pairs.csv"
    assert append_rows(path, rows, PAIR_FILE_COLUMNS) == 1
    assert append_rows(path, rows, ROW_COLUMNS) == 0  # a file of the other kind is left alone
    (observed,) = load_extra_pair_rows(path, keep_simulated=True)
    assert observed.speed == 0.75 and observed.gpu.name == "H100"
    assert observed.group == mine.model
    assert observed.a["fwd_flops"] == mine.features["fwd_flops"]
    assert observed.b["fwd_flops"] == theirs.features["fwd_flops"]
    assert fb.finished([]) == [] and fb.pairs.profiles == {}  # no kind left to remember


def test_pair_speeds_forget_neighbour_profiles_with_their_pairs() -> None:
    theirs = load_profile(ROOT / "examples" / "profiles" / "bert-base-bs16.yaml")
    ps = PairSpeeds(min_samples=1)
    ps.know("bert@16", theirs)
    _feed(ps, [("a", "r@64", 0.6), ("b", "bert@16", 0.5)], 1)
    ps.forget(["a"])
    assert ps.profiles == {"bert@16": theirs}  # a still has a measurement next to it
    ps.forget([])
    assert ps.profiles == {}
