"""Settings of the device plugin (section ``deviceplugin``): CLI > environment > config file.

Every field can be set as ``--field-name`` on ``horus deviceplugin run``, as the environment
variable ``HORUS_DEVICEPLUGIN_<FIELD>``, or under ``deviceplugin:`` in the YAML file given with
``--config`` (see :mod:`horus.common.settings`). Two environment variables shared with other
roles are honoured as fallbacks when the Horus-specific one is absent: ``NODE_NAME`` (downward
API, what the DaemonSet sets) and ``HORUS_ASSIGNMENT_KEY_FILE`` (the mounted public keys).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from horus.common.constants import (
    ASSIGNMENT_KEY_FILE_ENV,
    DEFAULT_DEVICE_PLUGIN_DIR,
    DEFAULT_GPU_MEMORY_UNIT_MIB,
    MAX_GPU_MEMORY_MIB,
    MPS_PIPE_DIRECTORY_DEFAULT,
    NODE_NAME_ENV,
)
from horus.common.errors import ConfigError
from horus.common.settings import check_range, check_seconds, load_settings
from horus.progress.mount import DEFAULT_HOST_ROOT as DEFAULT_PROGRESS_ROOT

SECTION = "deviceplugin"
# CDI's kind: <vendor>/<class>, vendor a DNS-like name (container-device-interface spec).
_CDI_KIND = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61})?")


@dataclass(frozen=True)
class DevicePluginSettings:
    """What one node's device plugin does; every field documented, every field has a default."""

    # Name of this node (pods are looked up with spec.nodeName=<it>); falls back to $NODE_NAME.
    node_name: str = ""
    # The kubelet's device-plugin directory: kubelet.sock is there, and our sockets go there.
    plugin_dir: Path = Path(DEFAULT_DEVICE_PLUGIN_DIR)
    # GPU discovery: "nvml" (real GPUs through nvidia-ml-py) or "simulated" (kwok/CI stand-in).
    backend: Literal["nvml", "simulated"] = "nvml"
    # Simulated backend only: how many GPUs, which model, how much memory each (MiB).
    sim_gpu_count: int = 1
    sim_gpu_model: str = "H100"
    sim_gpu_memory_mib: int = 81920
    # Simulated backend only: optional JSON file {"<index>": "Healthy"|"Unhealthy"}, re-read
    # at every health check, so tests and demos can fail a simulated GPU.
    sim_health_file: Path | None = None
    # MiB per device ID of horus.io/gpu-memory (see docs/decisions.md). Default keeps GPUs up
    # to 256 GiB at <= 1,024 IDs.
    memory_unit_mib: int = DEFAULT_GPU_MEMORY_UNIT_MIB
    # How shares are enforced in the container: "mps" hands out the CUDA MPS settings and mount;
    # "none" only restricts the visible GPU (the agent's watchdog still watches memory).
    enforcement: Literal["mps", "none"] = "mps"
    # Host directory of the MPS control daemon's pipes (the agent starts the daemon there); it
    # is mounted at the same path in every container.
    mps_pipe_dir: Path = Path(MPS_PIPE_DIRECTORY_DEFAULT)
    # Host directory the MPS control daemon has as /dev/shm (the chart: node.mps.root/shm,
    # mounted as the agent's /dev/shm). MPS clients share memory with the server there, so it
    # is mounted as /dev/shm into every MPS client, as NVIDIA's device plugin does. Empty: no
    # /dev/shm mount (a daemon running in the host's own /dev/shm, as in the local demo).
    mps_shm_dir: Path | None = None
    # Host root of the per-pod progress directories: each pod gets <root>/<pod UID>
    # mounted read-write with $HORUS_PROGRESS_DIR, where its training loop reports progress
    # for the agent (the chart mounts the root into the plugin and the agent at this path).
    # Empty: none (the agent measures pairs from utilisation only).
    progress_root: Path | None = Path(DEFAULT_PROGRESS_ROOT)
    # Also hand out /dev/nvidia* device nodes (for runtimes without the NVIDIA container
    # toolkit, like NVIDIA's PASS_DEVICE_SPECS).
    pass_device_specs: bool = False
    # How the container is given its GPU (docs/agent.md, "What a workload can still take"):
    # "envvar" sets NVIDIA_VISIBLE_DEVICES=<uuid> (any pod can set that variable itself, so it
    # grants exclusively only where the NVIDIA container toolkit refuses it from unprivileged
    # containers); "volume-mounts" mounts /dev/null at
    # /var/run/nvidia-container-devices/<uuid> and sets NVIDIA_VISIBLE_DEVICES to that folder
    # (NVIDIA's DEVICE_LIST_STRATEGY=volume-mounts: a pod cannot make such a mount itself
    # without hostPath); "cdi" names the CDI device <cdi_kind>=<uuid> in the Allocate response
    # (NVIDIA's cdi-cri strategy; containerd >= 1.7 with CDI on, kubelet >= 1.31) and sets no
    # NVIDIA_* variable at all.
    gpu_access: Literal["envvar", "volume-mounts", "cdi"] = "envvar"
    # The CDI kind of the node's GPU devices (what `nvidia-ctk cdi generate` writes).
    cdi_kind: str = "nvidia.com/gpu"
    # kubeconfig for the API server; empty means in-cluster config (else ~/.kube/config).
    kubeconfig: Path | None = None
    # The published public keys (keys.pem of the mounted ConfigMap horus-verify-keys; never a
    # private key); falls back to $HORUS_ASSIGNMENT_KEY_FILE, then to reading that ConfigMap
    # through the API.
    assignment_key_file: Path | None = None
    # Write the node's horus.io/gpu-inventory annotation (and memory unit) on start and on
    # every health change.
    publish_inventory: bool = True
    # Seconds between GPU health checks.
    health_interval_s: float = 5.0
    # Seconds between checks of kubelet.sock (re-registration after a kubelet restart).
    socket_poll_s: float = 0.5
    # When GPU discovery fails (NVML absent): true exits with status 2; false (default) logs
    # one clear message, keeps running and retries every retry_interval_s, so a DaemonSet pod
    # on a node without a driver never crash-loops.
    fail_on_init_error: bool = False
    retry_interval_s: float = 30.0
    # Advertise even when the node's capacity already lists nvidia.com/gpu, i.e. another
    # device plugin (NVIDIA's) hands out this node's GPUs. Off: the plugin does not advertise
    # there (log, Event on the Node, inventory withdrawn) until the other plugin is gone; on
    # only where the two plugins do not share GPUs (docs/deviceplugin.md, Coexistence).
    allow_other_gpu_plugin: bool = False
    # Seconds between reads of this node for that check.
    node_check_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if not _CDI_KIND.fullmatch(self.cdi_kind):
            raise ConfigError(
                f"cdi_kind must be a CDI kind <vendor>/<class> such as nvidia.com/gpu, got "
                f"{self.cdi_kind!r}"
            )
        if not 1 <= self.memory_unit_mib <= 65536:
            raise ConfigError(f"memory_unit_mib must be 1..65536 MiB, got {self.memory_unit_mib}")
        if not 1 <= self.sim_gpu_count <= 16:
            raise ConfigError(f"sim_gpu_count must be 1..16, got {self.sim_gpu_count}")
        check_range("sim_gpu_memory_mib", self.sim_gpu_memory_mib, 1, MAX_GPU_MEMORY_MIB)
        for name in (
            "health_interval_s",
            "socket_poll_s",
            "retry_interval_s",
            "node_check_interval_s",
        ):
            check_seconds(name, getattr(self, name))
        for name in ("mps_pipe_dir", "mps_shm_dir", "progress_root"):
            path = getattr(self, name)
            if path is not None and not path.is_absolute():
                raise ConfigError(
                    f"{name} must be an absolute host path (the kubelet mounts it into "
                    f"containers), got {str(path)!r}"
                )


def load(
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> DevicePluginSettings:
    """Settings from CLI, environment and file, with the shared-variable fallbacks applied."""
    environ = os.environ if env is None else env
    settings = load_settings(DevicePluginSettings, SECTION, cli, environ, config_file)
    if not settings.node_name and environ.get(NODE_NAME_ENV):
        settings = replace(settings, node_name=environ[NODE_NAME_ENV])
    if settings.assignment_key_file is None and environ.get(ASSIGNMENT_KEY_FILE_ENV):
        settings = replace(settings, assignment_key_file=Path(environ[ASSIGNMENT_KEY_FILE_ENV]))
    return settings
