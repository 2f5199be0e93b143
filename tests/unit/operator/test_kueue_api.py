"""The Kueue API the operator uses on a real apiserver: Workloads and AdmissionChecks read
from watch-fed copies (not a LIST every pass), Kueue not installed told apart from no
Workloads, and Horus' own answers seen by the next pass before their watch events. The
watch itself is the Kubernetes client's (tests/unit/kube/test_informer.py and the Kueue
integration tests run it); here the copies are filled by their LIST."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from horus.common import constants as c
from horus.kube.errors import Conflict
from horus.operator.kueue.api import KubeKueueApi, KueueMissing, KueueNotSynced
from kube_fakes import json_response

pytestmark = pytest.mark.unit


def _workload(name: str, rv: int, state: str = "Pending") -> dict[str, Any]:
    return {
        "apiVersion": f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "resourceVersion": str(rv),
            "managedFields": [{"manager": "kueue"}],
        },
        "status": {"admissionChecks": [{"name": "horus-gpu", "state": state}]},
    }


class FakeCustom:
    """``CustomObjectsApi`` as the operator calls it: LISTs of the two kinds, and the status
    patches answered with the object after the write (or refused with ``refuse``)."""

    def __init__(self, served: bool = True) -> None:
        self.served = served
        self.objects: dict[str, list[dict[str, Any]]] = {
            c.KUEUE_WORKLOADS: [],
            c.KUEUE_ADMISSION_CHECKS: [],
        }
        self.lists = 0
        self.refuse: int | None = None

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> Any:
        assert (group, version) == (c.KUEUE_GROUP, c.KUEUE_VERSION)
        assert not kw.get("watch"), "the unit tests fill the copies by LIST only"
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        self.lists += 1
        return json_response({"metadata": {"resourceVersion": "10"}, "items": self.objects[plural]})

    def patch_namespaced_custom_object_status(
        self, group: str, version: str, ns: str, plural: str, name: str, body: Any, **_: Any
    ) -> Any:
        if self.refuse is not None:
            raise ApiException(status=self.refuse, reason="test failed")
        done = _workload(name, 11, state=body[-1]["value"]["state"])
        return json_response(done)

    def patch_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: Any, **_: Any
    ) -> Any:
        return json_response({"metadata": {"name": name, "resourceVersion": "12"}, **body})


def _api(custom: FakeCustom, **kw: Any) -> tuple[KubeKueueApi, list[tuple[str, str, bool]]]:
    heard: list[tuple[str, str, bool]] = []
    api = KubeKueueApi(
        ApiClient(Configuration()),
        on_change=lambda kind, key, _old, new: heard.append((kind, key, new is None)),
        **kw,
    )
    api.custom = custom
    return api, heard


def _listed(api: KubeKueueApi) -> KubeKueueApi:
    """Both copies filled by their LIST, as the informer threads' first step does."""
    api.workloads.relist()
    api.admission_checks.relist()
    api._started = True  # the threads' watch is not run here
    return api


def test_passes_read_the_copies_not_a_list_each() -> None:
    custom = FakeCustom()
    custom.objects[c.KUEUE_WORKLOADS] = [_workload("train", 5)]
    api, heard = _api(custom)
    _listed(api)
    for _ in range(5):
        (wl,) = api.list_workloads()
        assert wl["metadata"]["name"] == "train"
        assert api.list_admission_checks() == []
    assert custom.lists == 2  # one LIST per kind, however many passes read them
    assert "managedFields" not in wl["metadata"]  # the copy keeps what Horus reads
    assert heard == [(c.KUEUE_WORKLOADS, "team-a/train", False)]


def test_horus_answer_is_in_the_copy_before_its_watch_event() -> None:
    custom = FakeCustom()
    custom.objects[c.KUEUE_WORKLOADS] = [_workload("train", 5)]
    api = _listed(_api(custom)[0])
    entry = {"name": "horus-gpu", "state": "Ready"}
    api.answer_check("team-a", "train", 0, {"name": "horus-gpu", "state": "Pending"}, entry)
    (wl,) = api.list_workloads()
    assert wl["status"]["admissionChecks"][0]["state"] == "Ready"


