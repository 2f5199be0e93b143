"""A placement decision as ResourceClaim manifests (DRA path): the pure half.

On the DRA path the operator keeps deciding (prediction, interference, queue, gangs) and
recording the decision in the DLJob status first, as on the device-plugin path; it then
expresses each replica's share as one ResourceClaim and lets the kube-scheduler allocate it,
so the kube-scheduler stays the only allocator and capacity holds against every claim,
whoever made it. This module builds those objects from the signed placement records:

* :func:`replica_claim` — claim ``<pod>-gpu`` of class ``gpu.horus.io``: one request for the
  replica's GPUs (``count`` = its number of GPUs), a CEL selector naming exactly the chosen
  GPUs by UUID (so the kube-scheduler can allocate nothing else), and the share as capacity
  requests (``cores`` percent, ``memory`` MiB) — the units the driver's ResourceSlice offers
  (``docs/dra.md``). Owned by the DLJob, like its pods;
* :func:`use_claim` — the replica's pod made to use it: the claim in ``resourceClaims``, the
  first container's ``resources.claims``, the device-plugin resources and Horus' own
  ``schedulerName`` removed (the kube-scheduler allocates the claim and binds the pod).

Creating them, and re-placing a job whose claim another claim overtook, is the commit path's
work (:mod:`horus.operator.claimcommit`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.podspec import assignment_of, pin_to_node, pod_name

__all__ = [
    "CLAIM_REQUEST",
    "claim_name",
    "pod_share_claim",
    "replica_claim",
    "share_claim",
    "use_claim",
]

#: The request name in every replica claim, and the pod's claim entry name.
CLAIM_REQUEST = "gpu"


def claim_name(job: str, replica: int) -> str:
    """The deterministic claim of replica ``replica`` of DLJob ``job``."""
    return f"{pod_name(job, replica)}-{CLAIM_REQUEST}"


def _selector(uuids: Sequence[str]) -> str:
    attr = f'device.attributes["{c.DRA_DRIVER_NAME}"].{c.DRA_ATTR_UUID}'
    if len(uuids) == 1:
        return f"{attr} == {json.dumps(uuids[0])}"
    return f"{attr} in [{', '.join(json.dumps(u) for u in uuids)}]"


def replica_claim(
    dljob: Mapping[str, Any], replica: int, records: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The ResourceClaim of one replica placed as ``records`` say (one record per GPU)."""
    meta = dljob.get("metadata") or {}
    job, namespace = str(meta.get("name", "")), str(meta.get("namespace", "default"))
    assignment = assignment_of(job, replica, records)
    gpus = assignment.all_gpus
    shares = {(g.core_percent, g.memory_mib) for g in gpus}
    if len(shares) != 1:
        # one request carries one capacity request for all its devices
        raise ValidationError(
            f"DLJob {namespace}/{job} replica {replica}: its GPUs have different shares "
            f"{sorted(shares)}; a claim gives every GPU of a replica the same share"
        )
    cores, memory_mib = shares.pop()
    owner = {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "name": job,
        "uid": str(meta.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": False,
    }
    labels = {c.LABEL_DLJOB_NAME: job, c.LABEL_REPLICA_INDEX: str(replica)}
    return share_claim(
        claim_name(job, replica),
        namespace,
        labels,
        owner,
        [g.gpu_uuid for g in gpus],
        cores,
        memory_mib,
    )


def pod_share_claim(
    pod: Mapping[str, Any], name: str, gpu_uuid: str, cores: int, memory_mib: int
) -> dict[str, Any]:
    """The claim ``name`` a converted plain pod (``horus.io/gpu-*`` requests turned into a
    claim reference at admission, ``examples/dra/extended-resources-policy.yaml``) gets once
    Horus chose its GPU: pinned to it by UUID with the share, controlled by the pod (the
    garbage collector deletes it with the pod) and marked as the resourceclaim controller
    marks a claim it makes for a pod's template entry — so for a ``generateName`` pod, which
    names the placeholder template, that controller finds this claim as the pod's and records
    it in the pod's status, where the kube-scheduler reads it (it checks the pod controls
    it). ``horus.io/converted-for-pod`` (only the operator may write it) tells it from a
    claim someone else made under the name."""
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": str(meta.get("name", "")),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }
    labels = {c.LABEL_CONVERTED_POD: str(meta.get("name", ""))[:63]}
    namespace = str(meta.get("namespace", "default"))
    claim = share_claim(name, namespace, labels, owner, [gpu_uuid], cores, memory_mib)
    claim["metadata"]["annotations"] = {
        c.POD_CLAIM_ANNOTATION: c.CONVERTED_CLAIM_ENTRY,
        c.ANNOTATION_CONVERTED_FOR: uid,
    }
    return claim


def share_claim(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
    uuids: Sequence[str],
    cores: int,
    memory_mib: int,
) -> dict[str, Any]:
    """One request of class ``gpu.horus.io`` for exactly the GPUs ``uuids``, each with the
    share ``cores`` % and ``memory_mib`` MiB."""
    return {
        "apiVersion": f"{c.RESOURCE_API_GROUP}/{c.RESOURCE_API_VERSION}",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": CLAIM_REQUEST,
                        "exactly": {
                            "deviceClassName": c.DRA_DEVICE_CLASS,
                            "allocationMode": "ExactCount",
                            "count": len(uuids),
                            "selectors": [{"cel": {"expression": _selector(uuids)}}],
                            "capacity": {
                                "requests": {
                                    c.DRA_CAPACITY_CORES: str(cores),
                                    c.DRA_CAPACITY_MEMORY: f"{memory_mib}Mi",
                                }
                            },
                        },
                    }
                ]
            }
        },
    }


def use_claim(pod: Mapping[str, Any], claim: str, node: str | None = None) -> dict[str, Any]:
    """``pod`` (from :func:`horus.operator.podspec.pod_manifest`) using claim ``claim``
    instead of the device plugin's resources; the kube-scheduler schedules it. With ``node``
    (the node Horus chose), the pod may go there only (:func:`~horus.operator.podspec.pin_to_node`):
    the claim's CEL pin names the GPU's UUID, and a device with that UUID published by another
    node's slice must not attract the pod there."""
    out = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    spec.pop("schedulerName", None)
    if node is not None:
        pin_to_node(spec, node)
    entries = [e for e in spec.get("resourceClaims") or [] if e.get("name") != CLAIM_REQUEST]
    spec["resourceClaims"] = [*entries, {"name": CLAIM_REQUEST, "resourceClaimName": claim}]
    containers = spec.get("containers") or []
    if containers:
        res = containers[0].setdefault("resources", {})
        for kind in ("requests", "limits"):
            values = res.get(kind) or {}
            for resource in (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY):
                values.pop(resource, None)
            if values:
                res[kind] = values
            else:
                res.pop(kind, None)
        claims = [e for e in res.get("claims") or [] if e.get("name") != CLAIM_REQUEST]
        res["claims"] = [*claims, {"name": CLAIM_REQUEST}]
    return out
