"""The DRA path's ResourceClaims counted into the live state, and the decisions they overtake.

Rules (c) and (d) of :mod:`horus.operator.livestate`. How one claim reads is
:mod:`horus.operator.claimcount`; here each claim is counted beside the records already in the
state, and a readable claim that does not fit takes out a decision it overtook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.claimcount import (
    claim_holding,
    claim_job_name,
    claim_owner,
    converted_decision,
    made_for_pod,
)
from horus.operator.object_reads import (
    assumed_prediction,
    key_of,
    meta_of,
    unknown_profile,
)
from horus.operator.podspec import owner_uid
from horus.operator.residents import (
    MOVING_SUFFIX,
    TERMINAL_POD_PHASES,
    UNKNOWN_KIND,
    LiveState,
    Resident,
    add_resident,
)
from horus.predictor.interface import ResourcePrediction
from horus.scheduler import GpuShare, JobRequest

__all__ = ["add_claims", "running_jobs"]


def add_claims(
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
    add_resident(live, request, [share], prediction, "converted", (), f"ResourceClaim {name}")


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


def running_jobs(pods: Iterable[Mapping[str, Any]], recorded: Mapping[str, str]) -> set[str]:
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
