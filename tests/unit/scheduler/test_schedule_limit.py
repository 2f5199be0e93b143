"""``Scheduler.schedule(limit=)``: a pass that stops after so many placements (issue 27).

The operator bounds what one pass commits (and so the memory a pass needs) with this limit.
What must hold: the placements are the first ones the queue order gives, a job the pass did
reach is refused as without a limit, and the jobs after the limit are neither placed nor
refused — so the caller writes nothing for them and takes them up next pass.
"""

from __future__ import annotations

from sched_helpers import TablePredictor, cluster, job

from horus.scheduler import Scheduler

PRED = TablePredictor({"light": (20.0, 2000.0)})


def test_the_limit_places_the_first_jobs_in_queue_order_and_leaves_the_rest() -> None:
    state = cluster(1, 4)
    sched = Scheduler("exclusive", PRED)
    jobs = [job(f"j{i}", "light", float(10 - i)) for i in range(6)]  # j5 arrived first
    res = sched.schedule(state, jobs, limit=2)
    assert [p.job for p in res.placed] == ["j5", "j4"]
    assert res.refused == ()
    assert set(state.jobs) == {"j5", "j4"}  # only the placements made are applied


def test_refusals_before_the_limit_are_made_as_without_it() -> None:
    state = cluster(1, 2)
    sched = Scheduler("exclusive", PRED)
    big = job("big", "light", 0.0, replicas=3)  # 3 GPUs on a 2-GPU node: refused
    rest = [job(f"s{i}", "light", float(1 + i)) for i in range(4)]
    unlimited = Scheduler("exclusive", PRED).schedule(cluster(1, 2), [big, *rest])
    res = sched.schedule(state, [big, *rest], limit=1)
    assert [p.job for p in res.placed] == ["s0"]
    assert [r.job for r in res.refused] == ["big"]
    assert res.reason_for("big") == unlimited.reason_for("big")
    assert [p.job for p in unlimited.placed] == ["s0", "s1"]  # without the limit: two


def test_no_limit_and_a_limit_above_the_queue_are_the_same_pass() -> None:
    jobs = [job(f"j{i}", "light", float(i)) for i in range(5)]
    a = Scheduler("exclusive", PRED).schedule(cluster(1, 3), jobs)
    b = Scheduler("exclusive", PRED).schedule(cluster(1, 3), jobs, limit=100)
    assert [p.job for p in a.placed] == [p.job for p in b.placed] == ["j0", "j1", "j2"]
    assert [r.job for r in a.refused] == [r.job for r in b.refused] == ["j3", "j4"]
