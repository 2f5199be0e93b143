"""Kueue v0.19 as installed by ``WorkloadControllers`` (its own CRDs, RBAC, webhooks and
identity) on the real control plane: the Job integration end to end, and the AdmissionCheck
contract the Horus check controller relies on (``kueue.x-k8s.io/v1beta2``: quota reserved and
the check Pending keeps the Job suspended; the check Ready with ``podSetUpdates`` admits it and
its pods carry the updates)."""

from __future__ import annotations

import datetime
import json
import uuid

from kueue_support import KueueEnv, condition, job, wait_for

from horus.common import constants as c


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _workload_of(env: KueueEnv, ns: str, job_name: str) -> dict | None:  # type: ignore[type-arg]
    for wl in env.workloads(ns):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job_name for o in owners):
            return wl
    return None


def test_job_is_suspended_admitted_and_started(kueue: KueueEnv) -> None:
    ns = kueue.namespace()
    lq = kueue.queues(ns)
    name = "plain"
    # Pinned to the fixture's node: earlier modules of the session may leave kwok nodes behind.
    plain = job(name, ns, lq)
    plain["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": kueue.node}
    created = json.loads(
        kueue.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(plain)).stdout
    )
    # Kueue's mutating Job webhook suspended it on create (it was sent without `suspend`).
    assert created["spec"].get("suspend") is True, created["spec"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    wl = wait_for(
        lambda: (
            (w := _workload_of(kueue, ns, name))
            and (cond := condition(w, "Admitted"))
            and cond["status"] == "True"
            and w
        ),
        60,
        "the Job's Workload to be admitted",
        diag,
    )
    assert wl["spec"]["queueName"] == lq
    assert wl["status"]["admission"]["podSetAssignments"][0]["name"] == "main"
    wait_for(
        lambda: kueue.get("job", name, ns)["spec"].get("suspend") is False,
        30,
        "Kueue to unsuspend the Job",
        diag,
    )
    # kwok runs the pod and, as it does for a Job's pods, completes it.
    pods = wait_for(
        lambda: [
            p
            for p in kueue.list("pods", ns, f"job-name={name}")
            if p["status"].get("phase") in ("Running", "Succeeded")
        ],
        60,
        "the Job's pod to run on the kwok node",
        diag,
    )
    assert pods[0]["spec"]["nodeName"] == kueue.node
    assert pods[0]["metadata"]["labels"].get(c.KUEUE_PODSET_LABEL) == "main"
    wait_for(
        lambda: (
            (cond := condition(kueue.get("workload", wl["metadata"]["name"], ns), "Finished"))
            and cond["status"] == "True"
        ),
        60,
        "Kueue to mark the Workload Finished with its Job",
        diag,
    )


def test_a_job_without_queue_name_is_left_alone(kueue: KueueEnv) -> None:
    ns = kueue.namespace()
    obj = job("unqueued", ns, "none")
    del obj["metadata"]["labels"]
    created = json.loads(
        kueue.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(obj)).stdout
    )
    assert not created["spec"].get("suspend"), "manageJobsWithoutQueueName is false"


def test_an_invalid_queue_name_is_refused(kueue: KueueEnv) -> None:
    """Kueue's validating Job webhook refuses a queue name that is no valid object name."""
    ns = kueue.namespace()
    bad = job("bad", ns, "Not_A_Name")
    got = kueue.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert got.returncode != 0 and "queue-name" in got.stderr, got.stderr


