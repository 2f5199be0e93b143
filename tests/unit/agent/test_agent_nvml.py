from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from agent_helpers import pod

from horus.agent.backend import BackendUnavailable, NodeView
from horus.agent.nvml import NvmlBackend, _load_pynvml, pod_uid_from_cgroup

UID = "3f1c2b4a-1111-4222-8333-944455556666"


@pytest.mark.parametrize(
    "text",
    [
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-abc.scope\n",
        f"12:memory:/kubepods/burstable/pod{UID}/0123456789abcdef\n11:cpu:/kubepods/burstable/pod{UID}/0123\n",
        f"0::/kubepods/besteffort/pod{UID}/ctr\n",
    ],
)
def test_pod_uid_from_cgroup(text: str) -> None:
    assert pod_uid_from_cgroup(text) == UID


def test_not_a_pod() -> None:
    assert pod_uid_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n") is None


def test_nvml_absent_gives_clear_message() -> None:
    try:
        nv = _load_pynvml()
    except BackendUnavailable as exc:
        msg = str(exc)
        assert "NVML" in msg and ("driver" in msg or "nvidia-ml-py" in msg)
        assert "--backend simulated" in msg
    else:  # a machine with a GPU
        nv.nvmlShutdown()
        pytest.skip("NVML is present on this machine")


class FakeNvml:
    """Stands in for pynvml: one GPU, two processes, one of them in a known pod."""

    def __init__(self, per_process_util: bool = True, mps: bool = False) -> None:
        self.per_process_util = per_process_util
        self.mps = mps  # the pod's process is an MPS client: listed with the MPS processes

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return b"GPU-abc"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=70, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=5 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        if self.mps:  # the MPS server (a host process) and the other process
            return [
                SimpleNamespace(pid=303, usedGpuMemory=2**25),
                SimpleNamespace(pid=202, usedGpuMemory=2**29),
            ]
        return [
            SimpleNamespace(pid=101, usedGpuMemory=2**30),
            SimpleNamespace(pid=202, usedGpuMemory=2**29),
        ]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: int) -> list[Any]:
        if not self.mps:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [SimpleNamespace(pid=101, usedGpuMemory=2**30)]

    def nvmlDeviceGetProcessUtilization(self, h: int, ts: int) -> list[Any]:
        if not self.per_process_util:
            raise RuntimeError("not supported")
        return [SimpleNamespace(pid=101, smUtil=35, timeStamp=10)]

    def nvmlShutdown(self) -> None:
        pass


@pytest.mark.parametrize(("per_process", "mps"), [(True, False), (False, False), (True, True)])
def test_nvml_maps_processes_to_pods(tmp_path: Path, per_process: bool, mps: bool) -> None:
    p = pod("a")
    (tmp_path / "101").mkdir()
    (tmp_path / "101" / "cgroup").write_text(f"0::/kubepods/burstable/pod{p.uid}/c\n")
    (tmp_path / "202").mkdir()
    (tmp_path / "202" / "cgroup").write_text("0::/system.slice/other\n")
    p = type(p)(**{**p.__dict__, "uid": UID})
    (tmp_path / "101" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/c\n")
    b = NvmlBackend(proc_root=tmp_path, nvml=FakeNvml(per_process, mps))
    s = b.sample(NodeView("n1", []), [p])
    assert s.backend == "nvml"
    assert s.gpus[0].utilization == 0.7 and s.gpus[0].memory_total_bytes == 80 * 2**30
    assert s.pods[UID].memory_used_bytes == 2**30
    assert s.pods[UID].utilization == (0.35 if per_process else 0.7)
