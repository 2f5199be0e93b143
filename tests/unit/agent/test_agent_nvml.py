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


# --- issue 26: per-process samples are averaged over time, then summed over a pod's processes --

POD_A = "3f1c2b4a-1111-4222-8333-944455556666"
POD_B = "7a2d0c1e-2222-4333-8444-a55566667777"
PERIOD_US = 166_667  # the driver's per-process sample period (about 1/6 s)


def _cycle(t0: int, n: int, per_pid: dict[int, list[int]]) -> list[Any]:
    """What ``nvmlDeviceGetProcessUtilization`` returns for ``n`` sample periods from ``t0``:
    one entry per process per period (PID, smUtil %, the driver's CPU timestamp in us),
    interleaved by period as the driver lists them."""
    out = []
    for k in range(n):
        for pid, utils in per_pid.items():
            out.append(
                SimpleNamespace(
                    pid=pid,
                    smUtil=utils[k % len(utils)],
                    memUtil=0,
                    encUtil=0,
                    decUtil=0,
                    timeStamp=t0 + k * PERIOD_US,
                )
            )
    return out


def _pods_a_and_b(tmp_path: Path, pid_pods: tuple[tuple[int, str], ...]) -> list[Any]:
    """Pods A and B, with each PID's /proc/<pid>/cgroup under ``tmp_path`` naming its pod."""
    for pid, uid in pid_pods:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid}/c\n")
    base = pod("a")
    return [type(base)(**{**base.__dict__, "uid": u}) for u in (POD_A, POD_B)]


class RecordedNvml(FakeNvml):
    """Two pods time-slicing one GPU: pod A runs two processes (PIDs 101 and 102, e.g. a
    trainer and its evaluation worker), pod B one (201). Each 4 s cycle the driver holds 24
    samples per process; the second read asks only for samples after the first's newest."""

    def __init__(self) -> None:
        super().__init__()
        t0 = 1_764_150_000_000_000
        self.first = _cycle(t0, 24, {101: [40, 44, 36, 40], 102: [5, 0, 10, 5], 201: [30, 34, 26]})
        # the first read's last sample repeated (drivers return the sample at ``since`` again)
        # and a repeated timestamp for 201, then the second cycle with other rates
        t1 = t0 + 24 * PERIOD_US
        self.second = [self.first[-1], *_cycle(t1, 24, {101: [60], 102: [0], 201: [20, 24, 16]})]
        self.second.append(SimpleNamespace(pid=201, smUtil=20, timeStamp=t1))
        self.calls: list[int] = []
        self.gpu_percent = 90  # the GPU's own figure: above what its processes add up to

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self.gpu_percent, memory=10)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in (101, 102, 201)]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: int) -> list[Any]:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetProcessUtilization(self, h: int, ts: int) -> list[Any]:
        self.calls.append(ts)
        return [s for s in (self.first if len(self.calls) == 1 else self.second)]


def test_nvml_averages_samples_over_time_and_sums_a_pods_processes(tmp_path: Path) -> None:
    pods = _pods_a_and_b(tmp_path, ((101, POD_A), (102, POD_A), (201, POD_B)))
    nv = RecordedNvml()
    b = NvmlBackend(proc_root=tmp_path, nvml=nv)
    s1 = b.sample(NodeView("n1", []), pods)
    # pod A: mean(40,44,36,40)=40 % + mean(5,0,10,5)=5 %; pod B: mean(30,34,26)=30 %
    assert s1.pods[POD_A].utilization == pytest.approx(0.45)
    assert s1.pods[POD_B].utilization == pytest.approx(0.30)
    # the old aggregation (every sample added) would have read both pods at 100 %
    summed = sum(e.smUtil for e in nv.first if e.pid == 201) / 100
    assert summed > 1.0
    s2 = b.sample(NodeView("n1", []), pods)
    assert nv.calls[1] == nv.first[-1].timeStamp  # asks only for what is new
    assert s2.pods[POD_A].utilization == pytest.approx(0.60)  # the repeated old sample is dropped
    assert s2.pods[POD_B].utilization == pytest.approx(20.0 / 100, abs=1e-9)


def test_pod_sm_util_ignores_other_processes_and_caps_at_one() -> None:
    from horus.agent.nvml import pod_sm_util
    from horus.common.nvml import ProcessUtilSample as S

    samples = [S(1, 10, 70.0), S(1, 20, 90.0), S(2, 10, 60.0), S(3, 10, 99.0)]
    assert pod_sm_util(samples, {1: "a", 2: "a"}) == {"a": 1.0}  # 80 % + 60 %, capped
    assert pod_sm_util(samples, {3: "b"}) == {"b": pytest.approx(0.99)}
    assert pod_sm_util([], {1: "a"}) == {}


def test_time_sliced_processes_each_reading_the_whole_gpu_get_their_share_of_it(
    tmp_path: Path,
) -> None:
    """Two GPU-bound jobs time-slicing an H200 (``horus predictor measure``, 2026-11-26,
    driver 580.159.04): each process read 98.96 % and 99.0 % SM utilisation with the GPU at
    99.65 %, and ran at 0.63 and 0.54 of its solo speed (solo: 58.9 % and 95.0 %). Read as
    they come, the pods' utilisation over alone was 1.68 and 1.04 (no slowdown at all); split
    by the GPU's busy time, 0.85 and 0.52."""
    pods = _pods_a_and_b(tmp_path, ((101, POD_A), (201, POD_B)))
    nv = RecordedNvml()
    nv.first = _cycle(1_764_150_000_000_000, 24, {101: [98.96], 201: [99.0]})
    nv.gpu_percent = 99.65
    s = NvmlBackend(proc_root=tmp_path, nvml=nv).sample(NodeView("n", []), pods)
    a, b = s.pods[POD_A].utilization, s.pods[POD_B].utilization
    assert a is not None and b is not None
    assert a + b == pytest.approx(0.9965)
    assert a / 0.589 == pytest.approx(0.846, abs=0.01) and b / 0.950 == pytest.approx(
        0.525, abs=0.01
    )
    # a pod alone keeps its own figure, and processes under the GPU's figure are not scaled
    nv2 = RecordedNvml()
    nv2.first = _cycle(1_764_150_000_000_000, 24, {101: [58.9]})
    nv2.gpu_percent = 59.3
    alone = NvmlBackend(proc_root=tmp_path, nvml=nv2).sample(NodeView("n", []), pods[:1])
    assert alone.pods[POD_A].utilization == pytest.approx(0.589)


