"""Which change of a watched object starts a reconcile pass at once.

The operator's informers tell every change; most (a pod Horus neither made nor placed, a
node's heartbeat) do not change what a pass would decide, so the loop is nudged only when the
part of an object that placement reads changed: its *fingerprint* here.
"""

from __future__ import annotations

from typing import Any

from horus.common import constants as c
from horus.operator.claimcount import converted_claim_name
from horus.operator.object_reads import node_exclusion

__all__ = ["change_fingerprint"]


def _pod_fingerprint(body: Any) -> tuple[Any, ...]:
    return (
        (body.get("status") or {}).get("phase"),
        (body.get("spec") or {}).get("nodeName"),
        bool((body.get("metadata") or {}).get("deletionTimestamp")),
    )


def _node_fingerprint(body: Any) -> tuple[Any, ...]:
    meta = body.get("metadata") or {}
    return (
        node_exclusion(body),
        (meta.get("annotations") or {}).get(c.ANNOTATION_GPU_INVENTORY),
    )


def _job_fingerprint(body: Any) -> tuple[Any, ...]:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return (
        meta.get("uid"),
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        status.get("phase"),
        bool(status.get("placements")),
    )


def change_fingerprint(kind: str, body: Any) -> tuple[Any, ...] | None:
    """What of a changed object matters to placement (a change of it nudges the loop), or
    None for an object whose changes never do (a pod Horus neither made nor placed, a node
    without a GPU inventory)."""
    if kind == "dljobs":
        return _job_fingerprint(body)
    if kind == "pods":
        meta = body.get("metadata") or {}
        if c.LABEL_DLJOB_NAME in (meta.get("labels") or {}) or c.ANNOTATION_GPU_ASSIGNMENT in (
            meta.get("annotations") or {}
        ):
            return _pod_fingerprint(body)
        if converted_claim_name(body) is not None:  # DRA: a plain pod waiting for its claim
            return _pod_fingerprint(body)
        return None
    if kind == "nodes":
        if c.ANNOTATION_GPU_INVENTORY not in (
            (body.get("metadata") or {}).get("annotations") or {}
        ):
            return None
        return _node_fingerprint(body)
    if kind == "priorityclasses":
        # A job waiting for its class (PriorityClassNotFound) is admitted once it exists.
        return (body.get("value"), body.get("globalDefault"))
    if kind == "resourceslices":
        return (str((body.get("metadata") or {}).get("resourceVersion")),)
    if kind == "resourceclaims":
        return (
            bool((body.get("status") or {}).get("allocation")),
            bool((body.get("metadata") or {}).get("deletionTimestamp")),
        )
    if kind in (c.KUEUE_WORKLOADS, c.KUEUE_ADMISSION_CHECKS):
        # quota reserved or given back, a check's state reset, a check activated: each may
        # be Horus' turn to decide or release
        status = body.get("status") or {}
        return (
            tuple((x.get("name"), x.get("state")) for x in _dicts(status.get("admissionChecks"))),
            tuple((x.get("type"), x.get("status")) for x in _dicts(status.get("conditions"))),
            (body.get("spec") or {}).get("active"),
        )
    return None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []
