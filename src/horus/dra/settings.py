"""Settings of the DRA driver (section ``dra``): CLI > environment > config file.

Every field can be set as ``--field-name`` on ``horus dra run``, as the environment variable
``HORUS_DRA_<FIELD>``, or under ``dra:`` in the YAML file given with ``--config`` (see
:mod:`horus.common.settings`). ``NODE_NAME`` (downward API, what a DaemonSet sets) is the
fallback for the node name. The GPU and grant fields mean what they mean for the device plugin
(``docs/deviceplugin.md``): both paths hand a container the same thing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from horus.common.constants import (
    DEFAULT_CDI_SPEC_DIR,
    DEFAULT_KUBELET_PLUGINS_DIR,
    DEFAULT_KUBELET_REGISTRY_DIR,
    DRA_DRIVER_NAME,
    MAX_GPU_MEMORY_MIB,
    MPS_PIPE_DIRECTORY_DEFAULT,
    NODE_NAME_ENV,
)
from horus.common.errors import ConfigError
from horus.common.settings import check_range, check_seconds, load_settings
from horus.progress.mount import DEFAULT_HOST_ROOT as DEFAULT_PROGRESS_ROOT

SECTION = "dra"
# CDI's kind: <vendor>/<class>, vendor a DNS-like name (container-device-interface spec).
_CDI_KIND = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61})?")
# A unix socket path must fit sockaddr_un.sun_path (108 bytes with the NUL).
MAX_SOCKET_PATH = 107


@dataclass(frozen=True)
class DraSettings:
    """What one node's DRA driver does; every field documented, every field has a default."""

    # Name of this node (its ResourceSlice pool, the claims' allocations); falls back to
    # $NODE_NAME.
    node_name: str = ""
    # The kubelet's plugin-registration directory: the kubelet watches it for <driver>-reg.sock.
    registry_dir: Path = Path(DEFAULT_KUBELET_REGISTRY_DIR)
    # This driver's own directory (dra.sock, the checkpoint); the same path inside and outside
    # the container (k8s.io/dynamic-resource-allocation's default, /var/lib/kubelet/plugins/<driver>).
    plugin_dir: Path = Path(DEFAULT_KUBELET_PLUGINS_DIR) / DRA_DRIVER_NAME
    # Where the node's container runtime reads CDI specs (containerd: cdi_spec_dirs, default
    # /etc/cdi and /var/run/cdi); one spec file per prepared claim is written here.
    cdi_dir: Path = Path(DEFAULT_CDI_SPEC_DIR)
    # The prepared claims (survives plugin and kubelet restarts). Empty: <plugin_dir>/checkpoint.json.
    checkpoint_file: Path | None = None
    # GPU discovery: "nvml" (real GPUs) or "simulated" (kwok/CI stand-in), as the device plugin.
    backend: Literal["nvml", "simulated"] = "nvml"
    sim_gpu_count: int = 1
    sim_gpu_model: str = "H100"
    sim_gpu_memory_mib: int = 81920
    sim_health_file: Path | None = None
    # How a share is enforced and the GPU granted (as the device plugin's settings).
    enforcement: Literal["mps", "none"] = "mps"
    mps_pipe_dir: Path = Path(MPS_PIPE_DIRECTORY_DEFAULT)
    mps_shm_dir: Path | None = None
    pass_device_specs: bool = False
    gpu_access: Literal["envvar", "volume-mounts", "cdi"] = "envvar"
    # The CDI kind of the node's GPU devices (NVIDIA's spec), for gpu_access=cdi.
    cdi_kind: str = "nvidia.com/gpu"
    # Host root of the per-pod progress directories, as the device plugin's: the
    # claim's one reserving pod gets <root>/<pod UID> mounted with $HORUS_PROGRESS_DIR.
    # Empty: none.
    progress_root: Path | None = Path(DEFAULT_PROGRESS_ROOT)
    # kubeconfig for the API server; empty means in-cluster config (else ~/.kube/config).
    kubeconfig: Path | None = None
    # Publish this node's ResourceSlice (off: a test or a node whose GPUs another writer lists).
    publish_slices: bool = True
    # Seconds between GPU health checks (a change updates the ResourceSlice at once).
    health_interval_s: float = 5.0
    # Seconds between full re-reads of this node's ResourceSlices (repairs a deleted or edited one).
    slice_resync_s: float = 60.0
    # Seconds between checks that our sockets still exist (re-created if removed).
    socket_poll_s: float = 1.0
    # Seconds between stale-claim sweeps (horus.dra.sweep): checkpointed claims the apiserver
    # no longer has (404, or another UID under the name) are unprepared. One sweep runs as the
    # driver starts; each costs one claim GET per checkpointed claim.
    claim_sweep_interval_s: float = 600.0
    # When GPU discovery fails: true exits with status 2; false logs once and retries.
    fail_on_init_error: bool = False
    retry_interval_s: float = 30.0

    def __post_init__(self) -> None:
        if not _CDI_KIND.fullmatch(self.cdi_kind):
            raise ConfigError(
                f"cdi_kind must be a CDI kind <vendor>/<class> such as nvidia.com/gpu, got "
                f"{self.cdi_kind!r}"
            )
        if not 1 <= self.sim_gpu_count <= 16:
            raise ConfigError(f"sim_gpu_count must be 1..16, got {self.sim_gpu_count}")
        check_range("sim_gpu_memory_mib", self.sim_gpu_memory_mib, 1, MAX_GPU_MEMORY_MIB)
        for name in (
            "health_interval_s",
            "slice_resync_s",
            "socket_poll_s",
            "claim_sweep_interval_s",
            "retry_interval_s",
        ):
            check_seconds(name, getattr(self, name))
        for name in (
            "mps_pipe_dir",
            "mps_shm_dir",
            "progress_root",
            "registry_dir",
            "plugin_dir",
            "cdi_dir",
        ):
            path = getattr(self, name)
            if path is not None and not path.is_absolute():
                raise ConfigError(
                    f"{name} must be an absolute host path (the kubelet and the runtime read "
                    f"it as it is), got {str(path)!r}"
                )
        for sock in (self.registration_socket, self.dra_socket):
            if len(str(sock)) > MAX_SOCKET_PATH:
                raise ConfigError(
                    f"socket path {sock} is longer than {MAX_SOCKET_PATH} bytes (a unix "
                    "socket cannot be bound there); choose a shorter directory"
                )

    @property
    def registration_socket(self) -> Path:
        """What the kubelet's plugin watcher finds (k8s.io/dynamic-resource-allocation's name)."""
        return self.registry_dir / f"{DRA_DRIVER_NAME}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def checkpoint_path(self) -> Path:
        return self.checkpoint_file or self.plugin_dir / "checkpoint.json"


def load(
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> DraSettings:
    """Settings from CLI, environment and file, with the ``NODE_NAME`` fallback applied."""
    environ = os.environ if env is None else env
    settings = load_settings(DraSettings, SECTION, cli, environ, config_file)
    if not settings.node_name and environ.get(NODE_NAME_ENV):
        settings = replace(settings, node_name=environ[NODE_NAME_ENV])
    return settings
