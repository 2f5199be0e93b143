"""The scheduler's :class:`~horus.scheduler.ClusterState`, rebuilt from the live API objects.

Why rebuild every time instead of keeping state in memory: the operator may be killed at any
instant, a second replica may take over, and the scheduler extender places plain pods behind
our back. The only truth that survives all of that is what the apiserver holds, so every
scheduling pass starts from it:

* **GPUs** — nodes carrying ``horus.io/gpu-inventory`` (on the DRA path: the GPUs the Horus
  driver's ResourceSlice of the node publishes); a node that is NotReady,
  unschedulable or being deleted contributes no GPUs, and Unhealthy GPUs are kept but marked
  unhealthy (the scheduler never places on them, yet shares already there are still counted).
* **Shares already committed**, from two sources, de-duplicated:

  (a) each DLJob's ``status.placements`` — the *durable* record, written before its pods
      exist, so a share is counted even when the operator died before creating the pods;
  (b) every non-terminal pod with a ``horus.io/gpu-assignment`` annotation — plain pods placed
      by the scheduler extender, and the pods of DLJobs that no longer have a live record
      (the job was deleted, or already finished while some pods still run).

  A DLJob pod whose job has live placements is *not* counted again (dedup by job); plain
  pods are keyed by pod.

  (c) on the DRA path, every allocated ResourceClaim of the ``gpu.horus.io``
      driver — the kube-scheduler's allocation (``status.allocation``, which tenants cannot
      write: device, ``consumedCapacity``) — unless Horus made it for a DLJob whose record
      was counted in (a), on that record's GPUs (its signed text,
      :func:`horus.operator.claimcount.claim_owner`; never an ``ownerReferences`` entry, which
      a tenant writes). So claims Horus did not make (a tenant's, a plain pod's template
      claim) count. A claim Horus cannot read as a share counts as the whole of each GPU it
      names and overtakes nobody (:func:`horus.operator.claimcount.claim_holding`). A
      readable claim that does not fit beside the records overtook a decision whose own claim
      was not allocated yet and none of whose pods runs: that DLJob's record is taken out of
      the state (its allocated claims count instead) and named in
      :attr:`LiveState.overtaken`, so the operator re-places the job — the kube-scheduler
      never over-commits, Horus must not either. A decision with a running pod is kept
      (:attr:`LiveState.held_over`) and the claim counted up to each GPU's capacity;
  (d) on the DRA path, every claim Horus made for a plain pod's converted ``horus.io/gpu-*``
      request (:mod:`horus.operator.plain_pod_claims`; :func:`made_for_pod`, while that pod waits)
      that is not allocated yet: Horus' decision, pinned to one GPU with the share, counted
      like a record (and, like one, named in :attr:`LiveState.overtaken` when an allocated
      claim takes its capacity first).

  A pod whose signature does not verify (any more) but that the node's device plugin has
  allocated (``horus.io/gpu-allocated``, which only the node identity may write) is still
  counted, with the share it claims: it verified when it was allocated, its containers hold
  the GPU, and losing or revoking a key must never un-count a share in use. A pod
  that was never allocated holds nothing and is not counted (a replay of a signed pod).

Everything here is a pure function of lists of plain ``dict`` objects (the apiserver's JSON,
camelCase), so it is unit-tested without a cluster; the placers fetch them. The scheduler
extender uses the same module.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from horus.api.assignment import GpuAssignment, decode_predicted
from horus.api.dljob import (
    DLJobStatus,
    InlineProfile,
    parse_dljob_spec,
    parse_dljob_status,
)
from horus.api.inventory import GpuDevice, decode_inventory
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import timestamp
from horus.common.errors import HorusError, ValidationError
from horus.common.memo import Memo
from horus.node.claims import slice_gpus
from horus.node.identities import Registry, contested, split_gpus
from horus.operator.claimcount import (
    claim_holding,
    claim_job_name,
    claim_owner,
    claim_shares,
    converted_claim_name,
    converted_decision,
    made_for_pod,
    waiting_pods,
)
from horus.operator.podspec import owner_uid
from horus.operator.records import (
    annotations_of,
    assumed_prediction,
    dljob_record_trusted,
    key_of,
    meta_of,
    node_exclusion,
    pod_assignment_trusted,
    pod_profile,
    resource_prediction,
    shares_of,
    unknown_profile,
)
from horus.predictor.interface import GraphProfile, Predictor, ResourcePrediction
from horus.predictor.schema import graph_profile
from horus.scheduler import ClusterState, GpuShare, JobRequest, job_kind

log = logging.getLogger(__name__)

__all__ = [
    "LiveObjects",
    "LiveState",
    "Resident",
    "build_cluster_state",
    "build_live_state",
    "claim_job_name",
    "claim_shares",
    "converted_claim_name",
    "dljob_job_name",
    "dljob_record_trusted",
    "graph_profile",
    "made_for_pod",
    "node_exclusion",
    "pod_assignment_trusted",
    "pod_job_name",
    "resource_prediction",
    "slices_by_node",
]

TERMINAL_POD_PHASES = ("Succeeded", "Failed")
#: Parsed DLJob statuses by the status object itself and its job's resourceVersion: the
#: watch-fed view hands every pass the same objects until they change, so only a changed job
#: is parsed again (horus.common.memo).
_STATUS: Memo[DLJobStatus] = Memo(limit=40_000)
TERMINAL_JOB_PHASES = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)
UNKNOWN_KIND = "unknown"
#: The live state's name for the placements a moving job leaves (``<job>`` + this).
MOVING_SUFFIX = "#moving-from"


def dljob_job_name(namespace: str, name: str) -> str:
    """The scheduler's name for DLJob ``namespace/name`` (its key in the ClusterState)."""
    return f"{namespace}/{name}"


