"""The CDI spec of a claim carries exactly what the device plugin hands over for the same share."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dra_peer import POD_UID, allocated_claim, result
from horus.api.inventory import GpuDevice
from horus.common import constants as c
from horus.deviceplugin.allocator import Allocator, AssignmentKey
from horus.dra import cdi
from horus.dra.driver import prepared_devices, share_grant
from horus.node.claim_checks import ClaimRef, read_share
from horus.node.grant import GrantPolicy

NODE = "gpu-node-0001"
GPUS = [GpuDevice(index=i, uuid=f"GPU-{i}", model="H100", memory_mib=81559) for i in range(2)]
REF = ClaimRef("ml", "c1", "uid-1")


def share(*results: dict[str, Any]) -> Any:
    return read_share(REF, allocated_claim("ml", "c1", "uid-1", NODE, list(results)), NODE, GPUS)


@pytest.mark.parametrize("access", ["envvar", "volume-mounts", "cdi"])
def test_the_grant_equals_the_device_plugins_for_the_same_share(access: str) -> None:
    s = share(result(NODE, 1, "45", "40000Mi", "s-1"))
    policy = GrantPolicy(NODE, "mps", Path("/run/mps"), Path("/run/mps/shm"), True, access)
    dra = share_grant(policy, s)
    dp = Allocator(
        None,  # type: ignore[arg-type]  # grant() never calls the API
        NODE,
        AssignmentKey(None, None),  # type: ignore[arg-type]
        lambda: [],
        256,
        "mps",
        Path("/run/mps"),
        True,
        Path("/run/mps/shm"),
        access,
    ).grant({"metadata": {"namespace": "ml", "name": "p1", "uid": POD_UID}}, s.assignment(NODE))
    extra = {c.ENV_CLAIM_NAMESPACE, c.ENV_CLAIM_NAME, c.ENV_CLAIM_UID, c.ENV_SHARE_ID}
    assert {k: v for k, v in dra.envs.items() if k not in extra} == dp.envs
    assert (dra.mounts, dra.devices, dra.cdi_devices) == (dp.mounts, dp.devices, dp.cdi_devices)
    assert dra.envs[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == "45"
    assert dra.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40000M"
    assert dra.envs[c.ENV_SHARE_ID] == "s-1"
    assert dra.envs[c.ENV_POD_UID] == POD_UID


def test_the_spec_names_the_claim_and_carries_the_edits() -> None:
    s = share(result(NODE, 0, "30", "1024Mi"))
    grant = share_grant(GrantPolicy(NODE, gpu_access="volume-mounts"), s)
    spec = cdi.build_spec("uid-1", grant)
    assert spec["kind"] == "horus.io/gpu" and spec["cdiVersion"] == cdi.CDI_VERSION
    (device,) = spec["devices"]
    assert device["name"] == "uid-1"
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1024M"
    assert env["NVIDIA_VISIBLE_DEVICES"] == c.NVIDIA_DEVICE_MOUNT_ROOT
    mounts = {m["containerPath"]: m for m in device["containerEdits"]["mounts"]}
    assert mounts[f"{c.NVIDIA_DEVICE_MOUNT_ROOT}/GPU-0"]["hostPath"] == "/dev/null"
    assert "ro" in mounts[f"{c.NVIDIA_DEVICE_MOUNT_ROOT}/GPU-0"]["options"]
    assert mounts[c.MPS_PIPE_DIRECTORY_DEFAULT]["hostPath"] == c.MPS_PIPE_DIRECTORY_DEFAULT
    assert cdi.cdi_device_id("uid-1") == "horus.io/gpu=uid-1"


def test_enforcement_none_hands_out_no_mps_limits() -> None:
    grant = share_grant(GrantPolicy(NODE, "none"), share(result(NODE, 0)))
    assert not [k for k in grant.envs if k.startswith("CUDA_MPS")]
    assert "mounts" not in cdi.build_spec("uid-1", grant)["devices"][0]["containerEdits"]


def test_the_claims_cdi_device_is_on_its_first_device_only() -> None:
    s = share(result(NODE, 0, share_id="a"), result(NODE, 1, share_id="b"))
    grant = share_grant(GrantPolicy(NODE, gpu_access="cdi"), s)
    first, second = prepared_devices(s, grant)
    assert first.cdi_device_ids == (
        "horus.io/gpu=uid-1",
        "nvidia.com/gpu=GPU-0",
        "nvidia.com/gpu=GPU-1",
    )
    assert second.cdi_device_ids == ()
    assert (first.share_id, second.share_id) == ("a", "b")
    assert grant.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M,1=8192M"


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    spec = cdi.build_spec("uid-1", share_grant(GrantPolicy(NODE), share(result(NODE, 0))))
    path = cdi.write_spec(tmp_path / "cdi", "uid-1", spec)
    assert path.name == "horus.io-gpu_uid-1.json"
    assert json.loads(path.read_text()) == spec
    assert os.listdir(tmp_path / "cdi") == [path.name]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    cdi.remove_spec(tmp_path / "cdi", "uid-1")
    cdi.remove_spec(tmp_path / "cdi", "uid-1")  # twice: still fine
    assert os.listdir(tmp_path / "cdi") == []
