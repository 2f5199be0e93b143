"""The DRA path's commit (issue 25 item 3) in whole reconcile passes on the in-memory API:
record first, then one ResourceClaim per replica and a pod using it, no Binding; live state
from allocated claims (tenants' too); a decision another claim overtook is re-placed, never
over-committed and never Failed. The same passes run on a real apiserver and kube-scheduler
in tests/integration/dra/test_operator_claims.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.api.assignment import encode_assignment
from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.dra.slices import build_slice_spec
from horus.operator.claim_manifests import claim_name, replica_claim
from horus.operator.claimcommit import REASON_CLAIM_NAME_TAKEN, claim_matches
from horus.operator.claimcount import claim_job_name, claim_shares
from horus.operator.livestate import build_live_state
from horus.operator.object_reads import CLAIM_SIGNED_PREFIX, CLAIM_SIGNED_UID
from horus.operator.podspec import assignment_of, placement_record
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()
GPU_MIB = 81920


def dra_node(name: str, gpus: int = 2) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node as on the DRA path — no inventory annotation (no device plugin writes it) —
    and the ResourceSlice the Horus DRA driver publishes for it (its own builder)."""
    obj = node(name, gpus=gpus, memory=GPU_MIB)
    obj["metadata"]["annotations"] = {}
    devices = [
        GpuDevice(i, simulated_gpu_uuid(name, i), "H100", GPU_MIB, c.GPU_HEALTHY)
        for i in range(gpus)
    ]
    return obj, {"metadata": {"name": f"{name}-slice"}, "spec": build_slice_spec(name, devices, 1)}


def dra_api(*names: str, gpus: int = 2) -> FakeJobApi:
    pairs = [dra_node(n, gpus) for n in names]
    api = FakeJobApi([n for n, _ in pairs])
    api.slices = [s for _, s in pairs]
    return api


def live_of(api: FakeJobApi, pods: bool = False, keys: bool = True) -> Any:
    """The live state a DRA pass builds from ``api`` (nodes, DLJobs, claims, slices)."""
    return build_live_state(
        api.list_nodes(),
        api.list_pods() if pods else [],
        api.list_dljobs(),
        keys=KEY if keys else None,
        claims=api.list_resource_claims(),
        slices=api.slices,
    )


@pytest.fixture
def api() -> FakeJobApi:
    return dra_api("n1", "n2")


@pytest.fixture
def rec(api: FakeJobApi) -> Iterator[Reconciler]:
    r = Reconciler(
        api, PREDICTOR, KEY, workers=4, progress_deadline=30.0, placement_path=c.PLACEMENT_PATH_DRA
    )
    yield r
    r.close()


def job(name: str, replicas: int = 1, core: int = 50, mem: int = 20000) -> dict[str, Any]:
    return dljob(
        name, replicas=replicas, gpu={"mode": "explicit", "corePercent": core, "memoryMiB": mem}
    )


def status(api: FakeJobApi, name: str) -> dict[str, Any]:
    out: dict[str, Any] = api.job(name).get("status") or {}
    return out


def allocate_as_recorded(api: FakeJobApi, name: str) -> None:
    """What the kube-scheduler does with a claim pinned to one GPU that has room."""
    for rec in status(api, name)["placements"]:
        pod = rec["pod"]
        api.allocate(
            "default",
            f"{pod}-gpu",
            rec["node"],
            rec["gpuIndex"],
            rec["corePercent"],
            rec["memoryMiB"],
            pod,
        )


