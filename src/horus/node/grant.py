"""What a container is handed for its GPU share: one builder for both node paths.

The device plugin's ``Allocate`` (a pod with a signed assignment) and the DRA driver's
``NodePrepareResources`` (a ResourceClaim the kube-scheduler allocated) end in the same place:
the container gets its GPU, the CUDA MPS limits of its share, the MPS pipe and shared-memory
mounts and the ``HORUS_*`` variables the sharing agent and the workload read. They are built
here, once, from a :class:`GrantPolicy` (the node's settings) and the share
(:class:`~horus.api.assignment.GpuAssignment`), so a workload sees exactly the same thing
whichever path placed it; the device plugin turns the result into a
``ContainerAllocateResponse``, the DRA driver into the ``containerEdits`` of a CDI spec.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from horus.api.assignment import GpuAssignment, GpuRef
from horus.common import constants as c
from horus.progress.mount import progress_mount

log = logging.getLogger("horus.node.grant")

#: Where an MPS client's container sees the daemon's shared memory.
MPS_CLIENT_SHM = "/dev/shm"
ENFORCEMENT_MODES = ("mps", "none")


@dataclass(frozen=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class Consumer:
    """The pod a share is handed to (``HORUS_POD_*``)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ContainerGrant:
    """What one container gets: the plugin turns this into a ContainerAllocateResponse, the
    DRA driver into CDI ``containerEdits``. ``namespace``/``pod`` are empty when the share is
    not handed to exactly one pod (a ResourceClaim several pods share)."""

    namespace: str
    pod: str
    assignment: GpuAssignment
    envs: dict[str, str]
    mounts: list[MountSpec] = field(default_factory=list)
    devices: list[DeviceNode] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)  # fully qualified CDI device names


@dataclass(frozen=True)
class GrantPolicy:
    """How this node hands a share to a container (from the role's settings).

    ``gpu_access`` says how the runtime is told which GPU to give (``docs/agent.md``, "What
    a workload can still take"): ``envvar`` (``NVIDIA_VISIBLE_DEVICES=<uuid>``),
    ``volume-mounts`` (``/dev/null`` at ``/var/run/nvidia-container-devices/<uuid>``) or
    ``cdi`` (the CDI device ``<cdi_kind>=<uuid>`` of NVIDIA's CDI spec)."""

    node: str
    enforcement: str = "mps"
    mps_pipe_dir: Path = Path(c.MPS_PIPE_DIRECTORY_DEFAULT)
    mps_shm_dir: Path | None = None
    pass_device_specs: bool = False
    gpu_access: str = "envvar"
    cdi_kind: str = "nvidia.com/gpu"
    #: Host root of the per-pod progress directories (``horus.progress.mount``): a share
    #: handed to one pod also gets that pod's directory, read-write, and
    #: ``$HORUS_PROGRESS_DIR``. None: no progress directory (pair speeds from utilisation).
    progress_root: Path | None = None

    def __post_init__(self) -> None:
        if self.gpu_access not in c.GPU_ACCESS_MODES:
            raise ValueError(
                f"gpu_access must be one of {c.GPU_ACCESS_MODES}, got {self.gpu_access!r}"
            )
        if self.enforcement not in ENFORCEMENT_MODES:
            raise ValueError(
                f"enforcement must be one of {ENFORCEMENT_MODES}, got {self.enforcement!r}"
            )


def build_grant(
    policy: GrantPolicy,
    assignment: GpuAssignment,
    consumer: Consumer | None,
    extra_envs: Mapping[str, str] | None = None,
) -> ContainerGrant:
    """The container side of ``assignment`` on this node: environment, mounts, devices."""
    refs = assignment.all_gpus
    uuids = ",".join(g.gpu_uuid for g in refs)
    mounts, cdi_devices, envs = gpu_access(policy, refs)
    envs |= {
        # UUIDs, so the container sees exactly these GPUs whether or not the runtime also
        # hides the others; inside, they are CUDA ordinals 0..n-1 in this order.
        "CUDA_VISIBLE_DEVICES": uuids,
        c.ENV_GPU_UUID: uuids,
        c.ENV_GPU_INDEX: ",".join(str(g.gpu_index) for g in refs),
        c.ENV_GPU_CORE_PERCENT: ",".join(str(g.core_percent) for g in refs),
        c.ENV_GPU_MEMORY_MIB: ",".join(str(g.memory_mib) for g in refs),
        c.ENV_NODE_NAME: policy.node,
        c.ENV_ENFORCEMENT: policy.enforcement,
    }
    if consumer is not None:
        envs |= {
            c.ENV_POD_NAMESPACE: consumer.namespace,
            c.ENV_POD_NAME: consumer.name,
            c.ENV_POD_UID: consumer.uid,
        }
    envs |= dict(extra_envs or {})
    if policy.enforcement == "mps":
        pipe = str(policy.mps_pipe_dir)
        envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe
        # One percentage per MPS client; with several GPUs the smallest share, so the
        # container never exceeds any of them.
        envs[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] = str(min(g.core_percent for g in refs))
        # Ordinals as the client sees them (after CUDA_VISIBLE_DEVICES), not host indices.
        envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
            f"{ordinal}={g.memory_mib}M" for ordinal, g in enumerate(refs)
        )
        mounts.append(MountSpec(pipe, pipe))
        if policy.mps_shm_dir is not None:
            # MPS clients and the server share memory in /dev/shm: the client's must be
            # the daemon's (NVIDIA's device plugin mounts <mps root>/shm the same way).
            mounts.append(MountSpec(MPS_CLIENT_SHM, str(policy.mps_shm_dir)))
    if policy.progress_root is not None and consumer is not None and consumer.uid:
        # the job reports its progress here; one pod's own directory, so a job
        # cannot write another's. A directory that cannot be made is left out: a missing
        # bind source would stop the container from starting, progress is not worth that.
        try:
            progress = progress_mount(policy.progress_root, consumer.uid)
        except (OSError, ValueError) as exc:
            log.warning("no progress directory for pod %s: %s", consumer.uid, exc)
        else:
            mounts.append(MountSpec(progress.container_path, progress.host_path))
            envs |= progress.env
    devices: list[DeviceNode] = []
    if policy.pass_device_specs:
        names = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
        names += [f"nvidia{g.gpu_index}" for g in refs]
        devices = [DeviceNode(f"/dev/{n}", f"/dev/{n}") for n in names]
    return ContainerGrant(
        consumer.namespace if consumer else "",
        consumer.name if consumer else "",
        assignment,
        envs,
        mounts,
        devices,
        cdi_devices,
    )


def gpu_access(
    policy: GrantPolicy, refs: Sequence[GpuRef]
) -> tuple[list[MountSpec], list[str], dict[str, str]]:
    """How the runtime is told which GPUs to give (``policy.gpu_access``): mounts, CDI
    device names and NVIDIA_* variables. Only "volume-mounts" and "cdi" are grants a pod
    cannot make for itself; "envvar" relies on the toolkit refusing the variable from
    unprivileged containers (docs/agent.md)."""
    uuids = [g.gpu_uuid for g in refs]
    if policy.gpu_access == "cdi":
        return [], [f"{policy.cdi_kind}={u}" for u in uuids], {}
    if policy.gpu_access == "volume-mounts":
        root = c.NVIDIA_DEVICE_MOUNT_ROOT
        mounts = [MountSpec(f"{root}/{u}", "/dev/null", read_only=True) for u in uuids]
        return mounts, [], {"NVIDIA_VISIBLE_DEVICES": root}
    return [], [], {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
