"""What Horus counts on the DRA path cannot be chosen by a tenant (docs/dra.md, "What Horus
counts"): a claim is a DLJob's only when Horus signed it; a claim Horus cannot read as a share
counts as the whole GPU and overtakes nobody; a decision with a running pod is never taken
out of the state for another's claim. The live state alone (``build_live_state``), on the
objects the apiserver holds."""

from __future__ import annotations

from typing import Any

from opfixtures import dljob
from test_operator_dra_commit_claims import (
    GPU_MIB,
    _Gpu,
    dra_api,
    horus_claim,
    live_of,
)

from horus.common import constants as c
from horus.operator.claim_manifests import replica_claim
from horus.operator.claimcount import claim_holding, claim_job_name
from horus.operator.podspec import placement_record


def decided(core: int = 60, mib: int = 1000, phase: str = "Scheduled") -> dict[str, Any]:
    """DLJob ``j``, one replica decided on n1/gpu-0, its record signed."""
    records = [placement_record(0, "j-0", "n1", _Gpu("n1", 0, core, mib))]
    return dljob(
        "j", placements=[{k: v for k, v in r.items() if k != "replica"} for r in records],
        phase=phase,
    )  # fmt: skip


def records_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(r, replica=0) for r in obj["status"]["placements"]]


def allocated(
    name: str, results: list[dict[str, Any]], owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A claim as the kube-scheduler leaves it: ``results`` allocated."""
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "a"}, {"name": "b"}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def result(index: int, cores: str | None = "30", memory: str = "1000Mi", **extra: Any) -> Any:
    out: dict[str, Any] = {
        "request": "a", "driver": c.DRA_DRIVER_NAME, "pool": "n1", "device": f"gpu-{index}",
    }  # fmt: skip
    if cores is not None:
        out["consumedCapacity"] = {"cores": cores, "memory": memory}
    return {**out, **extra}


def state_with(claims: list[dict[str, Any]], obj: dict[str, Any] | None = None) -> Any:
    api = dra_api("n1", gpus=2)
    if obj is not None:
        api.add_dljob(obj)
    for claim in claims:
        api.claims[("default", claim["metadata"]["name"])] = claim
    return live_of(api)


def core(live: Any, index: int) -> int:
    return int(live.state.core_used[live.state.gpu_id("n1", index)])


def test_a_tenant_claim_naming_a_dljob_as_owner_is_counted() -> None:
    obj = decided(core=30)
    owner = {
        "apiVersion": c.API_GROUP_VERSION, "kind": c.DLJOB_KIND, "name": "j", "uid": "uid-j",
        "controller": True,
    }  # fmt: skip
    # whole GPU 1, "owned" by the tenant's own small DLJob: enforced on the node, so counted
    forged = allocated("forged", [result(1, cores=None)], owner)
    live = state_with([forged], obj)
    assert core(live, 1) == 100 and claim_job_name("default", "forged") in live.residents
    # even on the job's own recorded GPU (30 % + 40 %), it is the tenant's share, not the job's
    on_record = allocated("also", [result(0, cores="40")], owner)
    live = state_with([on_record], obj)
    assert core(live, 0) == 70
    # Horus' signed claim of the job is the job's: counted once, by its record
    own = horus_claim(obj, 0, records_of(obj))
    own["status"] = allocated("x", [result(0, cores="30")])["status"]
    live = state_with([own], obj)
    assert core(live, 0) == 30 and not live.overtaken
    # a signature that does not verify (copied from another claim name) makes it a tenant's
    copied = horus_claim(obj, 0, records_of(obj))
    copied["metadata"]["name"] = "copy"
    copied["status"] = own["status"]
    live = state_with([copied], obj)
    assert core(live, 0) == 60 and claim_job_name("default", "copy") in live.residents


def test_two_results_on_one_gpu_count_the_whole_gpu_and_overtake_nobody() -> None:
    obj = decided(core=60)  # decided on gpu-0, its claim not allocated yet
    twice = allocated("twice", [result(0, "20"), {**result(0, "20"), "request": "b"}])
    held = claim_holding(state_with([]).state, twice)
    assert held.odd is not None and "two requests on one GPU" in held.odd
    assert [(s.core_percent, s.memory_mib) for s in held.shares] == [(100, GPU_MIB)]
    live = state_with([twice], obj)
    # counted up to the GPU's capacity beside the decision; the decision stays
    assert core(live, 0) == 100 and not live.overtaken
    assert "default/j" in {r for r in live.residents}
    assert any("twice" in p and "no pod is deleted" in p for p in live.problems)


def test_an_admin_access_claim_counts_the_whole_gpu_and_overtakes_nobody() -> None:
    obj = decided(core=60)
    admin = allocated("admin", [result(0, "10", adminAccess=True)])
    live = state_with([admin], obj)
    assert core(live, 0) == 100 and not live.overtaken
    assert any("adminAccess" in p for p in live.problems)
    alone = state_with([admin])  # on a GPU with nothing else: the whole GPU
    assert core(alone, 0) == 100
    assert int(alone.state.mem_used[alone.state.gpu_id("n1", 0)]) == GPU_MIB


def test_an_unreadable_result_loses_nothing_else_of_the_claim() -> None:
    odd = allocated(
        "odd", [result(0, cores="lots"), result(7, "10"), result(1, "20", memory="2000Mi")]
    )
    held = claim_holding(state_with([]).state, odd)
    assert held.odd is not None and "gpu-7" in held.odd
    # both GPUs it holds count whole; the device the node does not publish, nothing
    assert sorted((s.gpu_index, s.core_percent) for s in held.shares) == [(0, 100), (1, 100)]


def test_a_readable_claim_still_overtakes_a_decision_before_its_pods_run() -> None:
    obj = decided(core=60)
    grab = allocated("grab", [result(0, "70")])
    live = state_with([grab], obj)
    assert set(live.overtaken) == {"default/j"}
    assert live.overtaken_on["default/j"] == {live.state.gpu_uuid[0]}
    assert core(live, 0) == 70


def test_a_decision_with_a_running_pod_is_never_overtaken() -> None:
    obj = decided(core=60)
    api = dra_api("n1", gpus=2)
    api.add_dljob(obj)
    grab = allocated("grab", [result(0, "70")])
    api.claims[("default", "grab")] = grab
    claim = horus_claim(obj, 0, records_of(obj))
    api.claims[("default", "j-0-gpu")] = claim
    pod = {
        "metadata": {
            "name": "j-0", "namespace": "default", "uid": "p1",
            "ownerReferences": [{"apiVersion": c.API_GROUP_VERSION, "kind": c.DLJOB_KIND,
                                 "name": "j", "uid": "uid-j", "controller": True}],
            "annotations": {c.ANNOTATION_GPU_ASSIGNMENT: "x"},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }  # fmt: skip
    api.pods[("default", "j-0")] = pod
    live = live_of(api, pods=True)
    assert not live.overtaken and "default/j" in live.held_over
    assert core(live, 0) == 100  # its record and the claim up to the capacity
    # the same pod not bound yet: the decision was overtaken (nothing runs)
    pod["spec"] = {}
    live = live_of(api, pods=True)
    assert set(live.overtaken) == {"default/j"} and not live.held_over


def test_without_keys_horus_text_alone_marks_its_claim() -> None:
    obj = decided(core=30)
    own = horus_claim(obj, 0, records_of(obj))
    own["status"] = allocated("x", [result(0, cores="30")])["status"]
    plain = replica_claim(obj, 0, records_of(obj))  # a copy of the spec, no Horus text
    plain["metadata"]["name"] = "plain"
    plain["status"] = own["status"]
    api = dra_api("n1", gpus=2)
    api.add_dljob(obj)
    api.claims[("default", "j-0-gpu")] = own
    api.claims[("default", "plain")] = plain
    live = live_of(api, keys=False)
    assert core(live, 0) == 60  # the record (30) and the unsigned copy (30); own once
    assert claim_job_name("default", "plain") in live.residents
