"""Run-time correction on the in-memory API: the planners' decisions carried out by the
operator — a measured bad pair is split up, a `Never` job is never moved, a waiting
higher-priority job preempts a lower one that may be preempted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, node
from test_moves import movable
from test_run_pass import PREDICTOR, auto_job

from horus.common import constants as c
from horus.operator.reconcile import Reconciler
from horus.scheduler.types import MigrationSettings, PreemptionSettings


def _reconciler(api: FakeJobApi) -> Reconciler:
    return Reconciler(
        api,
        PREDICTOR,
        KEY,
        workers=4,
        correction=(MigrationSettings(min_interval_s=0.0), PreemptionSettings()),
        correction_period=0.0001,
    )


def _explicit(job: dict[str, Any], core: int, mib: int) -> dict[str, Any]:
    job["spec"]["gpu"] = {"mode": "explicit", "corePercent": core, "memoryMiB": mib}
    return job


def _measure(api: FakeJobApi, name: str, other: str, speed: float) -> None:
    """What the node agent writes: the job ran at ``speed`` next to ``other``'s kind."""
    api.job(name)["status"]["observed"] = {
        "util": 40.0,
        "sampledAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pairs": [{"other": other, "gpuModel": "H100", "speed": speed, "samples": 12}],
    }


def _gpus(api: FakeJobApi, name: str) -> set[tuple[str, int]]:
    return {(p["node"], p["gpuIndex"]) for p in api.job(name)["status"]["placements"]}


@pytest.mark.parametrize("policy", ["OnCheckpoint", "Never"])
def test_a_measured_bad_pair_is_split_up_unless_the_job_says_never(policy: str) -> None:
    api = FakeJobApi([node("n1", gpus=1)])
    api.graceful = True
    rec = _reconciler(api)
    try:
        for name in ("a", "b"):
            job = _explicit(movable(name) if policy == "OnCheckpoint" else auto_job(name), 40, 8000)
            api.add_dljob(job)
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()
        assert _gpus(api, "a") == _gpus(api, "b") == {("n1", 0)}
        api.nodes.append(node("n2", gpus=1))  # an idle GPU appears
        for name in ("a", "b"):
            _measure(api, name, "resnet50@64", 0.3)
        rec.run_pass()
        moved = [n for n in ("a", "b") if _gpus(api, n) == {("n2", 0)}]
        if policy == "Never":
            assert not moved and "migrations" not in api.job("a")["status"]
            return
        assert len(moved) == 1, "one of the two moves to the idle GPU"
        status = api.job(moved[0])["status"]
        assert status["migrations"]["count"] == 1 and status["reason"] == "Migrating"
        assert status["migrations"]["lastTo"] == "n2/gpu-0"
        api.finish_deletions()
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()
        assert api.job(moved[0])["status"]["phase"] == c.DLJOB_PHASE_RUNNING
        assert {p["spec"]["nodeName"] for p in api.pods.values()} == {"n1", "n2"}
        rec.writer.drain()
        assert "Migrated" in api.reasons(moved[0])
        rec.run_pass()  # no flapping: nothing moves back
        assert _gpus(api, moved[0]) == {("n2", 0)}
    finally:
        rec.close()


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_later() -> None:
    api = FakeJobApi([node("n1", gpus=1)])
    api.graceful = True
    rec = _reconciler(api)
    try:
        api.add_dljob(_explicit(movable("low"), 100, 60000))
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()
        api.priority_classes["gold"] = 500
        high = _explicit(auto_job("high"), 100, 60000)
        high["spec"]["priorityClassName"] = "gold"
        api.add_dljob(high)
        rec.run_pass()
        low = api.job("low")["status"]
        assert (low["phase"], low["reason"]) == ("Queued", "Preempted")
        assert low["migrations"]["preemptions"] == 1
        api.finish_deletions()
        rec.run_pass()  # the GPU is free: the high-priority job starts
        assert api.job("high")["status"]["phase"] == c.DLJOB_PHASE_SCHEDULED
        assert api.job("low")["status"]["phase"] == c.DLJOB_PHASE_QUEUED
        rec.writer.drain()
        assert "Preempted" in api.reasons("low") and "Preempting" in api.reasons("high")
        # the preemptor never gets preempted back by its victim (lower priority)
        api.run_bound_pods()
        rec.run_pass()
        assert api.job("high")["status"]["phase"] == c.DLJOB_PHASE_RUNNING
    finally:
        rec.close()


def test_a_running_job_of_a_higher_class_is_never_preempted_by_a_lower_one() -> None:
    """The running job's priority is the value recorded when it was admitted (the live state's
    requests carry none): a waiting job of a lower class never evicts it, whatever the order."""
    api = FakeJobApi([node("n1", gpus=1)])
    api.graceful = True
    api.priority_classes.update({"gold": 1000, "bronze": 100})
    rec = _reconciler(api)
    try:
        high = _explicit(movable("high"), 100, 60000)
        high["spec"]["priorityClassName"] = "gold"
        api.add_dljob(high)
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()
        assert api.job("high")["status"]["priority"] == 1000
        low = _explicit(auto_job("low"), 100, 60000)
        low["spec"]["priorityClassName"] = "bronze"
        api.add_dljob(low)
        for _ in range(3):
            rec.run_pass()
        assert api.job("high")["status"]["phase"] == c.DLJOB_PHASE_RUNNING
        assert "preemptions" not in api.job("high")["status"].get("migrations", {})
        assert api.job("low")["status"]["phase"] == c.DLJOB_PHASE_QUEUED
        assert api.job("low")["status"]["priority"] == 100
    finally:
        rec.close()


def test_a_class_with_preemption_policy_never_waits_instead_of_preempting() -> None:
    """As kube-scheduler treats a pod of such a class: ahead in the queue, never a preemptor."""
    api = FakeJobApi([node("n1", gpus=1)])
    api.graceful = True
    api.priority_classes.update({"gold-polite": 1000, "bronze": 100})
    api.never_preempt.add("gold-polite")
    rec = _reconciler(api)
    try:
        low = _explicit(movable("low"), 100, 60000)
        low["spec"]["priorityClassName"] = "bronze"
        api.add_dljob(low)
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()
        high = _explicit(auto_job("high"), 100, 60000)
        high["spec"]["priorityClassName"] = "gold-polite"
        api.add_dljob(high)
        for _ in range(3):
            rec.run_pass()
        assert api.job("low")["status"]["phase"] == c.DLJOB_PHASE_RUNNING
        assert api.job("high")["status"]["phase"] == c.DLJOB_PHASE_QUEUED
        api.never_preempt.clear()  # the same jobs, a class that may preempt: it does
        rec.run_pass()
        assert api.job("low")["status"]["reason"] == "Preempted"
    finally:
        rec.close()
