"""The per-pass cap (``max_jobs_per_pass``, issue 27): a pass admits and places at most so
many jobs, oldest first, and leaves the rest untouched for the next pass.

Why it exists: a pass holds what it commits in memory until it ends, and the process keeps
the memory of its largest pass — at 5,000 nodes a pass of 10,000 arrivals left the operator
40 % larger for good. What must hold: no job is written before its turn (no status, no pod),
none is placed twice, the order is arrival order for new jobs and the scheduler's for queued
ones, and every job is placed in the end.
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
