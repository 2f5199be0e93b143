"""The commit path on DRA: a recorded decision as ResourceClaims and pods.

The order of one placement stays the one :mod:`horus.operator.reconcile` explains — the signed
record in the DLJob status first, so the share is committed and counted before anything
else exists — and then, per replica:

1. its ResourceClaim (:func:`horus.operator.claim_manifests.replica_claim`: the chosen GPUs by UUID, the
   share as capacity requests; deterministic name ``<pod>-gpu``, ``AlreadyExists`` means a
   previous attempt made it). A claim under that name that asks for something else is an older
   decision's (a move, an older DLJob of the same name) and is deleted with a UID
   precondition; one Horus did not make for this job is neither used nor deleted — the job
   waits for the name, as for a pod name (:class:`ClaimNameTaken`);
2. its pod using the claim (:func:`horus.operator.claim_manifests.use_claim`), for the kube-scheduler.

No Binding: the kube-scheduler allocates the claim — it is the only allocator, so capacity
holds against every claim whoever made it — and binds the pod where the claim's device is.
A decision the kube-scheduler can no longer honour (another claim took the capacity first:
:attr:`horus.operator.residents.LiveState.overtaken`, or nothing was scheduled within the
progress deadline) is re-placed (:meth:`ClaimPath.replace`) while none of its pods runs: back
to the queue with its share given back, its pods (none bound) and the claims Horus signed for
it deleted (UID preconditions), never Failed — the kube-scheduler refused to over-commit, so
the job itself is fine. A job some of whose pods run is never re-placed for another's claim
(:func:`running_pods`).

Repeated overtakes: a job re-placed because another claim overtook it keeps off the GPUs it
was overtaken on for :attr:`ClaimPath.avoid_s` (:meth:`ClaimPath.avoided`, the queue's
``JobRequest.avoid_gpus``); when that leaves it no GPU that could ever take it, it waits
(:data:`REASON_AVOIDING`) instead of going back. Within one such period a job is overtaken at
most once per GPU it fits on (docs/dra.md, "What Horus counts").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from horus.api.assignment import encode_assignment
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.common.errors import ValidationError
from horus.operator import transitions as tr
from horus.operator.claim_manifests import CLAIM_REQUEST, claim_name, replica_claim
from horus.operator.jobapi import JobApi, PodRejected
from horus.operator.object_reads import (
    CLAIM_SIGNED_PREFIX,
    CLAIM_SIGNED_UID,
    claim_epoch,
    horus_claim_job_uid,
    record_epoch,
)
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.podspec import assignment_of, owner_uid
from horus.operator.writer import StatusWriter

__all__ = [
    "CLAIM_SIGNED_PREFIX",
    "CLAIM_SIGNED_UID",
    "REASON_AVOIDING",
    "REASON_CLAIM_NAME_TAKEN",
    "REASON_GPU_UNHEALTHY",
    "REASON_KEPT",
    "REASON_OVERTAKEN",
    "ClaimNameTaken",
    "ClaimPath",
    "avoiding_message",
    "claim_epoch",
    "claim_matches",
    "claim_owner_uid",
    "running_pods",
]

log = logging.getLogger(__name__)

#: The condition reason of a job one of whose claim names a claim Horus did not make holds.
REASON_CLAIM_NAME_TAKEN = "ClaimNameTaken"
#: The condition reason of a job re-placed because its claim was overtaken.
REASON_OVERTAKEN = "ClaimOvertaken"
#: ... or because a recorded GPU turned unhealthy before its claim was allocated.
REASON_GPU_UNHEALTHY = "GPUUnhealthy"
#: The Warning Event of a job that would be re-placed but some of whose pods run: kept.
REASON_KEPT = "ClaimCrossedKept"
#: The condition reason of a queued job every GPU it could take was overtaken on lately.
REASON_AVOIDING = "OvertakenWaiting"


def avoiding_message(gpus: int) -> str:
    """Why a job waits: every GPU it could take is one it was overtaken on lately."""
    return (
        f"every GPU this job could take ({gpus}) was taken by another claim before this "
        "job's own was allocated, in the last few minutes; it keeps off them for a while "
        "and is placed again then (nothing is deleted meanwhile)"
    )


class ClaimNameTaken(PodRejected):
    """A replica's claim name is held by a ResourceClaim Horus did not make for this job and
    that asks for something else: neither used nor deleted; the job waits for the name."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(
            409,
            f"ResourceClaim {namespace}/{name} exists but Horus did not create it for this "
            "DLJob and it asks for other devices or shares than the job's record; Horus "
            "neither uses nor deletes it: the job waits, holding no GPU, until the name is free",
        )

    @property
    def wait_reason(self) -> str | None:
        return REASON_CLAIM_NAME_TAKEN


