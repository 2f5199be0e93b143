"""The NVML process readers shared by the agent and the measuring harness
(``horus.common.nvml``), against a stand-in with pynvml's call names and return shapes: this
machine has no GPU. What a real driver lists under MPS is checked by the ``gpu`` tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from horus.common.nvml import GpuProcess, gpu_processes, process_sm_util


class Lists:
    """pynvml's two process lists; ``None`` for a list makes that call fail (unsupported)."""

    def __init__(self, compute: list[Any] | None, mps: list[Any] | None) -> None:
        self.compute, self.mps = compute, mps

    def nvmlDeviceGetComputeRunningProcesses(self, h: object) -> list[Any]:
        if self.compute is None:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return self.compute

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: object) -> list[Any]:
        if self.mps is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.mps

    def nvmlDeviceGetProcessUtilization(self, h: object, since: int) -> list[Any]:
        if since >= 30:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")  # what NVML says when nothing is new
        return [
            SimpleNamespace(pid=7, smUtil=40, timeStamp=20),
            SimpleNamespace(pid=8, smUtil=10, timeStamp=30),
        ]


def proc(pid: int, mib: int | None) -> Any:
    return SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * 2**20)


def test_mps_clients_are_read_beside_the_compute_processes() -> None:
    # under MPS the compute list may name only the server (9); its clients are in the MPS list
    nv = Lists([proc(9, 30)], [proc(7, 1000), proc(8, None)])
    assert sorted(gpu_processes(nv, 0), key=lambda p: p.pid) == [
        GpuProcess(7, 1000.0 * 2**20, mps_client=True),
        GpuProcess(8, None, mps_client=True),
        GpuProcess(9, 30.0 * 2**20),
    ]


def test_a_process_in_both_lists_counts_once_with_the_larger_memory() -> None:
    nv = Lists([proc(7, 500), proc(8, None)], [proc(7, 800), proc(8, 64)])
    assert sorted(gpu_processes(nv, 0), key=lambda p: p.pid) == [
        GpuProcess(7, 800.0 * 2**20, mps_client=True),
        GpuProcess(8, 64.0 * 2**20, mps_client=True),
    ]


@pytest.mark.parametrize(
    ("compute", "mps", "pids"),
    [
        ([proc(1, 10)], None, [1]),  # a driver without MPS support
        (None, [proc(2, 10)], [2]),
        (None, None, []),  # neither answers: nothing, not an exception
    ],
)
def test_a_list_the_driver_cannot_give_is_skipped(
    compute: list[Any] | None, mps: list[Any] | None, pids: list[int]
) -> None:
    assert [p.pid for p in gpu_processes(Lists(compute, mps), 0)] == pids


def test_bindings_without_the_mps_call_read_the_compute_list() -> None:
    class Old:  # nvidia-ml-py releases before the MPS call existed
        def nvmlDeviceGetComputeRunningProcesses(self, h: object) -> list[Any]:
            return [proc(3, 5)]

    assert gpu_processes(Old(), 0) == [GpuProcess(3, 5.0 * 2**20)]


def test_process_utilisation_returns_the_newest_timestamp_and_raises_when_nothing_is_new() -> None:
    nv = Lists([], [])
    samples, newest = process_sm_util(nv, 0, 0)
    assert samples == [(7, 40.0), (8, 10.0)] and newest == 30
    with pytest.raises(RuntimeError, match="NOT_FOUND"):
        process_sm_util(nv, 0, newest)
