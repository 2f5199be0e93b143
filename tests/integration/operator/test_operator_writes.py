"""What a DLJob costs the real apiserver in writes (issue 27), counted by the apiserver itself.

The unit test (tests/unit/operator/test_writes_per_job.py) counts the operator's calls on an
in-memory API; this counts the requests the kube-apiserver served, by its own
``apiserver_request_total``, while the operator places a batch of jobs and follows them to
Running: per job one pod, one Binding and at most two status writes (the signed record, then
Running), and no Event from the operator about a job that went well.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from operator_support import Kube, dljob_body, request_counts

from horus.common import constants as c
from horus.operator.writer import COMPONENT

pytestmark = pytest.mark.integration

JOBS = 8
WRITES = ("dljobs/status", "pods", "pods/binding", "events")


def test_a_job_that_goes_well_costs_a_pod_a_binding_and_two_status_writes(
    cluster: Any, gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    op = operator_factory()
    op.wait_leader()
    names = [f"w{i}" for i in range(JOBS)]
    before = request_counts(cluster, "POST", WRITES)
    patches_before = request_counts(cluster, "PATCH", WRITES)
    kube.create_jobs([dljob_body(n) for n in names])  # auto-sized: no share warning either
    kube.wait(
        f"{JOBS} jobs Running",
        lambda: all(kube.phases().get(n) == c.DLJOB_PHASE_RUNNING for n in names),
        120,
    )
    time.sleep(4)  # two more passes (--resync-period 2): any write they made is counted
    after = request_counts(cluster, "POST", WRITES)
    patches_after = request_counts(cluster, "PATCH", WRITES)
    posts = {k: after[k] - before[k] for k in WRITES}
    patches = {k: patches_after[k] - patches_before[k] for k in WRITES}
    print(f"for {JOBS} jobs: POST {posts}, PATCH {patches}")
    # the operator alone writes DLJob status here (no node agent runs on kwok nodes)
    assert patches["dljobs/status"] <= 2 * JOBS
    assert posts["pods"] == JOBS and posts["pods/binding"] == JOBS
    mine = [
        e
        for e in kube.events()
        if e["involvedObject"]["name"] in names and e.get("reportingComponent") == COMPONENT
    ]
    assert not mine, [(e["involvedObject"]["name"], e["reason"]) for e in mine]
    assert op.alive()
