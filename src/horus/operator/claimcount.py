"""How one ResourceClaim of the ``gpu.horus.io`` driver reads for the live state (DRA path).

Pure functions of the apiserver's JSON, used by :mod:`horus.operator.livestate` (rules (c) and
(d) of its module docstring) and the commit path. Two questions are answered here:

* **what a claim holds** (:func:`claim_holding`): the kube-scheduler's allocation
  (``status.allocation``, which tenants cannot write) as GPU shares. A claim Horus cannot read
  as a share — two results on one GPU (the allocator may satisfy two requests of one claim
  from one shareable device), an ``adminAccess`` result (the kube-scheduler does not count it
  against the device's capacity at all), a consumed amount that does not parse, a device the
  node does not publish — holds, as far as Horus counts, the most it could take: the whole of
  every GPU it names. Such a claim is *odd*: counted, never read as having overtaken anybody's
  decision (:func:`horus.operator.livestate.build_live_state`);
* **whom a claim belongs to** (:func:`claim_owner`): a claim is a DLJob's — deduplicated
  against that job's record — only if Horus made it, proven by its signed text
  (:func:`horus.operator.object_reads.horus_claim_job_uid`), never by ``ownerReferences``, which
  anyone who may edit claims in the namespace writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from horus.api.resources import parse_quantity
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.object_reads import annotations_of, horus_claim_job_uid, key_of, meta_of
from horus.scheduler import ClusterState, GpuShare

__all__ = [
    "ClaimHolding",
    "claim_holding",
    "claim_job_name",
    "claim_owner",
    "claim_shares",
    "converted_claim_name",
    "converted_decision",
    "made_for_pod",
    "status_claim",
    "waiting_pods",
]

_TERMINAL_POD_PHASES = ("Succeeded", "Failed")
_DOMAIN_CORES = f"{c.DRA_DRIVER_NAME}/{c.DRA_CAPACITY_CORES}"
_DOMAIN_MEMORY = f"{c.DRA_DRIVER_NAME}/{c.DRA_CAPACITY_MEMORY}"


def claim_job_name(namespace: str, name: str) -> str:
    """The scheduler's name for a ResourceClaim counted on its own (never a DLJob's name)."""
    return f"claim:{namespace}/{name}"


@dataclass
class ClaimHolding:
    """What an allocated claim holds on the state's GPUs."""

    shares: list[GpuShare] = field(default_factory=list)
    #: Why Horus cannot read the claim as a share (None: it can): its shares are then the
    #: whole of each GPU it names, and it never counts as having overtaken a decision.
    odd: str | None = None


def claim_holding(state: ClusterState, claim: Mapping[str, Any]) -> ClaimHolding:
    """The GPU shares an allocated claim holds: each result of the ``gpu.horus.io`` driver on
    a GPU the state has, with what it consumed (the whole GPU when it records nothing).
    Empty for a claim not allocated (it holds nothing yet) or only on other drivers' devices
    or on nodes the state does not offer (nothing can be over-committed there). A result Horus
    cannot read makes the claim odd (:class:`ClaimHolding`) and never loses the rest."""
    alloc = (claim.get("status") or {}).get("allocation")
    results = (
        ((alloc or {}).get("devices") or {}).get("results") if isinstance(alloc, dict) else None
    )
    out = ClaimHolding()
    odd: list[str] = []
    seen: set[int] = set()
    for i, res in enumerate(results if isinstance(results, list) else []):
        if not isinstance(res, Mapping) or res.get("driver") != c.DRA_DRIVER_NAME:
            continue
        node, device = str(res.get("pool") or ""), str(res.get("device") or "")
        if node not in state.node_set:
            continue
        index = device.removeprefix(c.DRA_DEVICE_PREFIX)
        try:
            if not index.isdigit() or len(index) > 4:
                raise ValidationError(device)
            g = state.gpu_id(node, int(index))
        except ValidationError:
            odd.append(f"result {i} names {node}/{device[:64]}, not a GPU the node offers")
            continue
        if g in seen:
            odd.append(f"result {i} is a second share of {node}/{device} (two requests on one GPU)")
            continue
        seen.add(g)
        if res.get("adminAccess") is True:
            odd.append(f"result {i} on {node}/{device} is adminAccess")
        try:
            core, mib = _consumed_share(state, g, claim, i, res)
        except ValidationError as exc:
            odd.append(str(exc))
            core, mib = c.GPU_CORE_UNITS_PER_GPU, int(state.mem_total[g])
        out.shares.append(GpuShare(node, int(index), state.gpu_uuid[g], core, mib))
    if odd:
        out.odd = "; ".join(odd)
        out.shares = [
            GpuShare(s.node, s.gpu_index, s.gpu_uuid, c.GPU_CORE_UNITS_PER_GPU, _whole(state, s))
            for s in out.shares
        ]
    return out


