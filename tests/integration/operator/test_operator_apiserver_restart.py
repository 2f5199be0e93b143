"""The operator's watch-fed view across apiserver crashes, while jobs arrive (issue 27).

The operator reads every pass from its informers (:mod:`horus.operator.view`), never from a
LIST. Killing the apiserver (SIGKILL) cuts every watch at once; the restarted apiserver's
watch cache starts at etcd's current revision, so the informers' next watches are either
resumed or refused as too old (410) and relisted. Either way the view must come back to the
cluster as it is: no job placed twice (a pass that missed its own write), none lost (a pass
that missed a new job) and no GPU counted twice or not at all. Two restarts land while 60 jobs
(1–2 replicas, explicit and auto-sized shares) are being submitted and committed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from operator_support import Kube, check_invariants, restart_apiserver
from test_operator_scale import workload


def test_placements_stay_exact_across_two_apiserver_crashes(
    cluster: Any, gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    op = operator_factory(identity="restarts", lease_duration=30.0)
    op.wait_leader()
    bodies = workload(60, seed=27)
    errors: list[BaseException] = []

    def create(body: dict[str, Any]) -> None:
        """One job, retried while the apiserver is down (its create may have landed)."""
        for _ in range(120):
            try:
                kube.create_jobs([body], workers=1)
                return
            except ApiException as exc:
                if exc.status == 409:  # AlreadyExists: an attempt cut off after the write
                    return
            except Exception:  # connection refused or reset: the apiserver is restarting
                pass
            time.sleep(0.5)
        raise AssertionError(f"{body['metadata']['name']} never created")

    def submit() -> None:  # 60 jobs in batches of 6, around the restarts
        try:
            for i in range(0, len(bodies), 6):
                for body in bodies[i : i + 6]:
                    create(body)
                time.sleep(0.5)
        except BaseException as exc:
            errors.append(exc)

    submitter = threading.Thread(target=submit)
    submitter.start()
    time.sleep(2.0)  # some jobs placed and committing
    restart_apiserver(cluster)
    time.sleep(3.0)
    restart_apiserver(cluster)
    submitter.join()
    assert not errors, errors
    kube.wait(
        "all 60 DLJobs placed and bound after the restarts",
        lambda: len(kube.phases()) == 60 and kube.all_bound(),
        timeout=180,
        every=1.0,
    )
    assert op.alive(), "the operator died with the apiserver"
    summary = check_invariants(kube)
    assert summary["jobs"] == summary["placed"] == 60
    assert summary["pods"] == sum(b["spec"]["replicas"] for b in bodies)
    for j in kube.jobs():  # one record per replica (one GPU each): never a second round
        placements = j["status"]["placements"]
        assert len(placements) == j["spec"]["replicas"], j["metadata"]["name"]
    log = op.log.read_text(errors="replace")
    # The view saw the breaks (a failed watch, or an expired one and its relist) and the
    # process went on: one leader start, never a restart of the operator itself.
    assert "watch failed" in log or "watch expired" in log, log[-3000:]
    assert op.starts == 1
