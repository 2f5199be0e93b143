"""A pod's signed GPU assignment, read one way by everyone who trusts it.

Three places act on the ``horus.io/gpu-assignment`` a pod carries: the device plugin hands the
share to the container (and counts the shares already handed out), the node agent enforces
and reports it, and the operator's live state counts it as occupied capacity. Anyone who can
create a pod can write that annotation, so each of them must check the
``horus.io/gpu-assignment-signature`` beside it (:mod:`horus.api.signing`) — and they used
to do it three ways, in three orders, with three sets of words. :func:`read_pod_assignment`
is the one reading: present, well formed (bounded, every field checked), signed for exactly
this pod — its namespace, name and UID, the UID of the DLJob that controls it, and the text
(:mod:`horus.api.signing`) — and which record epoch it was bound in; the answer says which of
these failed, in one sentence naming the pod and
the annotation, and each caller adds only what the failure means for it (refused, not
enforced, not counted).

Pure (no Kubernetes client): the pod is the apiserver's JSON object as a dict, and a hostile
one (wrong types anywhere) yields a problem, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from horus.api.assignment import GpuAssignment, decode_assignment
from horus.api.signing import KeyRing
from horus.common.constants import (
    ANNOTATION_ASSIGNMENT_SIGNATURE,
    ANNOTATION_GPU_ASSIGNMENT,
    API_GROUP,
    DLJOB_KIND,
)
from horus.common.errors import ValidationError
from horus.common.memo import Memo

__all__ = ["AssignmentProblem", "PodAssignment", "controller_dljob_uid", "read_pod_assignment"]


class AssignmentProblem(StrEnum):
    """Why a pod's assignment is not one Horus stands behind."""

    MISSING = "missing"  # no horus.io/gpu-assignment: not a pod Horus placed
    MALFORMED = "malformed"  # present but not a valid assignment
    UNSIGNED = "unsigned"  # no horus.io/gpu-assignment-signature
    FORGED = "forged"  # a signature that does not verify for this pod (UID), job and text

    @property
    def signature(self) -> bool:
        """The assignment itself is fine; its signature is missing or wrong (a verifier
        whose key may be stale re-reads the key before refusing)."""
        return self in (AssignmentProblem.UNSIGNED, AssignmentProblem.FORGED)


@dataclass(frozen=True)
class PodAssignment:
    """What :func:`read_pod_assignment` found on one pod.

    ``assignment`` is set whenever the annotation decodes (also when its signature is bad, so
    a caller may say what it claimed); trust it only when :attr:`trusted`.
    """

    namespace: str
    name: str
    assignment: GpuAssignment | None
    problem: AssignmentProblem | None = None
    detail: str = ""  # one sentence naming the pod, the annotation and what is wrong
    #: The record epoch the signature binds (None: unsigned, or not verified).
    epoch: int | None = None

    @property
    def trusted(self) -> bool:
        return self.problem is None and self.assignment is not None

    @property
    def who(self) -> str:
        return f"pod {self.namespace}/{self.name}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def controller_dljob_uid(meta: Mapping[str, Any]) -> str:
    """The UID of the DLJob that controls a pod (its controller ownerReference of kind DLJob
    in the horus.io group), or "" for any other pod (a plain pod's signature binds "")."""
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == DLJOB_KIND
            and str(ref.get("apiVersion") or "").split("/")[0] == API_GROUP
        ):
            return str(ref.get("uid") or "")
    return ""


#: Answers by the pod object itself (the watch-fed view replaces an object that changed), its
#: version and the two annotations read, and the key ring (horus.common.memo): a pass reads
#: every pod again, but only a changed one is decoded and verified again.
_READ: Memo[PodAssignment] = Memo(limit=60_000)


def read_pod_assignment(pod: Mapping[str, Any], keys: KeyRing | None) -> PodAssignment:
    """The decoded assignment of ``pod`` and whether it is trusted.

    ``keys`` verifies the signature (every published public key); None reads without verifying — only for callers that hold no key (tools, a preferred
    allocation that grants nothing) and say so.
    """
    meta = _mapping(pod.get("metadata"))
    annotations = _mapping(meta.get("annotations"))
    version = meta.get("resourceVersion")
    text = annotations.get(ANNOTATION_GPU_ASSIGNMENT)
    if not version or not isinstance(text, str):
        return _read_pod_assignment(pod, keys)
    key = (
        meta.get("namespace"),
        meta.get("name"),
        meta.get("uid"),
        version,
        text,
        annotations.get(ANNOTATION_ASSIGNMENT_SIGNATURE),
    )
    slot = (key[0], key[1], key[2], id(keys))
    return _READ.get(key, lambda: _read_pod_assignment(pod, keys), pod, keys, slot=slot)


def _read_pod_assignment(pod: Mapping[str, Any], keys: KeyRing | None) -> PodAssignment:
    meta = _mapping(pod.get("metadata"))
    annotations = _mapping(meta.get("annotations"))
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    who = f"pod {namespace}/{name}"
    text = annotations.get(ANNOTATION_GPU_ASSIGNMENT)
    if text is None:
        return PodAssignment(
            namespace,
            name,
            None,
            AssignmentProblem.MISSING,
            f"{who} has no {ANNOTATION_GPU_ASSIGNMENT} annotation",
        )
    try:
        if not isinstance(text, str):
            raise ValidationError(f"{who} annotation {ANNOTATION_GPU_ASSIGNMENT}: not a string")
        assignment = decode_assignment(text, f"{who} annotation {ANNOTATION_GPU_ASSIGNMENT}")
    except ValidationError as exc:
        return PodAssignment(namespace, name, None, AssignmentProblem.MALFORMED, str(exc))
    if keys is None:
        return PodAssignment(namespace, name, assignment)
    signature = annotations.get(ANNOTATION_ASSIGNMENT_SIGNATURE)
    if not isinstance(signature, str) or not signature:
        return PodAssignment(
            namespace,
            name,
            assignment,
            AssignmentProblem.UNSIGNED,
            f"{who} has no {ANNOTATION_ASSIGNMENT_SIGNATURE}: its {ANNOTATION_GPU_ASSIGNMENT} "
            "is not signed by Horus (written by hand or by another tool)",
        )
    uid = str(meta.get("uid") or "")
    epoch = keys.verify_assignment(
        namespace, name, uid, controller_dljob_uid(meta), text, signature
    )
    if epoch is None:
        return PodAssignment(
            namespace,
            name,
            assignment,
            AssignmentProblem.FORGED,
            f"{who} has an invalid {ANNOTATION_ASSIGNMENT_SIGNATURE}, one that does not verify "
            f"for this pod (its UID), its job and its assignment with any published key: its "
            f"{ANNOTATION_GPU_ASSIGNMENT} is not signed by Horus (forged, copied from another "
            "or an earlier pod, edited, or signed with a key no longer published)",
        )
    return PodAssignment(namespace, name, assignment, epoch=epoch)
