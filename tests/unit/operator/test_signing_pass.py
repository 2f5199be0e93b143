"""Whole reconcile passes without a signing key, with a rolled-back record, and with a replayed
pod (issue 24, WP1), on the in-memory API; the same on the real apiserver is
tests/integration/operator/test_operator_signing.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, node
from test_run_pass import PREDICTOR, auto_job

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.operator.livestate import build_live_state
from horus.operator.reconcile import COND_SIGNING_KEY, Reconciler


class Switch:
    """The key source: the operator's pair, or (``lost``) only the public keys."""

    def __init__(self) -> None:
        self.lost = False

    def __call__(self) -> KeyRing:
        if self.lost:
            return KeyRing(KEY.verify, None, "placement is paused: the Secret does not exist")
        return KEY


@pytest.fixture
def api() -> FakeJobApi:
    return FakeJobApi([node("n1", gpus=2), node("n2", gpus=2)])


@pytest.fixture
def switch() -> Switch:
    return Switch()


@pytest.fixture
def rec(api: FakeJobApi, switch: Switch) -> Iterator[Reconciler]:
    r = Reconciler(api, PREDICTOR, switch, workers=4, progress_deadline=30.0)
    yield r
    r.close()


def _condition(api: FakeJobApi, name: str) -> str | None:
    conds = (api.job(name).get("status") or {}).get("conditions") or []
    return next((x["status"] for x in conds if x["type"] == COND_SIGNING_KEY), None)


def test_without_a_key_nothing_is_placed_or_deleted_and_placement_resumes(
    api: FakeJobApi, rec: Reconciler, switch: Switch
) -> None:
    api.add_dljob(auto_job("running"))
    rec.run_pass()
    api.run_bound_pods()
    rec.run_pass()
    uids = {k: p["metadata"]["uid"] for k, p in api.pods.items()}
    switch.lost = True
    api.add_dljob(auto_job("late"))
    for _ in range(3):
        report = rec.run_pass()
        assert report.held == 1
    assert {k: p["metadata"]["uid"] for k, p in api.pods.items()} == uids
    assert not any(p["metadata"].get("deletionTimestamp") for p in api.pods.values())
    assert not (api.job("late").get("status") or {}).get("placements")
    assert _condition(api, "late") == "False" and _condition(api, "running") == "False"
    assert rec.metrics.signing_key._value.get() == 0  # type: ignore[attr-defined]
    rec.writer.drain()
    said = [e for e in api.events if e["reason"] == "SigningKeyUnavailable"]
    assert len(said) == 2  # once per job, not once per pass
    live = build_live_state(api.list_nodes(), api.list_pods(), api.list_dljobs(), keys=KEY)
    assert "default/running" in live.residents  # still counted
    switch.lost = False
    rec.run_pass()
    assert api.job("late")["status"]["placements"]
    assert _condition(api, "late") == "True" and _condition(api, "running") == "True"
    assert rec.metrics.signing_key._value.get() == 1  # type: ignore[attr-defined]


def test_a_rolled_back_record_is_restored_never_acted_on(api: FakeJobApi, rec: Reconciler) -> None:
    """The job's own earlier signed record (Queued, no placements), replayed after it was
    placed, would make the pass stop its running pod; it is older than the epoch the pod was
    bound in and than this operator's last signature, so it is restored instead."""
    api.add_dljob(auto_job("j", nodeSelector={"pool": "later"}))
    rec.run_pass()
    queued = copy.deepcopy(api.job("j")["status"])
    assert queued["phase"] == "Queued" and not queued.get("placements")
    for n in api.nodes:
        n["metadata"].setdefault("labels", {})["pool"] = "later"
    rec.run_pass()
    api.run_bound_pods()
    rec.run_pass()
    (pod,) = api.pods.values()
    uid = pod["metadata"]["uid"]
    api.job("j")["status"] = copy.deepcopy(queued)
    for fresh in (rec, Reconciler(api, PREDICTOR, KEY, workers=4)):  # a new process too
        try:
            fresh.run_pass()
            status = api.job("j")["status"]
            assert status["placements"], status
            assert status[c.STATUS_PLACEMENT_EPOCH] > queued[c.STATUS_PLACEMENT_EPOCH]
            (again,) = api.pods.values()
            assert again["metadata"]["uid"] == uid
            assert not again["metadata"].get("deletionTimestamp")
            assert "a rollback" in status["message"]
        finally:
            if fresh is not rec:
                fresh.close()
        api.job("j")["status"] = copy.deepcopy(queued)


def test_a_pod_signed_for_another_uid_is_not_counted(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("j"))
    rec.run_pass()
    (pod,) = api.pods.values()
    replay = copy.deepcopy(pod)
    replay["metadata"]["uid"] = "uid-of-a-re-created-pod"
    replay["metadata"]["ownerReferences"] = []
    replay["metadata"]["name"] = "j-copy"
    live = build_live_state(api.list_nodes(), [replay], [], keys=KEY)
    assert live.residents == {}
    assert any("not counted" in p for p in live.problems)
    # allocated (the device plugin checked it then): counted with its claim even so
    replay["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED] = '{"x": "t"}'
    live = build_live_state(api.list_nodes(), [replay], [], keys=KEY)
    assert list(live.residents) == ["default/j"]