def horus_claim(obj: dict[str, Any], replica: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The claim Horus makes for a replica: the record's claim, signed as the operator signs
    it (:meth:`horus.operator.claimcommit.ClaimPath.signed`)."""
    claim = replica_claim(obj, replica, records)
    meta = obj["metadata"]
    text = CLAIM_SIGNED_PREFIX + encode_assignment(assignment_of(meta["name"], replica, records))
    signature = KEY.sign_assignment(
        "default", claim["metadata"]["name"], CLAIM_SIGNED_UID, meta["uid"], 0, text
    )
    claim["metadata"]["annotations"] = {
        c.ANNOTATION_GPU_ASSIGNMENT: text,
        c.ANNOTATION_ASSIGNMENT_SIGNATURE: signature,
    }
    return claim


def tenant_claim(api: FakeJobApi, name: str, node: str, index: int, cores: int, mib: int) -> None:
    """A claim a tenant made directly (no Horus owner), allocated by the kube-scheduler."""
    api.create_resource_claim(
        "default",
        {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu"}]}}},
    )
    api.allocate("default", name, node, index, cores, mib)


def test_the_decision_is_recorded_then_claims_and_pods_for_the_kube_scheduler(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("train", replicas=2))
    report = rec.run_pass()
    assert (report.placed, report.pods_created, report.pods_bound) == (1, 2, 0)
    st = status(api, "train")
    assert st["phase"] == c.DLJOB_PHASE_SCHEDULED and len(st["placements"]) == 2
    for r in st["placements"]:
        claim = api.claims[("default", f"{r['pod']}-gpu")]
        # exactly the recorded GPU and share, owned by the DLJob
        assert claim_matches(claim, replica_claim(api.job("train"), r["replica"], [r]))
        exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
        assert r["gpuUUID"] in exactly["selectors"][0]["cel"]["expression"]
        assert exactly["capacity"]["requests"] == {"cores": "50", "memory": "20000Mi"}
        assert claim["metadata"]["ownerReferences"][0]["uid"] == "uid-train"
        pod = api.pods[("default", r["pod"])]
        assert "schedulerName" not in pod["spec"]  # the kube-scheduler's
        assert not pod["spec"].get("nodeName")  # Horus binds nothing on this path
        # but the pod may go only to the node Horus chose, whatever device attracts it
        required = pod["spec"]["affinity"]["nodeAffinity"]
        (term,) = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term["matchFields"] == [
            {"key": "metadata.name", "operator": "In", "values": [r["node"]]}
        ]
        assert pod["spec"]["resourceClaims"] == [
            {"name": "gpu", "resourceClaimName": f"{r['pod']}-gpu"}
        ]
        limits = pod["spec"]["containers"][0]["resources"]
        assert c.RESOURCE_GPU_CORE not in str(limits)
    again = rec.run_pass()  # idempotent: nothing new, nothing placed twice
    assert (again.placed, again.pods_created, again.status_writes) == (0, 0, 0)
    assert len(api.claims) == 2 and len(api.pods) == 2
    # the kube-scheduler allocates each claim where it is pinned and binds its pod
    allocate_as_recorded(api, "train")
    api.run_bound_pods()
    rec.run_pass()
    assert status(api, "train")["phase"] == c.DLJOB_PHASE_RUNNING


def test_a_tenant_claim_counts_so_horus_never_places_past_it(
    api: FakeJobApi, rec: Reconciler
) -> None:
    # the tenant holds 80 % of every GPU but one: a 60 % job can go only to n2/gpu-1
    for n, i in (("n1", 0), ("n1", 1), ("n2", 0)):
        tenant_claim(api, f"t-{n}-{i}", n, i, 80, 1000)
    api.add_dljob(job("a", core=60))
    rec.run_pass()
    (placed,) = status(api, "a")["placements"]
    assert (placed["node"], placed["gpuIndex"]) == ("n2", 1)
    live = live_of(api, keys=False)
    assert claim_job_name("default", "t-n1-0") in live.residents
    api.add_dljob(job("b", core=60))  # no GPU has 60 % left: queued, not over-committed
    rec.run_pass()
    assert status(api, "b")["phase"] == c.DLJOB_PHASE_QUEUED
    assert not status(api, "b").get("placements")


def test_a_decision_overtaken_before_its_pods_run_is_re_placed_off_that_gpu(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("gang", replicas=2, core=60))
    rec.run_pass()
    first = {(r["node"], r["gpuIndex"]) for r in status(api, "gang")["placements"]}
    _, r1 = sorted(status(api, "gang")["placements"], key=lambda r: r["replica"])
    # before either replica's claim is allocated, a tenant's claim takes replica 1's GPU
    tenant_claim(api, "grab", r1["node"], r1["gpuIndex"], 70, 1000)
    # and another claim of the tenant names the gang as its controller: not Horus', kept
    forged = {"apiVersion": c.API_GROUP_VERSION, "kind": c.DLJOB_KIND, "name": "gang",
              "uid": "uid-gang", "controller": True}  # fmt: skip
    api.create_resource_claim(
        "default", {"metadata": {"name": "mine", "ownerReferences": [forged]}, "spec": {}}
    )
    report = rec.run_pass()
    assert report.replaced == 1
    st = status(api, "gang")
    assert st["phase"] == c.DLJOB_PHASE_QUEUED and st["reason"] == "ClaimOvertaken"
    assert "grab" in st["message"]
    # both replicas' claims gone; the tenant's stay
    assert set(api.claims) == {("default", "grab"), ("default", "mine")}
    assert not api.pods  # and their pods, none of which ran (UID preconditions)
    assert rec.claim_path is not None
    assert rec.claim_path.avoided("uid-gang") == {r1["gpuUUID"]}
    rec.run_pass()
    st = status(api, "gang")
    assert st["phase"] == c.DLJOB_PHASE_SCHEDULED  # placed again, the whole gang
    again = {(r["node"], r["gpuIndex"]) for r in st["placements"]}
    assert (r1["node"], r1["gpuIndex"]) not in again  # not on the GPU the tenant holds
    assert len(again) == 2 and again != first
    assert "Failed" not in {status(api, "gang").get("phase")}


def test_a_running_replica_is_never_deleted_for_another_claim(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("gang", replicas=2, core=60))
    rec.run_pass()
    placed = status(api, "gang")["placements"]
    r0, r1 = sorted(placed, key=lambda r: r["replica"])
    # replica 0's claim is allocated and its pod bound and running; before replica 1's claim
    # is allocated, a tenant's claim takes its GPU
    api.allocate("default", "gang-0-gpu", r0["node"], r0["gpuIndex"], 60, 20000, "gang-0")
    api.run_bound_pods()
    running = api.pods[("default", "gang-0")]["metadata"]["uid"]
    tenant_claim(api, "grab", r1["node"], r1["gpuIndex"], 70, 1000)
    report = rec.run_pass()
    assert report.replaced == 0 and report.pods_deleted == 0
    assert api.pods[("default", "gang-0")]["metadata"]["uid"] == running  # kept, untouched
    assert ("default", "gang-1") in api.pods and ("default", "gang-1-gpu") in api.claims
    st = status(api, "gang")
    assert st["phase"] == c.DLJOB_PHASE_SCHEDULED and st["placements"] == placed
    rec.writer.drain()
    assert "ClaimCrossedKept" in api.reasons("gang")  # told, once
    # Horus counts the GPU full (its record and the tenant's claim up to the capacity) and
    # names the over-commitment; nothing else is placed there
    live = live_of(api, pods=True)
    assert not live.overtaken and "default/gang" in live.held_over
    gpu = live.state.gpu_id(r1["node"], r1["gpuIndex"])
    assert live.state.core_used[gpu] == 100
    assert any("grab" in p and "over" in p for p in live.problems)
    # past the progress deadline the job is still kept: the waiting replica waits
    api.job("gang")["status"]["scheduledTime"] = "2026-01-01T00:00:00Z"
    rec.run_pass()
    assert api.pods[("default", "gang-0")]["metadata"]["uid"] == running
    assert status(api, "gang")["phase"] == c.DLJOB_PHASE_SCHEDULED


def test_a_pass_never_counts_past_a_gpu_when_claims_and_records_disagree() -> None:
    """The live state itself: the overtaken record goes out of the state, the allocated
    claims (the job's own included) stay; no GPU is over 100 %."""
    api = dra_api("n1", gpus=1)
    records = [placement_record(0, "j-0", "n1", _Gpu("n1", 0, 60, 1000))]
    obj = dljob(
        "j",
        placements=[{k: v for k, v in r.items() if k != "replica"} for r in records],
        phase="Scheduled",
    )
    api.add_dljob(obj)
    api.create_resource_claim("default", horus_claim(obj, 0, records))
    tenant_claim(api, "grab", "n1", 0, 70, 1000)
    live = live_of(api)
    assert set(live.overtaken) == {"default/j"}
    view = live.state.views()[0]
    assert view.core_used_percent == 70 and view.jobs == (claim_job_name("default", "grab"),)
    # once the job's own claim is allocated, a later tenant claim cannot overtake it
    api2 = dra_api("n1", gpus=1)
    api2.add_dljob(obj)
    api2.create_resource_claim("default", horus_claim(obj, 0, records))
    api2.allocate("default", "j-0-gpu", "n1", 0, 60, 1000)
    live = live_of(api2)
    assert not live.overtaken and live.state.views()[0].core_used_percent == 60


def test_claim_shares_reads_canonical_quantities_and_whole_devices() -> None:
    n1, slice_ = dra_node("n1")
    live = build_live_state([n1], [], [], slices=[slice_])
    claim: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "x"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": c.DRA_DRIVER_NAME, "pool": "n1", "device": "gpu-1",
                         "consumedCapacity": {"cores": "40", "memory": "16Gi"}},
                        {"driver": c.DRA_DRIVER_NAME, "pool": "n1", "device": "gpu-0"},
                        {"driver": "other.example.com", "pool": "n1", "device": "gpu-0"},
                    ]
                }
            }
        },
    }  # fmt: skip
    shares = claim_shares(live.state, claim)
    assert [(s.gpu_index, s.core_percent, s.memory_mib) for s in shares] == [
        (1, 40, 16384),
        (0, 100, GPU_MIB),
    ]
    assert shares[0].gpu_uuid == simulated_gpu_uuid("n1", 1)
    assert claim_shares(live.state, {"metadata": {"name": "pending"}, "status": {}}) == []


