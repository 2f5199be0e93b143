"""What the placers read from one API object: a node's fitness for new work, whether a DLJob
record or a pod assignment is signed, a job's profile and prediction in the core's types.

Pure functions of the apiserver's JSON (``dict``), shared by :mod:`horus.operator.livestate`
(which builds the whole cluster from them), the reconcile pass, restoration and the scheduler
extender, so each object is read one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from horus.api.assignment import GpuAssignment, PredictedUsage
from horus.api.dljob import parse_profile_document
from horus.api.podassignment import controller_dljob_uid, read_pod_assignment
from horus.api.signing import MAX_EPOCH, KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.common.memo import Memo
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.predictor.schema import graph_profile
from horus.scheduler import GpuShare


def meta_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    ann = meta_of(obj).get("annotations")
    return ann if isinstance(ann, dict) else {}


def key_of(obj: Mapping[str, Any]) -> str:
    meta = meta_of(obj)
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def node_exclusion(node: Mapping[str, Any]) -> str | None:
    """Why ``node`` must not receive new work (None when it may)."""
    meta = meta_of(node)
    if meta.get("deletionTimestamp"):
        return "node is being deleted"
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "node is cordoned (spec.unschedulable)"
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((cd for cd in conditions if cd.get("type") == "Ready"), None)
    if ready is None:
        return "node has no Ready condition yet"
    if ready.get("status") != "True":
        return f"node is NotReady ({ready.get('reason') or 'no reason given'})"
    return None


def record_epoch(status: Mapping[str, Any]) -> int:
    """A record's ``status.placementEpoch`` (0 when absent or not a small integer)."""
    value = status.get(c.STATUS_PLACEMENT_EPOCH)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        return 0
    return value


def pods_epoch(pods: Iterable[Mapping[str, Any]], keys: KeyRing) -> int:
    """The highest record epoch any of ``pods`` carries in a signature that verifies (0 if none):
    a record of the job older than that is a rollback."""
    best = 0
    for pod in pods:
        epoch = read_pod_assignment(pod, keys).epoch
        if epoch is not None:
            best = max(best, epoch)
    return best


def dljob_record_trusted(obj: Mapping[str, Any], keys: KeyRing, floor: int = 0) -> bool:
    """Whether a DLJob's phase and placements are the operator's own (signed) record.

    A job the operator never wrote (no phase, no placements) has nothing to trust. Anything
    else must carry ``status.placementSignature`` over exactly its uid, phase, placements, move
    and epoch (:meth:`horus.api.signing.SigningKey.sign_placements`): whoever else can write
    ``dljobs/status`` cannot make the operator count, create or bind anything from a record of
    their own. ``floor`` is the lowest epoch a current record can have (the highest one its
    pods carry, or this process signed): an older, validly signed record is a rollback and is
    not trusted either.
    """
    status = obj.get("status")
    if not isinstance(status, dict):
        return True
    phase, placements = status.get("phase"), status.get("placements")
    if not phase and not placements and not status.get("migration"):
        return True
    meta = meta_of(obj)
    version = meta.get("resourceVersion")
    if not version:
        return _record_trusted(obj, status, keys, floor)
    slot = (meta.get("namespace"), meta.get("name"), meta.get("uid"), floor)
    return _TRUSTED.get(
        (version, floor), lambda: _record_trusted(obj, status, keys, floor), obj, keys, slot=slot
    )


#: Verdicts by the job object itself (the view replaces an object that changed), its version
#: and the key ring.
_TRUSTED: Memo[bool] = Memo(limit=40_000)


