"""Every policy on small hand-made clusters where the right answer is obvious."""

from __future__ import annotations

from typing import ClassVar

import pytest
from sched_helpers import TablePredictor, cluster, job

from horus.common.errors import ConfigError, ValidationError
from horus.scheduler import (
    POLICY_NAMES,
    GpuShare,
    Placement,
    Refusal,
    Scheduler,
    SchedulerSettings,
)

pytestmark = pytest.mark.unit

PRED = TablePredictor(
    {
        "heavy": (60.0, 15000.0),  # two of these do not fit one 24 GiB GPU
        "light": (20.0, 2000.0),
        "hot": (95.0, 3000.0),
        "cool": (30.0, 3000.0),
        "huge": (50.0, 40960.0),
    },
    pairs={
        ("light", "hot"): 0.55,
        ("hot", "light"): 0.7,
        ("light", "cool"): 0.97,
        ("cool", "light"): 0.95,
    },
)


def gpu_of(p: Placement | Refusal) -> str:
    assert isinstance(p, Placement), p
    s = p.shares[0]
    return f"{s.node}/gpu-{s.gpu_index}"


@pytest.mark.parametrize("policy", ["binpack", "horus", "horus-original", "oracle"])
def test_two_memory_heavy_jobs_never_share(policy: str) -> None:
    state = cluster(1, 2)
    sched = Scheduler(policy, PRED)
    a = sched.place(state, job("a", "heavy"))
    b = sched.place(state, job("b", "heavy"))
    assert gpu_of(a) != gpu_of(b)


def test_light_job_joins_gpu_with_least_slowdown() -> None:
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    assert gpu_of(sched.place(state, job("h", "hot"))) == "node-0/gpu-0"
    assert gpu_of(sched.place(state, job("c", "cool"))) == "node-0/gpu-1"
    # Both GPUs busy: the light job goes where the predicted slowdown is least (next to "cool").
    p = sched.place(state, job("l", "light"))
    assert gpu_of(p) == "node-0/gpu-1"
    assert isinstance(p, Placement)
    assert p.predicted_speed == pytest.approx(0.97)
    assert p.predicted_gain == pytest.approx(0.97 + 0.95 - 1.0)


def test_horus_prefers_idle_gpu_and_refuses_bad_sharing() -> None:
    state = cluster(1, 1)
    sched = Scheduler("horus", PRED, SchedulerSettings(min_gain=0.3))
    sched.place(state, job("h", "hot"))
    r = sched.place(state, job("l", "light"))
    assert isinstance(r, Refusal)
    assert r.code == "interference"
    assert "node-0/gpu-0" in r.reason and "0.25" in r.reason


def test_exclusive_one_job_per_gpu_fifo() -> None:
    state = cluster(1, 2)
    sched = Scheduler("exclusive", PRED)
    res = sched.schedule(state, [job("a", "light", 0), job("b", "light", 1), job("c", "light", 2)])
    assert [p.job for p in res.placed] == ["a", "b"]
    assert res.placed[0].shares[0].core_percent == 100
    assert res.placed[0].shares[0].memory_mib == 24576
    assert res.refused[0].job == "c" and res.refused[0].code == "busy"
    assert "0 of 2 healthy GPUs are idle" in res.refused[0].reason


def test_binpack_packs_and_spread_spreads() -> None:
    for policy, same in (("binpack", True), ("spread", False)):
        state = cluster(1, 2)
        sched = Scheduler(policy, PRED)
        a, b = sched.place(state, job("a", "light")), sched.place(state, job("b", "light"))
        assert (gpu_of(a) == gpu_of(b)) is same, policy


def test_horus_original_cost_prefers_idle_gpu_and_caps_three() -> None:
    state = cluster(1, 1)
    sched = Scheduler("horus-original", PRED)
    names = [f"j{i}" for i in range(4)]
    res = sched.schedule(state, [job(n, "light", i) for i, n in enumerate(names)])
    assert len(res.placed) == 3
    assert res.refused[0].code == "slots"
    assert "already runs 3 jobs" in res.refused[0].reason