def test_a_claim_name_held_by_someone_else_is_neither_used_nor_deleted(
    api: FakeJobApi, rec: Reconciler
) -> None:
    # a tenant made the claim name in advance, asking for any GPU whole, and names the job
    # as its controller (which proves nothing: Horus did not sign it)
    forged = {"apiVersion": c.API_GROUP_VERSION, "kind": c.DLJOB_KIND, "name": "w",
              "uid": "uid-w", "controller": True}  # fmt: skip
    api.create_resource_claim(
        "default",
        {
            "metadata": {"name": claim_name("w", 0), "ownerReferences": [forged]},
            "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        },
    )
    api.add_dljob(job("w"))
    rec.run_pass()
    rec.run_pass()
    assert ("default", "w-0-gpu") in api.claims  # not deleted
    assert not api.pods  # no pod uses it
    st = status(api, "w")
    assert st["phase"] == c.DLJOB_PHASE_QUEUED and st["reason"] == REASON_CLAIM_NAME_TAKEN
    assert not st.get("placements")  # it holds no GPU while it waits


def test_nothing_scheduled_within_the_deadline_is_re_placed_not_failed(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("slow", replicas=2))
    rec.run_pass()
    obj = api.job("slow")
    obj["status"]["scheduledTime"] = "2020-01-01T00:00:00Z"  # long ago (unsigned field)
    rec.run_pass()
    st = status(api, "slow")
    assert st["phase"] == c.DLJOB_PHASE_QUEUED and st["reason"] == "ProgressDeadlineExceeded"
    assert not api.pods and not api.claims


def test_claims_of_a_job_back_in_the_queue_or_gone_are_deleted(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("p"))
    rec.run_pass()
    assert api.claims
    del api.dljobs[("default", "p")]  # the DLJob is deleted: its claims go
    rec.run_pass()
    assert not api.claims


class _Gpu:
    def __init__(self, node_name: str, index: int, core: int, mib: int) -> None:
        self.gpu_uuid = simulated_gpu_uuid(node_name, index)
        self.gpu_index, self.core_percent, self.memory_mib = index, core, mib


def _ctx(rec: Reconciler, api: FakeJobApi, name: str) -> Any:
    from horus.operator.listing import Listing

    snap = Listing(api.list_pods(), api.list_dljobs(), api.list_nodes())
    return rec._contexts(snap)[f"default/{name}"]


def _placement(job_key: str, node_name: str, index: int, core: int, mib: int) -> Any:
    from horus.predictor.interface import ResourcePrediction
    from horus.scheduler import GpuShare, Placement, ReplicaPlacement

    share = GpuShare(node_name, index, simulated_gpu_uuid(node_name, index), core, mib)
    return Placement(
        job=job_key,
        replicas=(ReplicaPlacement(0, node_name, (share,)),),
        prediction=ResourcePrediction(50.0, 60.0, float(mib), float(mib)),
        policy="horus",
        predicted_speed=1.0,
        predicted_gain=0.4,
    )


def _move_to_the_other_node(api: FakeJobApi, rec: Reconciler) -> tuple[str, int]:
    """Start moving job ``m``'s replica to GPU 1 of the node it is not on; returns that GPU."""
    from horus.operator.moves import start_move
    from horus.operator.pass_state import PassReport

    old = dict(status(api, "m")["placements"][0])
    target = ("n2", 1) if old["node"] == "n1" else ("n1", 1)
    placement = _placement("default/m", *target, 50, 20000)
    start_move(_ctx(rec, api, "m"), placement, "test", api, rec.writer, PassReport())
    return target


def test_a_move_on_dra_replaces_the_claim_after_the_old_pod(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.graceful = True  # pods stop within their grace period, as kubelets do
    api.add_dljob(job("m"))
    rec.run_pass()
    allocate_as_recorded(api, "m")
    api.run_bound_pods()
    rec.run_pass()
    target = _move_to_the_other_node(api, rec)
    rec.run_pass()  # the old pod is stopping: its claim goes, no new pod yet
    assert ("default", "m-0-gpu") not in api.claims
    api.finish_deletions()
    rec.run_pass()  # the name is free: the claim of the new decision, then its pod
    claim = api.claims[("default", "m-0-gpu")]
    expr = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
    assert simulated_gpu_uuid(*target) in expr
    assert ("default", "m-0") in api.pods and not api.pods[("default", "m-0")]["spec"].get(
        "nodeName"
    )
    api.allocate("default", "m-0-gpu", target[0], target[1], 50, 20000, "m-0")
    api.run_bound_pods()
    rec.run_pass()
    rec.run_pass()
    st = status(api, "m")
    assert st["phase"] == c.DLJOB_PHASE_RUNNING and not st.get("migration")


def test_a_moved_jobs_old_pod_that_stopped_is_not_taken_for_the_new_one(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """On a real node the old pod of a move writes its checkpoint on SIGTERM and exits 0:
    phase Succeeded while its object is still there (terminating), and the kube-controller-
    manager frees the old claim as soon as the pod is terminal — so the new claim is made
    while the old pod still holds the name. Creating the new pod then answers AlreadyExists;
    the pod read back is the old one, and must not count as the new replica: it made the job
    Succeeded in the demo (issue 25 item 5: the move never showed)."""
    api.graceful = True
    api.add_dljob(job("m"))
    rec.run_pass()
    allocate_as_recorded(api, "m")
    api.run_bound_pods()
    rec.run_pass()
    rec.run_pass()
    assert status(api, "m")["phase"] == c.DLJOB_PHASE_RUNNING
    target = _move_to_the_other_node(api, rec)
    api.pods[("default", "m-0")]["status"]["phase"] = "Succeeded"  # checkpointed, exit 0
    rec.run_pass()  # the old claim goes (the fake frees it at once, as the controller does)
    assert ("default", "m-0-gpu") not in api.claims
    rec.run_pass()  # the new claim; the pod name is still the old pod's
    rec.run_pass()
    st = status(api, "m")
    assert st["phase"] == c.DLJOB_PHASE_SCHEDULED, st.get("message")
    assert st.get("migration"), "the move is not over while the old pod is there"
    assert simulated_gpu_uuid(*target) in pinned(api.claims[("default", "m-0-gpu")])
    api.finish_deletions()
    rec.run_pass()  # the name is free: the new pod
    assert ("default", "m-0") in api.pods
    api.allocate("default", "m-0-gpu", target[0], target[1], 50, 20000, "m-0")
    api.run_bound_pods()
    rec.run_pass()
    rec.run_pass()
    st = status(api, "m")
    assert st["phase"] == c.DLJOB_PHASE_RUNNING and not st.get("migration")
    assert st["migrations"]["count"] == 1


def test_a_preempted_job_on_dra_gives_its_claims_back(api: FakeJobApi, rec: Reconciler) -> None:
    from horus.operator.moves import preempt
    from horus.operator.pass_state import PassReport

    api.add_dljob(job("low"))
    rec.run_pass()
    allocate_as_recorded(api, "low")
    api.run_bound_pods()
    rec.run_pass()
    preempt(_ctx(rec, api, "low"), "default/high", api, rec.writer, PassReport())
    assert status(api, "low")["phase"] == c.DLJOB_PHASE_QUEUED
    assert ("default", "low-0-gpu") in api.claims  # allocated until deleted: still counted
    live = live_of(api)
    assert claim_job_name("default", "low-0-gpu") in live.residents
    report = rec.run_pass()  # its claim goes (and the job is placed again, with a new claim)
    assert report.claims_deleted >= 1


def test_on_dra_the_gpus_come_from_the_drivers_slices_not_an_annotation() -> None:
    api = dra_api("n1", gpus=1)
    foreign = dra_node("n2", gpus=1)
    api.nodes.append(foreign[0])
    api.slices.append({**foreign[1], "spec": {**foreign[1]["spec"], "driver": "other.example"}})
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        api.add_dljob(job("fits"))
        api.add_dljob(job("huge", mem=GPU_MIB + 1))  # more than any GPU a slice offers
        r.run_pass()
        (placed,) = status(api, "fits")["placements"]  # only n1: n2's slice is not Horus'
        assert (placed["node"], placed["gpuUUID"]) == ("n1", simulated_gpu_uuid("n1", 0))
        assert status(api, "huge")["phase"] == c.DLJOB_PHASE_FAILED
    finally:
        r.close()
    # the device-plugin path on the same objects sees no GPU at all (no annotation)
    dp = Reconciler(api, PREDICTOR, KEY, workers=2)
    try:
        api.add_dljob(job("dp"))
        dp.run_pass()
        assert status(api, "dp").get("reason") == "NoGPUNodes"
    finally:
        dp.close()


# --- plain pods' horus.io/gpu-* requests, converted at admission (horus.operator.plain_pod_claims) ---


def converted_pod(
    name: str, core: int, memory_units: int, claim: str | None = None
) -> dict[str, Any]:
    """A pod as examples/dra/extended-resources-policy.yaml leaves it: its requests moved into
    annotations, a reference to claim horus-gpu-<pod name> that does not exist yet."""
    from opfixtures import ROOT

    profile = (ROOT / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": {
                c.ANNOTATION_GRAPH_PROFILE: profile,
                c.ANNOTATION_GPU_CORE_REQUEST: str(core),
                c.ANNOTATION_GPU_MEMORY_REQUEST: str(memory_units),
            },
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"claims": [{"name": "horus-gpu"}]},
                }
            ],
            "resourceClaims": [
                {"name": "horus-gpu", "resourceClaimName": claim or f"horus-gpu-{name}-req"}
            ],
        },
        "status": {"phase": "Pending"},
    }