def test_admission_check_holds_then_podset_updates_reach_pods(kueue: KueueEnv) -> None:
    ns = kueue.namespace()
    check = f"horus-gpu-{uuid.uuid4().hex[:6]}"
    kueue.admission_check(check)
    # The check's controller marks it Active; until then its ClusterQueue admits nothing.
    kueue.kubectl(
        "patch", "admissioncheck", check, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"conditions": [{
            "type": "Active", "status": "True", "reason": "Active",
            "message": "the Horus GPU placement check answers", "lastTransitionTime": _now(),
        }]}}),
    )  # fmt: skip
    lq = kueue.queues(ns, admission_checks=[check])
    name = "checked"
    kueue.create(job(name, ns, lq, parallelism=2))
    diag = lambda: kueue.diagnose(ns)  # noqa: E731

    def pending() -> dict | None:  # type: ignore[type-arg]
        w = _workload_of(kueue, ns, name)
        if not w:
            return None
        reserved = condition(w, "QuotaReserved")
        checks = w.get("status", {}).get("admissionChecks") or []
        if reserved and reserved["status"] == "True" and checks and checks[0]["state"] == "Pending":
            return w
        return None

    wl = wait_for(pending, 60, "quota reserved with the check Pending", diag)
    assert wl["status"]["admissionChecks"][0]["name"] == check
    admitted = condition(wl, "Admitted")
    assert admitted is None or admitted["status"] == "False"
    assert kueue.get("job", name, ns)["spec"]["suspend"] is True
    assert not kueue.list("pods", ns, f"job-name={name}")

    marker = f"{wl['metadata']['name']}/{wl['metadata']['uid']}"
    update = {
        "name": "main",
        "annotations": {c.ANNOTATION_KUEUE_WORKLOAD: marker},
        "nodeSelector": {"kubernetes.io/hostname": kueue.node},
    }
    kueue.kubectl(
        "patch", "workload", wl["metadata"]["name"], "-n", ns, "--subresource=status",
        "--type=merge", "-p",
        json.dumps({"status": {"admissionChecks": [{
            "name": check, "state": "Ready", "message": "placed by the test",
            "lastTransitionTime": _now(), "podSetUpdates": [update],
        }]}}),
    )  # fmt: skip
    wait_for(
        lambda: (
            (cond := condition(kueue.get("workload", wl["metadata"]["name"], ns), "Admitted"))
            and cond["status"] == "True"
        ),
        60,
        "the Workload to be admitted once its check is Ready",
        diag,
    )
    pods = wait_for(
        lambda: (ps := kueue.list("pods", ns, f"job-name={name}")) and len(ps) == 2 and ps,
        60,
        "the Job's two pods",
        diag,
    )
    for pod in pods:
        meta = pod["metadata"]
        assert meta["annotations"].get(c.ANNOTATION_KUEUE_WORKLOAD) == marker
        assert meta["labels"].get(c.KUEUE_PODSET_LABEL) == "main"
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": kueue.node}
    template = kueue.get("job", name, ns)["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"kubernetes.io/hostname": kueue.node}


def test_an_inactive_admission_check_stops_its_cluster_queue(kueue: KueueEnv) -> None:
    """Until the check's controller marks the AdmissionCheck Active, its ClusterQueue is
    inactive and reserves no quota."""
    ns = kueue.namespace()
    check = f"horus-idle-{uuid.uuid4().hex[:6]}"
    kueue.admission_check(check)
    sfx = uuid.uuid4().hex[:6]
    lq = kueue.queues(ns, admission_checks=[check], suffix=sfx)
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    cond = wait_for(
        lambda: (
            (got := condition(kueue.get("clusterqueue", f"cq-{sfx}"), "Active"))
            and got["status"] == "False"
            and got
        ),
        30,
        "the ClusterQueue to report itself inactive",
        diag,
    )
    assert cond["reason"] == "AdmissionCheckInactive", cond
    kueue.create(job("idle", ns, lq))
    reserved = wait_for(
        lambda: (
            (w := _workload_of(kueue, ns, "idle"))
            and (got := condition(w, "QuotaReserved"))
            and got["status"] == "False"
            and got
        ),
        30,
        "Kueue to say why the Workload gets no quota",
        diag,
    )
    assert "inactive" in reserved["message"], reserved
    assert kueue.get("job", "idle", ns)["spec"]["suspend"] is True