def test_horus_original_queue_orders_by_predicted_util() -> None:
    state = cluster(1, 4)
    sched = Scheduler("horus-original", PRED)
    res = sched.schedule(state, [job("hot", "hot", 0), job("cool", "cool", 1)])
    assert [p.job for p in res.placed] == ["cool", "hot"]


def test_memory_refusal_names_best_candidate() -> None:
    state = cluster(2, 1, memory_mib=32768)
    sched = Scheduler("binpack", PRED)
    sched.place(state, job("a", "light"))
    r = sched.place(state, job("big", "heavy", memory_mib=40960))
    assert isinstance(r, Refusal)
    assert r.code == "impossible"  # 40 GiB never fits a 32 GiB GPU
    r2 = sched.place(state, job("h2", "heavy", memory_mib=31000))
    assert isinstance(r2, Placement)
    r3 = sched.place(state, job("h3", "heavy", memory_mib=31000))
    assert isinstance(r3, Refusal) and r3.code == "memory"
    assert r3.reason.startswith("no GPU with 30.3 GiB free; best candidate node-")
    assert "has 29.9 GiB" in r3.reason


def test_impossible_jobs_are_named() -> None:
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    r = sched.place(state, job("g", "light", replicas=3))
    assert isinstance(r, Refusal) and r.code == "impossible"
    assert "needs 3 GPUs" in r.reason and "2 healthy GPUs" in r.reason
    assert sched.check_possible(state, job("x", "huge")) is not None


def test_gang_all_or_nothing() -> None:
    state = cluster(2, 2)
    sched = Scheduler("exclusive", PRED)
    sched.place(state, job("a", "light"))
    r = sched.place(state, job("g", "light", replicas=2, gpus_per_replica=2))
    assert isinstance(r, Refusal)
    assert state.njobs.sum() == 1  # nothing partially placed
    state.release("a")
    p = sched.place(state, job("g", "light", replicas=2, gpus_per_replica=2))
    assert isinstance(p, Placement)
    assert {r.node for r in p.replicas} == {"node-0", "node-1"}
    assert all(len({s.node for s in r.gpus}) == 1 for r in p.replicas)


def test_a_gang_short_of_gpus_with_room_says_how_many_have_it() -> None:
    state = cluster(2, 2)
    sched = Scheduler("horus", PRED)
    assert isinstance(sched.place(state, job("a", "light", core_percent=100)), Placement)
    r = sched.place(state, job("g", "light", replicas=4, core_percent=40))
    assert isinstance(r, Refusal) and r.code == "core"
    assert r.reason == "only 3 GPUs have 40% core free among those with enough memory, needs 4"
    full = cluster(1, 1)  # no GPU with room at all: the best candidate is named
    assert isinstance(sched.place(full, job("b", "light", core_percent=100)), Placement)
    r = sched.place(full, job("w", "light", core_percent=40))
    assert isinstance(r, Refusal) and r.code == "core"
    assert r.reason.startswith("no GPU with 40% core free for ")
    assert r.reason.endswith("best candidate node-0/gpu-0 has 0% free")


def test_unknown_policy_is_clear() -> None:
    with pytest.raises(ConfigError, match=r"unknown scheduling policy 'best'.*exclusive"):
        Scheduler("best", PRED)
    assert set(POLICY_NAMES) == {
        "exclusive",
        "binpack",
        "spread",
        "horus-original",
        "horus",
        "oracle",
    }


def test_starvation_guard_holds_back_backfill() -> None:
    state = cluster(1, 2)
    sched = Scheduler("exclusive", PRED, SchedulerSettings(starvation_seconds=100))
    sched.place(state, job("running", "light"))
    big = job("big", "light", 0.0, replicas=2)
    small = job("small", "light", 1.0)
    res = sched.schedule(state, [big, small], now=50.0)
    assert [p.job for p in res.placed] == ["small"]  # backfill is fine while big is young
    state.release("small")
    res = sched.schedule(state, [big, job("small2", "light", 2.0)], now=500.0)
    assert res.placed == ()
    assert res.reason_for("small2") is not None and "held back" in str(res.reason_for("small2"))


