"""What a pass reads of each pod, read once per version of the pod, not once per pass.

Why: a pass walks every pod of the cluster several times — to give each DLJob its replica
pods, to find leftovers to delete, to check each record against the epoch its pods were bound
in — and at 10,000 pods those walks (the ownerReference and annotation proof of
:func:`~horus.operator.podspec.owner_uid`, the replica view, the signature check of every
pod's assignment) were most of a steady pass's time, although between two passes of a still
cluster no pod changed. The watch-fed view hands every pass the same dict for a pod that did
not change and a new dict for one that did, so the facts of a pod are kept by the identity
of its dict (the dict held with them, so the identity is never another object's) and read
again only for a new dict. A listing of new dicts every time (no view) reads them all, as
before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from horus.api.signing import KeyRing
from horus.common.memo import PerObject
from horus.operator import status as st
from horus.operator.object_reads import pods_epoch
from horus.operator.podspec import owner_uid
from horus.operator.residents import TERMINAL_POD_PHASES

__all__ = ["PodFacts", "PodFactsCache", "by_pod"]


@dataclass(frozen=True, slots=True)
class PodFacts:
    pod: dict[str, Any]
    namespace: str  # "" when the pod names none, as the pass has always read it
    name: str
    #: The DLJob that controls the pod if Horus made it for one (:func:`owner_uid`), else None.
    owner: str | None
    view: st.PodView | None
    deleting: bool
    #: Not Succeeded or Failed.
    running: bool
    #: The record epoch its assignment carries in a signature that verifies with the pass's
    #: key ring (:func:`pods_epoch`), 0 if none.
    epoch: int


def _facts(pod: dict[str, Any], ring: KeyRing) -> PodFacts:
    meta = pod.get("metadata") or {}
    owner = owner_uid(pod)
    return PodFacts(
        pod=pod,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        owner=owner,
        view=st.PodView.from_pod(pod),
        deleting=bool(meta.get("deletionTimestamp")),
        running=(pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES,
        epoch=pods_epoch([pod], ring) if owner is not None else 0,
    )


class PodFactsCache:
    """The facts of one pass's pods (:meth:`read`), kept for the next pass by pod identity
    (:class:`~horus.common.memo.PerObject`; a new key ring reads every pod again)."""

    def __init__(self) -> None:
        self._kept: PerObject[PodFacts] = PerObject()

    def read(self, pods: Iterable[dict[str, Any]], ring: KeyRing) -> list[PodFacts]:
        """The facts of ``pods``, in their order. Only this listing's pods are kept: a pod
        gone (or replaced by a new dict) is forgotten."""
        return self._kept.read(pods, lambda pod: _facts(pod, ring), ring)


def by_pod(facts: Iterable[PodFacts]) -> Mapping[int, PodFacts]:
    """``facts`` by the identity of their pod (what holds them is checked by the reader)."""
    return {id(f.pod): f for f in facts}