def _whole(state: ClusterState, share: GpuShare) -> int:
    return int(state.mem_total[state.gpu_id(share.node, share.gpu_index)])


def _consumed_share(
    state: ClusterState, g: int, claim: Mapping[str, Any], i: int, res: Mapping[str, Any]
) -> tuple[int, int]:
    consumed = res.get("consumedCapacity")
    consumed = consumed if isinstance(consumed, Mapping) else {}
    cores = consumed.get(c.DRA_CAPACITY_CORES, consumed.get(_DOMAIN_CORES))
    memory = consumed.get(c.DRA_CAPACITY_MEMORY, consumed.get(_DOMAIN_MEMORY))
    core = (
        c.GPU_CORE_UNITS_PER_GPU
        if cores is None
        else _consumed(cores, 1, claim, i, c.DRA_CAPACITY_CORES)
    )
    mib = (
        int(state.mem_total[g])
        if memory is None
        else _consumed(memory, c.MIB, claim, i, c.DRA_CAPACITY_MEMORY)
    )
    if not 0 < core <= c.GPU_CORE_UNITS_PER_GPU or not 0 < mib <= int(state.mem_total[g]):
        raise ValidationError(
            f"ResourceClaim {key_of(claim)} result {i} consumed {core} % and {mib} MiB, "
            "outside the GPU"
        )
    return core, mib


def claim_shares(state: ClusterState, claim: Mapping[str, Any]) -> list[GpuShare]:
    """The shares of :func:`claim_holding`; ``ValidationError`` naming the cause for a claim
    Horus cannot read as a share (callers that count use :func:`claim_holding`)."""
    held = claim_holding(state, claim)
    if held.odd is not None:
        raise ValidationError(f"ResourceClaim {key_of(claim)}: {held.odd}")
    return held.shares