def pod_job_name(namespace: str, name: str) -> str:
    """The scheduler's name for a plain pod (never equal to a DLJob's name: it has a prefix)."""
    return f"pod:{namespace}/{name}"


@dataclass(frozen=True)
class Resident:
    """One job (DLJob or plain pod) holding GPU shares in the live cluster."""

    name: str  # dljob_job_name / pod_job_name
    source: str  # "dljob-status" | "pods"
    request: JobRequest
    shares: tuple[GpuShare, ...]
    prediction: ResourcePrediction
    pods: tuple[str, ...] = ()  # "ns/name" of the pods the shares were read from


@dataclass
class LiveState:
    """A ClusterState plus what went into it, for the operator, the extender and tests."""

    state: ClusterState
    residents: dict[str, Resident] = field(default_factory=dict)
    #: node → why it contributes no GPUs (NotReady, unschedulable, bad inventory, …).
    excluded_nodes: dict[str, str] = field(default_factory=dict)
    #: Records that could not be counted, each a sentence naming the object and the cause.
    problems: list[str] = field(default_factory=list)
    #: Pair speeds the node agents measured (DLJob ``status.observed.pairs``, finished jobs
    #: too) as (job kind, neighbour kind, GPU model, speed, error), for
    #: ``Scheduler.observe_pair``; error is the reading's own (None: an agent that reports
    #: no error).
    observed_pairs: list[tuple[str, str, str, float, float | None]] = field(default_factory=list)
    #: DLJobs (``ns/name``) whose recorded decision an allocated claim overtook (DRA path):
    #: why, one sentence naming the claim and the GPU. Their record is not in :attr:`state`.
    overtaken: dict[str, str] = field(default_factory=dict)
    #: DLJobs (``ns/name``) a claim took capacity from before their claim there was allocated,
    #: kept because some of their pods run (nothing that runs is deleted for another's
    #: claim): why, one sentence. Their record stays in :attr:`state`, the claim counted up to
    #: each GPU's capacity.
    held_over: dict[str, str] = field(default_factory=dict)
    #: For each job in :attr:`overtaken`: the GPUs (UUIDs) of its decision the claim took.
    overtaken_on: dict[str, frozenset[str]] = field(default_factory=dict)

    def profiles(self) -> dict[str, JobRequest]:
        """Resident requests by kind (hand each to ``Scheduler.remember`` for pair speeds)."""
        return {r.request.kind: r.request for r in self.residents.values()}


# --- the builder -------------------------------------------------------------------------------


