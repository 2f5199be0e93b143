"""The placeholder claim of a pod under Kueue's pod integration, replaced by Horus' own.

Kueue builds the Workload of a Deployment's, StatefulSet's or plain pod from the pod itself,
refuses one that names a ResourceClaim, and counts a ResourceClaimTemplate's devices as quota.
So the admission policy gives such a pod the template entry ``horus-gpu-kueue`` (one device of
DeviceClass ``kueue.gpu.horus.io``, which Kueue counts as ``horus.io/gpu-shares`` and which
selects no device). The kube-controller-manager's resourceclaim controller makes a claim from
it at once — a **placeholder**: it can never be allocated, so the pod cannot start on it.

Once Horus has made the pod's own claim (pinned to the GPU of its slot, controlled by the pod,
marked as the resourceclaim controller marks its claims), this module records that claim in the
pod's ``status.resourceClaimStatuses`` in place of the placeholder — a JSON patch that first
tests the pod's UID and the list it read — and then deletes the placeholder; the kube-scheduler
reads the claim from the status and allocates it. The resourceclaim controller is not asked to
adopt Horus' claim after the placeholder goes: it remembers the claims it made for up to an
hour (its mutation cache, which no delete event clears) and would go on seeing the deleted
placeholder.
Crash-safe: each pass looks again from what the pod's status records.

Only a placeholder is ever deleted: a claim of that class only, controlled by the pod, made for
its ``horus-gpu`` entry, not allocated, deleted under its UID. A claim the status records that
is not one (a tenant's own template of that name, of another class) is the pod's: Horus makes
no claim for the pod and says why (:func:`foreign_claim`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from horus.common import constants as c
from horus.operator.claimcount import converted_claim_name, made_for_pod, status_claim
from horus.operator.jobapi import JobApi
from horus.operator.pass_state import PassReport

__all__ = ["foreign_claim", "is_placeholder", "replace_placeholders", "uses_kueue_template"]

log = logging.getLogger(__name__)


def uses_kueue_template(spec: Mapping[str, Any]) -> bool:
    """Whether a pod spec's ``horus-gpu`` entry names Kueue's template."""
    return any(
        isinstance(entry, Mapping)
        and entry.get("name") == c.CONVERTED_CLAIM_ENTRY
        and entry.get("resourceClaimTemplateName") == c.KUEUE_CLAIM_TEMPLATE
        for entry in spec.get("resourceClaims") or []
    )


def is_placeholder(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """A claim the resourceclaim controller made from Kueue's template for pod ``pod_uid``:
    every request of class ``kueue.gpu.horus.io``, controlled by the pod, made for its
    ``horus-gpu`` entry, not allocated."""
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(c.POD_CLAIM_ANNOTATION) != c.CONVERTED_CLAIM_ENTRY:
        return False
    if (claim.get("status") or {}).get("allocation"):
        return False
    if not any(
        isinstance(r, Mapping) and r.get("kind") == "Pod" and r.get("uid") == pod_uid
        and r.get("controller") is True
        for r in meta.get("ownerReferences") or []
    ):  # fmt: skip
        return False
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return bool(requests) and all(
        isinstance(r, Mapping)
        and ((r.get("exactly") or {}).get("deviceClassName") == c.KUEUE_DEVICE_CLASS)
        for r in requests
    )


def foreign_claim(
    pod: Mapping[str, Any], claims: Mapping[tuple[str, str], Mapping[str, Any]]
) -> str | None:
    """Why Horus makes no claim for a pod of Kueue's template: its status records a claim that
    is neither Horus' nor a placeholder (made from a template of that name of another class).
    None when Horus may go on."""
    spec = pod.get("spec") or {}
    if not uses_kueue_template(spec):
        return None
    meta = pod.get("metadata") or {}
    recorded, ours = status_claim(pod), converted_claim_name(pod)
    if recorded is None or recorded == ours:
        return None
    ns = str(meta.get("namespace") or "default")
    claim = claims.get((ns, recorded))
    if claim is None or is_placeholder(claim, str(meta.get("uid") or "")):
        return None
    return (
        f"this pod's claim {ns}/{recorded}, made from ResourceClaimTemplate "
        f"{c.KUEUE_CLAIM_TEMPLATE}, does not ask for class {c.KUEUE_DEVICE_CLASS}: the pod uses "
        "that claim as it is, on a GPU and with a share Horus did not choose"
    )


def replace_placeholders(
    api: JobApi,
    pods: Iterable[Mapping[str, Any]],
    claims: Mapping[tuple[str, str], Mapping[str, Any]],
    report: PassReport,
) -> None:
    """For each pod of Kueue's template that has Horus' claim: record that claim in its status
    (in place of its placeholder, or where none was made), then delete the placeholder."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not uses_kueue_template(pod.get("spec") or {}) or meta.get("deletionTimestamp"):
            continue
        ns, uid = str(meta.get("namespace") or "default"), str(meta.get("uid") or "")
        ours, recorded = converted_claim_name(pod), status_claim(pod)
        own = claims.get((ns, ours)) if ours is not None else None
        if ours is None or recorded == ours or own is None or not made_for_pod(own, uid):
            continue
        placeholder = claims.get((ns, recorded)) if recorded is not None else None
        if recorded is not None and (placeholder is None or not is_placeholder(placeholder, uid)):
            continue  # not listed yet, or the pod's own claim of another class: left alone
        if not _record(api, pod, ours, report) or placeholder is None:
            continue
        try:
            claim_uid = str((placeholder.get("metadata") or {}).get("uid") or "")
            api.delete_resource_claim(ns, str(recorded), claim_uid)
        except Exception as exc:  # deleted with the pod at the latest
            log.warning("cannot delete placeholder claim %s/%s: %s", ns, recorded, exc)
            continue
        report.count("placeholders_deleted")


def _record(api: JobApi, pod: Mapping[str, Any], ours: str, report: PassReport) -> bool:
    """Record ``ours`` as the pod's ``horus-gpu`` claim in its status."""
    meta = pod.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    current = (pod.get("status") or {}).get("resourceClaimStatuses")
    kept = [
        s
        for s in current or []
        if isinstance(s, Mapping) and s.get("name") != c.CONVERTED_CLAIM_ENTRY
    ]
    statuses = [*kept, {"name": c.CONVERTED_CLAIM_ENTRY, "resourceClaimName": ours}]
    try:
        api.record_pod_claims(ns, name, str(meta.get("uid") or ""), current, statuses)
    except Exception as exc:  # read again next pass
        log.warning("pod %s/%s: cannot record claim %s in its status: %s", ns, name, ours, exc)
        return False
    log.info("pod %s/%s: claim %s recorded in its status", ns, name, ours)
    report.count("claims_recorded")
    return True
