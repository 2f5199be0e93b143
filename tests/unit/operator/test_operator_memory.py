"""What a gone job leaves behind in the operator goes (issue 27: the scale cycles).

A long-running operator sees every DLJob ever created; whatever it keeps per job (the
admitted profile, parsed objects, signature checks) must go once the job is gone, or its
memory grows with each create/delete cycle of a busy cluster.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def test_a_deleted_jobs_profile_is_forgotten_by_the_next_pass() -> None:
    api = FakeJobApi([node("n1", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        for cycle in range(3):
            names = [f"c{cycle}-{i}" for i in range(4)]
            for name in names:
                api.add_dljob(dljob(name))
            assert rec.run_pass().placed == 4
            uids = [api.job(n)["metadata"]["uid"] for n in names]
            assert all(rec.admission.known_profile(u) is not None for u in uids)
            kept = next(iter(uids[1:]))
            for name in names[:1]:  # one deleted, with its pods (the garbage collector's job)
                del api.dljobs[("default", name)]
                api.pods.pop(("default", f"{name}-0"), None)
            rec.run_pass()
            assert rec.admission.known_profile(uids[0]) is None
            assert rec.admission.known_profile(kept) is not None  # the others stay
            for name in names[1:]:
                del api.dljobs[("default", name)]
                api.pods.pop(("default", f"{name}-0"), None)
            rec.run_pass()
            assert all(rec.admission.known_profile(u) is None for u in uids)
    finally:
        rec.close()


class _SlowDeletes(FakeJobApi):
    """Deletes that take the time a busy apiserver takes, remembering their threads."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.delete_threads: set[str] = set()
        self.in_flight = self.most_in_flight = 0

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        with self.lock:
            self.delete_threads.add(threading.current_thread().name)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.05)
        with self.lock:
            self.in_flight -= 1
        super().delete_pod(namespace, name, uid)


def _placed_then_gone(api: FakeJobApi, rec: Reconciler, count: int) -> list[str]:
    """``count`` jobs placed, then deleted with their pods left (no garbage collector here)."""
    old = [f"old-{i}" for i in range(count)]
    for name in old:
        api.add_dljob(dljob(name))
    assert rec.run_pass().placed == count
    for name in old:
        del api.dljobs[("default", name)]
    return old


def test_a_gone_jobs_pods_are_deleted_beside_the_pass_and_counted() -> None:
    """Leftover pods of deleted jobs (thousands after a cycle at 5,000 nodes) are deleted by
    the cleanup threads, several at a time, not one by one inside the pass; the pass still
    reports each and places the new job in the same pass."""
    api = _SlowDeletes([node("n1", gpus=8)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=8)
    try:
        _placed_then_gone(api, rec, 8)
        api.add_dljob(dljob("new"))
        report = rec.run_pass()
        assert report.pods_deleted == 8 and report.placed == 1
        assert not any(k[1].startswith("old-") for k in api.pods)
        assert api.delete_threads and all(t.startswith("horus-cleanup") for t in api.delete_threads)
        assert api.most_in_flight >= 2  # concurrent, not one after the other
    finally:
        rec.close()


class _HeldDeletes(FakeJobApi):
    """Deletes that wait until the test lets them go (an apiserver busy with thousands)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.go = threading.Event()
        self.started: list[str] = []

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        with self.lock:
            self.started.append(name)
        self.go.wait(30)
        super().delete_pod(namespace, name, uid)


def test_a_pass_does_not_wait_for_slow_deletions_and_never_starts_one_twice(
    monkeypatch: Any,
) -> None:
    """At 5,000 nodes a pass that found 6,355 pods of deleted jobs waited 9 minutes for their
    deletions before the next pass could place anything. Now a pass waits a few seconds, the
    deletions go on beside the next passes, and a pass that still sees a pod whose deletion
    is under way does not start it again."""
    from horus.common import constants as c

    monkeypatch.setattr(c, "LEFTOVER_DELETE_WAIT_SECONDS", 0.2)
    api = _HeldDeletes([node("n1", gpus=8)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=8)
    try:
        old = _placed_then_gone(api, rec, 4)
        t0 = time.monotonic()
        report = rec.run_pass()
        assert time.monotonic() - t0 < 10  # not held by the deletions
        assert report.pods_deleted == 0  # none done yet
        api.add_dljob(dljob("new"))
        again = rec.run_pass()  # the four pods still listed, their deletions under way
        assert again.placed == 1
        api.go.set()
        deadline = time.monotonic() + 10
        while any(k[1].startswith("old-") for k in api.pods) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(k[1].startswith("old-") for k in api.pods)
        rec.run_pass()
        rec.cleanup_pool.shutdown(wait=True)  # whatever was submitted has run
        # each deletion started once, although two passes saw the pods
        assert sorted(api.started) == sorted(f"{n}-0" for n in old)
    finally:
        api.go.set()
        rec.close()
