"""What the kube-scheduler allocated to one ResourceClaim on a node, read and checked: by the DRA
driver at Prepare and by the agent on the dra path (both node roles; ``horus.node``).

``NodePrepareResources`` names a claim (namespace, name, UID) and nothing else; what the claim
may have is in its ``status.allocation``, which only the scheduler (and admins) can write —
tenants cannot (``resourceclaims/status`` is not in ``edit``). Of its results, those of this
driver on this node's pool are ours: each names a device ``gpu-<index>``, the amounts of its
capacities the claim consumed (``consumedCapacity``: ``cores``, ``memory``) and the share's
``shareID``. Everything is checked before use, and a claim that does not fit this node is
refused with a sentence saying why (:class:`ClaimRefused`), never a crash:

* the claim read back has the UID the kubelet named (a claim deleted and re-created under
  the same name is another claim);
* it is allocated, and has at least one result of this driver; every such result is for this
  node's pool, names a GPU this node has (and that is healthy), and consumed whole percent of
  its cores (1..100) and whole MiB of its memory (1..the GPU's memory) — the request policies
  of the ResourceSlice make every allocation so (``docs/dra.md``);
* all of them belong to one request of the claim (a Horus share is one request; its count
  may be several GPUs) and none has ``adminAccess`` (not a share: nothing to enforce);
* it is reserved for at most one consumer (a share is one pod's).

A result without ``consumedCapacity`` was allocated the whole device (the device did not allow
multiple allocations when it was allocated): 100 % and all its memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from horus.api.assignment import GpuAssignment, GpuRef
from horus.api.inventory import GpuDevice
from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.common.errors import HorusError, ValidationError

#: Claim namespace and name: DNS subdomains (names) and labels (namespaces), bounded.
MAX_NAME = 253
#: A UID is used in file names (CDI spec, checkpoint key) and CDI device names: it must be
#: a UUID-like token of CDI-safe characters, never a path.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_DEVICE = re.compile(rf"{re.escape(c.DRA_DEVICE_PREFIX)}(0|[1-9][0-9]{{0,3}})")


class ClaimRefused(HorusError):
    """This claim cannot be prepared here; the message is what the kubelet shows."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


def check_claim_ref(namespace: str, name: str, uid: str) -> ClaimRef:
    """The claim reference of a request, every field checked (:class:`ClaimRefused`)."""
    if not namespace or len(namespace) > 63 or not _NAME.fullmatch(namespace):
        raise ClaimRefused(f"claim namespace {namespace[:80]!r} is not a namespace name")
    if not name or len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise ClaimRefused(f"claim name {name[:80]!r} is not a ResourceClaim name")
    if not _UID.fullmatch(uid):
        raise ClaimRefused(f"claim uid {uid[:80]!r} is not a UID")
    return ClaimRef(namespace, name, uid)


@dataclass(frozen=True)
class AllocatedDevice:
    """One result of this driver: the device and its share."""

    request: str
    pool: str
    device: str
    gpu: GpuDevice
    cores: int
    memory_mib: int
    share_id: str  # empty when the device was allocated whole


@dataclass(frozen=True)
class ClaimShare:
    """Everything Prepare hands out for one claim."""

    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    consumer: tuple[str, str, str] | None  # (namespace, name, uid) of the one pod it is for

    def assignment(self, node: str) -> GpuAssignment:
        """The share as a (multi-)GPU assignment, the shape the grant builder reads."""
        refs = tuple(GpuRef(d.gpu.uuid, d.gpu.index, d.cores, d.memory_mib) for d in self.devices)
        first = refs[0]
        return GpuAssignment(
            node,
            first.gpu_uuid,
            first.gpu_index,
            first.core_percent,
            first.memory_mib,
            gpus=refs if len(refs) > 1 else (),
        )


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _consumed(result: Mapping[str, Any], name: str) -> Any:
    consumed = result.get("consumedCapacity")
    if not isinstance(consumed, Mapping):
        return None
    # the capacity may be named with or without the driver's domain
    for key in (name, f"{c.DRA_DRIVER_NAME}/{name}"):
        if key in consumed:
            return consumed[key]
    return None


