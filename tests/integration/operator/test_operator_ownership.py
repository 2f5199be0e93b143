"""Issue 24 point 7 on the real control plane: Horus adopts and deletes only pods it made.

A pod is a DLJob's only when it is in the job's namespace, names the job (its UID) as its
controller ownerReference in the horus.io group, and carries the Horus-owned
``horus.io/gpu-assignment`` annotation. A tenant's pod under a replica's name — made in advance
and claiming the job by label and ownerReference, or a StatefulSet's pod ``foo-0`` beside DLJob
``foo`` (which used to be deleted in a loop) — is neither adopted nor deleted; the job waits,
holding no GPU, with a condition and an Event naming the pod, and runs once the name is free.
"""

from __future__ import annotations

import time
from typing import Any

from operator_support import Kube, dljob_body

from horus.common import constants as c

PASSES = 6.0  # seconds: three operator passes at the tests' 2 s resync


def _status(kube: Kube, name: str) -> dict[str, Any]:
    return (kube.jobs_by_name().get(name) or {}).get("status") or {}


def _pod(kube: Kube, name: str) -> dict[str, Any] | None:
    return next((p for p in kube.pods(kube.namespace) if p["metadata"]["name"] == name), None)


def _waits_for(kube: Kube, job: str, pod: str) -> None:
    kube.wait(
        f"{job} waiting for its pod name",
        lambda: _status(kube, job).get("reason") == "PodNameTaken",
        60,
    )
    st = _status(kube, job)
    assert st["phase"] == "Queued" and f"{kube.namespace}/{pod}" in st["message"], st
    assert not st.get("placements"), f"{job} holds a share it cannot use: {st}"
    conds = {x["type"]: x for x in st.get("conditions") or []}
    assert conds["Scheduled"]["reason"] == "PodNameTaken"
    kube.wait(  # Events are posted off the critical path
        f"an Event on {job} naming {pod}",
        lambda: any(
            e["involvedObject"]["name"] == job and e["reason"] == "PodNameTaken"
            and pod in e["message"]
            for e in kube.events()
        ),
        30,
    )  # fmt: skip


def _untouched(kube: Kube, name: str, uid: str) -> dict[str, Any]:
    pod = _pod(kube, name)
    assert pod is not None and pod["metadata"]["uid"] == uid, f"{name} was deleted or replaced"
    assert not pod["metadata"].get("deletionTimestamp"), f"{name} is being deleted"
    annotations = pod["metadata"].get("annotations") or {}
    assert c.ANNOTATION_GPU_ASSIGNMENT not in annotations, "Horus wrote onto a foreign pod"
    return pod


def test_a_pod_made_in_advance_under_a_replica_name_is_neither_adopted_nor_deleted(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """The tenant knows the job's UID (it can read its DLJob) and makes ``<job>-0`` claiming
    it by label and controller ownerReference, without the annotation only Horus may set."""
    op = operator_factory(start=False)
    kube.create_jobs([dljob_body("pre")])
    uid = kube.jobs_by_name()["pre"]["metadata"]["uid"]
    kube.core.create_namespaced_pod(
        kube.namespace,
        {
            "metadata": {
                "name": "pre-0",
                "labels": {c.LABEL_DLJOB_NAME: "pre", c.LABEL_REPLICA_INDEX: "0"},
                "ownerReferences": [
                    {
                        "apiVersion": c.API_GROUP_VERSION,
                        "kind": c.DLJOB_KIND,
                        "name": "pre",
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "schedulerName": "no-such-scheduler",  # stays Pending: nobody binds it
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
    )
    foreign = _pod(kube, "pre-0")
    assert foreign is not None
    op.start()
    _waits_for(kube, "pre", "pre-0")
    time.sleep(PASSES)
    pod = _untouched(kube, "pre-0", foreign["metadata"]["uid"])
    assert not pod["spec"].get("nodeName"), "Horus bound a pod it did not make"
    assert _status(kube, "pre").get("reason") == "PodNameTaken"
    kube.core.delete_namespaced_pod("pre-0", kube.namespace, grace_period_seconds=0)
    kube.wait("pre bound once the name is free", lambda: kube.all_bound(["pre"]), 90)
    ours = _pod(kube, "pre-0")
    assert ours is not None and c.ANNOTATION_GPU_ASSIGNMENT in ours["metadata"]["annotations"]
    assert "Traceback" not in op.log.read_text(errors="replace")


def test_a_statefulset_beside_a_dljob_of_the_same_name_keeps_its_pod(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """StatefulSet ``foo`` (its controller makes ``foo-0``) and DLJob ``foo``: the pod keeps
    its UID for many passes (the operator used to delete it, the StatefulSet made it again,
    in a loop); the DLJob waits, and runs once the StatefulSet is gone."""
    from kubernetes import client

    apps = client.AppsV1Api(kube.api)
    statefulset: Any = {
        "metadata": {"name": "foo"},
        "spec": {
            "replicas": 1,
            "serviceName": "foo",
            "selector": {"matchLabels": {"app": "foo"}},
            "template": {
                "metadata": {"labels": {"app": "foo"}},
                "spec": {
                    "schedulerName": "no-such-scheduler",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "web", "image": "busybox"}],
                },
            },
        },
    }
    apps.create_namespaced_stateful_set(kube.namespace, statefulset)
    kube.wait("the StatefulSet's pod foo-0", lambda: _pod(kube, "foo-0") is not None, 60)
    first = _pod(kube, "foo-0")
    assert first is not None
    op = operator_factory()
    kube.create_jobs([dljob_body("foo")])
    _waits_for(kube, "foo", "foo-0")
    time.sleep(PASSES)
    _untouched(kube, "foo-0", first["metadata"]["uid"])
    apps.delete_namespaced_stateful_set("foo", kube.namespace, propagation_policy="Foreground")
    kube.wait("the DLJob bound once the name is free", lambda: kube.all_bound(["foo"]), 90)
    assert "Traceback" not in op.log.read_text(errors="replace")