def add_pod(api: FakeJobApi, pod: dict[str, Any]) -> None:
    api.pods[("default", pod["metadata"]["name"])] = pod


def pinned(claim: dict[str, Any]) -> str:
    expr: str = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"
    ]
    return expr


def test_a_converted_plain_pod_gets_a_claim_pinned_to_the_gpu_horus_chose(
    api: FakeJobApi, rec: Reconciler
) -> None:
    add_pod(api, converted_pod("plain", 30, 64))  # 64 units of 256 MiB, as on the DP path
    report = rec.run_pass()
    assert report.claims_created == 1
    claim = api.claims[("default", "horus-gpu-plain-req")]
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"] == {"cores": "30", "memory": f"{64 * 256}Mi"}
    assert claim["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Pod", "name": "plain", "uid": "uid-plain",
        "controller": True, "blockOwnerDeletion": False,
    }  # fmt: skip
    assert claim["metadata"]["labels"][c.LABEL_CONVERTED_POD] == "plain"
    assert claim["metadata"]["annotations"] == {
        c.POD_CLAIM_ANNOTATION: "horus-gpu",
        c.ANNOTATION_CONVERTED_FOR: "uid-plain",
    }
    assert rec.run_pass().claims_created == 0  # made once


def generated_pod(name: str, core: int, memory_units: int) -> dict[str, Any]:
    """A pod of a Deployment or Job (only generateName at creation) as the policy leaves it:
    its entry names the placeholder template, not a claim (it had no name at admission)."""
    pod = converted_pod(name, core, memory_units)
    pod["metadata"]["generateName"] = name.rsplit("-", 1)[0] + "-"
    pod["spec"]["resourceClaims"] = [
        {"name": "horus-gpu", "resourceClaimTemplateName": c.CONVERTED_CLAIM_TEMPLATE}
    ]
    return pod


