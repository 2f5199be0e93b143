"""A DLJob replica's pod, as a pure function of the job and its placement record.

Why pure: the pod is the contract with three other parties — the apiserver (which must accept
it; the operator dry-runs it before committing a share), the kubelet's device plugin (which
allocates exactly the signed assignment) and the node agent (which enforces and measures it).
Everything that goes into it is visible in the arguments, so it is tested without a cluster.

The replica pod is the template plus: an ownerReference to the DLJob (``controller: true``),
``schedulerName: horus-scheduler``, the job's ``spec.priorityClassName``, the
``horus.io/gpu-core``/``gpu-memory`` requests = limits on the first container (in the chosen
node's memory unit), the labels ``horus.io/dljob`` and
``horus.io/replica-index``, and the annotations ``horus.io/gpu-assignment`` and
``horus.io/predicted``. No signature: it binds the pod's UID, which exists only once the pod
does, so the operator puts it in the pod's Binding (:func:`binding_annotations`), which the
apiserver copies onto the pod as it sets ``spec.nodeName``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from horus.api.assignment import (
    GpuAssignment,
    GpuRef,
    encode_assignment,
    encode_predicted,
    parse_predicted,
)
from horus.api.dljob import PlacementRecord
from horus.api.podassignment import controller_dljob_uid
from horus.api.resources import pod_gpu_requests
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError

__all__ = [
    "assignment_of",
    "binding_annotations",
    "owned_by",
    "owner_uid",
    "placement_record",
    "pod_manifest",
    "pod_name",
]


def pod_name(job: str, replica: int) -> str:
    """The deterministic name of replica ``replica`` of DLJob ``job``."""
    return f"{job}-{replica}"


def owner_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the DLJob that controls ``pod`` if Horus made it, else None.

    Horus made a pod when it has a controller ownerReference of kind DLJob in the horus.io
    group *and* the Horus-owned ``horus.io/gpu-assignment`` annotation, which only Horus
    identities may set (an admission policy). A name or label proves nothing — a tenant's
    StatefulSet ``foo`` beside DLJob ``foo`` has a pod ``foo-0`` — and anyone who may create
    pods may write an ownerReference, so Horus adopts or deletes no pod without both.
    """
    meta = pod.get("metadata") or {}
    uid = controller_dljob_uid(meta)
    if not uid or c.ANNOTATION_GPU_ASSIGNMENT not in (meta.get("annotations") or {}):
        return None
    return uid


def owned_by(pod: Mapping[str, Any], namespace: str, uid: str) -> bool:
    """Whether ``pod`` is a replica pod Horus made for the DLJob ``uid`` in ``namespace``
    (:func:`owner_uid`; an ownerReference is namespace-local, so a pod elsewhere naming the
    job's uid is not the job's)."""
    meta = pod.get("metadata") or {}
    return bool(uid) and meta.get("namespace") == namespace and owner_uid(pod) == uid


def placement_record(replica: int, pod: str, node: str, gpu: Any) -> dict[str, Any]:
    """One ``status.placements`` entry (:class:`~horus.api.dljob.PlacementRecord`): replica
    ``replica`` (pod ``pod``) on one GPU (anything with ``gpu_uuid``, ``gpu_index``,
    ``core_percent`` and ``memory_mib``)."""
    return PlacementRecord(
        replica=replica,
        node=node,
        gpu_uuid=gpu.gpu_uuid,
        gpu_index=gpu.gpu_index,
        core_percent=gpu.core_percent,
        memory_mib=gpu.memory_mib,
        pod=pod,
    ).to_json()


def assignment_of(job: str, replica: int, records: Sequence[Mapping[str, Any]]) -> GpuAssignment:
    """The assignment of one replica from its placement records (one per GPU)."""
    gpus = tuple(
        GpuRef(str(r["gpuUUID"]), int(r["gpuIndex"]), int(r["corePercent"]), int(r["memoryMiB"]))
        for r in records
    )
    return GpuAssignment(
        node=str(records[0]["node"]),
        gpu_uuid=gpus[0].gpu_uuid,
        gpu_index=gpus[0].gpu_index,
        core_percent=gpus[0].core_percent,
        memory_mib=gpus[0].memory_mib,
        job=job,
        replica=replica,
        gpus=gpus if len(gpus) > 1 else (),
    )


