"""The agent on the dra path (issue 25 item 4): the shares on its node come from the
ResourceClaims reserved for its pods — their status, which only the kube-scheduler writes —
checked against its own node's ResourceSlice, never from a field a tenant can edit.

Whole agent cycles run against a fake apiserver at the ApiClient seam; the slice is the one the
DRA driver publishes (``horus.dra.slices.build_slice_spec``), the claims are shaped as the
kube-scheduler writes them (tests/integration/dra checks that against the real one). Each
attack is a tenant (or a pod's owner) writing what they can write: the pod's annotations, its
``spec.resourceClaims``, a claim of their own."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_helpers import pod_obj

from horus.agent.agent import Agent
from horus.agent.kube import AgentApi
from horus.agent.settings import AgentSettings, WatchdogMode
from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common import constants as c
from horus.dra.slices import build_slice_spec
from kube_fakes import RawResponse

NODE = "n1"
RES = "/apis/resource.k8s.io/v1"


def gpus(node: str = NODE) -> list[GpuDevice]:
    return [GpuDevice(i, simulated_gpu_uuid(node, i), "H100", 81559) for i in range(2)]


class DraApiserver:
    """One node, its ResourceSlice, claims and pods; records every request."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: list[dict[str, Any]] = [
            {"metadata": {"name": f"{NODE}-gpu"}, "spec": build_slice_spec(NODE, gpus(), 1)}
        ]
        self.calls: list[tuple[str, str, Any]] = []

    def param_serialize(self, method: str, path: str, **kw: Any) -> tuple[Any, ...]:
        return (method, path, kw.get("query_params"), kw.get("body"))

    def call_api(self, method: str, path: str, query: Any, body: Any, **_: Any) -> RawResponse:
        self.calls.append((method, path, body))
        if method != "GET":
            return RawResponse(200, b"{}")
        if path == "/api/v1/pods":
            return RawResponse(200, json.dumps({"items": self.pods}).encode())
        if path == f"/api/v1/nodes/{NODE}":
            return RawResponse(200, json.dumps({"metadata": {"name": NODE}}).encode())
        if path == f"{RES}/resourceslices":
            assert ("fieldSelector", f"spec.nodeName={NODE}") in query
            return RawResponse(200, json.dumps({"items": self.slices}).encode())
        parts = path.split("/")
        if path.startswith(f"{RES}/namespaces/") and parts[-2] == "resourceclaims":
            claim = self.claims.get((parts[-3], parts[-1]))
            if claim is not None:
                return RawResponse(200, json.dumps(claim).encode())
        return RawResponse(404, b"not found")

    def gets(self, kind: str) -> int:
        return sum(1 for m, p, _ in self.calls if m == "GET" and f"/{kind}/" in p)

    def writes(self) -> list[tuple[str, str, Any]]:
        return [call for call in self.calls if call[0] != "GET"]


def claim(
    name: str,
    pods: list[str],
    device: str = "gpu-1",
    cores: str = "30",
    memory: str = "8192Mi",
    pool: str = NODE,
) -> dict[str, Any]:
    """A claim as the kube-scheduler leaves it: allocated, reserved for ``pods`` (by name,
    uid ``uid-<name>``) in that order."""
    result = {
        "request": "gpu",
        "driver": c.DRA_DRIVER_NAME,
        "pool": pool,
        "device": device,
        "shareID": f"share-{name}",
        "consumedCapacity": {"cores": cores, "memory": memory},
    }
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"claim-uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
        },
    }


def claimed_pod(name: str, claim_name: str, **kw: Any) -> dict[str, Any]:
    """A running pod on NODE using ``claim_name``; no Horus annotation unless a test adds one."""
    obj = pod_obj(name, NODE, sign=False, **kw)
    obj["metadata"]["annotations"].pop(c.ANNOTATION_GPU_ASSIGNMENT)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return obj


def agent(api: DraApiserver, watchdog: WatchdogMode = "report") -> Agent:
    settings = AgentSettings(
        node_name=NODE,
        backend="simulated",
        placement_path="dra",
        watchdog=watchdog,
        metrics_port=0,
        feedback_interval_seconds=3600,
    )
    return Agent(settings, AgentApi(api), predictor=lambda: None)


