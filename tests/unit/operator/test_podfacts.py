"""A pass reads each pod's facts once per version of the pod (issue 27: at 10,000 pods the
per-pod walks were most of a steady pass): the same dict keeps its facts, a new dict or a
new key ring reads them again, and what is read is what the readers it replaces give."""

from __future__ import annotations

import copy
from typing import Any

from opfixtures import assignment, pod

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.operator import status as st
from horus.operator.podfacts import PodFactsCache, by_pod
from horus.operator.podspec import owner_uid
from horus.operator.records import pods_epoch
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
