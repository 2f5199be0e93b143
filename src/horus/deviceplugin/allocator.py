"""Allocate: find the pod the kubelet is admitting, check its signed assignment, hand out the share.

The kubelet's Allocate request names only device IDs, never a pod. Production sharing plugins
(HAMi, Aliyun's gpushare) therefore look the pod up themselves, and so do we:

1. list the pods on this node (field selector ``spec.nodeName``);
2. keep those not finished, not being deleted, not yet allocated *for this resource*
   (annotation ``horus.io/gpu-allocated``), with a container that requests exactly as many
   units of this resource as the kubelet asks devices for;
3. take the oldest (``Pending`` first, then creation time, then name), as the kubelet admits
   pods in the order they were bound.

That pod's ``horus.io/gpu-assignment`` must then be present, well formed, **signed by the
scheduler** for exactly this pod (its UID) and job (Ed25519, verified with the published public
keys only, :mod:`horus.api.signing` — a user can write any annotation, and a node holds no key
that signs, so the pod's own word is never trusted), for this node, on GPUs this node has and
that are healthy, and for exactly the amount requested. Anything else is refused: a
:class:`AllocationRefused` (the gRPC layer turns it into an error the kubelet shows in the
pod's status) and a Warning Event on the pod saying what was wrong. Refusing is safe: the
kubelet fails the pod's admission rather than start it without its limits.

The kubelet calls Allocate once per container *and resource*, so a pod gets two calls
(``gpu-core`` and ``gpu-memory``); each returns the complete environment (identical values,
which the kubelet merges), and each marks its resource in ``horus.io/gpu-allocated``. One pod
has at most one container that requests Horus resources (the operator builds pods that way).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from horus.api.assignment import GpuAssignment
from horus.api.inventory import GpuDevice
from horus.api.podassignment import AssignmentProblem, read_pod_assignment
from horus.api.resources import (
    container_amount,
    containers_asking,
    memory_units,
    pod_effective_request,
)
from horus.api.signing import KeyFileRing, KeyRing
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.common.documents import load_json
from horus.common.errors import ConfigError, HorusError, ValidationError
from horus.deviceplugin.kube import NodeApi
from horus.kube.errors import Conflict
from horus.node.grant import Consumer, ContainerGrant, GrantPolicy, build_grant

log = logging.getLogger(__name__)

_FINISHED = ("Succeeded", "Failed")
KEY_REFRESH_S = 60.0  # re-read the Secret at most this often (and after a failed check)
KEY_RETRY_S = 5.0
#: Where a pod gets a signed assignment (said when Allocate refuses a pod without one).
PLACEMENT_CHOICES = (
    "Create a DLJob (the Horus operator places its pods); or, for a plain pod, set "
    f"spec.schedulerName: {c.KUBE_SCHEDULER_NAME} (the chart's optional Horus scheduler, "
    "scheduler.enabled=true; the name is scheduler.schedulerName), or keep the default "
    "scheduler and add the Horus extender to the control plane's kube-scheduler (the "
    "KubeSchedulerConfiguration in the ConfigMap horus-scheduler-config)"
)


class AllocationRefused(HorusError):
    """Allocate must fail; ``message`` is what the kubelet shows and the Event says."""

    def __init__(self, message: str, reason: str = c.EVENT_REASON_ALLOCATE_REFUSED) -> None:
        super().__init__(message)
        self.reason = reason


class AssignmentKey:
    """The public keys that verify (never a private key: a node cannot sign): the mounted
    ConfigMap ``horus-verify-keys`` (:class:`~horus.api.signing.KeyFileRing`, re-read when the
    file changes) or the ConfigMap itself (cached). A signature that does not verify re-reads
    the ConfigMap through the API too, so a key published moments ago (before the kubelet
    refreshed the mount) is accepted at once."""

    def __init__(self, api: NodeApi, key_file: Path | None) -> None:
        self.api = api
        self.key_file = key_file
        self._file = KeyFileRing(key_file) if key_file is not None else None
        self._ring: KeyRing | None = None
        self._read_at = 0.0

    def get(self, refresh: bool = False) -> KeyRing:
        if self._file is not None:
            ring = self._file.ring()
            if not refresh:
                return ring
            try:
                fresh = self.api.read_assignment_key()
            except Exception as exc:  # no access, API down: the mounted keys still verify
                log.debug("cannot read the published keys through the API: %s", exc)
                return ring
            return KeyRing(ring.verify.union(fresh.verify), None, ring.why_not)
        age = time.monotonic() - self._read_at
        if self._ring is None or age > KEY_REFRESH_S or (refresh and age > KEY_RETRY_S):
            self._ring = self.api.read_assignment_key()
            self._read_at = time.monotonic()
        return self._ring


def _requested(pod: dict[str, Any], resource: str) -> list[int]:
    """The amounts of ``resource`` each container and init container of ``pod`` asks for
    (the kubelet calls Allocate for init containers too, first). Quantities come back from
    the apiserver in canonical form (``1000`` as ``"1k"``), so they are parsed, not int()ed;
    a pod whose quantity does not parse is not a candidate (the apiserver admits none)."""
    out: list[int] = []
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        items = spec.get(group) or []
        for i, container in enumerate(items if isinstance(items, list) else []):
            if not isinstance(container, dict):
                continue
            try:
                amount = container_amount(container, resource, f"spec.{group}[{i}]")
            except ValidationError:
                continue
            if amount is not None:
                out.append(amount)
    return out


def _allocated(pod: dict[str, Any]) -> dict[str, str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GPU_ALLOCATED)
    if not text:
        return {}
    try:  # bounded: anyone who may edit the pod may write a hostile value here
        raw = load_json(text, c.ANNOTATION_GPU_ALLOCATED, max_bytes=4096, max_depth=2)
    except ValidationError:
        return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def candidates(pods: list[dict[str, Any]], resource: str, amount: int) -> list[dict[str, Any]]:
    """Pods that may be the one being admitted for ``amount`` of ``resource``, best first."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if meta.get("deletionTimestamp") or phase in _FINISHED:
            continue
        if resource in _allocated(pod):
            continue
        if amount not in _requested(pod, resource):
            continue
        out.append(pod)
    out.sort(
        key=lambda p: (
            (p.get("status") or {}).get("phase", "Pending") != "Pending",
            p["metadata"].get("creationTimestamp") or "",
            _name(p),
        )
    )
    return out