def test_a_pods_share_is_its_claims_allocation_on_the_gpu_the_slice_names() -> None:
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"], device="gpu-1", cores="30", memory="8192Mi")
    api.pods = [claimed_pod("a", "c-a")]
    snap = agent(api).cycle()
    a = snap.pods["uid-a"].assignment
    assert (a.node, a.gpu_index, a.gpu_uuid) == (NODE, 1, simulated_gpu_uuid(NODE, 1))
    assert (a.core_percent, a.memory_mib) == (30, 8192)
    # sampled on the GPUs of the node's slice (no inventory annotation on this node)
    (sample,) = snap.samples
    assert [g.memory_total_bytes for g in sample.gpus] == [81559 * c.MIB] * 2
    assert api.writes() == []


def test_a_claim_from_a_template_is_found_through_the_pods_status() -> None:
    api = DraApiserver()
    api.claims[("ns", "t-a-gpu-x1")] = claim("t-a-gpu-x1", ["a"], cores="45", memory="40779Mi")
    obj = claimed_pod("a", "unused")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "t-a-gpu-x1"}]
    api.pods = [obj]
    a = agent(api).cycle().pods["uid-a"].assignment
    assert (a.core_percent, a.memory_mib) == (45, 40779)


def test_annotations_a_tenant_writes_are_not_a_share_on_this_path() -> None:
    """The pod's owner rewrites horus.io/gpu-assignment (even a validly signed one of another
    pod): on the dra path the share stays the claim's; a pod with only an annotation and no
    claim is not a Horus pod here."""
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"], cores="30", memory="8192Mi")
    forged = encode_assignment(GpuAssignment(NODE, simulated_gpu_uuid(NODE, 0), 0, 100, 81559))
    a_pod = claimed_pod("a", "c-a")
    a_pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = forged
    api.pods = [a_pod, pod_obj("b", NODE)]  # b: a signed device-plugin assignment, no claim
    snap = agent(api).cycle()
    assert set(snap.pods) == {"uid-a"}
    a = snap.pods["uid-a"].assignment
    assert (a.gpu_index, a.core_percent, a.memory_mib) == (1, 30, 8192)


def test_a_pod_naming_a_claim_reserved_for_another_pod_gets_nothing_from_it() -> None:
    """spec.resourceClaims is the pod owner's to write: a claim counts only when its status
    (the scheduler's) names the pod's UID."""
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"])
    api.pods = [claimed_pod("a", "c-a"), claimed_pod("thief", "c-a")]
    assert set(agent(api).cycle().pods) == {"uid-a"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"pool": "n2"}, "another node's GPU"),
        ({"device": "gpu-7"}, "a GPU this node does not have"),
        ({"memory": "90000Mi"}, "more memory than the GPU has"),
        ({"memory": "1000000"}, "not whole MiB"),
    ],
)
def test_an_allocation_that_does_not_fit_this_node_is_not_enforced(
    change: dict[str, str], why: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"], **change)
    api.pods = [claimed_pod("a", "c-a")]
    assert agent(api).cycle().pods == {}, why
    assert "claim ns/c-a" in caplog.text and "not enforced" in caplog.text


def test_only_this_nodes_slice_of_the_horus_driver_names_its_gpus() -> None:
    """A slice of another node, or of another driver for this node, names no GPU here: a
    claim on a device only they publish is not enforced."""
    api = DraApiserver()
    api.slices = [
        {"metadata": {"name": "n2"}, "spec": build_slice_spec("n2", gpus("n2"), 1)},
        {"metadata": {"name": "x"}, "spec": {**build_slice_spec(NODE, gpus(), 1), "driver": "x"}},
    ]
    api.claims[("ns", "c-a")] = claim("c-a", ["a"])
    api.pods = [claimed_pod("a", "c-a")]
    assert agent(api).cycle().pods == {}


def test_a_claim_is_read_once_while_its_pod_runs() -> None:
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"])
    api.pods = [claimed_pod("a", "c-a")]
    ag = agent(api)
    for _ in range(5):
        assert set(ag.cycle().pods) == {"uid-a"}
    assert api.gets("resourceclaims") == 1
    api.pods = []
    assert ag.cycle().pods == {}
    assert ag.claims._pods == {}  # forgotten with the pod


def test_a_pod_that_joined_a_prepared_claim_is_deleted_with_the_watchdog_in_evict() -> None:
    """The kubelet prepares a claim once per node, so a second pod using it causes no Prepare
    the driver could refuse (docs/dra.md, Limits). The agent sees reservedFor name it second:
    it is deleted (UID precondition) with an Event; the pod the claim was prepared for stays."""
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a", "joiner"])
    api.pods = [claimed_pod("a", "c-a"), claimed_pod("joiner", "c-a")]
    agent(api, watchdog="evict").cycle()
    deletes = [(p, b) for m, p, b in api.writes() if m == "DELETE"]
    assert deletes == [
        (
            "/api/v1/namespaces/ns/pods/joiner",
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "uid-joiner"}},
        )
    ]
    events = [b for m, p, b in api.writes() if m == "POST" and p.endswith("/events")]
    assert [e["reason"] for e in events] == [c.EVENT_REASON_SHARED_CLAIM]
    assert events[0]["involvedObject"]["name"] == "joiner"


