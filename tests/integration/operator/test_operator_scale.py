"""200 DLJobs over 50 kwok nodes × 8 GPUs: every job Running, nothing over-committed, statuses
in step with pods, and jobs that cannot run now say why."""

from __future__ import annotations

import random
import re
from typing import Any

from operator_support import Kube, check_invariants, dljob_body

from horus.common import constants as c


def workload(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A mix: auto-sized and explicit shares, 1–3 replicas, three model kinds."""
    rng = random.Random(seed)
    bodies = []
    for i in range(n):
        profile = rng.choice(["resnet50-bs64", "mobilenetv2-cifar-bs128", "lstm-lm-bs20"])
        replicas = rng.choice([1, 1, 1, 1, 2])
        if rng.random() < 0.4:
            bodies.append(
                dljob_body(
                    f"job-{i:03d}",
                    replicas,
                    core=rng.choice([10, 25, 40, 50]),
                    memory=rng.choice([2048, 8192, 16384]),
                    profile=profile,
                )
            )
        else:
            bodies.append(dljob_body(f"job-{i:03d}", replicas, profile=profile))
    return bodies


def wait_running(kube: Kube, n: int) -> float:
    """Seconds until ``n`` DLJobs are Running (at most 150)."""
    return kube.wait(
        f"{n} DLJobs Running",
        lambda: sum(p == c.DLJOB_PHASE_RUNNING for p in kube.phases().values()) >= n,
        timeout=150,
        every=1.0,
    )


def test_200_dljobs_reach_running(gpu_nodes: list[str], kube: Kube, operator_factory: Any) -> None:
    operator_factory()
    bodies = workload(200)
    # Two that cannot run now: no node has 16 GPUs; a gang larger than the cluster.
    bodies.append(dljob_body("too-wide", 1, core=50, memory=1024, gpus_per_replica=16))
    bodies.append(dljob_body("too-many", 1000, core=100, memory=1024))
    kube.create_jobs(bodies)
    took = wait_running(kube, 200)
    print(f"200 DLJobs Running after {took:.1f}s")
    summary = check_invariants(kube)
    assert summary["placed"] == 200
    jobs = {j["metadata"]["name"]: j for j in kube.jobs()}
    for name in ("too-wide", "too-many"):
        status = jobs[name].get("status") or {}
        assert status.get("phase") == c.DLJOB_PHASE_QUEUED, (name, status)
        cond = next(cd for cd in status["conditions"] if cd["type"] == "Scheduled")
        assert cond["status"] == "False" and cond["reason"] and cond["message"], cond
    assert "16 GPUs on one node" in jobs["too-wide"]["status"]["message"]
    assert "1000 GPUs" in jobs["too-many"]["status"]["message"]
    for j in jobs.values():
        if j["metadata"]["name"].startswith("job-"):
            st = j["status"]
            assert st["predicted"]["modelVersion"], j["metadata"]["name"]
            running = next(cd for cd in st["conditions"] if cd["type"] == "Running")
            assert running["status"] == "True"
    # no life-cycle Event (the conditions carry them: issue 27), the refusal once, not per pass
    events = kube.events()
    reasons: dict[tuple[str, str], int] = {}
    for e in events:
        key = (e["involvedObject"]["name"], e["reason"])
        reasons[key] = reasons.get(key, 0) + 1
    assert reasons.get(("job-000", "Scheduled")) is None
    assert reasons.get(("job-000", "Running")) is None
    refusals = [n for (job, _), n in reasons.items() if job == "too-wide"]
    assert refusals and max(refusals) == 1, reasons


def test_a_pass_takes_on_at_most_max_jobs_per_pass(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """The per-pass cap (issue 27) with the real apiserver and controller loop: 60 jobs arrive
    at once, no pass places more than 7 (the operator's own ``pass N: placed K`` lines), the
    passes follow each other without waiting for the resync (600 s here), and every job ends
    placed exactly once with nothing over-committed."""
    op = operator_factory(extra_args=("--max-jobs-per-pass", "7", "--resync-period", "600"))
    kube.create_jobs(workload(60, seed=11))
    took = wait_running(kube, 60)
    print(f"60 DLJobs Running after {took:.1f}s with at most 7 placed per pass")
    assert check_invariants(kube)["placed"] == 60
    placed = [int(k) for k in re.findall(r"pass \d+: placed (\d+),", op.log.read_text())]
    assert placed and max(placed) <= 7, placed
    assert sum(placed) >= 60, placed  # each job once (check_invariants), in capped passes