def build_live_state(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    dljobs: Iterable[Mapping[str, Any]],
    predictor: Predictor | None = None,
    profiles: Mapping[str, GraphProfile] | None = None,
    keys: KeyRing | None = None,
    distrusted: Collection[str] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    slices: Iterable[Mapping[str, Any]] | None = None,
    identities: Registry | None = None,
) -> LiveState:
    """Build the live cluster state (see the module docstring for the rules).

    ``claims``: the cluster's ResourceClaims on the DRA path (rule (c)); none elsewhere.
    ``slices``: on the DRA path, the ResourceSlices the GPUs are read from (the Horus
    driver's, one per node: :func:`horus.node.claims.slice_gpus`) instead of the node
    inventory annotation, which only the device plugin writes; None elsewhere.
    ``identities``: the GPU identity registry (:func:`_gpu_nodes`); None counts every GPU a
    node publishes as its own (tests, tools).

    ``distrusted``: DLJobs (``ns/name``) whose record the caller does not trust although it
    is signed (a rollback): counted from their pods, as an unsigned record is.

    With ``keys``, only signed records count: a DLJob placement record whose signature does
    not verify is ignored (its job's pods are counted instead, from their own signed
    assignments), and so is a pod whose assignment signature does not verify — the device
    plugin refuses such a pod any GPU, so it holds none. Without ``keys`` (tests, tools)
    every record is taken at its word.

    ``predictor`` sizes a resident that carries no prediction but whose profile is known;
    without one, such a resident is assumed to use exactly its share. ``profiles`` maps
    DLJob names (``ns/name``) to profiles resolved elsewhere (e.g. from a ConfigMap), used for
    DLJobs with a ``configMapRef`` profile so pair speeds can still be predicted.
    Records that cannot be counted are listed in :attr:`LiveState.problems`, never raised:
    one bad object must not stop the whole cluster from being scheduled.
    """
    live = _gpu_nodes(nodes, slices, identities)
    pods = list(pods)
    known = dict(profiles or {})
    recorded = _add_dljob_records(live, dljobs, predictor, known, keys, distrusted)
    dra = slices is not None
    for jname, members in _pod_groups(live, pods, recorded, keys, dra).items():
        _add_pod_group(live, jname, members, predictor, known)
    if claims:
        uids = {
            dljob_job_name(
                str(meta_of(o).get("namespace", "default")), str(meta_of(o).get("name"))
            ): str(meta_of(o).get("uid", ""))
            for o in dljobs
        }
        by_name = {j: uids.get(j, "") for j in recorded}
        running = _running_jobs(pods, by_name)
        _add_claims(live, claims, by_name, waiting_pods(pods), running, keys)
    return live


# --- (c) ResourceClaims: the kube-scheduler's allocations ------------------------------------


def _add_claims(
    live: LiveState,
    claims: Iterable[Mapping[str, Any]],
    recorded: Mapping[str, str],
    waiting: Mapping[tuple[str, str], str] | None = None,
    running: Collection[str] = (),
    keys: KeyRing | None = None,
) -> None:
    """(c): allocated claims not already counted by their DLJob's record (module docstring).

    ``recorded``: the DLJobs whose record was counted, by name → UID; ``running``: those of
    them with a replica pod bound to a node (its claims allocated: the kube-scheduler binds
    only then), whose decision no claim overtakes."""
    by_uid = {uid: jname for jname, uid in recorded.items() if uid}
    covered: dict[str, set[str]] = {jname: set() for jname in recorded}
    for jname in recorded:
        for key in (jname, jname + MOVING_SUFFIX):
            rec = live.residents.get(key)
            if rec is not None:
                covered[jname].update(s.gpu_uuid for s in rec.shares)
    own: dict[str, list[tuple[str, list[GpuShare]]]] = {}  # recorded job → its allocated claims
    readable: list[tuple[str, list[GpuShare]]] = []
    odd: list[tuple[str, list[GpuShare], str]] = []
    by_uuid = {str(u): g for g, u in enumerate(live.state.gpu_uuid)}
    for claim in claims:
        decided = converted_decision(live.state, by_uuid, claim)
        if decided is not None and _for_waiting_pod(claim, waiting or {}):
            _add_converted(live, key_of(claim), decided)
            continue
        held = claim_holding(live.state, claim)
        if not held.shares:
            if held.odd is not None:
                live.problems.append(f"ResourceClaim {key_of(claim)}: {held.odd}")
            continue
        owner = claim_owner(claim, by_uid, keys)
        if (
            owner
            and held.odd is None
            and {s.gpu_uuid for s in held.shares} <= covered.get(owner, set())
        ):
            own.setdefault(owner, []).append((key_of(claim), held.shares))
        elif held.odd is not None:
            odd.append((key_of(claim), held.shares, held.odd))
        else:
            readable.append((key_of(claim), held.shares))
    for name, shares in readable:
        _add_claim(live, name, shares, own, running)
    for name, shares, why in odd:  # counted at the most they could take, never an overtake
        _add_claim(live, name, shares, own, running, why)


