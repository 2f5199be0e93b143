"""``JobRequest.avoid_gpus``: a job is never placed on a GPU it avoids (the DRA path keeps a
job overtaken there off it for a while), and a job that may use no GPU at all is told so by
``check_possible``, never placed."""

from __future__ import annotations

from sched_helpers import cluster, job, synthetic_predictor

from horus.scheduler import Placement, Refusal, Scheduler

PRED = synthetic_predictor([(20.0, 2048.0)] * 3, 0.8, 5)


def test_a_job_is_never_placed_on_a_gpu_it_avoids() -> None:
    state = cluster(1, 2)
    sched = Scheduler("horus", PRED)
    free = sched.place(state, job("a", "m2"))
    assert isinstance(free, Placement)
    first = free.shares[0].gpu_uuid
    other = next(u for u in state.gpu_uuid if u != first)
    kept_off = sched.place(state, job("b", "m2", avoid_gpus=frozenset({first})))
    assert isinstance(kept_off, Placement) and kept_off.shares[0].gpu_uuid == other
    every = frozenset(state.gpu_uuid)
    assert sched.check_possible(state, job("c", "m2", avoid_gpus=every)) is not None
    assert isinstance(sched.place(state, job("c", "m2", avoid_gpus=every)), Refusal)
