"""Chaos: ``kill -9`` the operator at random instants, 20 times, while 200 DLJobs arrive.

Afterwards every job has exactly its replicas, each placed once (one record per replica, one
pod per replica, bound where the record says), no GPU is over-committed, and no job is lost.
The operator restarts with the same identity (as a pod restarted in place would), so it takes
its own Lease back at once instead of waiting out the lease duration.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from operator_support import Kube, check_invariants
from test_operator_scale import workload


def test_kill9_twenty_times_while_submitting(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    rng = random.Random(20)
    op = operator_factory(identity="chaos")
    bodies = workload(200, seed=11)

    def submit() -> None:  # 200 jobs in batches of 10 over ~the chaos period
        for i in range(0, len(bodies), 10):
            kube.create_jobs(bodies[i : i + 10], workers=4)
            time.sleep(0.25)

    submitter = threading.Thread(target=submit)
    submitter.start()
    kills = 0
    while kills < 20:
        # Kill at a random instant once the process leads (startup alone is ~2 s of imports):
        # mid-admission, between status and pod, between pod and binding, mid status sync.
        op.wait_leader()
        time.sleep(rng.uniform(0.0, 1.2))
        op.kill9()
        kills += 1
        op.start()
    submitter.join()
    took = kube.wait(
        "all 200 DLJobs placed and bound after the chaos",
        lambda: len(kube.phases()) == 200 and kube.all_bound(),
        timeout=120,
        every=1.0,
    )
    print(f"converged {took:.1f}s after the last restart ({op.starts} starts)")
    summary = check_invariants(kube)
    assert summary == {"jobs": 200, "placed": 200, "pods": summary["pods"]}
    expected_pods = sum(b["spec"]["replicas"] for b in bodies)
    assert summary["pods"] == expected_pods
    for j in kube.jobs():  # one placement record per replica (and GPU), never a second round
        placements = j["status"]["placements"]
        assert len(placements) == j["spec"]["replicas"], j["metadata"]["name"]
