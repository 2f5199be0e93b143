"""Issue 24, points 5 and 7, on the in-memory API: a DLJob's priority is its PriorityClass's
value, resolved by the operator (a missing class waits, the class goes onto the pods, a quota
refusing the class keeps the job Pending), and Horus adopts or deletes only pods it made for a
DLJob — never a tenant's pod under a replica's name, in another namespace, or without the
Horus-owned assignment annotation."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, node
from test_run_pass import PREDICTOR, auto_job

from horus.common import constants as c
from horus.operator.podspec import owned_by, owner_uid
from horus.operator.priority import PriorityClasses
from horus.operator.reconcile import Reconciler


@pytest.fixture
def api() -> FakeJobApi:
    return FakeJobApi([node("n1", gpus=2)])


@pytest.fixture
def rec(api: FakeJobApi) -> Iterator[Reconciler]:
    r = Reconciler(api, PREDICTOR, KEY, workers=4, progress_deadline=30.0)
    yield r
    r.close()


def _classy(name: str, klass: str | None) -> dict[str, Any]:
    job = auto_job(name)
    if klass is not None:
        job["spec"]["priorityClassName"] = klass
    return job


def _status(api: FakeJobApi, name: str) -> dict[str, Any]:
    return dict(api.job(name).get("status") or {})


def _foreign_pod(name: str, namespace: str = "default", **meta: Any) -> dict[str, Any]:
    """A pod Horus did not make (a StatefulSet's, or one made in advance by a tenant)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"foreign-{name}", **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "n1"},
        "status": {"phase": "Running"},
    }


# --- priority ------------------------------------------------------------------------------


def test_priority_classes_resolve_as_the_apiserver_does() -> None:
    classes = PriorityClasses.from_objects(
        [
            {"metadata": {"name": "gold"}, "value": 1000},
            {"metadata": {"name": "std"}, "value": 10, "globalDefault": True},
            {"metadata": {"name": "low-default"}, "value": 5, "globalDefault": True},
            {"metadata": {"name": "broken"}, "value": "high"},
        ]
    )
    assert classes.resolve("gold") == 1000
    assert classes.resolve(None) == 5  # several defaults: the lowest value
    assert classes.resolve("missing") is None and classes.resolve("broken") is None
    assert PriorityClasses().resolve(None) == 0  # no default class: 0, as for a pod
    polite = PriorityClasses.from_objects(
        [{"metadata": {"name": "p"}, "value": 1, "preemptionPolicy": "Never"}]
    )
    assert not polite.may_preempt("p") and polite.may_preempt("q") and polite.may_preempt(None)
    assert not PriorityClasses(error="forbidden").may_preempt("q")