def test_priority_goes_first() -> None:
    state = cluster(1, 1)
    sched = Scheduler("exclusive", PRED)
    res = sched.schedule(state, [job("low", "light", 0), job("high", "light", 5, priority=10)])
    assert [p.job for p in res.placed] == ["high"]


def test_placement_shares_and_add_job_roundtrip() -> None:
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    j = job("a", "cool")
    p = sched.place(state, j)
    assert isinstance(p, Placement)
    share = p.replicas[0].gpus[0]
    assert share.gpu_uuid.startswith("GPU-") and share.memory_mib > 0
    rebuilt = cluster(1, 2)
    rebuilt.add_job(j, p.shares, p.prediction)
    assert rebuilt.view(0).jobs == state.view(0).jobs


def test_light_job_shares_rather_than_waits_when_all_gpus_are_busy() -> None:
    # Sharing gains only 0.25 in summed speed (0.55 + 0.7 − 1), but the alternative on a busy
    # cluster is waiting at speed 0: the default rule takes the share.
    state = cluster(1, 1)
    sched = Scheduler("horus", PRED)
    sched.place(state, job("h", "hot"))
    p = sched.place(state, job("l", "light"))
    assert isinstance(p, Placement)
    assert p.predicted_gain == pytest.approx(0.25)
    # ... but a share that would push a job below min_speed is still refused.
    strict = Scheduler("horus", PRED, SchedulerSettings(min_speed=0.6))
    state2 = cluster(1, 1)
    strict.place(state2, job("h", "hot"))
    r = strict.place(state2, job("l", "light"))
    assert isinstance(r, Refusal) and r.code == "interference"


def test_horus_still_prefers_an_idle_gpu_to_a_share() -> None:
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    sched.place(state, job("c", "cool"))
    assert gpu_of(sched.place(state, job("l", "light"))) == "node-0/gpu-1"


@pytest.mark.parametrize("policy", ["exclusive", "horus"])
def test_backfill_never_delays_the_reserved_job(policy: str) -> None:
    state = cluster(2, 4)
    sched = Scheduler(policy, PRED, SchedulerSettings(starvation_seconds=100))
    # Heavy jobs (15 GB each): two never share a GPU, under any policy. Fill all 8 GPUs in
    # order, then free node-0/gpu-2, node-0/gpu-3 and node-1/gpu-3.
    for i in range(8):
        assert gpu_of(sched.place(state, job(f"r{i}", "heavy"))) == f"node-{i // 4}/gpu-{i % 4}"
    for name in ("r2", "r3", "r7"):
        state.release(name)
    big = job("big", "heavy", 0.0, gpus_per_replica=4)
    res = sched.schedule(state, [big, job("s1", "heavy", 1.0)], now=500.0)
    # big has starved: node-0 (2 jobs to wait for, not 3) is reserved; the free GPU on node-1
    # is still backfilled, the free GPUs on node-0 are not.
    assert [p.job for p in res.placed] == ["s1"]
    assert gpu_of(res.placed[0]) == "node-1/gpu-3"
    res = sched.schedule(state, [big, job("s2", "heavy", 2.0)], now=600.0)
    assert res.placed == ()
    reason = str(res.reason_for("s2"))
    assert "held back" in reason and "big" in reason
    # When the reserved node's jobs leave, big starts there at once, ahead of s2.
    state.release("r0")
    state.release("r1")
    res = sched.schedule(state, [big, job("s2", "heavy", 2.0)], now=700.0)
    assert [p.job for p in res.placed] == ["big"]
    assert sorted(state.gpus_of("big")) == [0, 1, 2, 3]


