"""Shares already committed: DLJobs' signed placement records and pods' signed assignments.

Rules (a) and (b) of :mod:`horus.operator.livestate`: each unfinished DLJob's
``status.placements`` counts (and, while it moves, the GPUs it leaves); a pod with an
assignment counts only when its job's record did not, grouped by DLJob or by pod. Every
DLJob's measured pair speeds are collected on the way.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from horus.api.assignment import GpuAssignment, decode_predicted
from horus.api.dljob import (
    DLJobStatus,
    InlineProfile,
    parse_dljob_spec,
    parse_dljob_status,
)
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import timestamp
from horus.common.errors import HorusError, ValidationError
from horus.common.memo import Memo
from horus.operator.object_reads import (
    annotations_of,
    assumed_prediction,
    dljob_record_trusted,
    key_of,
    meta_of,
    pod_profile,
    resource_prediction,
    shares_of,
    unknown_profile,
)
from horus.operator.residents import (
    MOVING_SUFFIX,
    TERMINAL_POD_PHASES,
    UNKNOWN_KIND,
    LiveState,
    add_resident,
    dljob_job_name,
    pod_job_name,
)
from horus.predictor.interface import GraphProfile, Predictor, ResourcePrediction
from horus.predictor.schema import graph_profile
from horus.scheduler import ClusterState, GpuShare, JobRequest, job_kind

log = logging.getLogger(__name__)

__all__ = ["add_dljob_records", "add_pod_group", "pod_groups"]

#: Parsed DLJob statuses by the status object itself and its job's resourceVersion: the
#: watch-fed view hands every pass the same objects until they change, so only a changed job
#: is parsed again (horus.common.memo).
_STATUS: Memo[DLJobStatus] = Memo(limit=40_000)


TERMINAL_JOB_PHASES = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)


def add_dljob_records(
    live: LiveState,
    dljobs: Iterable[Mapping[str, Any]],
    predictor: Predictor | None,
    known: Mapping[str, GraphProfile],
    keys: KeyRing | None,
    distrusted: Collection[str] = (),
) -> set[str]:
    """(a) the durable record: each unfinished DLJob's signed ``status.placements``; and
    every DLJob's measured pair speeds. Returns the jobs whose record was counted."""
    recorded: set[str] = set()
    for obj in dljobs:
        meta = meta_of(obj)
        ns, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        status_raw = obj.get("status")
        if not name or not isinstance(status_raw, dict) or not status_raw.get("placements"):
            continue
        jname = dljob_job_name(ns, name)
        try:
            status = _parsed_status(meta, status_raw)
        except ValidationError as exc:
            live.problems.append(
                f"DLJob {jname}: unreadable status ({exc}); its pods are used instead"
            )
            continue
        profile = _dljob_profile(obj, jname, known)
        if status.observed is not None and status.observed.pairs and profile is not None:
            kind = job_kind(profile)  # the agent's measurements, whoever wrote the record
            live.observed_pairs += [
                (kind, pair.other, pair.gpu_model, pair.speed, pair.error)
                for pair in status.observed.pairs
            ]
        if status.phase in TERMINAL_JOB_PHASES:
            continue  # pods of a finished job that still run are counted from the pods
        if jname in distrusted or (keys is not None and not dljob_record_trusted(obj, keys)):
            live.problems.append(
                f"DLJob {jname}: status.placements not signed by the operator; not counted "
                "(its pods are used instead)"
            )
            continue
        request, shares, prediction = _record_request(
            jname, meta, status, profile, predictor, live.state
        )
        if add_resident(live, request, shares, prediction, "dljob-status", (), f"DLJob {jname}"):
            recorded.add(jname)
        if status.migration is not None:
            _add_moving_from(live, request, status, shares, prediction)
    return recorded


def _parsed_status(meta: Mapping[str, Any], raw: Mapping[str, Any]) -> DLJobStatus:
    """``parse_dljob_status``, once per version of the job."""
    version = meta.get("resourceVersion")
    if not version:
        return parse_dljob_status(raw)
    slot = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
    return _STATUS.get(version, lambda: parse_dljob_status(raw), raw, slot=slot)


def _add_moving_from(
    live: LiveState,
    request: JobRequest,
    status: DLJobStatus,
    new: list[GpuShare],
    prediction: ResourcePrediction,
) -> None:
    """A move in progress: the GPUs the job leaves still hold its old pods (until they have
    stopped and the operator closes the move), so both the old and the new shares count."""
    assert status.migration is not None
    taken = {s.gpu_uuid for s in new}
    old = [
        GpuShare(p.node, p.gpu_index, p.gpu_uuid, p.core_percent, p.memory_mib)
        for p in status.migration.source
        if p.gpu_uuid not in taken
    ]
    if not old:
        return
    name = request.name + MOVING_SUFFIX
    leaving = dataclasses.replace(request, name=name, kind=request.kind or UNKNOWN_KIND)
    add_resident(
        live, leaving, old, prediction, "dljob-status", (), f"DLJob {request.name} (moving)"
    )


