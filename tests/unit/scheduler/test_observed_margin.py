"""The margin on a measured pair comes from that measurement's own error (issue 26): the same
measured speed is shared or refused depending on how sure the signal that read it is."""

from __future__ import annotations

import pytest
from sched_helpers import TablePredictor, cluster, job

from horus.common.errors import ValidationError
from horus.scheduler import Placement, Refusal, Scheduler

pytestmark = pytest.mark.unit

GPU = "RTX3090"


def _one_gpu_with_b(sched: Scheduler) -> object:
    state = cluster(1, 1)
    b = job("b0", "B")
    placed = sched.place(state, b)
    assert isinstance(placed, Placement)
    return state


@pytest.mark.parametrize(("error", "shared"), [(0.1, True), (0.02, False), (None, False)])
def test_measured_pair_margin_is_its_own_error(error: float | None, shared: bool) -> None:
    """a and b measured at 0.45 each: the pair's gain is 0.45 + 0.45 − 1 = −0.1, below
    waiting (min_gain 0) unless each of its 2 terms may be 0.05 too low. With error 0.1 the
    optimistic bound (−0.1 + 2 × 0.1) beats waiting; with 0.02 (a progress reading) it does
    not; without an error the constructor's default (0: exact) applies."""
    pred = TablePredictor({"A": (30.0, 2000.0), "B": (30.0, 2000.0)}, default_speed=0.95)
    sched = Scheduler("horus", pred, pair_error=0.0)
    state = _one_gpu_with_b(sched)
    sched.remember(job("a-kind", "A"))
    sched.observe_pair("A@32", "B@32", GPU, 0.45, error)
    sched.observe_pair("B@32", "A@32", GPU, 0.45, error)
    assert sched.observed_pair_error("A@32", "B@32", GPU) == (error or 0.0)
    got = sched.attempt(state, job("a0", "A"))  # type: ignore[arg-type]
    assert isinstance(got, Placement) is shared, got
    if not shared:
        assert isinstance(got, Refusal) and got.code == "interference"
    # share_margin (the planners' view) agrees: 2 terms × z × error
    assert sched.share_margin("A@32", GPU, ("B@32",)) == pytest.approx(2 * (error or 0.0))


def test_a_new_error_for_the_same_pair_replaces_the_old() -> None:
    pred = TablePredictor({"A": (30.0, 2000.0), "B": (30.0, 2000.0)})
    sched = Scheduler("horus", pred, pair_error=0.0)
    state = _one_gpu_with_b(sched)
    sched.remember(job("a-kind", "A"))
    for k, o in (("A@32", "B@32"), ("B@32", "A@32")):
        sched.observe_pair(k, o, GPU, 0.45, 0.1)
    assert isinstance(sched.attempt(state, job("a0", "A")), Placement)  # type: ignore[arg-type]
    for k, o in (("A@32", "B@32"), ("B@32", "A@32")):
        sched.observe_pair(k, o, GPU, 0.45, 0.01)  # a surer reading of the same speed
    assert isinstance(sched.attempt(state, job("a0", "A")), Refusal)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_error_is_refused(bad: float) -> None:
    sched = Scheduler("horus", TablePredictor({"A": (30.0, 2000.0)}))
    with pytest.raises(ValidationError, match="error of the observed pair speed"):
        sched.observe_pair("A@32", "A@32", GPU, 0.5, bad)
