"""Measured pairs invalidate only the cached gains they concern: a scheduler that has been
placing all along decides exactly like a fresh one told the same measurements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import cluster, job, synthetic_predictor

from horus.scheduler import Placement, Scheduler

pytestmark = pytest.mark.unit

PRED = synthetic_predictor([(10, 2000), (35, 3000), (60, 6000), (40, 4000)], 0.2, 8)
MODELS = sorted(PRED.usage)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("place"), st.sampled_from(MODELS)),
            st.tuples(
                st.just("observe"),
                st.sampled_from(MODELS),
                st.sampled_from(MODELS),
                st.floats(0.05, 1.0),
                st.sampled_from([None, 0.02, 0.2]),
            ),
        ),
        min_size=1,
        max_size=30,
    ),
    observed_error=st.sampled_from([0.0, 0.19]),
)
def test_incremental_caches_match_a_fresh_scheduler(steps: list, observed_error: float) -> None:
    state = cluster(2, 3)
    card = {"metrics_heldout_family": {"pair_heldout_mae": 0.12}}
    PRED.card = card  # type: ignore[attr-defined]
    old = Scheduler("horus", PRED, observed_error=observed_error)
    # every kind known from the start, so both learn the same error from each measurement
    kinds = [job(f"k-{m}", m) for m in MODELS]
    for k in kinds:
        old.remember(k)
    seen: list[tuple[str, str, float, float | None]] = []
    for i, step in enumerate(steps):
        if step[0] == "observe":
            _, a, b, speed, error = step  # error: the measurement's own (None: the default)
            old.observe_pair(f"{a}@32", f"{b}@32", "RTX3090", speed, error)
            seen.append((f"{a}@32", f"{b}@32", speed, error))
            continue
        j = job(f"j{i}", step[1])
        fresh = Scheduler("horus", PRED, observed_error=observed_error)
        for k in kinds:
            fresh.remember(k)
        for a, b, speed, error in seen:
            fresh.observe_pair(a, b, "RTX3090", speed, error)
        got, want = old.attempt(state, j), fresh.attempt(state, j)
        assert got == want
        for kind in MODELS:  # every GPU's verdict, not only the winner's
            probe = job("probe", kind)
            assert old.evaluate(state, probe, state.node_names) == fresh.evaluate(
                state, probe, state.node_names
            )
        if isinstance(got, Placement):
            state.apply(j, got)


def test_a_measurement_between_two_residents_changes_a_third_kinds_gain() -> None:
    """m0 and m1 share a GPU; m2's gain of joining them reads m0's speed next to m1."""
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    for i, m in enumerate(["m0", "m1"]):
        j = job(f"r{i}", m)
        only_gpu0 = [True, False]
        placed = sched.attempt(state, j, exclude=~np.array(only_gpu0))
        assert isinstance(placed, Placement)
        state.apply(j, placed)
    probe = job("probe", "m2")
    before = sched.evaluate(state, probe, ["node-0"])
    sched.observe_pair("m0@32", "m1@32", "RTX3090", 0.05)  # m0 barely moves next to m1
    fresh = Scheduler("horus", PRED)
    for m in ("m0", "m1", "m2"):
        fresh.remember(job(f"k-{m}", m))
    fresh.observe_pair("m0@32", "m1@32", "RTX3090", 0.05)
    gpu0 = np.array([False, True])  # judge joining the pair on gpu-0 only
    after, want = (
        sched.attempt(state, probe, exclude=gpu0),
        fresh.attempt(state, probe, exclude=gpu0),
    )
    assert after == want
    assert before != sched.evaluate(state, probe, ["node-0"]) or after != sched.attempt(
        state, probe
    )