def _record_request(
    jname: str,
    meta: Mapping[str, Any],
    status: DLJobStatus,
    profile: GraphProfile | None,
    predictor: Predictor | None,
    state: ClusterState,
) -> tuple[JobRequest, list[GpuShare], ResourcePrediction]:
    shares = [
        GpuShare(p.node, p.gpu_index, p.gpu_uuid, p.core_percent, p.memory_mib)
        for p in status.placements
    ]
    replicas = max(p.replica for p in status.placements) + 1
    prediction = (
        resource_prediction(status.predicted)
        if status.predicted is not None
        else _predict_or_assume(predictor, profile, shares, state)
    )
    request = JobRequest(
        name=jname,
        profile=profile or unknown_profile(UNKNOWN_KIND),
        replicas=replicas,
        gpus_per_replica=max(1, len(shares) // replicas),
        core_percent=shares[0].core_percent,
        memory_mib=shares[0].memory_mib,
        submit_time=timestamp(meta.get("creationTimestamp")),
        prediction=prediction,
        kind="" if profile is not None else UNKNOWN_KIND,
    )
    return request, shares, prediction


def pod_groups(
    live: LiveState,
    pods: Iterable[Mapping[str, Any]],
    recorded: set[str],
    keys: KeyRing | None,
    dra: bool = False,
) -> dict[str, list[tuple[Mapping[str, Any], GpuAssignment]]]:
    """(b) pods with a signed assignment, grouped by DLJob (replicas of one job) or by pod;
    a DLJob whose record was counted is not counted again from its pods.

    ``dra``: on the DRA path a pod's share is its ResourceClaim's allocation (rule (c)); an
    unsigned assignment annotation there (claim-path pods carry one for the agent's display)
    is simply not counted here — no problem to report, and no device plugin involved."""
    groups: dict[str, list[tuple[Mapping[str, Any], GpuAssignment]]] = {}
    for pod in pods:
        text = annotations_of(pod).get(c.ANNOTATION_GPU_ASSIGNMENT)
        if text is None or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        read = read_pod_assignment(pod, keys)
        ns, pname = read.namespace, read.name
        assignment = read.assignment
        if (
            assignment is not None
            and assignment.job is not None
            and dljob_job_name(ns, assignment.job) in recorded
        ):
            continue  # the job's signed record counts its shares
        if assignment is None or (keys is not None and not read.trusted):
            if dra:
                continue  # its claim counts it (rule (c))
            if assignment is not None and _allocated(pod):
                live.problems.append(
                    f"{read.detail}; counted anyway with the share it claims: the device "
                    "plugin allocated it, so its containers hold the GPU"
                )
            else:
                why = "the device plugin gives it no GPU" if read.problem else "unreadable"
                live.problems.append(f"{read.detail}; not counted ({why})")
                continue
        assert assignment is not None
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound and bound != assignment.node:
            live.problems.append(
                f"pod {ns}/{pname}: assigned to node {assignment.node} but bound to {bound}; "
                "its share is counted on the assigned node"
            )
        if assignment.job is not None:
            jname = dljob_job_name(ns, assignment.job)
            if jname in recorded:
                continue
        else:
            jname = pod_job_name(ns, pname)
        groups.setdefault(jname, []).append((pod, assignment))
    return groups


def _allocated(pod: Mapping[str, Any]) -> bool:
    """The node's device plugin allocated the pod (it verified the signature then)."""
    return bool(annotations_of(pod).get(c.ANNOTATION_GPU_ALLOCATED))


def _dljob_profile(
    obj: Mapping[str, Any], jname: str, known: Mapping[str, GraphProfile]
) -> GraphProfile | None:
    if jname in known:
        return known[jname]
    try:
        source = parse_dljob_spec(obj.get("spec")).profile
    except ValidationError:
        return None
    return graph_profile(source) if isinstance(source, InlineProfile) else None


def _predict_or_assume(
    predictor: Predictor | None,
    profile: GraphProfile | None,
    shares: list[GpuShare],
    state: ClusterState,
) -> ResourcePrediction:
    if predictor is not None and profile is not None and profile.features and state.models:
        model = state.models[0]
        for s in shares:
            try:
                model = state.gpu_model[state.gpu_id(s.node, s.gpu_index)]
                break
            except ValidationError:
                continue
        try:
            return predictor.predict(profile, model)
        except (HorusError, ValueError, KeyError) as exc:
            log.debug("prediction for a resident failed (%s); assuming its share", exc)
    return assumed_prediction(shares)


def add_pod_group(
    live: LiveState,
    jname: str,
    members: list[tuple[Mapping[str, Any], GpuAssignment]],
    predictor: Predictor | None,
    known: Mapping[str, GraphProfile],
) -> None:
    # Two pods claiming the same replica (should never happen): count both, they both hold GPUs.
    shares: list[GpuShare] = []
    pod_names: list[str] = []
    prediction: ResourcePrediction | None = None
    profile: GraphProfile | None = known.get(jname)
    submit = 0.0
    for pod, assignment in members:
        shares.extend(shares_of(assignment))
        pod_names.append(key_of(pod))
        text = annotations_of(pod).get(c.ANNOTATION_PREDICTED)
        if prediction is None and text:
            try:
                prediction = resource_prediction(decode_predicted(text, f"pod {key_of(pod)}"))
            except ValidationError as exc:
                live.problems.append(f"{exc} (the share is assumed fully used)")
        if profile is None:
            profile = pod_profile(pod)
        submit = max(submit, timestamp(meta_of(pod).get("creationTimestamp")))
    # Drop shares on GPUs the state does not have (node gone, NotReady, cordoned): their
    # capacity is not offered to anyone either, so nothing can be over-committed by it.
    kept = [s for s in shares if s.node in live.state.node_set]
    if not kept:
        return
    if prediction is None:
        prediction = _predict_or_assume(predictor, profile, kept, live.state)
    request = JobRequest(
        name=jname,
        profile=profile or unknown_profile(UNKNOWN_KIND),
        replicas=len(members),
        gpus_per_replica=max(1, len(kept) // len(members)),
        core_percent=kept[0].core_percent,
        memory_mib=kept[0].memory_mib,
        submit_time=submit,
        prediction=prediction,
        kind="" if profile is not None else UNKNOWN_KIND,
    )
    add_resident(live, request, kept, prediction, "pods", tuple(pod_names), ", ".join(pod_names))