def _add_claim(
    live: LiveState,
    name: str,
    shares: list[GpuShare],
    own: Mapping[str, list[tuple[str, list[GpuShare]]]],
    running: Collection[str] = (),
    odd: str | None = None,
) -> None:
    """Count one allocated claim. While a readable one does not fit, a recorded decision on
    its GPUs whose claim there is not allocated yet and none of whose pods runs was overtaken:
    its record goes out of the state. Otherwise (an odd claim, or the decision it crosses has
    running pods) it is counted up to each GPU's capacity, and nobody's pods go for it."""
    ns, _, cname = name.partition("/")
    prediction = assumed_prediction(shares)
    request = JobRequest(
        name=claim_job_name(ns, cname),
        profile=unknown_profile(UNKNOWN_KIND),
        replicas=1,
        gpus_per_replica=len(shares),
        core_percent=shares[0].core_percent,
        memory_mib=shares[0].memory_mib,
        prediction=prediction,
        kind=UNKNOWN_KIND,
    )
    uuids = {s.gpu_uuid for s in shares}
    while True:
        try:
            live.state.add_job(request, shares, prediction)
        except ValidationError as exc:
            victim = _overtaken_record(live, uuids, own, running) if odd is None else None
            if victim is None:
                _add_over(live, name, request, shares, prediction, odd or str(exc), own, running)
                return
            where = ", ".join(sorted(f"{s.node}/gpu-{s.gpu_index}" for s in shares))
            live.overtaken[victim] = (
                f"ResourceClaim {name}, allocated by the kube-scheduler on {where}, took the "
                "capacity this job's decision was given before its own claim was allocated"
            )
            lost = live.residents[victim].shares if victim in live.residents else ()
            live.overtaken_on[victim] = frozenset(
                s.gpu_uuid for s in lost if s.gpu_uuid in uuids
            ) | live.overtaken_on.get(victim, frozenset())
            live.state.release(victim)
            live.residents.pop(victim, None)
            for oname, oshares in own.get(victim, []):  # what it holds already still counts
                _add_claim(live, oname, oshares, own, running)
            continue
        live.residents[request.name] = Resident(
            request.name, "claims", request, tuple(shares), prediction
        )
        if odd is not None:
            live.problems.append(f"ResourceClaim {name}: {odd}; counted as the whole GPU")
        return


def _add_over(
    live: LiveState,
    name: str,
    request: JobRequest,
    shares: list[GpuShare],
    prediction: ResourcePrediction,
    why: str,
    own: Mapping[str, list[tuple[str, list[GpuShare]]]],
    running: Collection[str],
) -> None:
    """A claim that does not fit and overtook no decision: the kube-scheduler allocated it (or
    does not count it: adminAccess), so its GPUs are full as far as Horus places — counted up
    to what each GPU has left, the rest named as over-commitment. The decisions it crosses
    that have running pods keep them (:attr:`LiveState.held_over`)."""
    st = live.state
    kept: list[GpuShare] = []
    over: list[str] = []
    for s in shares:
        g = st.gpu_id(s.node, s.gpu_index)
        core = min(s.core_percent, max(0, c.GPU_CORE_UNITS_PER_GPU - int(st.core_used[g])))
        mib = min(s.memory_mib, max(0, int(st.mem_total[g]) - int(st.mem_used[g])))
        if (core, mib) != (s.core_percent, s.memory_mib):
            over.append(
                f"{s.node}/gpu-{s.gpu_index} by {s.core_percent - core} % and "
                f"{s.memory_mib - mib} MiB"
            )
        if core or mib:
            kept.append(GpuShare(s.node, s.gpu_index, s.gpu_uuid, core, mib))
    sentence = (
        f"ResourceClaim {name} ({why}) is allocated beyond what Horus counts free: "
        f"over {', '.join(over) or 'nothing'}; counted up to each GPU's capacity, no pod is "
        "deleted for it"
    )
    live.problems.append(sentence)
    uuids = {s.gpu_uuid for s in shares}
    for jname in _crossed_records(live, uuids, own):
        if jname in running:
            live.held_over[jname] = sentence
    if kept:
        live.state.add_job(
            dataclasses.replace(request, gpus_per_replica=len(kept)), kept, prediction
        )
        live.residents[request.name] = Resident(
            request.name, "claims", request, tuple(kept), prediction
        )


