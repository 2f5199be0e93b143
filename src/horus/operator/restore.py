"""Putting back the truth of a DLJob whose phase or placements someone else wrote.

The operator signs every record it writes (``status.placementSignature``); one whose
signature does not verify was written by another identity — a mis-scoped role, a cluster
admin, an older operator — and is trusted for nothing. The job's own pods with signed
assignments say where it really runs: the record is rebuilt from them and the phase from
their states. Without such a pod a job that is not finished is reset (no phase, no
placements) so it is admitted and placed again. A finished job without pods holds nothing
and is left alone.

A job that still has live, bound pods none of which verifies — the key that signed them was
removed from the published keys, or the record was signed by a key no longer published — is
*left alone*: resetting it would make the next pass delete running pods whose GPUs
are in use. Its pods stay counted (:mod:`horus.operator.livestate` counts allocated pods whose
signature no longer verifies), and a Warning Event says what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from horus.api.assignment import GpuAssignment, decode_assignment
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.common.errors import ValidationError
from horus.operator import status as st
from horus.operator import transitions as tr
from horus.operator.claim_manifests import claim_name
from horus.operator.claimcommit import CLAIM_SIGNED_PREFIX, claim_epoch, claim_owner_uid
from horus.operator.object_reads import dljob_record_trusted, record_epoch
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.podspec import placement_record
from horus.operator.residents import TERMINAL_POD_PHASES
from horus.operator.writer import StatusWriter

__all__ = ["restore"]

log = logging.getLogger(__name__)
_FINISHED = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)


def _signed(
    ctx: JobCtx, keys: KeyRing, claims: Mapping[tuple[str, str], Mapping[str, Any]]
) -> dict[int, tuple[dict[str, Any], GpuAssignment]]:
    """The job's pods whose assignment is signed, with that assignment, by replica — on the
    DRA path, where no Binding signs a pod, a pod's assignment is its claim's
    (:func:`_claimed`)."""
    out: dict[int, tuple[dict[str, Any], GpuAssignment]] = {}
    for replica, pod in ctx.pods.items():
        read = read_pod_assignment(pod, keys)
        if read.trusted and read.assignment is not None:
            out[replica] = (pod, read.assignment)
        elif (held := _claimed(ctx, replica, pod, keys, claims)) is not None:
            out[replica] = (pod, held)
    return out


def _claimed(
    ctx: JobCtx,
    replica: int,
    pod: Mapping[str, Any],
    keys: KeyRing,
    claims: Mapping[tuple[str, str], Mapping[str, Any]],
) -> GpuAssignment | None:
    """The share the replica's claim holds for ``pod``: the claim's signed text (it carries
    the job's UID and the epoch it was made in, :func:`claim_epoch`) for this replica, and the
    claim reserved for exactly this pod by the kube-scheduler (``status.reservedFor``, which
    tenants cannot write); None otherwise."""
    claim = claims.get((ctx.namespace, claim_name(ctx.name, replica)))
    if claim is None or claim_epoch(claim, keys) is None or claim_owner_uid(claim) != ctx.uid:
        return None
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    if not uid or not any(isinstance(r, Mapping) and r.get("uid") == uid for r in reserved):
        return None
    text = str(
        ((claim.get("metadata") or {}).get("annotations") or {})[c.ANNOTATION_GPU_ASSIGNMENT]
    )
    try:
        held = decode_assignment(text.removeprefix(CLAIM_SIGNED_PREFIX), "claim assignment")
    except ValidationError:
        return None
    return held if held.job == ctx.name and held.replica == replica else None


def _records(pods: dict[int, tuple[dict[str, Any], GpuAssignment]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for replica, (pod, a) in sorted(pods.items()):
        name = str((pod.get("metadata") or {}).get("name"))
        out += [placement_record(replica, name, a.node, g) for g in a.all_gpus]
    return out


def restore(
    ctx: JobCtx,
    writer: StatusWriter,
    report: PassReport,
    claims: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> None:
    """Rebuild ``ctx``'s record from its signed pods (on the DRA path: the signed claims
    reserved for them), or reset it (module docstring)."""
    pods = _signed(ctx, writer.keys(), claims or {})
    unverified = [
        p
        for r, p in ctx.pods.items()
        if r not in pods
        and (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
    ]
    if unverified and not pods:
        names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in unverified[:8])
        message = (
            f"status.phase/placements do not verify (no valid {c.STATUS_PLACEMENT_SIGNATURE} "
            f"with a published key), nor do its running pods ({names}): left as it is, its "
            "pods keep running and their GPU shares stay counted. Publish the key that signed "
            "them again (ConfigMap horus-system/horus-verify-keys), or delete the job"
        )
        log.warning("DLJob %s: %s", ctx.key, message)
        writer.event_once(ctx, "StatusUnverifiable", message, warning=True)
        return
    live = [
        p
        for p, _ in pods.values()
        if (p.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
    ]
    if not live and ctx.phase in _FINISHED:
        return
    records = _records(pods)
    now = now_rfc3339()
    if dljob_record_trusted(ctx.obj, writer.keys()):  # validly signed, but older than its pods
        epoch = record_epoch(ctx.status)
        unsigned = (
            f"status.phase/placements are an older record of the operator's (placementEpoch "
            f"{epoch}) than the job's pods or its last write carry: a rollback, not trusted"
        )
    else:
        unsigned = f"status.phase/placements were not written by the operator (no valid {c.STATUS_PLACEMENT_SIGNATURE})"
    if records and live:
        replicas = ctx.job.spec.replicas if ctx.job is not None else len(pods)
        views = [v for p, _ in pods.values() if (v := st.PodView.from_pod(p)) is not None]
        phase: str | None = st.progress(replicas, views, None).phase
        message = f"{unsigned}; restored from the job's {len(pods)} pod(s)"
        patch = tr.restored(ctx.status, phase, records, message, now)
    else:
        message = f"{unsigned} and the job has no pods: reset, it is admitted and placed again"
        patch = tr.restored(ctx.status, None, None, message, now)
    log.warning("DLJob %s: %s", ctx.key, message)
    writer.write(ctx, patch, report, ("StatusRestored", message, True))
