"""Horus as Kueue's AdmissionCheck controller (horus.operator.kueue) in whole reconcile passes
on the in-memory API: Workloads decided as gangs, answered with podSetUpdates, their slots
held until their pods' claims fill them, and every bad input answered in words.

The same contract runs against the real Kueue in tests/integration/kueue/."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, ROOT
from test_operator_dra_commit_claims import dra_api, pinned

from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.kube.errors import Conflict
from horus.operator.kueue.api import KueueMissing
from horus.operator.kueue.gang_pods import REASON_NO_SLOT
from horus.operator.kueue.slots import decode_slots
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()
CHECK = "horus-gpu"
PROFILE = (ROOT / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()


class FakeKueue:
    """Kueue's Workloads and AdmissionChecks in memory; ``answer_check`` as the apiserver
    applies the JSON patch (each ``test`` first, then the replace)."""

    def __init__(self) -> None:
        self.workloads: dict[tuple[str, str], dict[str, Any]] = {}
        self.checks = [
            {
                "metadata": {"name": CHECK},
                "spec": {"controllerName": c.KUEUE_ADMISSION_CHECK_CONTROLLER},
            },
            {"metadata": {"name": "other"}, "spec": {"controllerName": "example.com/other"}},
        ]
        self.installed = True
        self.answers: list[tuple[str, str]] = []
        self.templates: dict[tuple[str, str], dict[str, Any]] = {}

    def read_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.templates.get((namespace, name))

    def list_workloads(self) -> list[dict[str, Any]]:
        if not self.installed:
            raise KueueMissing("workloads.kueue.x-k8s.io is not served")
        return copy.deepcopy(list(self.workloads.values()))

    def list_admission_checks(self) -> list[dict[str, Any]]:
        if not self.installed:
            raise KueueMissing("admissionchecks.kueue.x-k8s.io is not served")
        return copy.deepcopy(self.checks)

    def activate_check(self, name: str, condition: Mapping[str, Any]) -> None:
        for ch in self.checks:
            if ch["metadata"]["name"] == name:
                ch["status"] = {"conditions": [dict(condition)]}

    def answer_check(
        self,
        namespace: str,
        name: str,
        index: int,
        expected: Mapping[str, str],
        entry: Mapping[str, Any],
    ) -> None:
        wl = self.workloads.get((namespace, name))
        if wl is None:
            raise Conflict("gone")
        checks = wl["status"]["admissionChecks"]
        if index >= len(checks) or any(checks[index].get(k) != v for k, v in expected.items()):
            raise Conflict("changed")
        checks[index] = copy.deepcopy(dict(entry))
        self.answers.append((name, str(entry["state"])))

    def check_of(self, name: str, namespace: str = "default") -> dict[str, Any]:
        wl = self.workloads[(namespace, name)]
        return next(ch for ch in wl["status"]["admissionChecks"] if ch["name"] == CHECK)


def template(core: int | None = 40, memory_units: int | None = 64, profile: str | None = PROFILE,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    limits: dict[str, str] = {}
    if core is not None:
        limits[c.RESOURCE_GPU_CORE] = str(core)
    if memory_units is not None:
        limits[c.RESOURCE_GPU_MEMORY] = str(memory_units)
    ann = dict(annotations or {})
    if profile is not None:
        ann[c.ANNOTATION_GRAPH_PROFILE] = profile
    return {
        "metadata": {"annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


def workload(
    name: str,
    pod_sets: list[tuple[str, int, dict[str, Any]]],
    priority: int = 0,
    reserved: bool = True,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"wl-uid-{name}",
            "creationTimestamp": created,
        },
        "spec": {
            "priority": priority,
            "podSets": [{"name": n, "count": k, "template": t} for n, k, t in pod_sets],
        },
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}],
            "admissionChecks": [
                {"name": "other", "state": "Pending", "message": ""},
                {"name": CHECK, "state": "Pending", "message": ""},
            ],
        },
    }


@pytest.fixture
def kueue() -> FakeKueue:
    return FakeKueue()


@pytest.fixture
def api() -> FakeJobApi:
    return dra_api("n1", "n2")


@pytest.fixture
def rec(api: FakeJobApi, kueue: FakeKueue) -> Iterator[Reconciler]:
    r = Reconciler(
        api, PREDICTOR, KEY, workers=4, progress_deadline=30.0,
        placement_path=c.PLACEMENT_PATH_DRA, kueue=kueue,
    )  # fmt: skip
    yield r
    r.close()


def add(kueue: FakeKueue, wl: dict[str, Any]) -> None:
    kueue.workloads[("default", wl["metadata"]["name"])] = wl


def slots(kueue: FakeKueue, name: str, pod_set: str = "workers") -> list[Any]:
    (update,) = [u for u in kueue.check_of(name)["podSetUpdates"] if u["name"] == pod_set]
    return decode_slots(update["annotations"][c.ANNOTATION_GANG_SLOTS], pod_set)


def gang_pod(name: str, wl: dict[str, Any], pod_set: str = "workers") -> dict[str, Any]:
    """A pod of an admitted Workload as it reaches the apiserver: the check's podSetUpdates
    (copied by Kueue into the job's template), Kueue's pod-set label, and the claim reference
    the admission policy made of its horus.io/gpu-* requests."""
    meta = wl["metadata"]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {c.KUEUE_PODSET_LABEL: pod_set},
            "annotations": {
                c.ANNOTATION_KUEUE_WORKLOAD: f"{meta['name']}/{meta['uid']}",
                c.ANNOTATION_GPU_CORE_REQUEST: "40",
                c.ANNOTATION_GPU_MEMORY_REQUEST: "64",
            },
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "horus-gpu"}]}}
            ],
            "resourceClaims": [
                {"name": "horus-gpu", "resourceClaimTemplateName": c.CONVERTED_CLAIM_TEMPLATE}
            ],
        },
        "status": {"phase": "Pending"},
    }


def add_pod(api: FakeJobApi, pod: dict[str, Any]) -> None:
    api.pods[("default", pod["metadata"]["name"])] = pod


def events(rec: Reconciler, api: FakeJobApi, reason: str) -> list[str]:
    rec.writer.drain()
    return [str(e.get("note") or e.get("message")) for e in api.events if e.get("reason") == reason]


# --- the gang decision ---------------------------------------------------------------------


def test_four_workers_get_four_gpus_as_one_gang_and_ready_with_pod_set_updates(
    kueue: FakeKueue, rec: Reconciler
) -> None:
    add(kueue, workload("train", [("workers", 4, template(40, 64))]))
    rec.run_pass()
    check = kueue.check_of("train")
    assert check["state"] == "Ready", check["message"]
    (update,) = check["podSetUpdates"]
    assert update["annotations"][c.ANNOTATION_KUEUE_WORKLOAD] == "train/wl-uid-train"
    got = slots(kueue, "train")
    assert [s.index for s in got] == [0, 1, 2, 3]
    assert len({s.gpu_uuid for s in got}) == 4  # one GPU per worker, the gang on all four
    assert {(s.core_percent, s.memory_mib) for s in got} == {(40, 64 * 256)}
    assert "nodeSelector" not in update  # two nodes: the claims pin each pod
    # the other controller's entry is left alone
    assert (
        kueue.workloads[("default", "train")]["status"]["admissionChecks"][0]["state"] == "Pending"
    )


def test_with_room_for_three_none_is_placed_and_kueue_is_told_to_retry(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    add(kueue, workload("big", [("workers", 1, template(100, 64))]))
    rec.run_pass()
    assert kueue.check_of("big")["state"] == "Ready"
    add(kueue, workload("train", [("workers", 4, template(40, 64))]))
    rec.run_pass()
    check = kueue.check_of("train")
    assert check["state"] == "Retry"
    assert check["requeueAfterSeconds"] == c.KUEUE_RETRY_SECONDS
    assert "does not fit as a gang" in check["message"] and "workers" in check["message"]
    assert "podSetUpdates" not in check
    # nothing of the refused gang is held: a 60 % pod still finds three free GPUs' worth
    add(kueue, workload("small", [("workers", 3, template(60, 64))]))
    rec.run_pass()
    assert kueue.check_of("small")["state"] == "Ready"


def test_two_pod_sets_are_all_or_none(kueue: FakeKueue, rec: Reconciler) -> None:
    add(
        kueue,
        workload("mixed", [("launcher", 1, template(100, 64)), ("workers", 4, template(40, 64))]),
    )
    rec.run_pass()
    check = kueue.check_of("mixed")
    assert check["state"] == "Retry", check["message"]  # 1 whole + 4 more GPUs > 4 GPUs
    assert "pod set workers" in check["message"]
    add(
        kueue,
        workload("fits", [("launcher", 1, template(50, 64)), ("workers", 3, template(40, 64))]),
    )
    rec.run_pass()
    assert kueue.check_of("fits")["state"] == "Ready"
    assert {u["name"] for u in kueue.check_of("fits")["podSetUpdates"]} == {"launcher", "workers"}


def test_ready_slots_hold_their_gpus_against_later_jobs_until_released(
    kueue: FakeKueue, rec: Reconciler
) -> None:
    add(kueue, workload("a", [("workers", 4, template(70, 64))]))
    rec.run_pass()
    assert kueue.check_of("a")["state"] == "Ready"
    add(kueue, workload("b", [("workers", 1, template(40, 64))]))
    for _ in range(2):  # the next passes read the slots back from the status
        kueue.check_of("b").update(state="Pending")
        rec.run_pass()
        assert kueue.check_of("b")["state"] == "Retry"
    # Kueue evicts "a" (preemption): its quota released, its check reset; "b" now fits
    wl_a = kueue.workloads[("default", "a")]
    wl_a["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False"},
                                    {"type": "Evicted", "status": "True"}]  # fmt: skip
    kueue.check_of("a").update(state="Pending", podSetUpdates=[])
    kueue.check_of("b").update(state="Pending")
    rec.run_pass()
    assert kueue.check_of("b")["state"] == "Ready"
    assert kueue.check_of("a")["state"] == "Pending"  # no quota: not decided


def test_higher_priority_workload_is_decided_first(kueue: FakeKueue, rec: Reconciler) -> None:
    add(
        kueue,
        workload(
            "low", [("workers", 4, template(60, 64))], priority=0, created="2026-01-01T00:00:00Z"
        ),
    )
    add(
        kueue,
        workload(
            "high", [("workers", 4, template(60, 64))], priority=10, created="2026-01-02T00:00:00Z"
        ),
    )
    rec.run_pass()
    assert kueue.check_of("high")["state"] == "Ready"
    assert kueue.check_of("low")["state"] == "Retry"


def test_bad_neighbours_land_on_different_gpus_when_a_free_one_exists(
    kueue: FakeKueue, api: FakeJobApi
) -> None:
    heavy = (ROOT / "examples" / "profiles" / "vgg16-bs256.yaml").read_text()
    one = dra_api("n1")
    r = Reconciler(one, PREDICTOR, KEY, workers=4, placement_path=c.PLACEMENT_PATH_DRA, kueue=kueue)
    try:
        add(kueue, workload("x", [("workers", 1, template(30, 32, heavy))]))
        r.run_pass()
        add(kueue, workload("y", [("workers", 1, template(30, 32, heavy))]))
        r.run_pass()
    finally:
        r.close()
    (sx,), (sy,) = slots(kueue, "x"), slots(kueue, "y")
    assert sx.gpu_uuid != sy.gpu_uuid  # 60 % of one GPU would fit, but they slow each other
    assert "predicted speed" in kueue.check_of("y")["message"]


# --- pods fill the slots ----------------------------------------------------------------------


def test_each_pod_of_the_gang_gets_the_claim_of_one_slot_and_a_fifth_waits(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    wl = workload("train", [("workers", 4, template(40, 64))])
    add(kueue, wl)
    rec.run_pass()
    uuids = {s.gpu_uuid for s in slots(kueue, "train")}
    for i in range(5):
        add_pod(api, gang_pod(f"train-w-{i}", wl))
    report = rec.run_pass()
    assert report.claims_created == 4
    made = [
        cl
        for cl in api.claims.values()
        if cl["metadata"]["annotations"].get(c.ANNOTATION_GANG_SLOT)
    ]
    assert len(made) == 4
    assert {pinned(cl).split('"')[-2] for cl in made} == uuids
    assert {cl["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT] for cl in made} == {
        f"wl-uid-train/workers/{i}" for i in range(4)
    }
    for cl in made:
        assert cl["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
            "cores": "40", "memory": f"{64 * 256}Mi"
        }  # fmt: skip
    assert any("filled by other pods" in m for m in events(rec, api, REASON_NO_SLOT))
    # once the claims exist the slots are filled, not held twice: the state counts 4 × 40 %
    rec.run_pass()
    assert rec.run_pass().claims_created == 0


def test_a_finished_pods_slot_goes_to_the_pod_that_replaces_it(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    wl = workload("train", [("workers", 1, template(40, 64))])
    add(kueue, wl)
    rec.run_pass()
    add_pod(api, gang_pod("train-w-0", wl))
    assert rec.run_pass().claims_created == 1
    api.pods[("default", "train-w-0")]["status"]["phase"] = "Failed"
    add_pod(api, gang_pod("train-w-1", wl))
    assert rec.run_pass().claims_created == 1
    claim = api.claims[("default", "horus-gpu-uid-train-w-1")]
    assert claim["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT] == "wl-uid-train/workers/0"


def test_a_pod_naming_a_workload_horus_did_not_admit_gets_no_claim(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    wl = workload("train", [("workers", 1, template(40, 64))], reserved=False)
    add(kueue, wl)
    forged = gang_pod("forged-x-0", wl)
    add_pod(api, forged)
    other_uid = gang_pod("forged-y-0", wl)
    other_uid["metadata"]["annotations"][c.ANNOTATION_KUEUE_WORKLOAD] = "train/not-its-uid"
    add_pod(api, other_uid)
    report = rec.run_pass()
    assert report.claims_created == 0 and not api.claims
    why = events(rec, api, REASON_NO_SLOT)
    assert any("not admitted by Horus" in m for m in why)
    assert any("does not exist or is not one a Horus check decides" in m for m in why)


def test_a_forged_slot_list_on_the_pod_is_never_read(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    wl = workload("train", [("workers", 1, template(40, 64))])
    add(kueue, wl)
    rec.run_pass()
    (slot,) = slots(kueue, "train")
    pod = gang_pod("train-w-0", wl)
    other = simulated_gpu_uuid("n2" if slot.node == "n1" else "n1", 1)
    pod["metadata"]["annotations"][c.ANNOTATION_GANG_SLOTS] = json.dumps(
        [{"i": 0, "node": "n2", "gpu": 1, "uuid": other, "core": 100, "memoryMiB": 81920}]
    )
    add_pod(api, pod)
    rec.run_pass()
    claim = api.claims[("default", "horus-gpu-uid-train-w-0")]
    assert slot.gpu_uuid in pinned(claim)
    assert (
        claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["cores"] == "40"
    )


# --- bad input ---------------------------------------------------------------------------------


def test_a_share_above_every_gpu_is_rejected_with_the_reason(
    kueue: FakeKueue, rec: Reconciler
) -> None:
    add(kueue, workload("huge", [("workers", 1, template(40, 400 * 1024))]))  # 100 GiB units → MiB
    add(kueue, workload("over", [("workers", 1, template(150, 64))]))
    rec.run_pass()
    assert kueue.check_of("huge")["state"] == "Rejected", kueue.check_of("huge")["message"]
    over = kueue.check_of("over")
    assert over["state"] == "Rejected" and c.RESOURCE_GPU_CORE in over["message"]


def test_an_unknown_profile_configmap_is_retried_with_its_name(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    ref = {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "resnet-profile"}
    add(kueue, workload("ref", [("workers", 1, template(40, 64, None, ref))]))
    rec.run_pass()
    check = kueue.check_of("ref")
    assert check["state"] == "Retry" and "resnet-profile" in check["message"]
    api.configmaps[("default", "resnet-profile")] = {c.PROFILE_CONFIGMAP_DEFAULT_KEY: PROFILE}
    check.update(state="Pending")
    rec.run_pass()
    assert kueue.check_of("ref")["state"] == "Ready"


def test_no_profile_gets_whole_gpus_and_says_so(kueue: FakeKueue, rec: Reconciler) -> None:
    add(kueue, workload("np", [("workers", 2, template(40, 64, None))]))
    rec.run_pass()
    check = kueue.check_of("np")
    assert check["state"] == "Ready"
    assert "names no profile" in check["message"] and "whole GPU" in check["message"]
    assert {s.core_percent for s in slots(kueue, "np")} == {100}


def test_a_malformed_workload_stops_nothing(kueue: FakeKueue, rec: Reconciler) -> None:
    bad = workload("bad", [("workers", 1, template())])
    bad["spec"]["podSets"][0]["count"] = "four"
    add(kueue, bad)
    add(kueue, workload("good", [("workers", 1, template())]))
    rec.run_pass()
    assert kueue.check_of("good")["state"] == "Ready"
    assert kueue.check_of("bad")["state"] == "Pending"


def test_workloads_without_horus_resources_are_ready_with_nothing_to_place(
    kueue: FakeKueue, rec: Reconciler
) -> None:
    add(kueue, workload("cpu", [("main", 2, template(None, None, None))]))
    rec.run_pass()
    check = kueue.check_of("cpu")
    assert check["state"] == "Ready" and "podSetUpdates" not in check


def test_a_lost_answer_holds_nothing(kueue: FakeKueue, rec: Reconciler) -> None:
    add(kueue, workload("a", [("workers", 4, template(70, 64))]))
    real = kueue.answer_check

    def refuse(*args: Any, **kwargs: Any) -> None:  # fmt: skip
        raise Conflict("Kueue reset the check meanwhile")

    kueue.answer_check = refuse  # type: ignore[method-assign]
    rec.run_pass()
    kueue.answer_check = real  # type: ignore[method-assign]
    add(kueue, workload("b", [("workers", 4, template(30, 64))]))
    rec.run_pass()
    assert kueue.check_of("b")["state"] == "Ready"  # a's refused answer held no GPU


def test_without_kueue_the_pass_places_dljobs_as_before(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    from test_operator_dra_commit_claims import job

    kueue.installed = False
    api.add_dljob(job("plain"))
    report = rec.run_pass()
    assert report.placed == 1


def test_horus_marks_its_own_checks_active_and_no_other(kueue: FakeKueue, rec: Reconciler) -> None:
    rec.run_pass()
    ours, other = kueue.checks
    assert ours["status"]["conditions"][0]["type"] == "Active"
    assert ours["status"]["conditions"][0]["status"] == "True"
    assert "status" not in other


def test_a_pod_kueue_still_gates_gets_no_claim_of_its_own(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """A Deployment's pod under Kueue's pod integration exists before its Workload is
    admitted; it waits for Kueue (and Horus' check), never decided alone meanwhile."""
    wl = workload("web", [("main", 1, template(40, 64))], reserved=False)
    add(kueue, wl)
    pod = gang_pod("web-7d9f-x2k4q", wl)
    del pod["metadata"]["annotations"][c.ANNOTATION_KUEUE_WORKLOAD]  # added at admission
    pod["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE] = PROFILE
    pod["spec"]["schedulingGates"] = [{"name": c.KUEUE_ADMISSION_GATE}]
    add_pod(api, pod)
    assert rec.run_pass().claims_created == 0
    ungated = copy.deepcopy(pod)  # admitted elsewhere (a ClusterQueue without Horus' check)
    ungated["spec"]["schedulingGates"] = []
    ungated["metadata"]["resourceVersion"] = "2"
    add_pod(api, ungated)
    assert rec.run_pass().claims_created == 1


def test_claim_templates_another_namespaces_or_horus_class_are_told(
    kueue: FakeKueue, rec: Reconciler
) -> None:
    def with_claim(template_name: str) -> dict[str, Any]:
        t = template(40, 64)
        t["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name}]
        return t

    kueue.templates[("default", "own-gpu")] = {
        "spec": {"spec": {"devices": {"requests": [
            {"name": "g", "exactly": {"deviceClassName": c.DRA_DEVICE_CLASS}}
        ]}}}
    }  # fmt: skip
    kueue.templates[("default", "nic")] = {
        "spec": {"spec": {"devices": {"requests": [
            {"name": "n", "exactly": {"deviceClassName": "nic.example.com"}}
        ]}}}
    }  # fmt: skip
    add(kueue, workload("elsewhere", [("workers", 1, with_claim("in-team-b"))]))
    add(kueue, workload("own", [("workers", 1, with_claim("own-gpu"))]))
    add(kueue, workload("nic", [("workers", 1, with_claim("nic"))]))
    rec.run_pass()
    elsewhere = kueue.check_of("elsewhere")
    assert (
        elsewhere["state"] == "Retry"
        and "does not exist in namespace default" in elsewhere["message"]
    )
    own = kueue.check_of("own")
    assert own["state"] == "Rejected" and "horus.io/gpu-core" in own["message"]
    assert kueue.check_of("nic")["state"] == "Ready"  # another driver's device: not Horus' business


def test_a_replica_that_does_not_lead_writes_nothing_to_kueue(
    api: FakeJobApi, kueue: FakeKueue
) -> None:
    add(kueue, workload("train", [("workers", 1, template())]))
    r = Reconciler(
        api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA, kueue=kueue,
        is_leader=lambda: False,
    )  # fmt: skip
    try:
        r.run_pass()
    finally:
        r.close()
    assert kueue.answers == []
    assert "status" not in kueue.checks[0]  # not even the Active condition


def test_an_admitted_slot_holds_its_gpu_when_its_profile_configmap_goes(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    ref = {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "p"}
    api.configmaps[("default", "p")] = {c.PROFILE_CONFIGMAP_DEFAULT_KEY: PROFILE}
    add(kueue, workload("a", [("workers", 4, template(70, 64, None, ref))]))
    rec.run_pass()
    assert kueue.check_of("a")["state"] == "Ready"
    del api.configmaps[("default", "p")]
    rec.kueue._configmaps.clear()  # type: ignore[union-attr]  # as after the cache's TTL
    add(kueue, workload("b", [("workers", 1, template(40, 64))]))
    rec.run_pass()
    assert kueue.check_of("b")["state"] == "Retry"  # a's four 70 % slots still hold every GPU


def test_profile_configmaps_are_read_once_per_ttl_not_every_pass(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    reads: list[tuple[str, str]] = []
    real = api.configmap_data

    def counted(namespace: str, name: str) -> dict[str, str]:
        reads.append((namespace, name))
        return real(namespace, name)

    assert rec.kueue is not None
    rec.kueue._read_configmap = counted
    api.configmaps[("default", "p")] = {c.PROFILE_CONFIGMAP_DEFAULT_KEY: PROFILE}
    ref = {c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP: "p"}
    add(kueue, workload("a", [("workers", 2, template(40, 64, None, ref))]))
    for _ in range(5):
        rec.run_pass()
    assert kueue.check_of("a")["state"] == "Ready"
    assert reads == [("default", "p")]


def test_without_kueue_or_its_check_nothing_is_listed_every_pass(
    api: FakeJobApi, kueue: FakeKueue
) -> None:
    calls: list[str] = []
    lists = (kueue.list_workloads, kueue.list_admission_checks)

    def counted(name: str, real: Any) -> Any:
        def call() -> Any:
            calls.append(name)
            return real()

        return call

    kueue.list_workloads = counted("workloads", lists[0])  # type: ignore[method-assign]
    kueue.list_admission_checks = counted("checks", lists[1])  # type: ignore[method-assign]
    now = [1000.0]
    r = Reconciler(api, PREDICTOR, KEY, workers=2, placement_path=c.PLACEMENT_PATH_DRA, kueue=kueue)
    try:
        assert r.kueue is not None
        r.kueue.clock = lambda: now[0]
        kueue.installed = False
        for _ in range(3):
            r.run_pass()
        assert calls == ["checks"]  # missing: looked for once, not every pass
        now[0] += 31
        kueue.installed = True
        kueue.checks = kueue.checks[1:]  # only another controller's check
        r.run_pass()
        assert calls == ["checks", "checks"]  # no Horus check: Workloads not listed
    finally:
        r.close()


# --- Kueue's pod integrations: a Deployment's, a StatefulSet's pods ----------------------------


def integration_pod(name: str, gated: bool = True) -> dict[str, Any]:
    """A pod under Kueue's pod integration as the admission policy leaves it: its amounts in
    annotations, the entry naming Kueue's template, the placeholder the resourceclaim
    controller made from it recorded in its status; gated by Kueue until admitted."""
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": {c.KUEUE_QUEUE_NAME_LABEL: "q"},
            "annotations": {
                c.ANNOTATION_GPU_CORE_REQUEST: "40",
                c.ANNOTATION_GPU_MEMORY_REQUEST: "64",
                c.ANNOTATION_GRAPH_PROFILE: PROFILE,
            },
        },
        "spec": {
            "schedulingGates": [{"name": c.KUEUE_ADMISSION_GATE}] if gated else [],
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "horus-gpu"}]}}
            ],
            "resourceClaims": [
                {"name": "horus-gpu", "resourceClaimTemplateName": c.KUEUE_CLAIM_TEMPLATE}
            ],
        },
        "status": {
            "phase": "Pending",
            "resourceClaimStatuses": [
                {"name": "horus-gpu", "resourceClaimName": f"{name}-horus-gpu-ab12c"}
            ],
        },
    }