def _for_waiting_pod(claim: Mapping[str, Any], waiting: Mapping[tuple[str, str], str]) -> bool:
    """Rule (d) counts a converted claim only while the pod Horus made it for waits for it (a
    label or owner reference anyone may write proves nothing: without its pod, such a claim
    holds nothing; :func:`made_for_pod`)."""
    meta = meta_of(claim)
    uid = waiting.get((str(meta.get("namespace", "default")), str(meta.get("name", ""))))
    return made_for_pod(claim, uid or "")


def _add_converted(live: LiveState, name: str, share: GpuShare) -> None:
    ns, _, cname = name.partition("/")
    prediction = assumed_prediction([share])
    request = JobRequest(
        name=claim_job_name(ns, cname),
        profile=unknown_profile(UNKNOWN_KIND),
        core_percent=share.core_percent,
        memory_mib=share.memory_mib,
        prediction=prediction,
        kind=UNKNOWN_KIND,
    )
    _add(live, request, [share], prediction, "converted", (), f"ResourceClaim {name}")


def _crossed_records(
    live: LiveState,
    uuids: Collection[str],
    own: Mapping[str, list[tuple[str, list[GpuShare]]]],
) -> list[str]:
    """The DLJob records (and converted pods' unallocated claims) on one of ``uuids`` whose
    claim on that GPU is not allocated, in name order."""
    out = []
    for jname, resident in sorted(live.residents.items()):
        if resident.source not in ("dljob-status", "converted") or jname.endswith(MOVING_SUFFIX):
            continue
        held = {s.gpu_uuid for _, shares in own.get(jname, []) for s in shares}
        if any(s.gpu_uuid in uuids and s.gpu_uuid not in held for s in resident.shares):
            out.append(jname)
    return out


def _overtaken_record(
    live: LiveState,
    uuids: Collection[str],
    own: Mapping[str, list[tuple[str, list[GpuShare]]]],
    running: Collection[str] = (),
) -> str | None:
    """A decision on one of ``uuids`` whose claim there is not allocated and none of whose
    pods runs (re-placing it deletes nothing that runs)."""
    for jname in _crossed_records(live, uuids, own):
        if jname not in running:
            return jname
    return None


def _running_jobs(pods: Iterable[Mapping[str, Any]], recorded: Mapping[str, str]) -> set[str]:
    """The recorded DLJobs with a replica pod Horus made bound to a node and not finished."""
    by_uid = {uid: jname for jname, uid in recorded.items() if uid}
    out: set[str] = set()
    for pod in pods:
        if not (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        jname = by_uid.get(owner_uid(pod) or "")
        if jname is not None:
            out.add(jname)
    return out


def slices_by_node(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The Horus driver's ResourceSlices grouped by ``spec.nodeName`` (one pass over them)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("driver") == c.DRA_DRIVER_NAME:
            out.setdefault(str(spec.get("nodeName") or ""), []).append(item)
    return out


def _gpu_nodes(
    nodes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]] | None = None,
    identities: Registry | None = None,
) -> LiveState:
    """The GPUs of the nodes that may receive work (see :func:`node_exclusion`): from the
    inventory annotation, or on the DRA path from the node's ResourceSlices.

    With the GPU identity registry (``identities``, :mod:`horus.node.identities`), a GPU a
    node publishes that is registered to another node is ignored on the node that publishes
    it (a problem names both); the node it is registered to keeps it. A UUID that several
    nodes publish and none is registered to is ignored on all of them (:func:`_tolerant_state`):
    no node leaves the view because another repeats its GPUs."""
    live_nodes: dict[str, list[GpuDevice]] = {}
    excluded: dict[str, str] = {}
    problems: list[str] = list(identities.problems) if identities is not None else []
    grouped = slices_by_node(slices) if slices is not None else None
    for node in nodes:
        name = str(meta_of(node).get("name", ""))
        if grouped is not None:
            gpus = slice_gpus(grouped.get(name, []), name) if name else []
            if not gpus:
                continue
            why = node_exclusion(node)
            if why is not None:
                excluded[name] = why
            else:
                kept = _own_gpus(identities, name, gpus, excluded, problems)
                if name not in excluded:
                    live_nodes[name] = kept
            continue
        text = annotations_of(node).get(c.ANNOTATION_GPU_INVENTORY)
        if not name or text is None:
            continue
        why = node_exclusion(node)
        if why is not None:
            excluded[name] = why
            continue
        try:
            gpus = decode_inventory(text, f"node {name} {c.ANNOTATION_GPU_INVENTORY}")
        except ValidationError as exc:
            excluded[name] = f"unreadable GPU inventory: {exc}"
            problems.append(str(exc))
            continue
        kept = _own_gpus(identities, name, gpus, excluded, problems)
        if name not in excluded:
            live_nodes[name] = kept
    live_nodes = dict(sorted(live_nodes.items()))
    try:
        state = ClusterState.from_inventory(live_nodes)
    except ValidationError as exc:  # e.g. a UUID on two nodes: leave it out on each
        problems.append(f"cluster inventory is inconsistent: {exc}")
        state = _tolerant_state(live_nodes, excluded, problems)
    return LiveState(state=state, excluded_nodes=excluded, problems=problems)