def test_a_generate_name_pod_gets_a_claim_named_by_its_uid_that_it_controls(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """The resourceclaim controller records a claim in such a pod's status only if the pod
    controls it and it carries the pod's entry name; the kube-scheduler checks the control."""
    add_pod(api, generated_pod("web-7d9f-x2k4q", 25, 16))
    assert rec.run_pass().claims_created == 1
    claim = api.claims[("default", "horus-gpu-uid-web-7d9f-x2k4q")]
    meta = claim["metadata"]
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        "uid-web-7d9f-x2k4q",
        True,
    )
    assert meta["annotations"][c.POD_CLAIM_ANNOTATION] == "horus-gpu"
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"] == {"cores": "25", "memory": f"{16 * 256}Mi"}
    assert pinned(claim).startswith('device.attributes["gpu.horus.io"].uuid == "GPU-')
    # once the controller recorded it in the pod's status, the pod is served: made once
    api.pods[("default", "web-7d9f-x2k4q")]["status"]["resourceClaimStatuses"] = [
        {"name": "horus-gpu", "resourceClaimName": "horus-gpu-uid-web-7d9f-x2k4q"}
    ]
    assert rec.run_pass().claims_created == 0


def test_a_generate_name_pod_whose_status_records_another_claim_is_not_horus_to_decide(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """Someone created a template of the placeholder's name in the namespace: the controller
    made the pod's claim from it; Horus makes no second claim (it would count twice)."""
    pod = generated_pod("job-abcde", 25, 16)
    pod["status"]["resourceClaimStatuses"] = [
        {"name": "horus-gpu", "resourceClaimName": "job-abcde-horus-gpu-q7x2z"}
    ]
    add_pod(api, pod)
    assert rec.run_pass().claims_created == 0
    assert not api.claims


def test_a_claim_under_the_pods_name_that_horus_did_not_make_is_neither_used_nor_replaced(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """A tenant made horus-gpu-<pod> (or horus-gpu-<uid>) first — even controlled by the pod,
    with the converted-pod label: Horus does not adopt, change or delete it, the pod is told
    why, and it holds nothing in Horus' state."""
    from horus.operator.claim_manifests import pod_share_claim

    uuid = simulated_gpu_uuid("n1", 0)
    for pod in (converted_pod("named", 30, 4), generated_pod("gen-h8s2k", 30, 4)):
        name = (
            f"horus-gpu-{pod['metadata']['uid']}"
            if "generateName" in pod["metadata"]
            else f"horus-gpu-{pod['metadata']['name']}-req"
        )
        squat = pod_share_claim(pod, name, uuid, 100, 1024)
        del squat["metadata"]["annotations"][c.ANNOTATION_CONVERTED_FOR]  # a tenant cannot
        api.create_resource_claim("default", squat)
        add_pod(api, pod)
    before = {k: dict(v) for k, v in api.claims.items()}
    rec.run_pass()
    rec.run_pass()
    rec.writer.drain()
    assert api.claims == before  # nothing made, changed or deleted
    assert api.reasons("named") == ["ClaimNameTaken"]  # once, though two passes
    assert api.reasons("gen-h8s2k") == ["ClaimNameTaken"]
    live = live_of(api, pods=True, keys=False)
    assert live.state.views()[0].core_used_percent == 0  # the squatters hold nothing


def test_the_gpu_within_the_node_is_chosen_by_interference_not_first_fit() -> None:
    api = dra_api("n1", gpus=2)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        api.add_dljob(job("busy", core=40, mem=8000))
        r.run_pass()
        (busy,) = status(api, "busy")["placements"]
        assert busy["gpuIndex"] == 0  # so a first fit in device order would share gpu-0
        add_pod(api, converted_pod("plain", 30, 16))
        r.run_pass()
        claim = api.claims[("default", "horus-gpu-plain-req")]
        other = simulated_gpu_uuid("n1", 1 - busy["gpuIndex"])
        # the first fit (the GPU with the job, it has room) is not where the pod goes
        assert other in pinned(claim)
    finally:
        r.close()


def test_an_unallocated_converted_claim_counts_and_an_overtaken_one_is_decided_again() -> None:
    api = dra_api("n1", gpus=2)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        add_pod(api, converted_pod("a", 60, 16))
        r.run_pass()
        add_pod(api, converted_pod("b", 60, 16))
        r.run_pass()  # a's claim, not allocated yet, holds its GPU: b goes to the other one
        a, b = (pinned(api.claims[("default", f"horus-gpu-{n}-req")]) for n in "ab")
        assert a != b
        # a tenant's claim is allocated on a's GPU before a's claim: a's claim goes ...
        index = 0 if simulated_gpu_uuid("n1", 0) in a else 1
        tenant_claim(api, "grab", "n1", index, 50, 1000)
        report = r.run_pass()
        assert report.claims_deleted >= 1
        # ... and is made again (same name: the pod names it) where it fits — nowhere now,
        # since b holds the other GPU: the pod waits, nothing over-committed
        assert ("default", "horus-gpu-a-req") not in api.claims
        live = live_of(api, keys=False)
        assert all(v.core_used_percent <= 100 for v in live.state.views())
    finally:
        r.close()


def test_two_pods_naming_one_converted_claim_get_none(api: FakeJobApi, rec: Reconciler) -> None:
    add_pod(api, converted_pod("x", 20, 4, claim="horus-gpu-same"))
    add_pod(api, converted_pod("y", 20, 4, claim="horus-gpu-same"))
    rec.run_pass()
    assert ("default", "horus-gpu-same") not in api.claims


def test_a_forged_converted_claim_without_its_waiting_pod_reserves_nothing() -> None:
    """A tenant may write the converted-pod label and a pod owner on any claim: without the
    pod Horus made it for waiting for it, an unallocated claim holds nothing and Horus does
    not count it; nor does one without Horus' own annotation (only the operator may write a
    horus.io/ annotation on a claim), though its pod waits."""
    from horus.operator.claim_manifests import pod_share_claim

    api = dra_api("n1", gpus=1)
    uuid = simulated_gpu_uuid("n1", 0)
    pod = converted_pod("p", 90, 4, claim="horus-gpu-p")
    made = pod_share_claim(pod, "horus-gpu-p", uuid, 90, 1024)
    api.create_resource_claim("default", made)

    def used() -> int:
        live = live_of(api, pods=True, keys=False)
        return live.state.views()[0].core_used_percent

    assert used() == 0  # no pod: a label proves nothing
    add_pod(api, {**pod, "metadata": {**pod["metadata"], "uid": "someone-else"}})
    assert used() == 0  # a pod of that name, but not the claim's owner
    api.pods[("default", "p")] = pod
    assert used() == 90  # the owner waits for it: Horus' decision, counted
    api.claims[("default", "horus-gpu-p")]["metadata"]["annotations"].pop(
        c.ANNOTATION_CONVERTED_FOR
    )
    assert used() == 0  # label and owner, but not Horus' mark: a tenant's claim
    api.claims[("default", "horus-gpu-p")] = made
    api.pods[("default", "p")]["spec"]["nodeName"] = "n1"
    assert used() == 0  # bound but not allocated: the pod does not wait for it any more


def test_a_converted_pod_nudges_a_pass_a_plain_one_does_not() -> None:
    from horus.operator.nudges import change_fingerprint

    pod = converted_pod("p", 30, 4)
    assert change_fingerprint("pods", pod) is not None
    plain = {"metadata": {"name": "q", "namespace": "default"}, "spec": {"containers": []}}
    assert change_fingerprint("pods", plain) is None


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("1000Mi", 1000), ("16Gi", 16384), ("1048576", 1), ("1048577", 2), ("1.5Gi", 1536)],
)
def test_consumed_memory_in_any_form_the_apiserver_writes(memory: str, mib: int) -> None:
    n1, slice_ = dra_node("n1")
    state = build_live_state([n1], [], [], slices=[slice_]).state
    result = {"driver": c.DRA_DRIVER_NAME, "pool": "n1", "device": "gpu-0",
              "consumedCapacity": {"cores": "7", "memory": memory}}  # fmt: skip
    claim = {"metadata": {"name": "m", "namespace": "x"},
             "status": {"allocation": {"devices": {"results": [result]}}}}  # fmt: skip
    (share,) = claim_shares(state, claim)
    assert (share.core_percent, share.memory_mib) == (7, mib)
    result["consumedCapacity"]["memory"] = "lots"
    with pytest.raises(ValidationError, match="ResourceClaim x/m result 0 memory"):
        claim_shares(state, claim)