def _amounts(result: Mapping[str, Any], gpu: GpuDevice, where: str) -> tuple[int, int]:
    """(core percent, memory MiB) the result consumed; the whole GPU when it records none."""
    if not isinstance(result.get("consumedCapacity"), Mapping):
        return c.GPU_CORE_UNITS_PER_GPU, gpu.memory_mib
    raw_cores = _consumed(result, c.DRA_CAPACITY_CORES)
    raw_memory = _consumed(result, c.DRA_CAPACITY_MEMORY)
    try:
        cores = (
            c.GPU_CORE_UNITS_PER_GPU
            if raw_cores is None
            else parse_quantity(raw_cores, f"{where}.consumedCapacity.cores")
        )
        memory_bytes = (
            gpu.memory_mib * c.MIB
            if raw_memory is None
            else parse_quantity(raw_memory, f"{where}.consumedCapacity.memory")
        )
    except ValidationError as exc:
        raise ClaimRefused(str(exc)) from None
    if not 1 <= cores <= c.GPU_CORE_UNITS_PER_GPU:
        raise ClaimRefused(
            f"{where}: consumed {cores} cores; a share is 1..{c.GPU_CORE_UNITS_PER_GPU}"
        )
    if memory_bytes % c.MIB:
        raise ClaimRefused(
            f"{where}: consumed {memory_bytes} bytes of memory, not a whole number of MiB (the "
            "unit Horus enforces); the ResourceSlice's request policy rounds every request up "
            "to whole MiB, so this allocation was not made against it"
        )
    memory_mib = memory_bytes // c.MIB
    if not 1 <= memory_mib <= gpu.memory_mib:
        raise ClaimRefused(
            f"{where}: consumed {memory_mib} MiB of memory; GPU {gpu.index} has {gpu.memory_mib} MiB"
        )
    return cores, memory_mib