def expected_amount(assignment: GpuAssignment, resource: str, unit_mib: int) -> int:
    gpus = assignment.all_gpus
    if resource == c.RESOURCE_GPU_CORE:
        return sum(g.core_percent for g in gpus)
    return sum(memory_units(g.memory_mib, unit_mib) for g in gpus)


class Allocator:
    """Finds, verifies and marks the pod behind one Allocate call; builds its container env."""

    def __init__(
        self,
        api: NodeApi,
        node_name: str,
        key: AssignmentKey,
        inventory: Callable[[], list[GpuDevice]],
        memory_unit_mib: int,
        enforcement: str = "mps",
        mps_pipe_dir: Path = Path(c.MPS_PIPE_DIRECTORY_DEFAULT),
        pass_device_specs: bool = False,
        mps_shm_dir: Path | None = None,
        gpu_access: str = "envvar",
        cdi_kind: str = "nvidia.com/gpu",
        progress_root: Path | None = None,
    ) -> None:
        self.api = api
        self.node = node_name
        self.key = key
        self.inventory = inventory
        self.unit_mib = memory_unit_mib
        # what a container is handed: built in horus.node.grant, shared with the DRA driver
        self.policy = GrantPolicy(
            node_name,
            enforcement,
            mps_pipe_dir,
            mps_shm_dir,
            pass_device_specs,
            gpu_access,
            cdi_kind,
            progress_root=progress_root,
        )
        self._lock = threading.Lock()

    # --- finding and checking the pod ------------------------------------------------------

    def _refuse(self, pod: dict[str, Any] | None, message: str) -> AllocationRefused:
        log.warning("Allocate refused: %s", message)
        if pod is not None:
            self.api.pod_event(pod, c.EVENT_REASON_ALLOCATE_REFUSED, message, self.node)
        return AllocationRefused(message)

    def _signed(self, pod: dict[str, Any], resource: str, amount: int) -> GpuAssignment:
        """The pod's assignment, present, well formed and signed for it by Horus."""
        if c.ANNOTATION_GPU_ASSIGNMENT not in ((pod["metadata"].get("annotations")) or {}):
            raise self._refuse(
                pod,
                f"pod {_name(pod)} requests {resource}={amount} but has no "
                f"{c.ANNOTATION_GPU_ASSIGNMENT} annotation: Horus GPU resources are only handed "
                f"to pods Horus placed. {PLACEMENT_CHOICES}",
            )
        try:
            read = read_pod_assignment(pod, self.key.get())
            if read.problem is not None and read.problem.signature:
                # the key may have been rotated since it was cached: read it again, once
                read = read_pod_assignment(pod, self.key.get(refresh=True))
        except ConfigError as exc:
            raise self._refuse(
                pod, f"cannot verify the assignment of pod {_name(pod)}: {exc}"
            ) from None
        if read.problem is AssignmentProblem.MALFORMED:
            raise self._refuse(pod, f"malformed assignment: {read.detail}")
        if read.assignment is None or not read.trusted:
            raise self._refuse(pod, f"{read.detail}; refused")
        return read.assignment

    def _check_request(
        self, pod: dict[str, Any], assignment: GpuAssignment, resource: str, amount: int
    ) -> None:
        """The assignment is for this node, and the pod asks for exactly its share, once."""
        who = f"pod {_name(pod)}"
        if assignment.node != self.node:
            raise self._refuse(
                pod, f"{who}: assignment is for node {assignment.node!r}, this is {self.node!r}"
            )
        expected = expected_amount(assignment, resource, self.unit_mib)
        unit = "" if resource == c.RESOURCE_GPU_CORE else f" (units of {self.unit_mib} MiB)"
        if expected != amount:
            raise self._refuse(
                pod,
                f"{who}: the container requests {resource}={amount} but its assignment grants "
                f"{expected}{unit}; the request must match the assignment",
            )
        try:
            effective = pod_effective_request(pod.get("spec") or {}, resource)
        except ValidationError as exc:
            raise self._refuse(pod, f"{who}: cannot read its {resource} requests: {exc}") from None
        if (effective.total or 0) > expected:
            # Defense in depth (the operator and the extender refuse such pods first): the
            # kubelet admits a pod by its effective request, so an init container or a second
            # container asking for more than the signed share would run outside it.
            raise self._refuse(
                pod,
                f"{who}: its effective request of {resource} is {effective.total}{unit} "
                f"({effective.describe()}) but its signed assignment grants {expected}; "
                "request Horus GPU resources in one container only, the amount the "
                "assignment names (never in initContainers)",
            )
        init = containers_asking(pod.get("spec") or {}, "initContainers", (resource,))
        if init:
            # Within the share, but the kubelet would call Allocate again for the app
            # container (reusing the init container's devices), and a pod's share is handed
            # out once: refuse now, with the reason, rather than at that second call.
            raise self._refuse(
                pod,
                f"{who}: init container(s) {', '.join(init)} request {resource}; a pod's GPU "
                "share goes to the one app container that uses the GPU, so request it there "
                "(never in initContainers)",
            )

    def _check_gpus(
        self, pod: dict[str, Any], assignment: GpuAssignment, gpus: dict[str, GpuDevice]
    ) -> None:
        """Every assigned GPU is on this node, at the index the assignment says, healthy."""
        who = f"pod {_name(pod)}"
        for ref in assignment.all_gpus:
            gpu = gpus.get(ref.gpu_uuid)
            if gpu is None:
                raise self._refuse(
                    pod, f"{who}: assigned GPU {ref.gpu_uuid} is not on node {self.node}"
                )
            if gpu.index != ref.gpu_index:
                raise self._refuse(
                    pod,
                    f"{who}: assigned GPU {ref.gpu_uuid} has index {gpu.index} here, the "
                    f"assignment says {ref.gpu_index}",
                )
            if not gpu.healthy:
                raise self._refuse(
                    pod, f"{who}: assigned GPU {gpu.index} ({gpu.uuid}) is Unhealthy"
                )

    def _verified(
        self, pod: dict[str, Any], resource: str, amount: int, gpus: dict[str, GpuDevice]
    ) -> GpuAssignment:
        assignment = self._signed(pod, resource, amount)
        self._check_request(pod, assignment, resource, amount)
        self._check_gpus(pod, assignment, gpus)
        return assignment

    def _find(self, resource: str, amount: int) -> tuple[dict[str, Any], GpuAssignment]:
        pods = self.api.list_node_pods(self.node)
        found = candidates(pods, resource, amount)
        if not found:
            raise self._refuse(
                None,
                f"no pod on node {self.node} awaits {resource}={amount}: no unallocated, "
                f"unfinished pod there has a container requesting exactly that amount",
            )
        pod = found[0]
        gpus = {g.uuid: g for g in self.inventory()}  # one read: both checks see the same GPUs
        assignment = self._verified(pod, resource, amount, gpus)
        self._check_capacity(pods, pod, assignment, gpus)
        return pod, assignment

    def _check_capacity(
        self,
        pods: list[dict[str, Any]],
        pod: dict[str, Any],
        assignment: GpuAssignment,
        gpus: dict[str, GpuDevice],
    ) -> None:
        """Last line against over-commit: refuse a share that, with the shares already
        allocated on this node, would pass a GPU's core or memory.

        Every pod this plugin allocated counts with the share it claims, whether or not its
        signature still verifies: it verified at its Allocate, its containers hold the GPU, and
        a key that is lost or revoked later must never un-count a share in use.

        Two placers (the operator and the extender) decide independently; each re-checks after
        writing, but a narrow window remains in which both may pick the same GPU. Here every
        Allocate is serialised, so the first pod admitted keeps its share and the second is
        refused with the figures. Only pods this plugin allocated count; a pod being deleted
        still holds its GPU until its containers stop.
        """
        mine = _name(pod)
        core: dict[str, int] = {}
        memory: dict[str, int] = {}
        holders: dict[str, list[str]] = {}
        for other in pods:
            if _name(other) == mine or not _allocated(other):
                continue
            if (other.get("status") or {}).get("phase") in _FINISHED:
                continue
            held = read_pod_assignment(other, None)  # allocated: verified then (docstring)
            if held.assignment is None:
                continue
            for ref in held.assignment.all_gpus:
                core[ref.gpu_uuid] = core.get(ref.gpu_uuid, 0) + ref.core_percent
                memory[ref.gpu_uuid] = memory.get(ref.gpu_uuid, 0) + ref.memory_mib
                holders.setdefault(ref.gpu_uuid, []).append(_name(other))
        for ref in assignment.all_gpus:
            gpu = gpus[ref.gpu_uuid]  # _verified checked every assigned GPU is in ``gpus``
            used_core, used_mem = core.get(ref.gpu_uuid, 0), memory.get(ref.gpu_uuid, 0)
            if (
                used_core + ref.core_percent > c.GPU_CORE_UNITS_PER_GPU
                or used_mem + ref.memory_mib > gpu.memory_mib
            ):
                raise self._refuse(
                    pod,
                    f"pod {mine}: GPU {gpu.index} ({gpu.uuid}) would be over-committed: "
                    f"{', '.join(sorted(holders[ref.gpu_uuid]))} already hold {used_core}% core "
                    f"and {used_mem} MiB of {gpu.memory_mib} MiB, and this pod's assignment "
                    f"adds {ref.core_percent}% and {ref.memory_mib} MiB (two placements raced "
                    "for the GPU; delete the pod to have it placed again)",
                )

    def match(self, resource: str, amount: int) -> GpuAssignment | None:
        """The assignment of the pod an Allocate for ``amount`` would pick (no side effects)."""
        try:
            pods = self.api.list_node_pods(self.node)
        except Exception:
            return None
        for pod in candidates(pods, resource, amount)[:1]:
            # unverified: a preferred allocation only orders device IDs; Allocate verifies
            return read_pod_assignment(pod, None).assignment
        return None

    # --- the grant -------------------------------------------------------------------------

    def allocate(self, resource: str, amount: int) -> ContainerGrant:
        """Grant ``amount`` devices of ``resource`` to the pod being admitted, or refuse."""
        with self._lock:
            for attempt in range(3):
                pod, assignment = self._find(resource, amount)
                meta = pod["metadata"]
                marks = {**_allocated(pod), resource: now_rfc3339()}
                try:
                    self.api.patch_pod_annotations(
                        meta["namespace"],
                        meta["name"],
                        {
                            c.ANNOTATION_GPU_ALLOCATED: json.dumps(
                                marks, separators=(",", ":"), sort_keys=True
                            )
                        },
                        # no resourceVersion precondition: only this plugin (one per node,
                        # Allocate serialised by the lock) writes this key, while the kubelet
                        # (or kwok) keeps bumping the pod's version with status updates.
                        "",
                    )
                except Conflict:
                    if attempt == 2:
                        raise AllocationRefused(
                            f"pod {_name(pod)} kept changing while it was being allocated; retry"
                        ) from None
                    continue
                log.info(
                    "allocated %s=%d to pod %s (GPU %s)",
                    resource,
                    amount,
                    _name(pod),
                    ",".join(str(g.gpu_index) for g in assignment.all_gpus),
                )
                return self.grant(pod, assignment)
        raise AssertionError("unreachable")

    def grant(self, pod: dict[str, Any], assignment: GpuAssignment) -> ContainerGrant:
        """What the pod's container gets (:func:`horus.node.grant.build_grant`)."""
        meta = pod["metadata"]
        consumer = Consumer(meta["namespace"], meta["name"], meta.get("uid", ""))
        return build_grant(self.policy, assignment, consumer)