def _owner(dljob: Mapping[str, Any]) -> dict[str, Any]:
    meta = dljob.get("metadata") or {}
    return {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _checkpointing(pspec: dict[str, Any], migration: object) -> None:
    """A job that may be moved (``spec.migration.policy: OnCheckpoint``) is told where its
    checkpoint lives (``$HORUS_CHECKPOINT_PATH`` in every container) and gets its grace
    period to write it after SIGTERM (``terminationGracePeriodSeconds``, never shortened)."""
    if not isinstance(migration, dict) or migration.get("policy") != c.MIGRATION_ON_CHECKPOINT:
        return
    grace = int(migration.get("gracePeriodSeconds") or 30)
    current = pspec.get("terminationGracePeriodSeconds")
    if not isinstance(current, int) or current < grace:
        pspec["terminationGracePeriodSeconds"] = grace
    path = str(migration.get("checkpointPath") or "")
    for container in pspec.get("containers") or []:
        env = [e for e in container.get("env") or [] if e.get("name") != c.ENV_CHECKPOINT_PATH]
        container["env"] = [*env, {"name": c.ENV_CHECKPOINT_PATH, "value": path}]


def pod_manifest(
    dljob: Mapping[str, Any],
    replica: int,
    records: Sequence[Mapping[str, Any]],
    unit_mib: int = 1,
    predicted: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod of replica ``replica`` of ``dljob`` (the raw object) placed as ``records`` say,
    its assignment not signed yet (module docstring); ``unit_mib``: MiB per unit of
    ``horus.io/gpu-memory`` on the chosen node; ``predicted``: the job's ``status.predicted``
    (its ``horus.io/predicted`` annotation)."""
    meta = dljob.get("metadata") or {}
    job, namespace = str(meta.get("name", "")), str(meta.get("namespace", "default"))
    template = copy.deepcopy((dljob.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    pspec = template.get("spec") or {}
    name = pod_name(job, replica)
    assignment = assignment_of(job, replica, records)
    text = encode_assignment(assignment)
    annotations = dict(tmeta.get("annotations") or {})
    annotations[c.ANNOTATION_GPU_ASSIGNMENT] = text
    annotations.pop(c.ANNOTATION_ASSIGNMENT_SIGNATURE, None)  # a template's copy means nothing
    if isinstance(predicted, dict):
        with contextlib.suppress(ValidationError):
            annotations[c.ANNOTATION_PREDICTED] = encode_predicted(parse_predicted(predicted))
    labels = dict(tmeta.get("labels") or {})
    labels[c.LABEL_DLJOB_NAME] = job
    labels[c.LABEL_REPLICA_INDEX] = str(replica)
    pspec["schedulerName"] = c.SCHEDULER_NAME
    pspec.setdefault("restartPolicy", "Never")
    pspec.pop("nodeName", None)
    # The job's class (never the template's: the schema refuses one there), so the apiserver's
    # Priority admission sets spec.priority and ResourceQuota scopes apply to the replicas —
    # checked by the operator's dry run before any share is committed.
    pspec.pop("priority", None)
    pspec.pop("priorityClassName", None)
    klass = (dljob.get("spec") or {}).get("priorityClassName")
    if isinstance(klass, str) and klass:
        pspec["priorityClassName"] = klass
    _checkpointing(pspec, (dljob.get("spec") or {}).get("migration"))
    # Quantities in the chosen node's gpu-memory unit (docs/decisions.md, device plugin).
    wanted = pod_gpu_requests(assignment, unit_mib)
    containers = pspec.get("containers") or []
    if containers:
        res = containers[0].setdefault("resources", {})
        for kind in ("requests", "limits"):
            res.setdefault(kind, {})
            for resource, amount in wanted.items():
                res[kind][resource] = str(amount)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [_owner(dljob)],
        },
        "spec": pspec,
    }


def binding_annotations(pod: Mapping[str, Any], epoch: int, keys: KeyRing) -> dict[str, str]:
    """What the Binding of an existing replica ``pod`` carries: the signature of its assignment
    for exactly this pod (its UID), its DLJob (the controller's UID) and record ``epoch``
    (:class:`~horus.api.signing.SigningUnavailable` without a signing key)."""
    meta = pod.get("metadata") or {}
    text = str((meta.get("annotations") or {}).get(c.ANNOTATION_GPU_ASSIGNMENT) or "")
    signature = keys.sign_assignment(
        str(meta.get("namespace", "default")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        controller_dljob_uid(meta),
        epoch,
        text,
    )
    return {c.ANNOTATION_ASSIGNMENT_SIGNATURE: signature}


def pin_to_node(spec: dict[str, Any], node: str) -> None:
    """Make the pod ``spec`` schedulable on ``node`` only: a required node affinity on the
    node's name (``matchFields`` ``metadata.name``, as the DaemonSet controller pins its pods;
    the ``kubernetes.io/hostname`` label need not equal the name), added to each term the
    template requires (terms are alternatives; each must now also name the node)."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_aff = affinity.setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        fields = [f for f in term.get("matchFields") or [] if f.get("key") != "metadata.name"]
        term["matchFields"] = [*fields, dict(pin)]
    required["nodeSelectorTerms"] = terms
