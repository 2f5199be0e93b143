"""Pods of an admitted Workload: each takes one free slot of its pod set.

A pod of a Workload Horus admitted carries the check's ``podSetUpdates`` (Kueue copies them
into the job's pod template when it starts the job): the pointer ``horus.io/kueue-workload``
and Kueue's ``kueue.x-k8s.io/podset`` label. Its ``horus.io/gpu-*`` requests were turned into
a claim reference at admission, as for any plain pod (:mod:`horus.operator.plain_pod_claims`).
Here it gets that claim, pinned to the GPU of the first slot of its pod set that no live pod's
claim fills, with the slot's share — never a GPU chosen for it alone. The slots come from the
Workload's status, not from the pod: a pod whose pointer names a Workload that is gone, of
another UID, or not admitted by Horus, gets no claim and an Event saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from horus.common import constants as c
from horus.operator.claim_manifests import pod_share_claim
from horus.operator.claimcount import converted_claim_name, made_for_pod
from horus.operator.jobapi import JobApi
from horus.operator.kueue.check import KueueView
from horus.operator.kueue.slots import slot_key
from horus.operator.kueue.workload import Workload
from horus.operator.pass_state import PassReport
from horus.operator.placeholder_claims import foreign_claim
from horus.operator.plain_pod_claims import REASON_CLAIM_NAME_TAKEN, claim_name_taken
from horus.operator.residents import TERMINAL_POD_PHASES
from horus.operator.writer import StatusWriter

__all__ = ["REASON_NO_SLOT", "fill_slots", "is_gang_pod"]

log = logging.getLogger(__name__)

#: The Event reason on a pod of a Workload that has no slot for it.
REASON_NO_SLOT = "NoHorusGPUSlot"


def is_gang_pod(pod: Mapping[str, Any]) -> bool:
    """A pod that names a Workload (its GPU comes from that Workload's slots, never from a
    decision for the pod alone)."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return c.ANNOTATION_KUEUE_WORKLOAD in ann


def fill_slots(
    api: JobApi,
    writer: StatusWriter,
    view: KueueView,
    pods: Iterable[Mapping[str, Any]],
    claims: Mapping[tuple[str, str], Mapping[str, Any]],
    report: PassReport,
) -> None:
    """Give each waiting gang pod the claim of a free slot of its pod set."""
    filled = dict(view.filled)  # this pass's, and each claim made here
    workloads = view.by_key()
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        if not is_gang_pod(pod) or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        claim_name = converted_claim_name(pod)
        ns, uid = str(meta.get("namespace") or "default"), str(meta.get("uid") or "")
        if claim_name is None:
            writer.pod_event_once(
                pod, REASON_NO_SLOT,
                f"this pod names a Workload ({c.ANNOTATION_KUEUE_WORKLOAD}) but asks for no "
                "Horus GPU resources: it gets no Horus share", True,
            )  # fmt: skip
            continue
        foreign = foreign_claim(pod, claims)
        if foreign is not None:
            writer.pod_event_once(pod, REASON_CLAIM_NAME_TAKEN, foreign, True)
            continue
        held = claims.get((ns, claim_name))
        if held is not None:
            if not made_for_pod(held, uid):
                why = claim_name_taken(ns, claim_name)
                writer.pod_event_once(pod, REASON_CLAIM_NAME_TAKEN, why, True)
            continue
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        found = _slots_for(pod, view, workloads)
        if isinstance(found, str):
            writer.pod_event_once(pod, REASON_NO_SLOT, found, True)
            continue
        w, pod_set = found
        slots = view.slots[w.key][pod_set]
        free = next((s for s in slots if slot_key(w.uid, pod_set, s.index) not in filled), None)
        if free is None:
            writer.pod_event_once(
                pod, REASON_NO_SLOT,
                f"all {len(slots)} GPU slots of pod set {pod_set} of Workload {w.key} are "
                "filled by other pods; this pod waits for one to finish", True,
            )  # fmt: skip
            continue
        key = slot_key(w.uid, pod_set, free.index)
        manifest = pod_share_claim(
            pod, claim_name, free.gpu_uuid, free.core_percent, free.memory_mib
        )
        manifest["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT] = key
        try:
            made = api.create_resource_claim(ns, manifest)
        except Exception as exc:
            log.warning("cannot create claim %s/%s: %s", ns, claim_name, exc)
            continue
        filled[key] = manifest
        if made is None:
            continue
        report.count("claims_created")
        writer.pod_event_once(
            pod,
            "GPUChosen",
            f"claim {claim_name}: slot {free.index} of pod set {pod_set} of Workload {w.key}: "
            f"{free.node}/gpu-{free.gpu_index} ({free.core_percent}% core, "
            f"{free.memory_mib} MiB); the kube-scheduler allocates it",
        )


def _pod_set(pod: Mapping[str, Any], slots: Mapping[str, Any]) -> str:
    """The pod's pod set: Kueue's label, or the Workload's only pod set with slots."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(c.KUEUE_PODSET_LABEL)
    if label:
        return str(label)
    return next(iter(slots)) if len(slots) == 1 else ""


def _slots_for(
    pod: Mapping[str, Any], view: KueueView, workloads: Mapping[str, Workload]
) -> tuple[Workload, str] | str:
    """The admitted Workload the pod's pointer names and the pod set whose slots it takes, or
    why it has none."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    pointer = str((meta.get("annotations") or {}).get(c.ANNOTATION_KUEUE_WORKLOAD) or "")
    name, _, uid = pointer.rpartition("/")
    if not name or not uid:
        return f"{c.ANNOTATION_KUEUE_WORKLOAD} must be '<workload name>/<workload UID>'"
    w = workloads.get(f"{ns}/{name}")
    if w is None or w.uid != uid:
        return (
            f"this pod names Workload {ns}/{name} (UID {uid}), which does not exist or is not "
            "one a Horus check decides; it gets no Horus share"
        )
    if w.key not in view.slots:
        return (
            f"Workload {w.key} is not admitted by Horus' check (quota released, evicted, "
            "finished or not decided yet); the pod waits without a GPU"
        )
    pod_set = _pod_set(pod, view.slots[w.key])
    if pod_set not in view.slots[w.key]:
        return (
            f"pod set {pod_set!r} ({c.KUEUE_PODSET_LABEL}) has no GPU slots in Workload "
            f"{w.key}; the pod gets no Horus share"
        )
    return w, pod_set