def _record_trusted(
    obj: Mapping[str, Any], status: Mapping[str, Any], keys: KeyRing, floor: int
) -> bool:
    epoch = record_epoch(status)
    if epoch < floor:
        return False
    meta = meta_of(obj)
    phase, placements = status.get("phase"), status.get("placements")
    signature = status.get(c.STATUS_PLACEMENT_SIGNATURE)
    return keys.verify_placements(
        str(meta.get("namespace", "default")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        phase if isinstance(phase, str) else None,
        placements,
        epoch,
        signature if isinstance(signature, str) else None,
        status.get("migration"),
    )


#: What a replica claim's signature binds in place of a pod UID (a claim's UID is known only
#: once it exists, and a pod UID is never this), and the prefix of its signed text: a claim's
#: signature can never pass for a pod's.
CLAIM_SIGNED_UID = "resourceclaim"
CLAIM_SIGNED_PREFIX = "claim:"


def claim_epoch(claim: Mapping[str, Any], keys: KeyRing) -> int | None:
    """The record epoch a Horus replica claim was made in, if its signature verifies (None:
    unsigned, forged, or not a DLJob's): a record older than that is a rollback."""
    meta = meta_of(claim)
    version = meta.get("resourceVersion")
    if not version:
        return _claim_epoch(claim, keys)
    slot = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
    return _CLAIM_EPOCH.get(version, lambda: _claim_epoch(claim, keys), claim, keys, slot=slot)


#: Verdicts by the claim object itself, its version and the key ring (a pass reads every
#: claim again; only a changed one is verified again).
_CLAIM_EPOCH: Memo[int | None] = Memo(limit=60_000)


def _claim_epoch(claim: Mapping[str, Any], keys: KeyRing) -> int | None:
    meta = meta_of(claim)
    ann = annotations_of(claim)
    text = ann.get(c.ANNOTATION_GPU_ASSIGNMENT)
    job_uid = controller_dljob_uid(meta)
    if not isinstance(text, str) or not text.startswith(CLAIM_SIGNED_PREFIX) or not job_uid:
        return None
    return keys.verify_assignment(
        str(meta.get("namespace", "default")),
        str(meta.get("name", "")),
        CLAIM_SIGNED_UID,
        job_uid,
        text,
        ann.get(c.ANNOTATION_ASSIGNMENT_SIGNATURE),
    )


def horus_claim_job_uid(claim: Mapping[str, Any], keys: KeyRing | None) -> str:
    """The UID of the DLJob Horus made ``claim`` for, or "" for a claim Horus did not make.

    Proven only by what a tenant cannot write: with ``keys``, the claim's signed text
    (:func:`claim_epoch`: the signature binds the namespace, the claim's name and the job's
    UID); without keys (tests, tools), by Horus' signed text being there at all — the chart's
    policy ``horus-claim-annotations`` lets only the operator set a ``horus.io/`` annotation
    on a claim. An ``ownerReferences`` entry alone proves nothing: anyone who may edit claims
    in the namespace writes one."""
    text = annotations_of(claim).get(c.ANNOTATION_GPU_ASSIGNMENT)
    if not isinstance(text, str) or not text.startswith(CLAIM_SIGNED_PREFIX):
        return ""
    if keys is not None and claim_epoch(claim, keys) is None:
        return ""
    return controller_dljob_uid(meta_of(claim))


def pod_assignment_trusted(pod: Mapping[str, Any], keys: KeyRing) -> bool:
    """Whether a pod's ``horus.io/gpu-assignment`` carries a valid signature for this pod
    (:func:`horus.api.podassignment.read_pod_assignment`, the one reader)."""
    return read_pod_assignment(pod, keys).trusted


def resource_prediction(p: PredictedUsage) -> ResourcePrediction:
    """An API ``predicted`` record as the scheduler's prediction type."""
    return ResourcePrediction(
        util_mean=p.util_mean,
        util_upper=p.util_upper,
        memory_mib_mean=p.memory_mib_mean,
        memory_mib_upper=p.memory_mib_upper,
        quantile=p.quantile if p.quantile is not None else 0.9,
        low_confidence=p.low_confidence,
        model_version=p.model_version,
    )


def assumed_prediction(shares: Iterable[GpuShare]) -> ResourcePrediction:
    """For a resident nobody predicted: assume it uses exactly the share it was given."""
    first = next(iter(shares))
    return ResourcePrediction(
        util_mean=float(first.core_percent),
        util_upper=float(first.core_percent),
        memory_mib_mean=float(first.memory_mib),
        memory_mib_upper=float(first.memory_mib),
        model_version="assumed-from-share",
    )


def unknown_profile(kind: str) -> GraphProfile:
    return GraphProfile(model=kind, batch_size=1)


def shares_of(assignment: GpuAssignment) -> list[GpuShare]:
    return [
        GpuShare(assignment.node, g.gpu_index, g.gpu_uuid, g.core_percent, g.memory_mib)
        for g in assignment.all_gpus
    ]


def pod_profile(pod: Mapping[str, Any]) -> GraphProfile | None:
    text = annotations_of(pod).get(c.ANNOTATION_GRAPH_PROFILE)
    if not text:
        return None
    try:
        return graph_profile(parse_profile_document(text, f"pod {key_of(pod)} graph-profile"))
    except ValidationError:
        return None
