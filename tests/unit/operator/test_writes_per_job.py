"""What one DLJob costs the apiserver in writes, on both placement paths (issue 27).

Every write the operator makes is a request the apiserver (and etcd) must serve, and a DLJob
status write — a custom resource with a large schema — costs several pod writes
(``benchmarks/apiserver_costs.py``). So the count per job is asserted here, over whole passes
on the in-memory apiserver, which counts every write it receives: a job that goes well is
written twice (the signed placement record with its admission, then Running), gets its pod
(and on the DRA path its claim), a Binding on the device-plugin path, and no Event unless
``lifecycle_events`` asks for them (the conditions carry the same sentences).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node
from test_operator_dra_commit_claims import allocate_as_recorded, dra_api

from horus.common import constants as c
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()
JOBS = 6


def _job(name: str) -> dict[str, object]:
    return dljob(name, gpu={"mode": "explicit", "corePercent": 25, "memoryMiB": 8000})


def _run_to_running(api: FakeJobApi, rec: Reconciler, dra: bool = False) -> Counter[str]:
    """Place :data:`JOBS` single-replica jobs, let their pods start, and sync them Running."""
    names = [f"j{i}" for i in range(JOBS)]
    for name in names:
        api.add_dljob(_job(name))
    report = rec.run_pass()
    assert report.placed == JOBS
    if dra:  # the kube-scheduler allocates each claim where it is pinned and binds the pod
        for name in names:
            allocate_as_recorded(api, name)
    api.run_bound_pods()
    rec.run_pass()
    rec.run_pass()  # a steady pass writes nothing more
    rec.writer.drain()
    assert {api.job(n)["status"]["phase"] for n in names} == {c.DLJOB_PHASE_RUNNING}
    return api.writes


def test_a_placed_job_costs_four_writes_on_the_device_plugin_path() -> None:
    api = FakeJobApi([node("n1", gpus=4), node("n2", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=4)
    try:
        writes = _run_to_running(api, rec)
    finally:
        rec.close()
    # was: status ×2, pod, Binding, Events Scheduled and Running (6)
    assert writes == Counter(status=2 * JOBS, pod=JOBS, binding=JOBS), writes
    assert not api.events


def test_a_placed_job_costs_four_writes_on_the_dra_path() -> None:
    api = dra_api("n1", "n2", gpus=4)
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        writes = _run_to_running(api, rec, dra=True)
    finally:
        rec.close()
    # record, claim, pod, Running: the kube-scheduler binds (and posts its own Scheduled
    # Event on the pod)
    assert writes == Counter(status=2 * JOBS, claim=JOBS, pod=JOBS), writes
    assert not api.events


def test_lifecycle_events_are_posted_when_asked_for() -> None:
    api = FakeJobApi([node("n1", gpus=4), node("n2", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=4, lifecycle_events=True)
    try:
        writes = _run_to_running(api, rec)
    finally:
        rec.close()
    assert writes["event"] == 2 * JOBS
    assert api.reasons("j0") == ["Scheduled", "Running"]


class SlowDryRunApi(FakeJobApi):
    """A server-side dry run that takes a moment, as on a busy apiserver."""

    def create_pod(
        self, namespace: str, manifest: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any] | None:
        if dry_run:
            time.sleep(0.05)
        return super().create_pod(namespace, manifest, dry_run)


def test_a_burst_of_jobs_with_one_template_costs_one_dry_run() -> None:
    """Jobs are admitted in parallel; the first one's dry run answers for the rest of the
    burst (the same template and class in the namespace) instead of each asking."""
    api = SlowDryRunApi([node("n1", gpus=4), node("n2", gpus=4)])
    rec = Reconciler(api, PREDICTOR, KEY, workers=8)
    try:
        for i in range(JOBS):
            api.add_dljob(_job(f"b{i}"))
        assert rec.run_pass().placed == JOBS
    finally:
        rec.close()
    assert api.dry_runs == 1