def test_reservation_protects_gang_partners_of_reserved_gpus() -> None:
    state = cluster(2, 2)
    sched = Scheduler("horus", PRED, SchedulerSettings(starvation_seconds=100))

    def put(name: str, model: str, gpus: list[tuple[str, int]], mem: int) -> None:
        j = job(name, model, replicas=len(gpus))
        shares = [GpuShare(n, i, state.gpu_uuid[state.gpu_id(n, i)], 10, mem) for n, i in gpus]
        state.add_job(j, shares, PRED.predict(j.profile, "RTX3090"))

    put("gang", "cool", [("node-0", 0), ("node-1", 0)], 3000)  # one job on both nodes
    put("x", "heavy", [("node-0", 1)], 16000)
    put("y", "heavy", [("node-1", 1)], 24000)  # full
    big = job("big", "heavy", 0.0, gpus_per_replica=2)
    res = sched.schedule(state, [big, job("light", "light", 1.0)], now=500.0)
    # node-0 is reserved for big; "light" would fit next to the gang on node-1/gpu-0, but that
    # would slow the gang, which big waits for on node-0/gpu-0: it is held back.
    assert res.placed == ()
    assert "held back" in str(res.reason_for("light"))
    res = sched.schedule(state, [job("light2", "light", 1.0)], now=500.0)
    assert [p.job for p in res.placed] == ["light2"]  # without the starving job it would fit


class CardPredictor(TablePredictor):
    """A table predictor that publishes a held-out pair error, as the trained one does."""

    card: ClassVar[dict[str, dict[str, float]]] = {
        "metrics_heldout_family": {"pair_heldout_mae": 0.1}
    }


def test_share_within_predictor_error_of_paying_is_taken_and_exact_source_refuses() -> None:
    pairs = {("light", "hot"): 0.45, ("hot", "light"): 0.5}  # predicted gain −0.05
    usage = {"light": (20.0, 2000.0), "hot": (95.0, 3000.0)}
    state = cluster(1, 1)
    sched = Scheduler("horus", CardPredictor(usage, pairs))
    assert sched.pair_error == pytest.approx(0.1)
    sched.place(state, job("h", "hot"))
    p = sched.place(state, job("l", "light"))
    # −0.05 + 2 × 0.1 ≥ 0 and 0.45 + 0.1 ≥ 0.3: the share may well beat waiting.
    assert isinstance(p, Placement) and p.predicted_gain == pytest.approx(-0.05)
    # The same speeds from an exact source (as oracle gets them): no error, refused.
    by_kind = {(f"{a}@32", f"{b}@32"): v for (a, b), v in pairs.items()}
    exact = Scheduler("horus", TablePredictor(usage), pair_speed=lambda a, b, g: by_kind[(a, b)])
    assert exact.pair_error == 0.0
    state2 = cluster(1, 1)
    exact.place(state2, job("h", "hot"))
    r = exact.place(state2, job("l", "light"))
    assert isinstance(r, Refusal) and r.code == "interference"
    # With uncertainty_z = 0 the card is ignored too.
    zero = Scheduler("horus", CardPredictor(usage, pairs), SchedulerSettings(uncertainty_z=0))
    state3 = cluster(1, 1)
    zero.place(state3, job("h", "hot"))
    r3 = zero.place(state3, job("l", "light"))
    assert isinstance(r3, Refusal) and "predictor error" not in r3.reason


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_job_already_in_the_state_is_refused_not_placed_twice(policy: str) -> None:
    # e.g. its pods still hold an assignment while the caller's record lost the placement:
    # the pass must neither place it again nor fail for the other jobs.
    state = cluster(1, 2)
    sched = Scheduler(policy, PRED)
    first = sched.place(state, job("a", "light"))
    assert isinstance(first, Placement)
    result = sched.schedule(state, [job("a", "light"), job("b", "light", submit=1.0)], now=2.0)
    assert [p.job for p in result.placed] == ["b"]
    (refusal,) = result.refused
    assert (refusal.job, refusal.code) == ("a", "resident")
    assert "already holds GPU shares" in refusal.reason
    assert sum(1 for name in state.jobs if name == "a") == 1