def placeholder(pod: dict[str, Any], device_class: str = c.KUEUE_DEVICE_CLASS) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "metadata": {
            "name": f"{meta['name']}-horus-gpu-ab12c",
            "namespace": "default",
            "uid": f"claim-uid-{meta['name']}",
            "annotations": {c.POD_CLAIM_ANNOTATION: "horus-gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": "share", "exactly": {"deviceClassName": device_class, "count": 1}}
                ]
            }
        },
        "status": {},
    }


def pod_workload(name: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The Workload Kueue makes of a pod (or a pod group): owned by its pods, its one pod set
    the pod's spec alone."""
    wl = workload(name, [("main", len(pods), {"spec": copy.deepcopy(pods[0]["spec"])})])
    wl["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
         "uid": p["metadata"]["uid"]}
        for p in pods
    ]  # fmt: skip
    return wl


def admitted(pod: dict[str, Any], wl: dict[str, Any], kueue: FakeKueue) -> dict[str, Any]:
    """``pod`` as Kueue leaves it on admission: ungated, the check's podSetUpdates applied."""
    out = copy.deepcopy(pod)
    out["spec"]["schedulingGates"] = []
    (update,) = kueue.check_of(wl["metadata"]["name"])["podSetUpdates"]
    out["metadata"]["annotations"].update(update["annotations"])
    out["metadata"]["resourceVersion"] = "2"
    return out