def _one_pod(ref: ClaimRef, claim: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The pod the claim is reserved for (None when the status names none yet).

    A share is one pod's: MPS limits a client, not a group of them, so pods sharing one
    claim would each get the whole share. A claim reserved for several consumers is refused.
    (A pod that joins a claim already prepared on this node is not seen here — the kubelet
    prepares a claim once per node; docs/dra.md, "Limits".)"""
    status = claim.get("status") or {}
    reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
    if not isinstance(reserved, list) or not reserved:
        return None
    if len(reserved) > 1:
        raise ClaimRefused(
            f"claim {ref} is reserved for {len(reserved)} consumers; a Horus share is one "
            "pod's (MPS would give each of them the whole share): give each pod its own claim, "
            "e.g. from a ResourceClaimTemplate"
        )
    entry = reserved[0]
    if not isinstance(entry, Mapping):
        return None
    if _str(entry.get("resource")) != "pods" or _str(entry.get("apiGroup")):
        return None
    namespace = _str((claim.get("metadata") or {}).get("namespace"))
    return (namespace, _str(entry.get("name")), _str(entry.get("uid")))


def read_share(
    ref: ClaimRef, claim: Mapping[str, Any] | None, node: str, gpus: Sequence[GpuDevice]
) -> ClaimShare:
    """The share ``claim`` (as read from the apiserver) holds on this node (ClaimRefused)."""
    if claim is None:
        raise ClaimRefused(f"claim {ref} does not exist (deleted before it was prepared?)")
    meta = claim.get("metadata") or {}
    if not isinstance(meta, Mapping) or _str(meta.get("uid")) != ref.uid:
        raise ClaimRefused(
            f"claim {ref.namespace}/{ref.name} has uid {_str(meta.get('uid'))!r}, the kubelet "
            f"asked for {ref.uid!r}: it was deleted and made again; not prepared"
        )
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        raise ClaimRefused(f"claim {ref} is not allocated")
    by_index = {g.index: g for g in gpus}
    ours: list[AllocatedDevice] = []
    for i, result in enumerate(results[:128]):
        where = f"claim {ref}: status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping) or _str(result.get("driver")) != c.DRA_DRIVER_NAME:
            continue  # another driver's device: that driver prepares it
        pool, device, request = (
            _str(result.get("pool")),
            _str(result.get("device")),
            _str(result.get("request")),
        )
        if pool != node:
            raise ClaimRefused(
                f"{where}: {device} of pool {pool!r} is another node's GPU; this is {node!r}"
            )
        if result.get("adminAccess") is True:
            raise ClaimRefused(f"{where}: adminAccess to {device} is not a share Horus hands out")
        m = _DEVICE.fullmatch(device)
        gpu = by_index.get(int(m.group(1))) if m else None
        if gpu is None:
            raise ClaimRefused(f"{where}: device {device[:80]!r} is not a GPU of node {node}")
        if not gpu.healthy:
            raise ClaimRefused(f"{where}: GPU {gpu.index} ({gpu.uuid}) is Unhealthy")
        cores, memory_mib = _amounts(result, gpu, where)
        share_id = _str(result.get("shareID"))
        ours.append(AllocatedDevice(request, pool, device, gpu, cores, memory_mib, share_id))
    if not ours:
        raise ClaimRefused(f"claim {ref} has no device of driver {c.DRA_DRIVER_NAME}")
    requests = sorted({d.request for d in ours})
    if len(requests) > 1:
        raise ClaimRefused(
            f"claim {ref}: devices of {c.DRA_DRIVER_NAME} in requests {requests}; a Horus "
            "share is one request of a claim (ask for several GPUs with its count)"
        )
    if len({d.gpu.index for d in ours}) != len(ours):
        raise ClaimRefused(f"claim {ref}: one GPU is allocated twice to the same claim")
    return ClaimShare(ref, tuple(ours), _one_pod(ref, claim))


# --- what the agent reads on the dra path -----------------------------------------------------

#: The most devices one node's slices may list that are read (a node has at most a few dozen
#: GPUs; a slice of the apiserver's own limit is 128 devices).
MAX_SLICE_DEVICES = 1024
#: The most claims of one pod that are read (the apiserver allows 128 per pod).
MAX_POD_CLAIMS = 128


def _attr(device: Mapping[str, Any], name: str, kind: str) -> Any:
    attrs = device.get("attributes")
    if not isinstance(attrs, Mapping):
        return None
    for key in (name, f"{c.DRA_DRIVER_NAME}/{name}"):
        value = attrs.get(key)
        if isinstance(value, Mapping) and kind in value:
            return value[kind]
    return None


def slice_gpus(slices: Sequence[Mapping[str, Any]], node: str) -> list[GpuDevice]:
    """The GPUs the Horus DRA driver published for ``node`` (its ResourceSlices as listed),
    as :class:`GpuDevice` — what the agent samples on the dra path and checks claims against.

    Only slices of driver ``gpu.horus.io`` whose ``spec.nodeName`` is ``node`` count: the
    node identity may write no other node's slice (``horus-node-own-resourceslices``) and a
    tenant none at all. A device that does not read as one GPU (no UUID, index not matching its
    name, memory out of range) is left out rather than guessed; a device with the
    ``gpu.horus.io/unhealthy`` taint is Unhealthy."""
    out: dict[int, GpuDevice] = {}
    seen = 0
    for item in slices:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        if _str(spec.get("driver")) != c.DRA_DRIVER_NAME or _str(spec.get("nodeName")) != node:
            continue
        devices = spec.get("devices")
        for device in devices if isinstance(devices, list) else []:
            seen += 1
            if seen > MAX_SLICE_DEVICES or not isinstance(device, Mapping):
                break
            m = _DEVICE.fullmatch(_str(device.get("name")))
            index, uuid = (
                _attr(device, c.DRA_ATTR_INDEX, "int"),
                _attr(device, c.DRA_ATTR_UUID, "string"),
            )
            memory = _attr(device, c.DRA_ATTR_MEMORY_MIB, "int")
            model = _attr(device, c.DRA_ATTR_MODEL, "string") or "unknown"
            if m is None or not isinstance(index, int) or int(m.group(1)) != index:
                continue
            if not isinstance(memory, int) or not 0 < memory <= c.MAX_GPU_MEMORY_MIB:
                continue
            taints = device.get("taints")
            unhealthy = isinstance(taints, list) and any(
                isinstance(t, Mapping) and t.get("key") == c.DRA_TAINT_UNHEALTHY for t in taints
            )
            try:
                out[index] = GpuDevice(
                    index,
                    _str(uuid),
                    _str(model)[:128],
                    memory,
                    c.GPU_UNHEALTHY if unhealthy else c.GPU_HEALTHY,
                )
            except ValidationError:
                continue
    return [out[i] for i in sorted(out)]


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of the ResourceClaims a pod uses: ``spec.resourceClaims[].resourceClaimName``
    and, for claims made from a template, ``status.resourceClaimStatuses[].resourceClaimName``.

    These names only say where to look: a claim counts for the pod only when its own status
    says it is reserved for this pod's UID (:func:`pod_share`), which neither the pod's owner
    nor the node can write."""
    names: list[str] = []
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    for entries in (
        spec.get("resourceClaims") if isinstance(spec, Mapping) else None,
        status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None,
    ):
        for entry in (entries if isinstance(entries, list) else [])[:MAX_POD_CLAIMS]:
            name = _str(entry.get("resourceClaimName")) if isinstance(entry, Mapping) else ""
            if name and len(name) <= MAX_NAME and _NAME.fullmatch(name) and name not in names:
                names.append(name)
    return names


@dataclass(frozen=True)
class PodShare:
    """What one claim reserved for a pod gives it on this node."""

    share: ClaimShare
    #: Pods the claim is reserved for besides this one ((namespace, name, uid), in the order
    #: of ``reservedFor``); non-empty: the claim is shared (docs/dra.md, "Limits").
    others: tuple[tuple[str, str, str], ...] = ()
    #: Whether this pod is the first in ``reservedFor``: the pod the claim was allocated and
    #: prepared for. Pods after it joined a claim the kubelet had prepared already.
    first: bool = True


def reserved_pods(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(namespace, name, uid) of each pod in ``status.reservedFor``, in its order."""
    status = claim.get("status") or {}
    reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
    namespace = _str((claim.get("metadata") or {}).get("namespace"))
    out = []
    for entry in (reserved if isinstance(reserved, list) else [])[:256]:
        if not isinstance(entry, Mapping):
            continue
        if _str(entry.get("resource")) == "pods" and not _str(entry.get("apiGroup")):
            out.append((namespace, _str(entry.get("name")), _str(entry.get("uid"))))
    return out


def pod_share(
    pod_uid: str, claim: Mapping[str, Any] | None, node: str, gpus: Sequence[GpuDevice]
) -> PodShare | None:
    """The share a claim holds for the pod ``pod_uid`` on ``node``; None when the claim is not
    (or no longer) reserved for that pod, or holds no Horus GPU. A claim reserved for the pod
    whose allocation does not check (:func:`read_share`) raises :class:`ClaimRefused`.

    A claim reserved for several pods is read as one share and the other pods returned in
    ``others``, so the caller can tell the pod the claim was prepared for from the ones that
    joined it afterwards."""
    if claim is None:
        return None
    meta = claim.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return None
    pods = reserved_pods(claim)
    if not pod_uid or pod_uid not in {uid for _, _, uid in pods}:
        return None
    ref = ClaimRef(_str(meta.get("namespace")), _str(meta.get("name")), _str(meta.get("uid")))
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list) or not any(
        isinstance(r, Mapping) and r.get("driver") == c.DRA_DRIVER_NAME for r in results
    ):
        return None  # not a Horus GPU share (another driver's claim)
    # read as if reserved for this pod alone: read_share refuses shared claims at Prepare
    alone = dict(claim)
    alone["status"] = {
        **(status if isinstance(status, Mapping) else {}),
        "reservedFor": [
            e
            for e in (status.get("reservedFor") or [])
            if isinstance(e, Mapping) and _str(e.get("uid")) == pod_uid
        ][:1],
    }
    share = read_share(ref, alone, node, gpus)
    return PodShare(share, tuple(p for p in pods if p[2] != pod_uid), pods[0][2] == pod_uid)
