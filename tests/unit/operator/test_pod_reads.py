"""A pass reads each pod's facts once per version of the pod (issue 27: at 10,000 pods the
per-pod walks were most of a steady pass): the same dict keeps its facts, a new dict or a
new key ring reads them again, and what is read is what the readers it replaces give."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import assignment, dljob, node, pod

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.operator import status as st
from horus.operator.object_reads import pods_epoch
from horus.operator.pass_state import JobCtx
from horus.operator.pod_reads import PodFactsCache, by_pod
from horus.operator.podspec import owner_uid
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor
from signing_keys import KEY, sign_pod


def owned(name: str, epoch: int, ring: KeyRing = KEY, phase: str = "Running") -> dict[str, Any]:
    """A replica pod Horus made for DLJob ``train`` (controller ownerReference + signed
    assignment), bound in ``epoch``."""
    p = pod(name, assignment("n1", 0, job="train", replica=0), phase, job="train", replica=0)
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": c.API_GROUP_VERSION,
            "kind": c.DLJOB_KIND,
            "name": "train",
            "uid": "uid-train",
            "controller": True,
        }
    ]
    p["metadata"]["resourceVersion"] = "7"
    return sign_pod(p, ring, epoch)


def test_the_facts_are_what_each_reader_gives() -> None:
    plain = pod("web", None)
    done = owned("train-1", 2, phase="Succeeded")
    leaving = owned("train-2", 4)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    forged = owned("train-3", 9, ring=KeyRing.generate())  # a key the ring does not hold
    pods = [owned("train-0", 3), plain, done, leaving, forged]
    facts = PodFactsCache().read(pods, KEY)
    assert [f.pod for f in facts] == pods
    for f in facts:
        meta = f.pod["metadata"]
        assert f.owner == owner_uid(f.pod)
        assert f.view == st.PodView.from_pod(f.pod)
        assert (f.namespace, f.name) == (meta["namespace"], meta["name"])
        assert f.deleting == bool(meta.get("deletionTimestamp"))
        assert f.running == (f.pod["status"]["phase"] not in ("Succeeded", "Failed"))
        assert f.epoch == (pods_epoch([f.pod], KEY) if f.owner else 0)
    assert [f.epoch for f in facts] == [3, 0, 2, 4, 0]
    assert [f.owner for f in facts] == ["uid-train", None, "uid-train", "uid-train", "uid-train"]
    assert by_pod(facts)[id(leaving)].deleting


def test_an_unchanged_pod_keeps_its_facts_and_a_changed_one_is_read_again() -> None:
    cache = PodFactsCache()
    a, b = owned("train-0", 3), owned("train-1", 3)
    first = cache.read([a, b], KEY)
    again = cache.read([a, b], KEY)
    assert again[0] is first[0] and again[1] is first[1]  # not read again
    # the view replaces the dict of a pod that changed: re-signed in a later epoch
    b2 = sign_pod(copy.deepcopy(b), KEY, 5)
    third = cache.read([a, b2], KEY)
    assert third[0] is first[0]
    assert third[1] is not first[1] and third[1].epoch == 5 and third[1].pod is b2


def test_a_new_key_ring_reads_every_pod_again() -> None:
    """A key taken out of the ring: a pod it signed no longer carries a verified epoch,
    although its dict did not change."""
    cache = PodFactsCache()
    old = KeyRing.generate()
    p = owned("train-0", 6, ring=old)
    assert KEY.signer is not None
    assert cache.read([p], KeyRing.of(KEY.signer, old.verify))[0].epoch == 6
    assert cache.read([p], KEY)[0].epoch == 0


def test_a_job_context_uses_the_view_its_pod_facts_read_and_reads_a_new_pod_again() -> None:
    """The settled check of every placed job (each pass) takes the replica views the pod
    facts already read; a pod the pass put in since (created, bound) is a new dict, read."""
    p = owned("train-0", 3)
    ctx = JobCtx({"metadata": {"name": "train", "uid": "uid-train"}}, None, {})
    ctx.pods[0] = p
    kept = st.PodView(name="kept", replica=0, phase="Running", node="n1")
    ctx.known_views[id(p)] = (p, kept)
    assert ctx.pod_views() == [kept]  # not read again
    bound = copy.deepcopy(p)
    bound["status"]["phase"] = "Succeeded"
    ctx.pods[0] = bound
    assert ctx.pod_views() == [st.PodView.from_pod(bound)]


def test_a_steady_pass_reads_no_replica_view_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the pass: once its pods run and nothing changes, a pass checks every placed
    job's progress from the views its pod facts kept (at 2,000 × 5,000 reading them anew
    was 16 % of a steady pass), and the job still settles (no status write)."""
    api = FakeJobApi([node("n1", gpus=4)])
    rec = Reconciler(api, load_default_predictor(), KEY, workers=2)
    try:
        api.add_dljob(dljob("a", gpu={"mode": "explicit", "corePercent": 50, "memoryMiB": 8000}))
        rec.run_pass()
        api.run_bound_pods()
        rec.run_pass()  # Running written
        assert api.job("a")["status"]["phase"] == "Running"
        rec.run_pass()
        reads = []
        real = st.PodView.from_pod.__func__  # type: ignore[attr-defined]

        def counted(cls: type[st.PodView], pod: dict[str, Any]) -> st.PodView | None:
            reads.append(pod["metadata"]["name"])
            return real(cls, pod)  # type: ignore[no-any-return]

        monkeypatch.setattr(st.PodView, "from_pod", classmethod(counted))
        report = rec.run_pass()
        assert reads == []
        assert report.status_writes == 0 and report.live_state == "kept"
        # a changed pod (a new dict in the view) is read again, and its job followed
        api.run_bound_pods("Succeeded")
        report = rec.run_pass()
        assert reads and api.job("a")["status"]["phase"] == "Succeeded"
    finally:
        rec.close()