def test_a_converted_pod_is_told_where_its_share_went_or_why_it_waits() -> None:
    api = dra_api("n1", gpus=1)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        add_pod(api, converted_pod("fits", 60, 4))
        no_profile = converted_pod("blind", 10, 4)
        del no_profile["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE]
        add_pod(api, no_profile)
        r.run_pass()
        add_pod(api, converted_pod("late", 60, 4))  # 60 % more fits nowhere now
        r.run_pass()
        r.run_pass()  # told once, not at every pass
        r.writer.drain()
        assert api.reasons("fits") == ["GPUChosen"]
        (chosen,) = [e["message"] for e in api.events if e["involvedObject"]["name"] == "fits"]
        assert "horus-gpu-fits-req: n1/gpu-0 (60% core, 1024 MiB)" in chosen
        assert api.reasons("blind") == ["GPURequestRefused"]
        (late,) = [e for e in api.events if e["involvedObject"]["name"] == "late"]
        assert late["type"] == "Warning" and late["involvedObject"]["kind"] == "Pod"
        assert ("default", "horus-gpu-late-req") not in api.claims
    finally:
        r.close()


def _taint(api: FakeJobApi, node_name: str, index: int) -> None:
    """What the driver publishes for a GPU that turned unhealthy (docs/dra.md contract)."""
    for item in api.slices:
        if item["spec"]["nodeName"] != node_name:
            continue
        for device in item["spec"]["devices"]:
            if device["name"] == f"gpu-{index}":
                device["taints"] = [
                    {"key": c.DRA_TAINT_UNHEALTHY, "value": "Unhealthy", "effect": "NoSchedule"}
                ]


def test_a_gpu_that_turns_unhealthy_before_the_claim_is_allocated_re_places_the_job() -> None:
    api = dra_api("n1", gpus=3)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        api.add_dljob(job("sick", core=60))
        api.add_dljob(job("fine", core=60))
        r.run_pass()
        sick, fine = (status(api, n)["placements"][0] for n in ("sick", "fine"))
        assert sick["gpuIndex"] != fine["gpuIndex"]  # 60 % each: two GPUs
        api.allocate("default", "fine-0-gpu", "n1", fine["gpuIndex"], 60, 20000, "fine-0")
        for index in (sick["gpuIndex"], fine["gpuIndex"]):
            _taint(api, "n1", index)
        r.run_pass()
        st = status(api, "sick")
        assert st["phase"] == c.DLJOB_PHASE_QUEUED and st["reason"] == "GPUUnhealthy"
        # an allocated claim is not re-placed: its pod holds the GPU (the agent's health
        # handling decides what happens to a running share)
        assert status(api, "fine")["phase"] == c.DLJOB_PHASE_SCHEDULED
        r.run_pass()
        (again,) = status(api, "sick")["placements"]
        assert again["gpuIndex"] not in (sick["gpuIndex"], fine["gpuIndex"])
    finally:
        r.close()


def test_a_replayed_older_record_is_found_out_from_the_claims_after_a_restart() -> None:
    """No Binding carries the record epoch onto a pod on this path: each claim carries the
    epoch it was made in, signed, so an older signed record written back (by whoever can write
    dljobs/status) is distrusted by a restarted operator and nothing is redone from it."""
    import copy

    from horus.operator.claimcommit import claim_epoch
    from horus.operator.moves import start_move
    from horus.operator.pass_state import PassReport

    api = dra_api("n1", gpus=2)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    api.add_dljob(job("m", core=60))
    r.run_pass()
    old_status = copy.deepcopy(api.job("m")["status"])
    old = old_status["placements"][0]
    start_move(
        _ctx(r, api, "m"),
        _placement("default/m", "n1", 1 - old["gpuIndex"], 60, 20000),
        "t",
        api,
        r.writer,
        PassReport(),
    )
    r.run_pass()
    r.run_pass()  # the old claim went, the new decision's claim is made
    claim = api.claims[("default", "m-0-gpu")]
    assert simulated_gpu_uuid("n1", 1 - old["gpuIndex"]) in pinned(claim)
    made_in = claim_epoch(claim, KEY)
    assert made_in is not None and made_in > old_status[c.STATUS_PLACEMENT_EPOCH]
    api.allocate("default", "m-0-gpu", "n1", 1 - old["gpuIndex"], 60, 20000, "m-0")
    api.run_bound_pods()
    r.close()
    # the older record, validly signed, written back; the operator restarts
    api.job("m")["status"] = old_status
    restarted = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        restarted.run_pass()
        assert ("default", "m-0-gpu") in api.claims  # the running share's claim is not redone
        assert simulated_gpu_uuid("n1", 1 - old["gpuIndex"]) in pinned(
            api.claims[("default", "m-0-gpu")]
        )
        assert api.pods[("default", "m-0")]["spec"]["nodeName"] == "n1"
        # a claim whose signature does not verify proves nothing
        forged = copy.deepcopy(claim)
        forged["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] += " "
        assert claim_epoch(forged, KEY) is None
    finally:
        restarted.close()


def test_a_record_someone_else_wrote_is_restored_from_the_claims_of_running_pods() -> None:
    """On this path replica pods carry no signature; their claims do, and the kube-scheduler
    reserved each for its pod: a record another identity wrote is rebuilt from them."""
    api = dra_api("n1", gpus=2)
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        api.add_dljob(job("t", replicas=2, core=60))
        r.run_pass()
        truth = sorted(status(api, "t")["placements"], key=lambda p: p["replica"])
        allocate_as_recorded(api, "t")
        api.run_bound_pods()
        r.run_pass()
        # an identity that may write dljobs/status moves both replicas onto one GPU, unsigned
        forged = [{**p, "gpuIndex": 0, "gpuUUID": simulated_gpu_uuid("n1", 0)} for p in truth]
        api.job("t")["status"]["placements"] = forged
        r.run_pass()
        r.writer.drain()
        st = status(api, "t")
        assert sorted(st["placements"], key=lambda p: p["replica"]) == truth
        assert st["phase"] == c.DLJOB_PHASE_RUNNING and "StatusRestored" in api.reasons("t")
        assert len(api.claims) == 2 and all(
            cl["status"].get("allocation") for cl in api.claims.values()
        )
    finally:
        r.close()


def test_an_unsigned_pod_assignment_on_the_dra_path_is_no_problem() -> None:
    """On DRA a pod's share is counted from its claim; its unsigned assignment annotation is
    not reported as a pod 'the device plugin gives no GPU' (there is no device plugin)."""
    n1, slice_ = dra_node("n1")
    pod = {
        "metadata": {
            "name": "hog-0",
            "namespace": "default",
            "uid": "u1",
            "annotations": {c.ANNOTATION_GPU_ASSIGNMENT: '{"node": "n1", "gpus": [0]}'},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    on_dra = build_live_state([n1], [pod], [], keys=KEY, slices=[slice_])
    assert on_dra.problems == []
    # the device-plugin path still reports it: there the plugin refuses such a pod any GPU
    inventory = node("n1", gpus=2, memory=GPU_MIB)
    on_dp = build_live_state([inventory], [pod], [], keys=KEY)
    assert any("hog-0" in p and "not counted" in p for p in on_dp.problems), on_dp.problems


def test_a_still_dra_cluster_keeps_its_live_state_and_any_change_builds_it_again(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """Issue 27: a DRA pass whose listings are the last build's very objects gets that build
    back (every one compared with a fresh build by tests/unit/conftest.py); a claim, a slice
    or a pod that changed builds in full."""
    api.add_dljob(job("train"))
    assert rec.run_pass().live_state == "full: dra"
    allocate_as_recorded(api, "train")
    api.run_bound_pods()
    assert rec.run_pass().live_state == "full: dra"  # its claim allocated, its pod running
    assert rec.run_pass().live_state == "full: dra"  # the record the pass wrote: Running
    assert status(api, "train")["phase"] == c.DLJOB_PHASE_RUNNING
    assert rec.run_pass().live_state == "kept"
    assert rec.run_pass().live_state == "kept"
    tenant_claim(api, "mine", "n2", 0, 100, GPU_MIB)  # a tenant takes a whole GPU of n2
    assert rec.run_pass().live_state == "full: dra"
    assert rec.run_pass().live_state == "kept"
    api.slices = api.slices[:1]  # n2's driver withdrew its slice: its GPUs are gone
    assert rec.run_pass().live_state == "full: dra"
    api.add_dljob(job("more", core=100, mem=GPU_MIB))
    report = rec.run_pass()
    assert report.live_state == "full: dra" and report.placed == 1
    (placed,) = status(api, "more")["placements"]
    assert placed["node"] == "n1"  # not n2, whose GPUs the kept state no longer offers
    assert rec.metrics.live_state_builds.labels(how="kept")._value.get() == 3


def test_repeated_overtakes_keep_the_job_off_those_gpus_for_a_while() -> None:
    """A tenant taking the GPU of each new decision in turn (and giving the last one back):
    the job is re-placed once per GPU, then waits until it may use them again, and is
    placed then; nothing that runs is ever deleted."""
    api = dra_api("n1", gpus=2)
    rec = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA)
    try:
        assert rec.claim_path is not None
        api.add_dljob(job("v", core=50))
        taken: list[int] = []
        for round_ in range(2):
            rec.run_pass()
            (r,) = status(api, "v")["placements"]
            assert r["gpuIndex"] not in taken  # never back on a GPU it lost
            tenant_claim(api, f"grab{round_}", "n1", r["gpuIndex"], 70, 1000)
            if round_:  # the tenant gives the GPU it took before back
                api.claims.pop(("default", "grab0"))
            taken.append(r["gpuIndex"])
            assert rec.run_pass().replaced == 1
        assert sorted(taken) == [0, 1]
        rec.run_pass()  # gpu 0 is free again, but the job lost it a moment ago: it waits
        st = status(api, "v")
        assert st["phase"] == c.DLJOB_PHASE_QUEUED and not st.get("placements")
        assert st["reason"] == "OvertakenWaiting"
        uid = api.job("v")["metadata"]["uid"]
        assert len(rec.claim_path.avoided(uid)) == 2
        rec.claim_path.avoid_s = 0  # what the passage of time does
        for gpus in rec.claim_path._avoid.values():
            for u in gpus:
                gpus[u] = 0.0
        rec.run_pass()
        (r,) = status(api, "v")["placements"]
        assert r["gpuIndex"] == taken[0]  # placed where there is room again
        rec.writer.drain()
        assert api.reasons("v").count("ClaimOvertaken") == 2
    finally:
        rec.close()


def test_a_tenant_claim_naming_a_gone_job_as_owner_is_never_deleted(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(job("q", core=60))
    forged = {"apiVersion": c.API_GROUP_VERSION, "kind": c.DLJOB_KIND, "name": "q",
              "uid": "uid-q", "controller": True}  # fmt: skip
    # a tenant claim "controlled" by a job that is then gone: not Horus' to delete
    api.create_resource_claim(
        "default", {"metadata": {"name": "mine", "ownerReferences": [forged]}, "spec": {}}
    )
    rec.run_pass()
    del api.dljobs[("default", "q")]
    for _ in range(2):
        rec.run_pass()
    assert ("default", "mine") in api.claims
    assert ("default", "q-0-gpu") not in api.claims  # Horus' own claim of the job went
