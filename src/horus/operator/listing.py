"""One pass's listing, and the context of each DLJob made from it with its own pods.

Pods are listed before DLJobs: a pod in the listing belongs to a DLJob that existed when it
was created, so a DLJob missing from the later list really was deleted. A pod is a job's only
if Horus made it for that job (:func:`~horus.operator.podspec.owner_uid`: controller
ownerReference and the Horus-owned assignment annotation) in the job's namespace; a pod
Horus did not make that holds one of a job's replica names makes the job wait for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horus.api.dljob import DLJob, parse_dljob
from horus.api.resources import node_memory_unit_mib
from horus.api.signing import KeyRing
from horus.common.errors import ValidationError
from horus.common.memo import PerObject
from horus.operator.object_reads import dljob_record_trusted
from horus.operator.pass_state import JobCtx
from horus.operator.pod_reads import PodFacts
from horus.operator.podspec import pod_name

__all__ = ["Listing", "job_contexts", "node_units"]

log = logging.getLogger(__name__)


@dataclass
class Listing:
    """One pass's listing (pods listed first: see the module docstring)."""

    pods: list[dict[str, Any]]
    dljobs: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    #: ResourceClaims and ResourceSlices, on the DRA path only (``placement_path: dra``)
    claims: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] | None = None


def job_contexts(
    snap: Listing,
    facts: Sequence[PodFacts],
    keys: KeyRing,
    job_facts: PerObject[tuple[DLJob | None, bool]],
) -> dict[str, JobCtx]:
    """One context per DLJob, with its trust and its own replica pods (``facts``: those of
    ``snap.pods``). ``job_facts`` keeps each DLJob parsed and its record checked per version
    of the object (per key ring)."""
    ctxs: dict[str, JobCtx] = {}
    read = job_facts.read(
        snap.dljobs, lambda obj: (_parsed(obj), dljob_record_trusted(obj, keys)), keys
    )
    for obj, (job, trusted) in zip(snap.dljobs, read, strict=True):
        raw = obj.get("status")
        status: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        ctx = JobCtx(obj, job, status, trusted=trusted)
        ctxs[ctx.key] = ctx
    by_uid = {(x.namespace, x.uid): x for x in ctxs.values()}
    by_name = {(x.namespace, x.name): x for x in ctxs.values()}
    for f in facts:  # the pods' facts, read once per version of each pod
        owner = f.owner
        mine = by_uid.get((f.namespace, owner)) if owner is not None else None
        if mine is None or f.view is None:
            if owner is None:  # no Horus pod at all: does it hold a replica's name?
                _note_taken(by_name, f.namespace, f.name)
            continue
        if f.deleting:
            mine.leaving.append(f.pod)
        elif mine.pods.setdefault(f.view.replica, f.pod) is f.pod:
            mine.known_views[id(f.pod)] = (f.pod, f.view)
    return ctxs


def _note_taken(jobs: Mapping[tuple[str, str], JobCtx], namespace: str, name: str) -> None:
    """A pod Horus did not make whose name is one of a job's replica pod names
    (``<job>-<replica>``) holds that name: the job waits for it (never adopts or deletes it)."""
    job, _, index = name.rpartition("-")
    ctx = jobs.get((namespace, job))
    if ctx is None or not index.isdigit() or pod_name(job, int(index)) != name:
        return
    replicas = ctx.job.spec.replicas if ctx.job is not None else 0
    recorded = {int(r["replica"]) for r in ctx.status.get("placements") or []}
    if int(index) < replicas or int(index) in recorded:
        ctx.taken.append(name)


def _parsed(obj: dict[str, Any]) -> DLJob | None:
    """``parse_dljob`` of a DLJob, None where it does not validate (kept per version of the
    object: :func:`job_contexts`)."""
    try:
        return parse_dljob(obj)
    except ValidationError:
        return None


def node_units(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Node name → MiB per unit of ``horus.io/gpu-memory`` (1 where unset or unreadable)."""
    out: dict[str, int] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        try:
            out[name] = node_memory_unit_mib(meta.get("annotations") or {}, f"node {name}")
        except ValidationError as exc:
            log.warning("%s; assuming 1 MiB units", exc)
            out[name] = 1
    return out
