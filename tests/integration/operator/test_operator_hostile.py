"""Hostile and broken DLJobs against the real control plane and the operator as a process.

Each test is one class of input from issue 20 that used to break the operator: a forged
placement record, a forged phase, a template the apiserver will not take as a pod, a node
constraint nothing matches, a profile nested thousands deep or physically impossible in a
ConfigMap, an explicit share below the prediction. In every one the operator must stay up,
say what is wrong on the object, and hold no GPU share for a job that cannot run.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import Any

from operator_support import PROFILES, Kube, check_invariants, dljob_body, gpu_capacity

from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, add_nodes


def _status(kube: Kube, name: str) -> dict[str, Any]:
    return (kube.jobs_by_name().get(name) or {}).get("status") or {}


def _reasons(kube: Kube, name: str) -> set[str]:
    return {e["reason"] for e in kube.events() if e["involvedObject"]["name"] == name}


def _patch_status(kube: Kube, name: str, status: dict[str, Any]) -> None:
    kube.custom.patch_namespaced_custom_object_status(
        c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL, name, {"status": status}
    )


def _forged_record(node: str, core: int = 100) -> list[dict[str, Any]]:
    from horus.api.inventory import simulated_gpu_uuid

    return [
        {
            "replica": 0,
            "pod": "x-0",
            "node": node,
            "gpuUUID": simulated_gpu_uuid(node, 0),
            "gpuIndex": 0,
            "corePercent": core,
            "memoryMiB": 1024,
        }
    ]


def _with_selector(body: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["spec"]["template"]["spec"]["nodeSelector"] = {key: value}
    return body


def test_forged_placements_are_never_made_into_pods(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """Whoever can write dljobs/status used to get pods created, signed and bound for a job
    the operator never placed (two jobs × 100 % of one GPU). Now the unsigned record is reset
    and the jobs are placed by the operator, each on a GPU of its own."""
    operator_factory()
    key = f"horus-test/{uuid.uuid4().hex[:6]}"
    # Waits in the queue (nothing matches), so the forged record is the only record.
    kube.create_jobs([_with_selector(dljob_body(n, core=100, memory=1024), key, "x") for n in "ab"])
    kube.wait(
        "both refused with NoMatchingNode",
        lambda: all(_status(kube, n).get("reason") == "NoMatchingNode" for n in "ab"),
        60,
    )
    assert "no GPU node allows the pod template" in _status(kube, "a")["message"]
    for n in "ab":
        _patch_status(kube, n, {"phase": "Scheduled", "placements": _forged_record(gpu_nodes[0])})
    kube.wait(
        "StatusRestored on both",
        lambda: all("StatusRestored" in _reasons(kube, n) for n in "ab"),
        60,
    )
    kube.wait(
        "both back in the queue",
        lambda: all(
            not _status(kube, n).get("placements")
            and _status(kube, n).get("reason") == "NoMatchingNode"
            for n in "ab"
        ),
        60,
    )
    assert not kube.pods(kube.namespace), "a pod was made from a forged record"
    # Let a node match: the operator places them itself, one GPU each.
    kube.core.patch_node(gpu_nodes[1], {"metadata": {"labels": {key: "x"}}})
    try:
        kube.wait("both bound", lambda: kube.all_bound(["a", "b"]), 60)
        gpus = {p["gpuUUID"] for n in "ab" for p in _status(kube, n)["placements"]}
        assert len(gpus) == 2
        assert all(p["node"] == gpu_nodes[1] for n in "ab" for p in _status(kube, n)["placements"])
        check_invariants(kube)
    finally:
        kube.core.patch_node(gpu_nodes[1], {"metadata": {"labels": {key: None}}})


def test_forged_phase_of_a_running_job_is_restored_and_its_pods_kept(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    op = operator_factory()
    kube.create_jobs([dljob_body("run", replicas=2)])
    kube.wait("Running", lambda: _status(kube, "run").get("phase") == "Running", 90)
    pods_before = {p["metadata"]["uid"] for p in kube.pods(kube.namespace)}
    for forged in ("Failed", "Succeeded"):
        _patch_status(kube, "run", {"phase": forged})
        kube.wait(
            f"{forged} undone",
            lambda: (
                _status(kube, "run").get("phase") == "Running"
                and _status(kube, "run").get("reason") == "StatusRestored"
            ),
            60,
        )
        _patch_status(kube, "run", {"reason": "Touched"})  # reset the marker for the next round
    assert {p["metadata"]["uid"] for p in kube.pods(kube.namespace)} == pods_before
    assert "StatusRestored" in _reasons(kube, "run")
    check_invariants(kube)
    assert op.alive()


def test_a_template_the_apiserver_refuses_fails_before_any_share(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """Bad container name, bad label: found by a server-side dry run, the job ends
    Failed/InvalidSpec with the apiserver's sentence and never holds a GPU. (A PriorityClass
    goes in spec.priorityClassName; a missing one waits: test_operator_priority.py.)"""
    op = operator_factory()
    bad_name = dljob_body("bad-container")
    bad_name["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_DNS_Label"
    bad_label = dljob_body("bad-label")
    bad_label["spec"]["template"]["metadata"] = {"labels": {"a/b/c": "x"}}
    good = dljob_body("good")
    kube.create_jobs([bad_name, bad_label, good])
    kube.wait(
        "the two bad ones Failed",
        lambda: all(
            _status(kube, n).get("phase") == "Failed" for n in ("bad-container", "bad-label")
        ),
        60,
    )
    for n, fragment in (("bad-container", "Not_A_DNS_Label"), ("bad-label", "a/b/c")):
        st = _status(kube, n)
        assert st["reason"] == "InvalidSpec" and fragment in st["message"], st
        assert not st.get("placements"), f"{n} committed a share"
    kube.wait("good bound", lambda: kube.all_bound(["good"]), 60)
    assert {p["metadata"]["name"] for p in kube.pods(kube.namespace)} == {"good-0"}
    log = op.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert op.alive()


def test_a_service_account_not_created_yet_keeps_the_job_pending_not_failed(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """The ServiceAccount admission plugin refuses pods naming an account that does not exist
    yet — also a new namespace's ``default``, made a moment after the namespace. That may pass
    by itself: the job waits Pending (ServiceAccountMissing) without a share and runs once
    the account exists (it used to end Failed/InvalidSpec)."""
    operator_factory()
    body = dljob_body("later-sa")
    body["spec"]["template"]["spec"]["serviceAccountName"] = "trainer"
    kube.create_jobs([body])
    kube.wait(
        "Pending for the service account",
        lambda: _status(kube, "later-sa").get("reason") == "ServiceAccountMissing",
        60,
    )
    st = _status(kube, "later-sa")
    assert st["phase"] == "Pending" and "trainer" in st["message"], st
    assert not st.get("placements") and not kube.pods(kube.namespace)
    kube.core.create_namespaced_service_account(kube.namespace, {"metadata": {"name": "trainer"}})
    kube.wait("bound once the account exists", lambda: kube.all_bound(["later-sa"]), 90)


def _configmap(kube: Kube, name: str, text: str) -> None:
    kube.core.create_namespaced_config_map(
        kube.namespace, {"metadata": {"name": name}, "data": {"profile.yaml": text}}
    )


def test_hostile_configmap_profiles_are_refused_by_name(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    op = operator_factory()
    doc = {"kind": "GraphProfile", "schemaVersion": 1, **PROFILES["resnet50-bs64"]}
    negative = json.loads(json.dumps(doc))
    negative["features"]["params"] = -25_000_000
    _configmap(kube, "deep", "features: " + "[" * 5000 + "]" * 5000)
    _configmap(kube, "negative", json.dumps(negative))
    _configmap(kube, "binary", "\x00\x01\x02 not yaml: [")
    bodies = []
    for n in ("deep", "negative", "binary"):
        body = dljob_body(f"cm-{n}")
        body["spec"]["profile"] = {"configMapRef": {"name": n}}
        bodies.append(body)
    inline_negative = copy.deepcopy(dljob_body("inline-negative"))  # PROFILES is shared
    inline_negative["spec"]["profile"]["features"]["fwd_flops"] = -1.0
    kube.create_jobs(bodies)
    names = [f"cm-{n}" for n in ("deep", "negative", "binary")]
    kube.wait(
        "each Failed/InvalidProfile",
        lambda: all(_status(kube, n).get("reason") == "InvalidProfile" for n in names),
        60,
    )
    assert "nested deeper" in _status(kube, "cm-deep")["message"]
    assert "params: must be a finite number >= 0" in _status(kube, "cm-negative")["message"]
    # the apiserver refuses the inline one itself (CRD minimum 0)
    from kubernetes.client.exceptions import ApiException

    try:
        kube.create_jobs([inline_negative])
        raise AssertionError("a negative inline feature was accepted")
    except ApiException as exc:
        assert exc.status == 422 and "features.fwd_flops" in str(exc.body)
    assert "RecursionError" not in op.log.read_text(errors="replace")
    assert op.alive()


def test_an_explicit_share_below_the_prediction_is_flagged(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    operator_factory()
    kube.create_jobs([dljob_body("tight", core=50, memory=256)])
    kube.wait("placed", lambda: kube.all_bound(["tight"]), 60)
    conds = {x["type"]: x for x in _status(kube, "tight").get("conditions") or []}
    share = conds["ShareSufficient"]
    assert share["status"] == "False" and share["reason"] == "MemoryBelowPrediction"
    assert "spec.gpu.memoryMiB 256 is below the predicted peak memory" in share["message"]
    assert "ShareBelowPrediction" in _reasons(kube, "tight")


def test_deleting_a_node_under_load_never_overcommits(
    cluster: Any, gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """Nodes go away (autoscaler scale-down) while two-replica jobs hold GPUs on them and
    on others and more jobs queue: no GPU's committed share may pass 100 % at any instant."""
    pool = f"del-{uuid.uuid4().hex[:4]}"
    nodes = add_nodes(cluster.kubeconfig, NodeSpec(count=4, gpus_per_node=2, prefix=pool))
    for n in nodes:
        kube.core.patch_node(n, {"metadata": {"labels": {"horus-test/pool": pool}}})
    operator_factory()

    def job(name: str) -> dict[str, Any]:
        return _with_selector(
            dljob_body(name, replicas=2, core=60, memory=4096), "horus-test/pool", pool
        )

    first = [f"d{i}" for i in range(4)]  # 8 replicas at 60 %: one per GPU of the pool
    kube.create_jobs([job(n) for n in first])
    kube.wait("first wave bound", lambda: kube.all_bound(first), 60)
    kube.create_jobs([job(f"q{i}") for i in range(4)])  # wait: no GPU has 60 % left
    try:
        worst = 0
        for victim in nodes[:2]:
            kube.core.delete_node(victim)
            for _ in range(10):  # every second: the window that used to over-commit (~66 s)
                worst = max(worst, _max_core_on_live_gpus(kube))
                assert worst <= 100, f"a GPU is committed to {worst} % core"
                time.sleep(1.0)
        queued = {n: _status(kube, n).get("phase") for n in (f"q{i}" for i in range(4))}
        assert set(queued.values()) == {"Queued"}, queued  # nothing was placed on held GPUs
    finally:
        for n in nodes[2:]:
            kube.core.delete_node(n)