def _own_gpus(
    identities: Registry | None,
    node: str,
    gpus: list[GpuDevice],
    excluded: dict[str, str],
    problems: list[str],
) -> list[GpuDevice]:
    """``node``'s GPUs less those registered to another node (each named in ``problems``);
    a node left with none is excluded, saying why."""
    kept, foreign = split_gpus(identities, node, gpus)
    problems.extend(f.why for f in foreign)
    if foreign and not kept:
        excluded[node] = "every GPU it publishes is registered to another node"
    return kept


def _add_dljob_records(
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
        if _add(live, request, shares, prediction, "dljob-status", (), f"DLJob {jname}"):
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
    _add(live, leaving, old, prediction, "dljob-status", (), f"DLJob {request.name} (moving)")


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


def _pod_groups(
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


def _add_pod_group(
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
    _add(live, request, kept, prediction, "pods", tuple(pod_names), ", ".join(pod_names))


def _add(
    live: LiveState,
    request: JobRequest,
    shares: list[GpuShare],
    prediction: ResourcePrediction,
    source: str,
    pods: tuple[str, ...],
    what: str,
) -> bool:
    # Only shares on GPUs the state offers are counted: a node that is NotReady, cordoned or
    # deleted (autoscaler scale-down, node replacement) contributes no capacity, so its shares
    # need no counting — but the job's shares on *other* nodes still hold those GPUs and must
    # be counted, never dropped with the vanished node's.
    kept = [s for s in shares if s.node in live.state.node_set]
    if not kept:
        return source == "dljob-status"  # recorded on nodes that are gone: still "recorded"
    try:
        live.state.add_job(request, kept, prediction)
    except ValidationError as exc:
        live.problems.append(f"{what}: share not counted: {exc}")
        return False
    live.residents[request.name] = Resident(
        request.name, source, request, tuple(kept), prediction, pods
    )
    return True


def _tolerant_state(
    nodes: dict[str, list[GpuDevice]], excluded: dict[str, str], problems: list[str]
) -> ClusterState:
    """The state without the GPUs whose UUID more than one node (or one node twice) publishes:
    which of them is the GPU's is not known (none is registered: :func:`_own_gpus` took out
    those that are), so the GPU is counted on none of them, and every node keeps the rest."""
    repeated = contested(nodes)
    for uuid, where in sorted(repeated.items()):
        problems.append(
            f"GPU {uuid} is published by nodes {', '.join(where)}: left out on each until "
            "one node alone publishes it"
        )
    good: dict[str, list[GpuDevice]] = {}
    for name, gpus in nodes.items():
        kept = [g for g in gpus if g.uuid not in repeated]
        if kept or not gpus:
            good[name] = kept
        else:
            excluded[name] = "its GPU UUIDs repeat those of another node"
    return ClusterState.from_inventory(good)


def build_cluster_state(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    dljobs: Iterable[Mapping[str, Any]],
    predictor: Predictor | None = None,
) -> ClusterState:
    """Just the :class:`ClusterState` of :func:`build_live_state`."""
    return build_live_state(nodes, pods, dljobs, predictor).state


# --- fetching from the API ---------------------------------------------------------------------


@dataclass(frozen=True)
class LiveObjects:
    """One consistent-enough listing of what :func:`build_live_state` needs (raw JSON dicts)."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    dljobs: list[dict[str, Any]]
    #: The GPU identity registry as the operator last read it (:func:`_gpu_nodes`); None: no
    #: registry (tests, tools, the extender), every GPU a node publishes counts as its own.
    identities: Registry | None = None
