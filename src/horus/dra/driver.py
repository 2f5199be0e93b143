"""Prepare and unprepare claims: the node half of a DRA share.

``prepare`` of one claim: answered from the checkpoint when the claim was prepared already
and its CDI spec is still there (idempotent: same claim, same answer, no apiserver call);
otherwise the claim is read from the apiserver and checked (:mod:`horus.node.claim_checks`), the
grant built exactly as the device plugin builds it (:func:`horus.node.grant.build_grant`),
the CDI spec written (:mod:`horus.dra.cdi`), the claim checkpointed, and the CDI device IDs
returned. ``unprepare`` removes the spec and the checkpoint entry (a claim it does not know is
already unprepared: success). Every failure is that claim's error, a sentence the kubelet
shows on the pod; nothing a request or the apiserver sends can stop the driver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from horus.api.inventory import GpuDevice
from horus.common import constants as c
from horus.dra import cdi
from horus.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from horus.dra.kube import DraApi
from horus.node.claim_checks import ClaimRef, ClaimRefused, ClaimShare, read_share
from horus.node.grant import Consumer, ContainerGrant, GrantPolicy, build_grant

log = logging.getLogger(__name__)


def share_envs(share: ClaimShare) -> dict[str, str]:
    """What the DRA path adds to the device plugin's ``HORUS_*``: the claim and its share."""
    return {
        c.ENV_CLAIM_NAMESPACE: share.ref.namespace,
        c.ENV_CLAIM_NAME: share.ref.name,
        c.ENV_CLAIM_UID: share.ref.uid,
        c.ENV_SHARE_ID: ",".join(d.share_id for d in share.devices),
    }


def share_grant(policy: GrantPolicy, share: ClaimShare) -> ContainerGrant:
    """The grant of a claim's share (pure): the device plugin's, plus the claim's names."""
    consumer = Consumer(*share.consumer) if share.consumer else None
    return build_grant(policy, share.assignment(policy.node), consumer, share_envs(share))


def prepared_devices(share: ClaimShare, grant: ContainerGrant) -> tuple[PreparedDevice, ...]:
    """The kubelet's answer for a share: every device of it; the claim's CDI device (and, with
    gpu_access=cdi, NVIDIA's per-GPU CDI devices) on the first, so a container that uses the
    claim gets each once."""
    out = []
    for i, d in enumerate(share.devices):
        ids = (cdi.cdi_device_id(share.ref.uid), *grant.cdi_devices) if i == 0 else ()
        out.append(PreparedDevice((d.request,), d.pool, d.device, ids, d.share_id))
    return tuple(out)


class Driver:
    """Prepare/unprepare, serialised (one claim's files are never written twice at once)."""

    def __init__(
        self,
        api: DraApi,
        policy: GrantPolicy,
        gpus: Callable[[], Sequence[GpuDevice]],
        cdi_dir: Path,
        checkpoint: Checkpoint,
    ) -> None:
        self.api = api
        self.policy = policy
        self.node = policy.node
        self.gpus = gpus
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self._lock = threading.Lock()

    def prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        """The devices of a prepared claim (raises ClaimRefused, ApiError, OSError)."""
        with self._lock:
            done = self.checkpoint.get(ref.uid)
            spec = self.cdi_dir / cdi.spec_file_name(ref.uid)
            if done is not None and spec.is_file():
                if (done.namespace, done.name) != (ref.namespace, ref.name):
                    raise ClaimRefused(
                        f"claim uid {ref.uid} was prepared as {done.namespace}/{done.name}, "
                        f"not {ref.namespace}/{ref.name}"
                    )
                return done.devices
            share = read_share(
                ref, self.api.get_claim(ref.namespace, ref.name), self.node, self.gpus()
            )
            grant = share_grant(self.policy, share)
            cdi.write_spec(self.cdi_dir, ref.uid, cdi.build_spec(ref.uid, grant))
            devices = prepared_devices(share, grant)
            self.checkpoint.put(PreparedClaim(ref.namespace, ref.name, ref.uid, devices))
            log.info(
                "prepared claim %s: %s",
                ref,
                ", ".join(f"{d.device} {d.cores}% {d.memory_mib} MiB" for d in share.devices),
            )
            return devices

    def unprepare(self, ref: ClaimRef) -> None:
        with self._lock:
            cdi.remove_spec(self.cdi_dir, ref.uid)
            if self.checkpoint.remove(ref.uid):
                log.info("unprepared claim %s", ref)