def test_a_deployments_pod_under_kueue_is_placed_from_its_pod_and_its_placeholder_replaced(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    pod = integration_pod("web-7d9f-x2k4q")
    add_pod(api, pod)
    api.claims[("default", placeholder(pod)["metadata"]["name"])] = placeholder(pod)
    wl = pod_workload("pod-web-7d9f-x2k4q", [pod])
    add(kueue, wl)
    assert rec.run_pass().claims_created == 0  # gated: the Workload is decided, not the pod
    assert kueue.check_of(wl["metadata"]["name"])["state"] == "Ready"
    (slot,) = slots(kueue, wl["metadata"]["name"], "main")
    assert (slot.core_percent, slot.memory_mib) == (40, 64 * 256)  # the pod's request
    add_pod(api, admitted(pod, wl, kueue))
    assert rec.run_pass().claims_created == 1
    ours = api.claims[("default", f"{c.CONVERTED_CLAIM_PREFIX}uid-web-7d9f-x2k4q")]
    assert slot.gpu_uuid in pinned(ours)
    assert ours["metadata"]["annotations"][c.POD_CLAIM_ANNOTATION] == "horus-gpu"
    assert ("default", placeholder(pod)["metadata"]["name"]) in api.claims  # next pass
    report = rec.run_pass()
    assert (report.claims_recorded, report.placeholders_deleted) == (1, 1)
    assert ("default", placeholder(pod)["metadata"]["name"]) not in api.claims
    status = api.pods[("default", "web-7d9f-x2k4q")]["status"]["resourceClaimStatuses"]
    assert status == [{"name": "horus-gpu", "resourceClaimName": ours["metadata"]["name"]}]
    assert rec.run_pass().claims_created == 0  # the slot is filled, nothing made twice


def test_a_pod_workload_whose_pods_are_not_seen_waits_with_the_reason(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """Admitting it without its pods' request would place nothing: Retry, saying why."""
    wl = pod_workload("pod-web-gone", [integration_pod("web-gone")])
    add(kueue, wl)
    rec.run_pass()
    check = kueue.check_of("pod-web-gone")
    assert check["state"] == "Retry"
    assert "none of its pods is seen yet" in check["message"]


def test_a_pod_group_is_one_gang_read_from_its_pods(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """A StatefulSet's pods under Kueue: one Workload of count 3, all placed together."""
    pods = [integration_pod(f"db-{i}") for i in range(3)]
    for pod in pods:
        add_pod(api, pod)
    wl = pod_workload("db-group", pods)
    add(kueue, wl)
    rec.run_pass()
    assert kueue.check_of("db-group")["state"] == "Ready"
    placed = slots(kueue, "db-group", "main")
    assert len(placed) == 3 and {s.core_percent for s in placed} == {40}
    for pod in pods:
        add_pod(api, admitted(pod, wl, kueue))
    assert rec.run_pass().claims_created == 3


def test_a_claim_from_a_template_of_another_class_is_the_pods_and_horus_makes_none(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """A tenant's own template named horus-gpu-kueue, of Horus' real class: the claim made
    from it is no placeholder. Horus neither deletes it nor makes a second claim that would
    hold a share the pod never uses; the pod is told."""
    pod = integration_pod("web-own", gated=False)
    pod["metadata"]["labels"] = {}
    tenant = placeholder(pod, c.DRA_DEVICE_CLASS)
    api.claims[("default", tenant["metadata"]["name"])] = tenant
    add_pod(api, pod)
    report = rec.run_pass()
    assert report.claims_created == 0 and report.placeholders_deleted == 0
    assert ("default", tenant["metadata"]["name"]) in api.claims
    assert any("does not ask for class" in m for m in events(rec, api, "ClaimNameTaken"))


def test_a_kueue_template_pod_outside_kueue_gets_its_claim_and_loses_its_placeholder(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """The queue-name label without Kueue's pod integration: no gate, no Workload; Horus
    decides the pod alone as any plain pod, then replaces the placeholder."""
    pod = integration_pod("solo", gated=False)
    add_pod(api, pod)
    api.claims[("default", placeholder(pod)["metadata"]["name"])] = placeholder(pod)
    assert rec.run_pass().claims_created == 1
    assert rec.run_pass().placeholders_deleted == 1
    assert rec.run_pass().claims_recorded == 0  # recorded once


def test_a_status_that_changed_since_it_was_read_is_not_overwritten(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler
) -> None:
    """The status patch tests the list it read: a pod whose status moved on (the controller
    recorded another claim meanwhile) keeps it, and its placeholder stays until a pass reads
    the new list."""
    pod = integration_pod("raced", gated=False)
    add_pod(api, pod)
    api.claims[("default", placeholder(pod)["metadata"]["name"])] = placeholder(pod)
    rec.run_pass()
    original = api.record_pod_claims

    def moved_on(*args: Any) -> None:
        api.pods[("default", "raced")]["status"]["resourceClaimStatuses"] = [
            {"name": "horus-gpu", "resourceClaimName": "raced-horus-gpu-zz999"}
        ]
        original(*args)

    api.record_pod_claims = moved_on  # type: ignore[method-assign]
    report = rec.run_pass()
    assert (report.claims_recorded, report.placeholders_deleted) == (0, 0)
    assert ("default", placeholder(pod)["metadata"]["name"]) in api.claims


def test_a_gang_pod_is_never_decided_alone_in_a_pass_that_cannot_read_kueue(
    api: FakeJobApi, kueue: FakeKueue, rec: Reconciler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass whose read of Kueue fails (the copies not synced, the apiserver failing) still
    places DLJobs and plain pods, but a pod naming a Workload waits for that Workload's slot:
    deciding it alone would place it twice once its slot is filled."""
    wl = workload("train", [("workers", 1, template(40, 64))])
    add(kueue, wl)
    rec.run_pass()
    pod = gang_pod("train-w-0", wl)  # its template's profile, as Kueue's pods carry it
    pod["metadata"]["annotations"][c.ANNOTATION_GRAPH_PROFILE] = PROFILE
    add_pod(api, pod)

    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("apiserver down")

    monkeypatch.setattr(kueue, "list_workloads", broken)
    assert rec.run_pass().claims_created == 0
    assert not api.claims
    monkeypatch.undo()
    assert rec.run_pass().claims_created == 1
    claim = api.claims[("default", "horus-gpu-uid-train-w-0")]
    assert claim["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT] == "wl-uid-train/workers/0"


def test_kueue_changes_that_may_be_horus_turn_nudge_the_operator() -> None:
    from horus.operator.nudges import change_fingerprint

    wl = workload("train", [("workers", 1, template(40, 64))])
    before = change_fingerprint(c.KUEUE_WORKLOADS, wl)
    assert before is not None
    reset = copy.deepcopy(wl)
    reset["status"]["admissionChecks"][1]["state"] = "Retry"
    assert change_fingerprint(c.KUEUE_WORKLOADS, reset) != before
    evicted = copy.deepcopy(wl)
    evicted["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False"}]
    assert change_fingerprint(c.KUEUE_WORKLOADS, evicted) != before
    relabelled = copy.deepcopy(wl)
    relabelled["metadata"]["labels"] = {"team": "a"}
    relabelled["metadata"]["resourceVersion"] = "99"
    assert change_fingerprint(c.KUEUE_WORKLOADS, relabelled) == before
    check = {"metadata": {"name": CHECK}, "status": {"conditions": "garbled"}}
    assert change_fingerprint(c.KUEUE_ADMISSION_CHECKS, check) == ((), (), None)