def _max_core_on_live_gpus(kube: Kube) -> int:
    """The highest core % committed to one GPU of an existing node, from every live pod's
    signed assignment (pods on a deleted node hold nothing any more)."""
    from horus.api.assignment import decode_assignment

    live = set(gpu_capacity(kube.nodes()))
    core: dict[str, int] = {}
    for p in kube.pods():
        text = (p["metadata"].get("annotations") or {}).get(c.ANNOTATION_GPU_ASSIGNMENT)
        if not text or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for g in decode_assignment(text).all_gpus:
            if g.gpu_uuid in live:
                core[g.gpu_uuid] = core.get(g.gpu_uuid, 0) + g.core_percent
    return max(core.values(), default=0)


def test_a_burst_of_valid_and_poison_jobs(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """50 valid jobs mixed with 50 that cannot run, created together: every valid one runs,
    every bad one says why, no share is held by a job without pods, the operator stays up."""
    import random

    op = operator_factory()
    _configmap(kube, "deep", "features: " + "[" * 3000 + "]" * 3000)
    neg = {"kind": "GraphProfile", **copy.deepcopy(PROFILES["resnet50-bs64"])}
    neg["features"]["params"] = -1
    _configmap(kube, "negative", json.dumps(neg))
    valid = [dljob_body(f"ok-{i}", profile="mobilenetv2-cifar-bs128") for i in range(50)]
    poison: list[dict[str, Any]] = []
    for i in range(10):
        b = dljob_body(f"p-name-{i}")
        b["spec"]["template"]["spec"]["containers"][0]["name"] = "Bad_Name"
        poison.append(b)
    for i in range(5):
        b = dljob_body(f"p-prio-{i}")
        b["spec"]["priorityClassName"] = "nope"
        poison.append(b)
    for i in range(10):
        poison.append(_with_selector(dljob_body(f"p-sel-{i}"), "horus-test/none", "x"))
    for i, ref in enumerate(["deep", "negative", "missing"] * 5):
        b = dljob_body(f"p-cm-{i}")
        b["spec"]["profile"] = {"configMapRef": {"name": ref}}
        poison.append(b)
    for i in range(10):
        poison.append(dljob_body(f"p-huge-{i}", gpus_per_replica=16))  # nodes have 8 GPUs
    bodies = valid + poison
    random.Random(7).shuffle(bodies)
    kube.create_jobs(bodies)
    names = [b["metadata"]["name"] for b in valid]
    kube.wait(
        "every valid job Running",
        lambda: all(_status(kube, n).get("phase") == "Running" for n in names),
        180,
    )
    jobs = kube.jobs_by_name()
    pods = {p["metadata"]["name"] for p in kube.pods(kube.namespace)}
    for name, job in jobs.items():
        st = job.get("status") or {}
        if name.startswith("p-"):
            assert not st.get("placements"), f"{name} holds a share: {st}"
            assert st.get("reason") and st.get("message"), f"{name} gives no reason: {st}"
        for rec in st.get("placements") or []:
            assert rec["pod"] in pods, f"{name} holds a share without its pod {rec['pod']}"
    reasons = {n: (j.get("status") or {}).get("reason") for n, j in jobs.items()}
    assert {reasons[f"p-name-{i}"] for i in range(10)} == {"InvalidSpec"}
    assert {reasons[f"p-prio-{i}"] for i in range(5)} == {"PriorityClassNotFound"}
    assert {reasons[f"p-sel-{i}"] for i in range(10)} == {"NoMatchingNode"}
    assert {reasons[f"p-cm-{i}"] for i in range(15)} == {"InvalidProfile", "ProfileUnavailable"}
    assert {reasons[f"p-huge-{i}"] for i in range(10)} == {"NeverFits"}
    check_invariants(kube)
    log = op.log.read_text(errors="replace")
    assert op.alive() and "Traceback" not in log, log[-3000:]