class MpsNvml(RecordedNvml):
    """Under MPS NVML gives per-process samples to the MPS server only (PID 900, no pod), none
    to its clients (measured on an H200, driver 580.159.04: benchmarks/results/
    gpu-pair-signal.json)."""

    def __init__(self, clients: tuple[int, ...]) -> None:
        super().__init__()
        self.clients = clients
        self.gpu_percent = 70

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=900, usedGpuMemory=2**25)]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.clients]

    def nvmlDeviceGetProcessUtilization(self, h: int, ts: int) -> list[Any]:
        return _cycle(ts + 1, 24, {900: [70]})


def test_under_mps_a_pod_alone_gets_the_gpus_utilisation_and_a_pair_none(tmp_path: Path) -> None:
    pods = _pods_a_and_b(tmp_path, ((101, POD_A), (201, POD_B)))
    alone = NvmlBackend(proc_root=tmp_path, nvml=MpsNvml((101,))).sample(NodeView("n", []), pods)
    assert alone.pods[POD_A].utilization == 0.7  # the GPU's (FakeNvml: 70 %)
    pair = NvmlBackend(proc_root=tmp_path, nvml=MpsNvml((101, 201))).sample(NodeView("n", []), pods)
    assert pair.pods[POD_A].utilization is None and pair.pods[POD_B].utilization is None


def test_a_pod_without_a_sample_beside_one_with_samples_was_idle(tmp_path: Path) -> None:
    pods = _pods_a_and_b(tmp_path, ((101, POD_A), (201, POD_B)))
    nv = RecordedNvml()
    nv.first = [e for e in nv.first if e.pid != 201]  # B used no SM time in the window
    s = NvmlBackend(proc_root=tmp_path, nvml=nv).sample(NodeView("n", []), pods)
    # PID 102 is no pod here: A is its PID 101 alone (40 %)
    assert s.pods[POD_A].utilization == pytest.approx(0.40) and s.pods[POD_B].utilization == 0.0


def test_samples_recorded_on_a_real_gpu_are_averaged_not_summed() -> None:
    """The per-process samples ``benchmarks/gpu_pair_signal.py`` recorded from a real H200
    (driver 580.159.04, ``benchmarks/results/gpu-pair-signal-raw.json``), read as one agent
    read over a whole phase would see them: several samples per process. The agent's reading
    is their mean, which the old sum exceeded — it put a busy job far above 100 %."""
    import json

    from horus.common.nvml import ProcessUtilSample, mean_sm_util

    raw_file = Path(__file__).resolve().parents[3] / "benchmarks/results/gpu-pair-signal-raw.json"
    raw = json.loads(raw_file.read_text())["raw"]  # [agent time, pid, sm %, driver timestamp]
    samples = [ProcessUtilSample(int(pid), int(ts), float(sm)) for _, pid, sm, ts in raw]
    per_pid: dict[int, list[float]] = {}
    for s in samples:
        per_pid.setdefault(s.pid, []).append(s.sm_util)
    busy = max(per_pid, key=lambda p: sum(per_pid[p]))  # the transformer run alone, then paired
    assert len(per_pid[busy]) > 5 and sum(per_pid[busy]) > 100  # the old sum: over 100 %
    means = mean_sm_util(samples)
    for pid, values in per_pid.items():
        assert means[pid] == pytest.approx(sum(values) / len(values))
        assert 0 <= means[pid] <= 100


# --- the driver's memory reserve is not a pod's use (seen on an H200, tools/gpu-validate.sh) ---

RESERVE = 614 * 2**20


class ReservingNvml(FakeNvml):
    """NVML with the version-2 memory call, as nvidia-ml-py and a 510+ driver have it: version
    1 counts the driver's reserve as used, version 2 gives it apart."""

    nvmlMemory_v2 = 0x2000028

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        if version is None:
            return SimpleNamespace(used=5 * 2**30 + RESERVE, total=80 * 2**30)
        assert version == self.nvmlMemory_v2
        return SimpleNamespace(used=5 * 2**30, reserved=RESERVE, total=80 * 2**30)


class OldDriverNvml(ReservingNvml):
    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        if version is not None:
            raise RuntimeError("Function Not Found")
        return super().nvmlDeviceGetMemoryInfo(h)


@pytest.mark.parametrize(
    ("nvml", "used"), [(ReservingNvml, 5 * 2**30), (OldDriverNvml, 5 * 2**30 + RESERVE)]
)
def test_gpu_memory_used_leaves_out_the_drivers_reserve(
    tmp_path: Path, nvml: type[FakeNvml], used: int
) -> None:
    from horus.common.nvml import gpu_memory

    fake = nvml(False, False)
    assert gpu_memory(fake, 0).used_bytes == used and gpu_memory(fake, 0).total_bytes == 80 * 2**30
    s = NvmlBackend(proc_root=tmp_path, nvml=fake).sample(NodeView("n1", []), [])
    assert s.gpus[0].memory_used_bytes == used