def _request(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = claim.get("spec") or {}
    requests = (spec.get("devices") or {}).get("requests") if isinstance(spec, dict) else None
    if not isinstance(requests, list) or len(requests) != 1 or not isinstance(requests[0], dict):
        return {}
    req = requests[0]
    exactly = req.get("exactly")
    return exactly if req.get("name") == CLAIM_REQUEST and isinstance(exactly, dict) else {}


def claim_matches(claim: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether an existing claim asks for exactly what ``want`` (a :func:`replica_claim`)
    asks: the same class, count, selectors and capacity — quantities compared by value, as
    the apiserver rewrites them canonically (``16384Mi`` comes back as ``16Gi``). A claim's
    spec cannot change once created, so this holds for the claim's life."""
    got, need = _request(claim), _request(want)
    if not got or not need:
        return False
    for key in ("deviceClassName", "count", "selectors"):
        if got.get(key) != need.get(key):
            return False
    if got.get("allocationMode", "ExactCount") != need.get("allocationMode", "ExactCount"):
        return False
    if any(got.get(k) for k in ("adminAccess", "tolerations")):
        return False
    try:
        have = {
            k: parse_quantity(v, k)
            for k, v in ((got.get("capacity") or {}).get("requests") or {}).items()
        }
        needed = {
            k: parse_quantity(v, k)
            for k, v in ((need.get("capacity") or {}).get("requests") or {}).items()
        }
    except (ValidationError, AttributeError):
        return False
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    return have == needed and not devices.get("constraints") and not devices.get("config")


class ClaimPath:
    """The replica step and the re-placement of the DRA path (module docstring). Each pass
    sets :attr:`claims` (its listing) and :attr:`overtaken` (from the live state)."""

    def __init__(
        self, api: JobApi, writer: StatusWriter, avoid_s: float = c.OVERTAKE_AVOID_SECONDS
    ) -> None:
        self.api = api
        self.writer = writer
        #: (namespace, name) → ResourceClaim, from the pass's listing
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        #: DLJob ``ns/name`` → why its decision was overtaken
        self.overtaken: Mapping[str, str] = {}
        #: DLJob ``ns/name`` → why a claim crossed its decision while some of its pods run
        self.held_over: Mapping[str, str] = {}
        #: DLJob ``ns/name`` → the GPUs (UUIDs) of its decision another claim took
        self.overtaken_on: Mapping[str, frozenset[str]] = {}
        #: UUIDs of the GPUs the live state holds unhealthy (their device is tainted)
        self.unhealthy: frozenset[str] = frozenset()
        #: How long a job re-placed after an overtake keeps off the GPUs it was overtaken on.
        self.avoid_s = avoid_s
        #: DLJob UID → GPU UUID → until when (monotonic) the job keeps off that GPU
        self._avoid: dict[str, dict[str, float]] = {}

    def set_pass(
        self,
        claims: Iterable[Mapping[str, Any]],
        overtaken: Mapping[str, str],
        unhealthy: Iterable[str] = (),
        held_over: Mapping[str, str] | None = None,
        overtaken_on: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        index: dict[tuple[str, str], dict[str, Any]] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            index[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = dict(claim)
        self.claims, self.overtaken = index, dict(overtaken)
        self.held_over = dict(held_over or {})
        self.overtaken_on = dict(overtaken_on or {})
        self.unhealthy = frozenset(unhealthy)
        now = time.monotonic()
        for uid in list(self._avoid):
            left = {u: t for u, t in self._avoid[uid].items() if t > now}
            if left:
                self._avoid[uid] = left
            else:
                del self._avoid[uid]

    def avoided(self, uid: str) -> frozenset[str]:
        """The GPUs (UUIDs) the job ``uid`` keeps off for now: those it was overtaken on in
        the last :attr:`avoid_s` (module docstring, "repeated overtakes")."""
        now = time.monotonic()
        return frozenset(u for u, t in self._avoid.get(uid, {}).items() if t > now)

    def why_replace(self, ctx: JobCtx) -> tuple[str, str] | None:
        """(reason, why) when the kube-scheduler cannot honour the job's recorded decision:
        another claim overtook it, or a recorded GPU turned unhealthy (its device tainted, so
        never allocated) before that replica's claim was allocated; None otherwise."""
        over = self.overtaken.get(ctx.key)
        if over is not None:
            return REASON_OVERTAKEN, over
        for rec in ctx.status.get("placements") or []:
            uuid = str(rec.get("gpuUUID") or "")
            if uuid not in self.unhealthy:
                continue
            replica = int(rec.get("replica") or 0)
            claim = self.claims.get((ctx.namespace, claim_name(ctx.name, replica)))
            if claim is None or not (claim.get("status") or {}).get("allocation"):
                return REASON_GPU_UNHEALTHY, (
                    f"GPU {rec.get('node')}/gpu-{rec.get('gpuIndex')} ({uuid}) turned unhealthy "
                    f"before replica {replica}'s claim was allocated; the kube-scheduler "
                    "allocates no tainted device"
                )
        return None

    # --- one replica ---------------------------------------------------------------------
    def ensure_claim(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], report: PassReport
    ) -> str | None:
        """The replica's claim as its record asks, created if missing; its name, or None
        while an older one under the name is going (the next pass goes on)."""
        want = replica_claim(ctx.obj, replica, recs)
        name = claim_name(ctx.name, replica)
        claim = self.claims.get((ctx.namespace, name))
        if claim is None:
            claim = self.api.create_resource_claim(
                ctx.namespace, self.signed(ctx, replica, recs, want)
            )
            if claim is not None:
                report.count("claims_created")
            else:  # AlreadyExists: a previous attempt (or someone else) made it
                claim = self.api.read_resource_claim(ctx.namespace, name)
            if claim is None:
                return None  # deleted meanwhile: the next pass makes it
            self.claims[(ctx.namespace, name)] = claim
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None  # an older decision's claim still going (its pod is stopping)
        if claim_matches(claim, want):
            return name  # whoever made it, it asks for exactly the recorded share
        if claim_owner_uid(claim) and _controller_name(meta) == ctx.name:
            # this job's claim of an earlier decision (a move), or an older DLJob's of the same
            # name: it goes once its pod has (the pod step deletes that pod first)
            log.info(
                "claim %s/%s asks for another share than the record; deleting it",
                ctx.namespace,
                name,
            )
            self.api.delete_resource_claim(ctx.namespace, name, str(meta.get("uid") or ""))
            report.count("claims_deleted")
            return None
        raise ClaimNameTaken(ctx.namespace, name)

    # --- re-placement --------------------------------------------------------------------
    def replace(self, ctx: JobCtx, reason: str, why: str, report: PassReport) -> None:
        """Give the decision's share back and queue the job again; delete its pods and
        claims (UID preconditions). Status first: claims that stay allocated until deleted
        are counted from the claims (:mod:`horus.operator.livestate` rule (c)), so nothing is
        over-committed in between; a crash after the write leaves pods and claims that the
        next pass's cleanup deletes (the job is queued without placements)."""
        running = running_pods(ctx)
        if running:  # the callers keep such a job (REASON_KEPT); never delete what runs
            log.warning("DLJob %s: not re-placed (%s): %s run", ctx.key, reason, running)
            return
        if reason == REASON_OVERTAKEN:  # keep off the GPUs it lost for a while
            until = time.monotonic() + self.avoid_s
            mine = self._avoid.setdefault(ctx.uid, {})
            for uuid in self.overtaken_on.get(ctx.key) or self.unallocated_gpus(ctx):
                mine[uuid] = until
        message = f"re-placed: {why}"
        self.writer.write(
            ctx,
            tr.requeued(ctx.status, reason, message, now_rfc3339()),
            report,
            (reason, f"{message}; its GPU share is given back and it is placed again", True),
        )
        report.count("replaced")
        self.writer.metrics.decisions.labels(outcome="replaced").inc()
        for pod in [*ctx.pods.values(), *ctx.leaving]:
            meta = pod.get("metadata") or {}
            if owner_uid(pod) == ctx.uid and not meta.get("deletionTimestamp"):
                # none runs (checked above): a pod the kube-scheduler has not bound yet
                self.api.delete_pod(
                    ctx.namespace, str(meta.get("name")), str(meta.get("uid") or "")
                )
        for claim in self.claims_of(ctx):
            meta = claim.get("metadata") or {}
            self.api.delete_resource_claim(
                ctx.namespace, str(meta.get("name")), str(meta.get("uid") or "")
            )
            report.count("claims_deleted")

    def signed(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], claim: dict[str, Any]
    ) -> dict[str, Any]:
        """``claim`` carrying its share and the record epoch it was made in, signed
        (:func:`claim_epoch`): on this path no Binding carries the epoch onto a pod, so the
        claim does, and a replayed older record is still found out after a restart."""
        meta = claim.setdefault("metadata", {})
        text = CLAIM_SIGNED_PREFIX + encode_assignment(assignment_of(ctx.name, replica, recs))
        signature = self.writer.keys().sign_assignment(
            ctx.namespace,
            str(meta.get("name")),
            CLAIM_SIGNED_UID,
            ctx.uid,
            record_epoch(ctx.status),
            text,
        )
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            c.ANNOTATION_GPU_ASSIGNMENT: text,
            c.ANNOTATION_ASSIGNMENT_SIGNATURE: signature,
        }
        return claim

    def taken(self, ctx: JobCtx, replicas: int) -> list[str]:
        """The job's claim names (one per replica) that a claim Horus did not make for a
        DLJob of this name holds: the job waits for them, holding no GPU, as for a pod name
        (placed, it would hold a share for a claim it cannot make)."""
        out = []
        for replica in range(replicas):
            name = claim_name(ctx.name, replica)
            claim = self.claims.get((ctx.namespace, name))
            meta = (claim or {}).get("metadata") or {}
            if claim is not None and not (
                claim_owner_uid(claim) and _controller_name(meta) == ctx.name
            ):
                out.append(name)
        return out

    def claims_of(self, ctx: JobCtx) -> list[dict[str, Any]]:
        """The claims Horus made for this DLJob (signed for its UID: a tenant's claim naming
        the job as owner is not one), not going."""
        keys = self.writer.keys()
        return [
            claim
            for (ns, _), claim in self.claims.items()
            if ns == ctx.namespace
            and horus_claim_job_uid(claim, keys) == ctx.uid
            and not (claim.get("metadata") or {}).get("deletionTimestamp")
        ]

    def unallocated_gpus(self, ctx: JobCtx) -> set[str]:
        """The UUIDs of the job's recorded GPUs whose replica claim is not allocated."""
        out = set()
        for rec in ctx.status.get("placements") or []:
            claim = self.claims.get((ctx.namespace, claim_name(ctx.name, int(rec["replica"]))))
            if claim is None or not (claim.get("status") or {}).get("allocation"):
                out.add(str(rec.get("gpuUUID") or ""))
        return out


def running_pods(ctx: JobCtx) -> list[str]:
    """The job's pods (Horus made them for it) the kube-scheduler has bound to a node and
    that have not finished: their claims are allocated, their containers may run. Nobody's
    claim makes Horus delete one of them."""
    out = []
    for pod in ctx.pods.values():
        meta = pod.get("metadata") or {}
        if owner_uid(pod) != ctx.uid or not (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            out.append(str(meta.get("name") or ""))
    return out


def _controller_name(meta: Mapping[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("name") or "")
    return ""


def claim_owner_uid(claim: Mapping[str, Any]) -> str:
    """The DLJob UID of a claim Horus made for a DLJob: its controller, on a claim that carries
    Horus' text (only the operator may set a ``horus.io/`` annotation on a claim, the policy
    ``horus-claim-annotations``; callers that hold the keys verify it, :func:`claim_epoch`).
    "" for any other claim — a tenant's naming a DLJob as owner is not Horus' to delete."""
    return horus_claim_job_uid(claim, None)