def test_gang_refusal_names_the_gpu_that_was_turned_down() -> None:
    # GPU 0 runs a job that the new one would slow to 0.2x; GPU 1 is idle. A 2-replica job
    # gets the idle GPU but not the shared one: the reason must name GPU 0 and its figures,
    # not the idle GPU's (which qualifies).
    pred = TablePredictor(
        {"hot": (95.0, 3000.0), "bad": (50.0, 2000.0)},
        pairs={("bad", "hot"): 0.2, ("hot", "bad"): 0.25},
    )
    state = cluster(1, 2)
    sched = Scheduler("horus", pred)
    assert gpu_of(sched.place(state, job("h", "hot"))) == "node-0/gpu-0"
    refusal = sched.place(state, job("g", "bad", replicas=2))
    assert isinstance(refusal, Refusal) and refusal.code == "interference", refusal
    assert "needs 2 GPUs but only 1 qualify" in refusal.reason
    assert "best candidate node-0/gpu-0 gains -0.55" in refusal.reason
    assert "slowest job would run at 0.20×" in refusal.reason


def test_pair_error_given_explicitly_wins_over_the_override_rule() -> None:
    wrapped = Scheduler("horus", PRED, pair_speed=PRED.pair_speed)
    assert wrapped.pair_error == 0.0  # an override alone is taken as exact (oracle)
    assert Scheduler("horus", PRED, pair_speed=PRED.pair_speed, pair_error=0.12).pair_error == 0.12
    with pytest.raises(ValidationError, match="pair_error must be a finite number"):
        Scheduler("horus", PRED, pair_error=-1.0)


def test_observed_pair_speeds_replace_predictions_and_carry_no_margin() -> None:
    # Predicted gain −0.05 is within the card's error (0.1) of paying: taken while predicted.
    pairs = {("light", "hot"): 0.45, ("hot", "light"): 0.5}
    usage = {"light": (20.0, 2000.0), "hot": (95.0, 3000.0)}
    sched = Scheduler("horus", CardPredictor(usage, pairs))
    state = cluster(1, 1)
    sched.place(state, job("h", "hot"))
    assert isinstance(sched.place(state, job("l", "light")), Placement)
    # Measured at the same speeds: nothing uncertain is left, so the share is refused, and
    # the refusal no longer claims a predictor error.
    sched.observe_pair("light@32", "hot@32", "RTX3090", 0.45)
    sched.observe_pair("hot@32", "light@32", "RTX3090", 0.5)
    assert sched.pair_speed("light@32", "hot@32", "RTX3090") == 0.45
    state2 = cluster(1, 1)
    sched.place(state2, job("h2", "hot"))
    r = sched.place(state2, job("l2", "light"))
    assert isinstance(r, Refusal) and r.code == "interference", r
    assert "predictor error" not in r.reason
    # A later measurement that says the pair gets on well wins over the cached decision.
    sched.observe_pair("light@32", "hot@32", "RTX3090", 0.9)
    sched.observe_pair("hot@32", "light@32", "RTX3090", 0.8)
    p = sched.place(state2, job("l3", "light"))
    assert isinstance(p, Placement) and p.predicted_gain == pytest.approx(0.7)
    assert sched.observed_pairs[("hot@32", "light@32", "RTX3090")] == 0.8