def test_a_refused_answer_is_a_conflict_and_leaves_the_copy() -> None:
    custom = FakeCustom()
    custom.objects[c.KUEUE_WORKLOADS] = [_workload("train", 5)]
    api = _listed(_api(custom)[0])
    custom.refuse = 422  # a JSON patch test failed: Kueue reset the check meanwhile
    with pytest.raises(Conflict, match="team-a/train changed or vanished"):
        api.answer_check("team-a", "train", 0, {"state": "Pending"}, {"state": "Ready"})
    assert api.list_workloads()[0]["status"]["admissionChecks"][0]["state"] == "Pending"


def test_activating_a_check_is_seen_by_the_next_read() -> None:
    custom = FakeCustom()
    custom.objects[c.KUEUE_ADMISSION_CHECKS] = [
        {"metadata": {"name": "horus-gpu", "resourceVersion": "3"}, "spec": {}}
    ]
    api = _listed(_api(custom)[0])
    api.activate_check("horus-gpu", {"type": "Active", "status": "True"})
    (check,) = api.list_admission_checks()
    assert check["status"]["conditions"] == [{"type": "Active", "status": "True"}]


def test_before_the_first_list_the_read_says_so_and_only_the_first_waits() -> None:
    """A LIST that keeps failing (the operator without RBAC for Workloads) must not hold up
    every pass: only the first read waits for the copies."""
    api, _ = _api(FakeCustom(), sync_seconds=0.3)
    api._started = True  # threads never started: no LIST ever answers
    t0 = time.monotonic()
    with pytest.raises(KueueNotSynced, match="kueue-workloads"):
        api.list_workloads()
    assert time.monotonic() - t0 >= 0.3
    t1 = time.monotonic()
    for _ in range(3):
        with pytest.raises(KueueNotSynced, match="kueue-admissionchecks"):
            api.list_admission_checks()
    assert time.monotonic() - t1 < 0.3


def test_kueue_not_installed_is_told_apart_from_no_workloads() -> None:
    api, _ = _api(FakeCustom(served=False), sync_seconds=10)
    try:
        with pytest.raises(KueueMissing, match=r"admissionchecks\.kueue\.x-k8s\.io is not served"):
            api.list_admission_checks()
        with pytest.raises(KueueMissing, match=r"workloads\.kueue\.x-k8s\.io is not served"):
            api.list_workloads()
    finally:
        api.stop()
    installed = _listed(_api(FakeCustom())[0])
    assert installed.list_workloads() == []


def test_a_workload_change_that_may_be_horus_turn_starts_a_pass() -> None:
    """The copies tell the operator's loop (``Controller._changed``), which is nudged when a
    check's state, a condition or ``spec.active`` changed, and not for a relabelled one."""
    from horus.operator.controller import Controller
    from horus.operator.settings import OperatorSettings

    loop = asyncio.new_event_loop()
    try:
        ctl = Controller(OperatorSettings())
        ctl._loop, ctl.nudge = loop, asyncio.Event()
        custom = FakeCustom()
        custom.objects[c.KUEUE_WORKLOADS] = [_workload("train", 5)]
        api = KubeKueueApi(ApiClient(Configuration()), on_change=ctl._changed)
        api.custom = custom

        def nudged_by(change: Any) -> bool:
            ctl.nudge.clear()
            change()
            loop.run_until_complete(asyncio.sleep(0))  # the poke the informer scheduled
            return ctl.nudge.is_set()

        assert nudged_by(api.workloads.relist)  # a Workload appears
        relabelled = _workload("train", 6)
        relabelled["metadata"]["labels"] = {"team": "a"}
        assert not nudged_by(lambda: api.workloads.observe(relabelled))
        assert nudged_by(lambda: api.workloads.observe(_workload("train", 7, state="Retry")))
    finally:
        loop.close()
