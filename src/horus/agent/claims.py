"""The shares on a node on the dra path: the ResourceClaims reserved for its pods.

On the dra path (setting ``placement_path: dra``) a pod's GPU share is what the kube-scheduler
allocated to its ResourceClaim: ``status.allocation`` (device, ``consumedCapacity``) and
``status.reservedFor`` (the pod's UID) — the claim's status, which no tenant can write
(``resourceclaims/status`` is not in ``edit``) and the node identity cannot either (it may
only ``get`` claims). The agent reads nothing else for a share: not the pod's annotations
(tenants may rewrite them), and a claim counts for a pod only when its status names that pod.
The GPUs it checks a claim against are its own node's ResourceSlice of driver
``gpu.horus.io`` — the slice the claim was allocated from, which only this node's identity may
write (``horus-node-own-resourceslices``). The reading and its checks are the DRA driver's
(:mod:`horus.node.claim_checks`), so the agent enforces exactly what Prepare handed out.

Once a pod's share has been read and checked, it stays the pod's until the pod ends: a re-read
that no longer checks (the GPU tainted Unhealthy, the slice briefly without the device, the
claim deleted under the running pod) or that fails keeps the verified share enforced, since the
pod's containers keep the GPU whatever the claim says now.

Cost: the pods are listed each cycle anyway; a claim is read once per pod and kept while the
pod runs (an allocation cannot change while the claim is reserved for the pod: the apiserver
only lets it be set once, or removed when no pod holds it), re-read every ``CLAIM_TTL``
seconds. The slice is re-read every ``SLICE_TTL`` seconds.

A pod that joined a claim after the kubelet prepared it for another pod (``reservedFor``
names it second; docs/dra.md, "Limits") causes no Prepare the driver could refuse: the agent
sees it here and the caller reports it, or with the watchdog in ``evict`` mode deletes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from horus.agent.pods import PodInfo, SkipLog, pod_info, running_pod
from horus.api.inventory import GpuDevice
from horus.common.errors import HorusError
from horus.kube.errors import ApiError
from horus.node.claim_checks import PodShare, pod_claim_names, pod_share, slice_gpus

log = logging.getLogger("horus.agent.claims")

#: Seconds a claim read for a running pod is kept before it is read again.
CLAIM_TTL = 300.0
#: Seconds a pod whose claims hold no Horus share (another driver's) is not asked about again.
NO_SHARE_TTL = 30.0
#: Seconds the node's ResourceSlice (its GPUs, their health) is kept.
SLICE_TTL = 10.0


class ClaimReader(Protocol):
    """The two reads this needs (:class:`horus.agent.kube.AgentApi`)."""

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def resourceslices_on(self, node: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ClaimedPod:
    """A running pod and the share its claim holds on this node."""

    info: PodInfo
    share: PodShare

    @property
    def joined(self) -> bool:
        """It joined a claim prepared for another pod (reserved for it second or later)."""
        return not self.share.first


class ClaimShares:
    """Shares of a node's pods from their ResourceClaims, cached per pod UID."""

    def __init__(
        self,
        kube: ClaimReader,
        skips: SkipLog,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._skips = skips
        self._clock = clock
        self._pods: dict[str, tuple[float, PodShare | None]] = {}
        self._gpus: dict[str, tuple[float, list[GpuDevice]]] = {}

    def gpus(self, node: str) -> list[GpuDevice]:
        """The node's GPUs as its ResourceSlice publishes them (empty when none is published)."""
        now = self._clock()
        cached = self._gpus.get(node)
        if cached is not None and cached[0] > now:
            return cached[1]
        gpus = slice_gpus(self._kube.resourceslices_on(node), node)
        self._gpus[node] = (now + SLICE_TTL, gpus)
        return gpus

    def pods(self, node: str, objects: Sequence[Mapping[str, Any]]) -> list[ClaimedPod]:
        """The running pods among ``objects`` (the node's pods as listed) that hold a Horus
        share through a claim, each with it. Pods gone are forgotten."""
        gpus: list[GpuDevice] | None = None
        out: list[ClaimedPod] = []
        present: set[str] = set()
        now = self._clock()
        for obj in objects:
            if not running_pod(obj):
                continue
            spec = obj.get("spec") or {}
            if not isinstance(spec, Mapping) or str(spec.get("nodeName") or "") != node:
                continue
            names = pod_claim_names(obj)
            if not names:
                continue
            meta = obj["metadata"]
            uid = str(meta.get("uid") or "")
            who = f"pod {meta.get('namespace')}/{meta.get('name')}"
            present.add(uid)
            cached = self._pods.get(uid)
            if cached is not None and cached[0] > now:
                share = cached[1]
            else:
                # the share verified before, kept while the pod runs: its containers hold the
                # GPU whatever a re-read says (a tainted GPU, a slice briefly without the
                # device, a claim deleted under the pod)
                verified = cached[1] if cached is not None else None
                if gpus is None:
                    gpus = self.gpus(node)
                try:
                    share = self._read(obj, uid, names, node, gpus, who)
                except ApiError as exc:  # this cycle only; asked again next cycle
                    if verified is None:
                        self._skips.warn(uid, f"{who}: cannot read its claims ({exc}); not sampled")
                        continue
                    self._skips.warn(
                        uid, f"{who}: cannot read its claims ({exc}); its verified share stays"
                    )
                    share = verified
                if share is None and verified is not None:
                    self._skips.warn(
                        f"{uid}:kept",
                        f"{who}: its claim no longer checks on re-read; the share verified "
                        f"before ({verified.share.ref}) stays enforced until the pod ends",
                    )
                    share = verified
                ttl = CLAIM_TTL if share is not None else NO_SHARE_TTL
                self._pods[uid] = (now + ttl, share)
            if share is None:
                continue
            info = pod_info(obj, share.share.assignment(node), self._skips)
            out.append(ClaimedPod(info, share))
        for uid in set(self._pods) - present:
            del self._pods[uid]
        return out

    def _read(
        self,
        obj: Mapping[str, Any],
        uid: str,
        names: list[str],
        node: str,
        gpus: list[GpuDevice],
        who: str,
    ) -> PodShare | None:
        namespace = str(obj["metadata"].get("namespace") or "")
        found: list[PodShare] = []
        for name in names:
            claim = self._kube.claim(namespace, name)
            try:
                share = pod_share(uid, claim, node, gpus)
            except HorusError as exc:
                self._skips.warn(
                    f"{uid}:{name}", f"{who}: claim {namespace}/{name} not enforced: {exc}"
                )
                continue
            if share is not None:
                found.append(share)
        if len(found) > 1:
            self._skips.warn(
                uid,
                f"{who} holds {len(found)} Horus GPU claims; its share is the first "
                f"({found[0].share.ref}); ask for several GPUs with one request's count",
            )
        return found[0] if found else None
