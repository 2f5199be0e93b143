"""Gangs of plain pods: all of a gang's pods get their GPUs in one decision, or none does.

Without Kueue, a JobSet's or an indexed Job's pods reach Horus one by one; placed one by one,
a 4-pod job can get three GPUs and wait for the fourth behind another job, holding three
shares for nothing. Pods that name a gang (label ``horus.io/gang-name`` and annotation
``horus.io/gang-size: N`` on their template, as Kueue's plain pod groups name theirs) are
held until all N of them wait for their claim, then decided as one request of N replicas —
the core's gang placement, all or none — and each gets its claim. A pod that joins a gang
whose claims exist (a replacement for a finished pod) is decided alone, as it would be
without the gang: the rest of the gang already runs.

The gang is scoped to the pods' namespace: a tenant's pods can join only its own namespace's
gangs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from horus.common import constants as c
from horus.scheduler import JobRequest

__all__ = ["Gang", "GangSplit", "split_gangs"]


@dataclass(frozen=True)
class Gang:
    """``members`` (pod, claim name, request) of gang ``key`` (``ns/name``), in pod-name
    order, and the one request that places them all."""

    key: str
    members: tuple[Any, ...]
    request: JobRequest


@dataclass(frozen=True)
class GangSplit:
    singles: list[Any]
    gangs: list[Gang]
    #: (a member, the Event reason, why the gang is not decided this pass)
    waiting: list[tuple[Any, str, str]]


REASON_GANG_WAITING = "GangWaiting"
REASON_GANG_INVALID = "GangInvalid"


def _gang_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(c.LABEL_GANG_NAME)
    if not name:
        return None
    return str(meta.get("namespace") or "default"), str(name)


def _size(pod: Mapping[str, Any]) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GANG_SIZE)
    text = str(raw or "")
    if not text.isdigit() or not 1 <= int(text) <= c.GANG_SIZE_MAX:
        return None
    return int(text)


def split_gangs(waiting: Sequence[Any], placed_gangs: Iterable[tuple[str, str]] = ()) -> GangSplit:
    """Split conversions (``.pod``, ``.request`` set) into pods decided alone and whole gangs.

    ``placed_gangs``: (namespace, gang) of gangs some pod of which already has its claim —
    their newcomers are decided alone."""
    already = set(placed_gangs)
    singles: list[Any] = []
    groups: dict[tuple[str, str], list[Any]] = {}
    for conv in waiting:
        gang = _gang_of(conv.pod)
        if gang is None or gang in already:
            singles.append(conv)
        else:
            groups.setdefault(gang, []).append(conv)
    gangs, held = [], []
    for (ns, name), members in sorted(groups.items()):
        members.sort(key=lambda m: str((m.pod.get("metadata") or {}).get("name")))
        key = f"{ns}/{name}"
        sizes = {_size(m.pod) for m in members}
        if len(sizes) != 1 or None in sizes:
            why = (
                f"gang {key}: every pod must carry {c.ANNOTATION_GANG_SIZE}, the same whole "
                f"number from 1 to {c.GANG_SIZE_MAX}; no pod of it gets a GPU"
            )
            held += [(m, REASON_GANG_INVALID, why) for m in members]
            continue
        size = sizes.pop()
        assert size is not None
        shapes = {(m.request.kind, m.request.core_percent, m.request.memory_mib) for m in members}
        if len(shapes) != 1:
            why = (
                f"gang {key}: its pods ask for different shares or profiles; a gang is one "
                "request, so every pod must ask the same"
            )
            held += [(m, REASON_GANG_INVALID, why) for m in members]
            continue
        if len(members) < size:
            why = (
                f"gang {key}: {len(members)} of {size} pods wait for a GPU; none is placed "
                "until all are there"
            )
            held += [(m, REASON_GANG_WAITING, why) for m in members]
            continue
        if len(members) > size:
            why = (
                f"gang {key}: {len(members)} pods wait but {c.ANNOTATION_GANG_SIZE} says "
                f"{size}; none is placed"
            )
            held += [(m, REASON_GANG_INVALID, why) for m in members]
            continue
        first = members[0].request
        request = replace(first, name=f"gang:{key}", replicas=size)
        gangs.append(Gang(key, tuple(members), request))
    return GangSplit(singles, gangs, held)