def _consumed(value: Any, unit: int, claim: Mapping[str, Any], i: int, what: str) -> int:
    """A consumed quantity in ``unit`` (1: as is; MiB: rounded up). What the apiserver
    writes for the slice's capacities — plain digits, ``<n>Mi`` — is read directly (a pass
    reads every claim; ``parse_quantity`` is 5x slower), anything else by ``parse_quantity``."""
    if isinstance(value, str) and len(value) <= 12:
        if value.isdigit():
            return -(-int(value) // unit)
        if unit == c.MIB and value[-2:] in ("Mi", "Gi") and value[:-2].isdigit():
            return int(value[:-2]) * (1 if value[-2:] == "Mi" else 1024)
    where = f"ResourceClaim {key_of(claim)} result {i} {what}"
    return -(-parse_quantity(value, where) // unit)


def claim_owner(
    claim: Mapping[str, Any], recorded_by_uid: Mapping[str, str], keys: KeyRing | None
) -> str:
    """``ns/name`` of the recorded DLJob Horus made ``claim`` for (``recorded_by_uid``: job UID
    → name, the jobs whose record the state counts), or "" — a tenant's claim, whatever owner
    it names (:func:`horus.operator.object_reads.horus_claim_job_uid`)."""
    uid = horus_claim_job_uid(claim, keys)
    return recorded_by_uid.get(uid, "") if uid else ""


def converted_claim_name(pod: Mapping[str, Any]) -> str | None:
    """The claim the admission policy made ``pod`` use for its ``horus.io/gpu-*`` requests
    (:mod:`horus.operator.plain_pod_claims`), or None for any other pod: the claim it names (a pod
    named at creation), or, for the placeholder template (a ``generateName`` pod),
    ``horus-gpu-<pod UID>`` — the name Horus gives the claim it makes for it — unless the
    pod's status already records another claim for the entry (one the resourceclaim
    controller made from a template of that name someone created: not Horus' to decide).
    For Kueue's template (a pod under Kueue's pod integration) it is ``horus-gpu-<pod UID>``
    whatever the status records: the claim made from that template is a placeholder Horus
    replaces (:mod:`horus.operator.placeholder_claims`, which also tells one that is not)."""
    meta = pod.get("metadata") or {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, Mapping) or entry.get("name") != c.CONVERTED_CLAIM_ENTRY:
            continue
        name = entry.get("resourceClaimName")
        if isinstance(name, str) and name.startswith(c.CONVERTED_CLAIM_PREFIX):
            return name
        uid = str(meta.get("uid") or "")
        template = entry.get("resourceClaimTemplateName")
        if template not in (c.CONVERTED_CLAIM_TEMPLATE, c.KUEUE_CLAIM_TEMPLATE) or not uid:
            return None
        ours = c.CONVERTED_CLAIM_PREFIX + uid
        if template == c.KUEUE_CLAIM_TEMPLATE:
            return ours
        status = _status_entry(pod)
        return ours if status is None or status.get("resourceClaimName") == ours else None
    return None


def _status_entry(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ``status.resourceClaimStatuses`` entry for its ``horus-gpu`` claim entry."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == c.CONVERTED_CLAIM_ENTRY:
            return status
    return None


def status_claim(pod: Mapping[str, Any]) -> str | None:
    """The claim the pod's status records for its ``horus-gpu`` entry (a template entry's
    claim, recorded by the resourceclaim controller), or None."""
    status = _status_entry(pod)
    name = status.get("resourceClaimName") if status is not None else None
    return str(name) if name else None


def made_for_pod(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether Horus made ``claim`` for the converted pod ``pod_uid``: its
    ``horus.io/converted-for-pod`` annotation (only the operator may write a ``horus.io/``
    annotation on a claim: the chart's policy ``horus-claim-annotations``) names the pod, and
    the pod is its owner. A label, a name or an owner reference alone anyone with ``edit``
    in the namespace may write."""
    meta = meta_of(claim)
    if not pod_uid or annotations_of(claim).get(c.ANNOTATION_CONVERTED_FOR) != pod_uid:
        return False
    refs = meta.get("ownerReferences") or []
    return any(
        isinstance(r, Mapping) and r.get("kind") == "Pod" and r.get("uid") == pod_uid for r in refs
    )


def waiting_pods(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, converted claim) → UID of the one unbound, unfinished pod that names it."""
    out: dict[tuple[str, str], str] = {}
    for pod in pods:
        name = converted_claim_name(pod)
        if name is None or (pod.get("spec") or {}).get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in _TERMINAL_POD_PHASES:
            continue
        meta = meta_of(pod)
        out[(str(meta.get("namespace", "default")), name)] = str(meta.get("uid") or "")
    return out


def converted_decision(
    state: ClusterState, by_uuid: Mapping[str, int], claim: Mapping[str, Any]
) -> GpuShare | None:
    """Rule (d): the share an unallocated claim Horus made for a converted pod pins (its one
    request: one GPU by UUID, ``cores`` and ``memory``), or None for any other claim (the
    caller also checks Horus' annotation: :func:`made_for_pod`)."""
    meta = meta_of(claim)
    if c.LABEL_CONVERTED_POD not in (meta.get("labels") or {}):
        return None
    if (claim.get("status") or {}).get("allocation") or meta.get("deletionTimestamp"):
        return None
    spec = claim.get("spec") or {}
    requests = (spec.get("devices") or {}).get("requests") if isinstance(spec, Mapping) else None
    if not isinstance(requests, list) or len(requests) != 1:
        return None
    exactly = requests[0].get("exactly") if isinstance(requests[0], Mapping) else None
    if not isinstance(exactly, Mapping) or exactly.get("count", 1) != 1:
        return None
    selectors = exactly.get("selectors") or []
    expr = (selectors[0].get("cel") or {}).get("expression") if len(selectors) == 1 else None
    prefix = f'device.attributes["{c.DRA_DRIVER_NAME}"].{c.DRA_ATTR_UUID} == "'
    if not isinstance(expr, str) or not expr.startswith(prefix) or not expr.endswith('"'):
        return None
    uuid = expr[len(prefix) : -1]
    g = by_uuid.get(uuid)
    if g is None:
        return None  # a GPU the state does not offer: nothing to over-commit there
    try:
        caps = (exactly.get("capacity") or {}).get("requests") or {}
        cores = parse_quantity(caps.get(c.DRA_CAPACITY_CORES, "100"), "cores")
        mib = -(-parse_quantity(caps.get(c.DRA_CAPACITY_MEMORY, "0"), "memory") // c.MIB)
    except ValidationError:
        return None
    node = state.node_names[int(state.node_of[g])]
    return GpuShare(node, state.gpu_index[g], uuid, cores, mib or int(state.mem_total[g]))
