"""Two operator replicas: only the Lease holder writes; killing it hands over within the lease
duration. And deleting a DLJob deletes its pods and frees its share for the next queued job."""

from __future__ import annotations

import time
from typing import Any

from operator_support import BIG_GPU_MIB, BIG_PREFIX, Kube, check_invariants, dljob_body

from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, add_nodes

LEASE_S = 5.0


def _holder(kube: Kube, lease: str) -> str | None:
    from kubernetes import client

    api: Any = client.CoordinationV1Api(kube.api)
    try:
        holder = api.read_namespaced_lease(lease, c.HORUS_NAMESPACE).spec.holder_identity
        return str(holder) if holder else None
    except client.ApiException:
        return None


def _writers(kube: Kube) -> set[str]:
    return {e.get("reportingInstance", "") for e in kube.events()}


def test_only_the_leader_binds_and_handover_within_lease(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    # Each replica's Events name it: with the life-cycle Events on, every job tells which
    # replica placed it.
    on = ("--lifecycle-events", "true")
    a = operator_factory(identity="replica-a", lease_duration=LEASE_S, extra_args=on)
    b = operator_factory(identity="replica-b", lease_duration=LEASE_S, extra_args=on)
    lease = operator_factory.lease
    kube.wait("a leader", lambda: _holder(kube, lease) in ("replica-a", "replica-b"), 30)
    first = [f"ha-{i}" for i in range(6)]
    kube.create_jobs([dljob_body(n, 2) for n in first])
    kube.wait("first batch bound", lambda: kube.all_bound(first), 60)
    leader = _holder(kube, lease)
    assert _writers(kube) == {leader}, "the follower wrote something"
    check_invariants(kube)
    dead, alive = (a, b) if leader == "replica-a" else (b, a)
    dead.kill9()
    killed = time.monotonic()
    kube.wait("hand-over", lambda: _holder(kube, lease) == alive.identity, LEASE_S * 4, 0.1)
    handover = time.monotonic() - killed
    print(f"hand-over took {handover:.2f}s (lease {LEASE_S}s)")
    # the follower takes over once the record stopped changing for a lease duration; it
    # polls every lease/10, so the bound is the lease + a retry period + API latency
    assert handover <= LEASE_S + LEASE_S / 10 + 1.5
    second = [f"hb-{i}" for i in range(4)]
    kube.create_jobs([dljob_body(n, 1) for n in second])
    kube.wait("second batch bound", lambda: kube.all_bound(second), 60)
    assert _writers(kube) == {leader, alive.identity}
    for e in kube.events():
        if e["involvedObject"]["name"] in second:
            assert e["reportingInstance"] == alive.identity
    check_invariants(kube)


def test_delete_dljob_frees_share_for_next_queued(
    cluster: Any, gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    # GPUs so large that only these jobs fit there: 1 node × 2 GPUs of 1 TiB
    existing = {n["metadata"]["name"] for n in kube.nodes()}
    if f"{BIG_PREFIX}-0000" not in existing:
        add_nodes(
            cluster.kubeconfig,
            NodeSpec(count=1, gpus_per_node=2, gpu_memory_mib=BIG_GPU_MIB, prefix=BIG_PREFIX),
        )
    operator_factory()
    big = 900_000
    kube.create_jobs([dljob_body("holder", 2, core=100, memory=big)])
    kube.wait("holder bound", lambda: kube.all_bound(["holder"]), 60)
    kube.create_jobs([dljob_body("waiter", 1, core=100, memory=big)])
    kube.wait(
        "waiter refused with a reason",
        lambda: bool(
            (kube.jobs_by_name().get("waiter", {}).get("status") or {}).get("reason")
            not in (None, "", "Queued")
        ),
        30,
    )
    waiter = kube.jobs_by_name()["waiter"]["status"]
    assert waiter["phase"] == c.DLJOB_PHASE_QUEUED
    assert "GiB" in waiter["message"], waiter["message"]
    kube.custom.delete_namespaced_custom_object(
        c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL, "holder"
    )
    took = kube.wait(
        "waiter bound after the holder was deleted", lambda: kube.all_bound(["waiter"]), 60, 0.2
    )
    print(f"freed share reused after {took:.1f}s")
    kube.wait(
        "the holder's pods gone",
        lambda: {p["metadata"]["name"] for p in kube.pods(kube.namespace)} == {"waiter-0"},
        30,
    )
    check_invariants(kube)
