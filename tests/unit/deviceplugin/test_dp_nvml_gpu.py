"""NVML discovery on a real NVIDIA GPU: what the plugin advertises matches ``nvidia-smi``.

Skipped, with the reason, where no NVIDIA GPU and driver are present (CI, kwok nodes).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from horus.deviceplugin.devices import core_kind, memory_kind
from horus.node.gpus import GpuDiscoveryError, open_backend


def _nvml_or_skip() -> object:
    try:
        return open_backend("nvml", "this-node")
    except GpuDiscoveryError as exc:
        pytest.skip(f"no NVIDIA GPU usable here: {exc}")


@pytest.mark.gpu
def test_nvml_inventory_matches_nvidia_smi() -> None:
    backend = _nvml_or_skip()
    try:
        gpus = backend.discover()  # type: ignore[attr-defined]
    finally:
        backend.close()  # type: ignore[attr-defined]
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [[f.strip() for f in line.split(",")] for line in out.strip().splitlines()]
    assert [(g.index, g.uuid) for g in gpus] == [(int(r[0]), r[1]) for r in rows]
    for g, r in zip(gpus, rows, strict=True):
        assert abs(g.memory_mib - int(r[2])) <= 1
        assert g.healthy
        assert len(core_kind().devices([g])) == 100
        assert len(memory_kind(256).devices([g])) <= 1024