def test_a_pod_that_joined_a_prepared_claim_is_reported_once_in_report_mode() -> None:
    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a", "joiner"])
    api.pods = [claimed_pod("a", "c-a"), claimed_pod("joiner", "c-a")]
    ag = agent(api, watchdog="report")
    for _ in range(3):
        snap = ag.cycle()
    assert {m for m, _, _ in api.writes()} == {"POST"}
    assert len(api.writes()) == 1
    # both are sampled and policed with the one share (MPS limits each to all of it)
    assert snap.pods["uid-joiner"].assignment == snap.pods["uid-a"].assignment


@pytest.mark.parametrize(
    "change",
    ["tainted", "device gone from the slice", "claim deleted", "apiserver down"],
)
def test_a_running_pods_verified_share_stays_enforced_until_the_pod_ends(change: str) -> None:
    """Once read and checked, a pod's share is the pod's while it runs: a re-read that no
    longer checks (or fails) must not stop enforcing it — its containers keep the GPU."""
    from horus.agent.claims import CLAIM_TTL, ClaimShares
    from horus.agent.pods import SkipLog
    from horus.kube.errors import ApiError

    api = DraApiserver()
    api.claims[("ns", "c-a")] = claim("c-a", ["a"], device="gpu-1", cores="30", memory="8192Mi")
    pods = [claimed_pod("a", "c-a")]
    now = [1000.0]
    kube = AgentApi(api)
    shares = ClaimShares(kube, SkipLog(), clock=lambda: now[0])
    (first,) = shares.pods(NODE, pods)
    assert (first.info.assignment.core_percent, first.info.assignment.memory_mib) == (30, 8192)
    sick = [GpuDevice(0, gpus()[0].uuid, "H100", 81559), gpus()[1]]
    if change == "tainted":
        sick[1] = GpuDevice(1, gpus()[1].uuid, "H100", 81559, c.GPU_UNHEALTHY)
        api.slices = [{"metadata": {"name": "s"}, "spec": build_slice_spec(NODE, sick, 2)}]
    elif change == "device gone from the slice":
        api.slices = [{"metadata": {"name": "s"}, "spec": build_slice_spec(NODE, sick[:1], 2)}]
    elif change == "claim deleted":
        del api.claims[("ns", "c-a")]
    else:

        def down(namespace: str, name: str) -> dict[str, Any] | None:
            raise ApiError(0, "connection refused")

        kube.claim = down  # type: ignore[method-assign]
    reads = api.gets("resourceclaims")
    for step in (1, 2, 3):
        now[0] += CLAIM_TTL * step + 1  # past the cache: the claim is read again
        (kept,) = shares.pods(NODE, pods)
        assert kept.info.assignment == first.info.assignment, (change, step)
    if change != "apiserver down":
        assert api.gets("resourceclaims") > reads  # it was read again, and did not check
    assert shares.pods(NODE, []) == []  # the pod ended: forgotten
    assert shares._pods == {}