def test_measured_pairs_teach_the_margin_of_unmeasured_ones_on_that_gpu_model() -> None:
    """The published error (0.1) admits the light/hot share (predicted gain −0.05). Measured
    pairs on the RTX 3090 that the predictor got exactly right shrink that GPU model's margin
    and the share is refused; measurements far off widen it again. Other models keep 0.1."""
    pairs = {("light", "hot"): 0.45, ("hot", "light"): 0.5, ("cool", "light"): 0.95}
    usage = {"light": (20.0, 2000.0), "hot": (95.0, 3000.0), "cool": (30.0, 3000.0)}
    sched = Scheduler(
        "horus", CardPredictor(usage, pairs), SchedulerSettings(pair_error_prior_pairs=1)
    )
    for kind in ("cool", "light"):
        sched.remember(job(kind, kind))
    assert sched.model_pair_error() == {}
    sched.observe_pair("cool@32", "light@32", "RTX3090", 0.95)  # as predicted
    sched.observe_pair("cool@32", "light@32", "V100", 0.55)  # 0.4 off, on another model
    # (1 × 0.1 + 0) / (1 + 1) and (1 × 0.1 + 0.4) / 2
    assert sched.model_pair_error() == pytest.approx({"RTX3090": 0.05, "V100": 0.25})
    state = cluster(1, 1)
    sched.place(state, job("h", "hot"))
    r = sched.place(state, job("l", "light"))  # −0.05 + 2 × 0.05 ≥ 0 still: taken
    assert isinstance(r, Placement), r
    sched.observe_pair("light@32", "cool@32", "RTX3090", 0.9)  # default 0.9: exact again
    assert sched.model_pair_error()["RTX3090"] == pytest.approx(0.1 / 3)
    state2 = cluster(1, 1)
    sched.place(state2, job("h2", "hot"))
    r2 = sched.place(state2, job("l2", "light"))  # −0.05 + 2 × 0.033 > 0: still taken
    assert isinstance(r2, Placement), r2
    strict = Scheduler(
        "horus", CardPredictor(usage, pairs), SchedulerSettings(pair_error_prior_pairs=0)
    )
    for kind in ("cool", "light"):
        strict.remember(job(kind, kind))
    strict.observe_pair("cool@32", "light@32", "RTX3090", 0.95)
    state3 = cluster(1, 1)
    strict.place(state3, job("h", "hot"))
    r3 = strict.place(state3, job("l", "light"))  # margin 0: the predicted loss stands
    assert isinstance(r3, Refusal) and r3.code == "interference", r3
    # The same pair measured again with a different speed: its error is the latest one.
    strict.observe_pair("cool@32", "light@32", "RTX3090", 0.35)
    assert strict.model_pair_error() == pytest.approx({"RTX3090": 0.6})
    assert isinstance(strict.place(state3, job("l2", "light")), Placement)


def test_one_unmeasured_pair_term_keeps_half_the_margin() -> None:
    # Predicted gain (0.4 + 0.45) − 1 = −0.15: within 2 × 0.1 of paying, not within 2 × 0.05.
    pairs = {("light", "hot"): 0.4, ("hot", "light"): 0.45}
    usage = {"light": (20.0, 2000.0), "hot": (95.0, 3000.0)}
    sched = Scheduler("horus", CardPredictor(usage, pairs))
    state = cluster(1, 1)
    sched.place(state, job("h", "hot"))
    assert isinstance(sched.place(state, job("l", "light")), Placement)  # full margin
    state2 = cluster(1, 1)
    sched.place(state2, job("h2", "hot"))
    sched.observe_pair("hot@32", "light@32", "RTX3090", 0.45)  # one direction measured
    r = sched.place(state2, job("l2", "light"))
    assert isinstance(r, Refusal) and "allowing ±0.05 predictor error per pair" in r.reason, r


@pytest.mark.parametrize("speed", [0.0, -0.1, 1.5, float("nan"), float("inf")])
def test_an_observed_speed_outside_0_1_is_refused(speed: float) -> None:
    sched = Scheduler("horus", PRED)
    with pytest.raises(ValidationError, match=r"observed pair speed .* must be in \(0, 1\]"):
        sched.observe_pair("a", "b", "RTX3090", speed)
    assert sched.observed_pairs == {}


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_job_restricted_to_nodes_is_placed_only_there(policy: str) -> None:
    """``JobRequest.nodes`` (the pod template's node constraints) bounds every policy, the
    gang check and the reservation alike."""
    state = cluster(3, 2)
    sched = Scheduler(policy, PRED)
    p = sched.place(state, job("a", "light", nodes=frozenset({"node-2"})))
    assert gpu_of(p).startswith("node-2/")
    gang = sched.place(state, job("g", "light", replicas=3, nodes=frozenset({"node-1"})))
    assert isinstance(gang, Refusal) and gang.code == "impossible"
    assert "on the nodes its pod template allows" in gang.reason
    r = sched.place(state, job("b", "light", nodes=frozenset()))
    assert isinstance(r, Refusal) and r.code == "impossible"
