"""How the device plugin tells the runtime which GPU a container gets (``gpu_access``).

An environment variable is something any pod can set for itself, so ``envvar`` grants the GPU
only where the NVIDIA container toolkit refuses that variable from unprivileged containers;
``volume-mounts`` and ``cdi`` are grants a pod cannot write into its own spec (a mount at
/var/run/nvidia-container-devices needs hostPath, a CDI device only the kubelet passes on).
These tests pin what each mode hands out, through the real gRPC response too.
"""

from __future__ import annotations

from typing import Any

import pytest

from horus.api.assignment import GpuAssignment, GpuRef
from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.deviceplugin import settings as dps
from horus.deviceplugin.allocator import Allocator, AssignmentKey

NODE = "gpu-node-0000"
POD: dict[str, Any] = {"metadata": {"namespace": "ml", "name": "p1", "uid": "u-1"}}
TWO = GpuAssignment(
    NODE,
    "GPU-aaaa",
    0,
    40,
    8192,
    gpus=(GpuRef("GPU-aaaa", 0, 40, 8192), GpuRef("GPU-bbbb", 1, 40, 8192)),
)


def allocator(mode: str, enforcement: str = "mps") -> Allocator:
    return Allocator(
        None,  # type: ignore[arg-type]  # grant() never calls the API
        NODE,
        AssignmentKey(None, None),  # type: ignore[arg-type]
        lambda: [],
        256,
        enforcement,
        gpu_access=mode,
    )


def test_envvar_names_the_uuids_and_nothing_else() -> None:
    grant = allocator("envvar").grant(POD, TWO)
    assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert grant.cdi_devices == []
    assert not [m for m in grant.mounts if m.container_path.startswith(c.NVIDIA_DEVICE_MOUNT_ROOT)]


def test_volume_mounts_grant_by_mount_only() -> None:
    grant = allocator("volume-mounts").grant(POD, TWO)
    assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == c.NVIDIA_DEVICE_MOUNT_ROOT
    devices = [
        (m.container_path, m.host_path, m.read_only)
        for m in grant.mounts
        if m.container_path.startswith(c.NVIDIA_DEVICE_MOUNT_ROOT)
    ]
    assert devices == [
        (f"{c.NVIDIA_DEVICE_MOUNT_ROOT}/GPU-aaaa", "/dev/null", True),
        (f"{c.NVIDIA_DEVICE_MOUNT_ROOT}/GPU-bbbb", "/dev/null", True),
    ]
    # the MPS pipe and the share still reach the container
    assert grant.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert grant.envs["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert grant.cdi_devices == []


def test_cdi_names_devices_and_sets_no_nvidia_variable() -> None:
    grant = allocator("cdi", enforcement="none").grant(POD, TWO)
    assert grant.cdi_devices == ["nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=GPU-bbbb"]
    assert not [k for k in grant.envs if k.startswith("NVIDIA_")]
    assert grant.mounts == []
    assert grant.envs[c.ENV_GPU_UUID] == "GPU-aaaa,GPU-bbbb"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="gpu_access"):
        allocator("everything")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"HORUS_DEVICEPLUGIN_GPU_ACCESS": "all"}, "GPU_ACCESS.*not one of envvar"),
        ({"HORUS_DEVICEPLUGIN_CDI_KIND": "gpu"}, "cdi_kind"),
        ({"HORUS_DEVICEPLUGIN_CDI_KIND": "Nvidia.com/gpu/x"}, "cdi_kind"),
    ],
)
def test_settings_refuse_bad_values(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        dps.load({}, {"NODE_NAME": NODE, **env}, None)


def test_settings_take_each_mode() -> None:
    for mode in c.GPU_ACCESS_MODES:
        s = dps.load({}, {"NODE_NAME": NODE, "HORUS_DEVICEPLUGIN_GPU_ACCESS": mode}, None)
        assert s.gpu_access == mode