def test_a_missing_class_waits_then_the_job_runs_with_its_value_on_the_pods(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(_classy("a", "gold"))
    rec.run_pass()
    status = _status(api, "a")
    assert (status["phase"], status["reason"]) == ("Pending", "PriorityClassNotFound")
    assert "'gold'" in status["message"] and not api.pods and "placements" not in status
    rec.run_pass()  # still waiting, nothing placed
    assert _status(api, "a")["phase"] == "Pending" and not api.pods
    api.priority_classes["gold"] = 1000
    rec.run_pass()
    status = _status(api, "a")
    assert status["phase"] == c.DLJOB_PHASE_SCHEDULED and status["priority"] == 1000
    (pod,) = api.pods.values()
    assert pod["spec"]["priorityClassName"] == "gold"


def test_a_job_without_a_class_gets_the_default_class_and_its_pods_name_none(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.priority_classes.update({"std": 7})
    api.default_class = "std"
    api.add_dljob(_classy("a", None))
    rec.run_pass()
    assert _status(api, "a")["priority"] == 7
    (pod,) = api.pods.values()
    assert "priorityClassName" not in pod["spec"]  # the apiserver applies the default itself


def test_a_class_the_namespace_quota_refuses_keeps_the_job_pending_and_unplaced(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """Same template, two classes: the dry run is not reused across classes, so the refused
    class never gets a share (the dry-run cache once keyed on the template alone)."""
    api.priority_classes.update({"low": 1, "high": 1000})
    api.quota_refuses.add("high")
    api.add_dljob(_classy("low", "low"))
    api.add_dljob(_classy("high", "high"))
    rec.run_pass()
    high = _status(api, "high")
    assert (high["phase"], high["reason"]) == ("Pending", "PodQuotaExceeded")
    assert "placements" not in high
    assert _status(api, "low")["phase"] == c.DLJOB_PHASE_SCHEDULED
    assert [p["metadata"]["name"] for p in api.pods.values()] == ["low-0"]


def test_a_class_deleted_after_placement_requeues_without_pods(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.priority_classes["gold"] = 50
    api.add_dljob(_classy("a", "gold"))
    api.fail_create_once["a-0"] = RuntimeError("apiserver restarting")
    rec.run_pass()  # placed; its pod not created
    assert _status(api, "a")["placements"] and not api.pods
    del api.priority_classes["gold"]
    rec.run_pass()
    status = _status(api, "a")
    assert (status["phase"], status["reason"]) == ("Queued", "PriorityClassNotFound")
    assert "placements" not in status and not api.pods


def test_the_old_numeric_priority_fails_a_queued_job_naming_the_class_field(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """A job queued before the upgrade whose stored spec still says ``priority: 500``: it fails
    with the parser's sentence instead of waiting silently (a new one is refused by the CRD)."""
    api.pods[("default", "old-0")] = _foreign_pod("old-0")  # keeps it in the queue
    api.add_dljob(auto_job("old"))
    rec.run_pass()
    assert _status(api, "old")["phase"] == c.DLJOB_PHASE_QUEUED
    api.job("old")["spec"]["priority"] = 500
    rec.run_pass()
    status = _status(api, "old")
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.priorityClassName" in status["message"]


# --- ownership -----------------------------------------------------------------------------


def test_ownership_needs_the_controller_reference_the_namespace_and_the_annotation() -> None:
    ref = {"apiVersion": "horus.io/v1alpha1", "kind": "DLJob", "uid": "u1", "controller": True}
    ann = {c.ANNOTATION_GPU_ASSIGNMENT: "{}"}
    ours = _foreign_pod("a-0", ownerReferences=[ref], annotations=ann)
    assert owner_uid(ours) == "u1" and owned_by(ours, "default", "u1")
    assert not owned_by(ours, "other", "u1")  # an ownerReference is namespace-local
    assert owner_uid(_foreign_pod("a-0", ownerReferences=[ref])) is None  # no annotation
    assert owner_uid(_foreign_pod("a-0", annotations=ann)) is None  # a plain pod
    for bad in (
        {**ref, "controller": False},
        {**ref, "apiVersion": "evil.io/v1"},
        {**ref, "kind": "StatefulSet"},
    ):
        assert owner_uid(_foreign_pod("a-0", ownerReferences=[bad], annotations=ann)) is None


@pytest.mark.parametrize(
    "meta",
    [
        # a StatefulSet "a" beside DLJob "a": its pod a-0
        {
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "uid": "ss", "controller": True}
            ],
            "labels": {"app": "a"},
        },
        # made in advance, claiming the job by label and ownerReference, without the annotation
        {
            "labels": {c.LABEL_DLJOB_NAME: "a", c.LABEL_REPLICA_INDEX: "0"},
            "ownerReferences": [
                {
                    "apiVersion": "horus.io/v1alpha1",
                    "kind": "DLJob",
                    "uid": "uid-a",
                    "controller": True,
                }
            ],
        },
    ],
    ids=["statefulset", "claims-the-job"],
)
def test_a_foreign_pod_under_a_replica_name_is_never_adopted_nor_deleted(
    api: FakeJobApi, rec: Reconciler, meta: dict[str, Any]
) -> None:
    foreign = _foreign_pod("a-0", **copy.deepcopy(meta))
    api.pods[("default", "a-0")] = copy.deepcopy(foreign)
    api.add_dljob(auto_job("a"))
    for _ in range(3):
        rec.run_pass()
    assert api.pods[("default", "a-0")] == foreign  # untouched: not deleted, not bound, not patched
    status = _status(api, "a")
    assert (status["phase"], status["reason"]) == ("Queued", "PodNameTaken")
    assert "default/a-0" in status["message"] and "placements" not in status
    rec.writer.drain()
    assert api.reasons("a").count("PodNameTaken") == 1  # one Event, not one per pass
    del api.pods[("default", "a-0")]  # its owner removes it: the job runs
    rec.run_pass()
    assert _status(api, "a")["phase"] == c.DLJOB_PHASE_SCHEDULED
    assert owner_uid(api.pods[("default", "a-0")]) == "uid-a"


def test_a_foreign_pod_taking_the_name_after_placement_requeues_the_job_untouched(
    api: FakeJobApi, rec: Reconciler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the name is taken between the pass's listing and the pod create."""
    api.add_dljob(auto_job("a"))
    api.fail_create_once["a-0"] = RuntimeError("apiserver restarting")
    rec.run_pass()  # placed; its pod not created
    assert _status(api, "a")["placements"] and not api.pods
    foreign = _foreign_pod("a-0")
    api.pods[("default", "a-0")] = copy.deepcopy(foreign)
    listed = api.list_pods
    hidden = [p for p in listed() if p["metadata"]["name"] != "a-0"]
    monkeypatch.setattr(api, "list_pods", lambda: hidden)
    rec.run_pass()  # the listing misses it; the create finds the name taken
    monkeypatch.undo()
    assert api.pods[("default", "a-0")] == foreign
    status = _status(api, "a")
    assert (status["phase"], status["reason"]) == ("Queued", "PodNameTaken")
    assert "placements" not in status  # its share given back
    rec.run_pass()  # waits (the listing sees the pod now), still untouched
    assert api.pods[("default", "a-0")] == foreign
    assert _status(api, "a")["reason"] == "PodNameTaken"


def test_cleanup_deletes_only_pods_horus_made_for_a_job_that_is_gone(
    api: FakeJobApi, rec: Reconciler
) -> None:
    gone = {"apiVersion": "horus.io/v1alpha1", "kind": "DLJob", "uid": "gone", "controller": True}
    labels = {c.LABEL_DLJOB_NAME: "old", c.LABEL_REPLICA_INDEX: "0"}
    ann = {c.ANNOTATION_GPU_ASSIGNMENT: "{}"}
    orphan = _foreign_pod("old-0", ownerReferences=[gone], labels=labels, annotations=ann)
    labelled = _foreign_pod("old-1", ownerReferences=[gone], labels=labels)  # no annotation
    lookalike = _foreign_pod("x-0", labels=labels, annotations=ann)  # no DLJob reference
    for pod in (orphan, labelled, lookalike):
        api.pods[("default", pod["metadata"]["name"])] = copy.deepcopy(pod)
    rec.run_pass()
    assert sorted(n for _, n in api.pods) == ["old-1", "x-0"]


def test_a_pod_in_another_namespace_naming_the_job_is_not_adopted(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(auto_job("a"))
    rec.run_pass()
    api.run_bound_pods()
    rec.run_pass()
    assert _status(api, "a")["phase"] == c.DLJOB_PHASE_RUNNING
    (pod,) = copy.deepcopy(list(api.pods.values()))
    pod["metadata"].update(namespace="elsewhere", uid="copy")
    pod["status"] = {"phase": "Failed"}  # were it adopted, the job would fail
    api.pods[("elsewhere", "a-0")] = pod
    rec.run_pass()
    assert _status(api, "a")["phase"] == c.DLJOB_PHASE_RUNNING


def test_an_owned_pod_with_a_larger_share_than_its_record_is_redone(
    api: FakeJobApi, rec: Reconciler
) -> None:
    """Same GPU, other share: not the recorded pod (it used to be adopted on the GPU UUID)."""
    api.add_dljob(auto_job("a"))
    rec.run_pass()
    pod = api.pods[("default", "a-0")]
    text = pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
    core = _status(api, "a")["placements"][0]["corePercent"]
    bigger = text.replace(f'"corePercent":{core}', '"corePercent":100').replace(
        f'"corePercent": {core}', '"corePercent": 100'
    )
    assert bigger != text
    pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = bigger
    pod["spec"].pop("nodeName", None)
    rec.run_pass()
    assert ("default", "a-0") not in api.pods  # deleted (Horus made it), redone next pass
    rec.run_pass()
    new = api.pods[("default", "a-0")]["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
    assert new == text
