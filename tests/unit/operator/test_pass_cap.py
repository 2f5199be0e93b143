"""The per-pass cap (``max_jobs_per_pass``, issue 27): a pass admits and places at most so
many jobs — new ones not tried yet first (highest priority, then oldest), then those tried
longest ago — and leaves the rest untouched for the next pass.

Why it exists: a pass holds what it commits in memory until it ends, and the process keeps
the memory of its largest pass — at 5,000 nodes a pass of 10,000 arrivals left the operator
40 % larger for good. What must hold: no job is written before its turn (no status, no pod),
none is placed twice, the order is the one above for new jobs and the scheduler's for queued
ones, every job is placed in the end, and jobs that stay Pending (a class a quota forbids)
neither hold the cap's places nor keep the operator passing back to back.
"""

from __future__ import annotations

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.common import constants as c
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def _job(name: str, second: int, core: int = 25) -> dict[str, object]:
    obj = dljob(name, gpu={"mode": "explicit", "corePercent": core, "memoryMiB": 8000})
    obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"  # type: ignore[index]
    return obj


def _placed(api: FakeJobApi) -> set[str]:
    return {n for (_, n), j in api.dljobs.items() if (j.get("status") or {}).get("placements")}


def test_new_jobs_past_the_cap_wait_untouched_and_go_oldest_first() -> None:
    api = FakeJobApi([node("n1", gpus=4), node("n2", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, max_jobs_per_pass=3)
    try:
        names = [f"j{i}" for i in range(7)]
        for i, name in enumerate(names):  # j6 is the oldest, j0 the newest
            api.add_dljob(_job(name, 30 - i))
        first = rec.run_pass()
        assert (first.placed, first.held_back) == (3, 4)
        assert _placed(api) == {"j6", "j5", "j4"}
        for name in ("j3", "j2", "j1", "j0"):  # not admitted: nothing written, no pod
            assert not api.job(name).get("status"), name
        assert len(api.pods) == 3
        second = rec.run_pass()
        assert (second.placed, second.held_back) == (3, 1)
        assert _placed(api) == {"j6", "j5", "j4", "j3", "j2", "j1"}
        third = rec.run_pass()
        assert (third.placed, third.held_back) == (1, 0)
        assert _placed(api) == set(names)
        # each job placed once: one record, one pod, one Binding each
        assert api.writes["status"] == 7 and api.writes["pod"] == 7
        assert api.writes["binding"] == 7
    finally:
        rec.close()


def test_queued_jobs_past_the_cap_keep_their_status_until_their_pass() -> None:
    # one GPU per job (all of its core): a 2-GPU node takes 2 of 5, the rest are queued
    api = FakeJobApi([node("n1", gpus=2)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, max_jobs_per_pass=10)
    try:
        for i in range(5):
            api.add_dljob(_job(f"q{i}", i, core=100))
        rec.run_pass()
        queued = {n for n in (f"q{i}" for i in range(5)) if n not in _placed(api)}
        assert _placed(api) == {"q0", "q1"} and queued == {"q2", "q3", "q4"}
        for name in queued:
            assert api.job(name)["status"]["phase"] == c.DLJOB_PHASE_QUEUED
        before = {n: api.job(n)["metadata"]["resourceVersion"] for n in queued}
        api.nodes.append(node("n2", gpus=4))  # room for all three
        rec.max_jobs_per_pass = 2
        report = rec.run_pass()
        assert (report.placed, report.held_back) == (2, 1)
        assert _placed(api) == {"q0", "q1", "q2", "q3"}  # the scheduler's order: oldest first
        # the one past the cap was not written (not refused again, not placed)
        assert api.job("q4")["metadata"]["resourceVersion"] == before["q4"]
        assert api.job("q4")["status"]["phase"] == c.DLJOB_PHASE_QUEUED
        report = rec.run_pass()
        assert (report.placed, report.held_back) == (1, 0)
        assert len(_placed(api)) == 5
    finally:
        rec.close()


def _queue_total(rec: Reconciler) -> float:
    return sum(
        sample.value for metric in rec.metrics.queue_length.collect() for sample in metric.samples
    )


def test_jobs_that_stay_pending_do_not_hold_the_cap_or_spin_the_operator() -> None:
    # Five old jobs name a class a quota refuses (they stay Pending, retried each time they
    # are tried); a later job of the default class must still be admitted within a few passes.
    api = FakeJobApi([node("n1", gpus=4)])
    api.priority_classes["gold"] = 1000
    api.quota_refuses.add("gold")
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, max_jobs_per_pass=2)
    try:
        for i in range(5):
            obj = _job(f"gold{i}", i)
            obj["spec"]["priorityClassName"] = "gold"  # type: ignore[index]
            api.add_dljob(obj)
        first = rec.run_pass()  # gold0 and gold1 tried (gold ranks first among untried)
        assert (first.placed, first.held_back) == (0, 3)
        assert api.dry_run_attempts == 2
        assert {n for n in ("gold0", "gold1") if api.job(n).get("status")} == {"gold0", "gold1"}
        api.add_dljob(_job("late", 50))  # newest of all, lowest priority
        second = rec.run_pass()  # the untried: gold2 and gold3 (higher priority than late)
        assert (second.placed, second.held_back) == (0, 2)
        third = rec.run_pass()  # gold4 and late: late is placed
        assert (third.placed, third.held_back) == (1, 0)
        assert "late" in _placed(api)
        # every Pending job was tried once: no pass calls for the next at once any more,
        # and each pass tries the two tried longest ago (gold0/1, then gold2/3, then gold4/0)
        tried_before = api.dry_run_attempts
        for _ in range(3):
            report = rec.run_pass()
            assert (report.placed, report.held_back) == (0, 0)
        assert api.dry_run_attempts - tried_before == 6
        for i in range(5):
            assert api.job(f"gold{i}")["status"]["phase"] == c.DLJOB_PHASE_PENDING
    finally:
        rec.close()


def test_untried_jobs_of_a_higher_class_are_admitted_first() -> None:
    api = FakeJobApi([node("n1", gpus=4)])
    api.priority_classes["high"] = 100
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, max_jobs_per_pass=2)
    try:
        for i in range(3):
            api.add_dljob(_job(f"old{i}", i))
        urgent = _job("urgent", 40)  # the newest
        urgent["spec"]["priorityClassName"] = "high"  # type: ignore[index]
        api.add_dljob(urgent)
        report = rec.run_pass()
        assert (report.placed, report.held_back) == (2, 2)
        assert _placed(api) == {"urgent", "old0"}
    finally:
        rec.close()


def test_queued_jobs_past_the_cap_still_count_in_the_queue_metric() -> None:
    api = FakeJobApi([node("n1", gpus=1)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, max_jobs_per_pass=10)
    try:
        for i in range(4):
            api.add_dljob(_job(f"q{i}", i, core=100))
        rec.run_pass()  # one placed, three queued (refused: no room)
        assert _queue_total(rec) == 3
        api.nodes.append(node("n2", gpus=1))
        rec.max_jobs_per_pass = 1
        report = rec.run_pass()  # one more placed; the pass stops there: two not reached
        assert (report.placed, report.held_back) == (1, 2)
        assert _queue_total(rec) == 2  # still waiting, under their last refusal's reason
    finally:
        rec.close()
