"""Node drain and node loss on real nodes, as docs/operator.md says the operator handles them:
a replica pod deleted while running fails its DLJob (reason and Event), the operator deletes
the job's other replicas, and their GPU shares are free again for the next job."""

from __future__ import annotations

from typing import Any

from realnode_support import JOB, apply, diagnose, pods_of, running, wait_for, workload_job

from horus.devcluster.chart import RealCluster


def _job(rc: RealCluster, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = rc.kube.json("get", "dljob", name)
    return doc


def _failed_and_cleaned(rc: RealCluster, name: str) -> dict[str, Any] | None:
    job = _job(rc, name)
    status = job.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    live = [p for p in pods_of(rc, name) if not p["metadata"].get("deletionTimestamp")]
    return None if live else job


def _placed_on_both(rc: RealCluster, name: str) -> list[dict[str, Any]]:
    apply(rc, workload_job(name, 2, 60, 8192, ["--steps", "0"]))
    return wait_for(  # type: ignore[no-any-return]
        f"{name} running on both nodes (the failed job's shares were freed)",
        lambda: (
            (p := pods_of(rc, name))
            and len(p) == 2
            and all(map(running, p))
            and {x["spec"]["nodeName"] for x in p} == set(rc.nodes)
            and p
        ),
        120,
        diagnose(rc),
    )


def test_drain_fails_the_job_and_frees_its_shares(rc: RealCluster) -> None:
    pods = pods_of(rc, JOB)
    assert len(pods) == 2 and all(map(running, pods)), diagnose(rc)()
    node = pods[1]["spec"]["nodeName"]
    rc.kube.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=120s",
        timeout=180,
    )
    try:
        job = wait_for(
            f"{JOB} Failed with its pods gone",
            lambda: _failed_and_cleaned(rc, JOB),
            120,
            diagnose(rc),
        )
        status = job["status"]
        assert status.get("reason") == "ReplicaPodDeleted", status
        assert "was deleted while the job was running" in status.get("message", ""), status
        events = rc.kube.json("get", "events", "--field-selector", f"involvedObject.name={JOB}")[
            "items"
        ]
        assert any(e["reason"] == "ReplicaPodDeleted" for e in events), [
            e["reason"] for e in events
        ]
    finally:
        rc.kube.kubectl("uncordon", node)
    # both GPUs are free again: a job that needs 60 % of each is placed on both nodes
    _placed_on_both(rc, "after-drain")


def test_node_loss_fails_the_job_and_frees_its_shares(rc: RealCluster) -> None:
    pods = pods_of(rc, "after-drain")
    lost = pods[1]["spec"]["nodeName"]
    # The machine goes away: its kubelet, containerd and containers stop, the Node is deleted.
    rc.real.remove([lost])
    rc.nodes.remove(lost)
    job = wait_for(
        "after-drain Failed with its pods gone",
        lambda: _failed_and_cleaned(rc, "after-drain"),
        180,
        diagnose(rc),
    )
    assert job["status"].get("reason") == "ReplicaPodDeleted", job["status"]
    # the remaining node's GPU is free: a one-replica 60 % job runs there
    apply(rc, workload_job("after-loss", 1, 60, 8192, ["--steps", "0"]))
    placed = wait_for(
        "after-loss running on the remaining node",
        lambda: (p := pods_of(rc, "after-loss")) and all(map(running, p)) and p,
        120,
        diagnose(rc),
    )
    assert placed[0]["spec"]["nodeName"] == rc.nodes[0]
