"""GPU-only checks of the agent (issue 6 item 3). They need a physical NVIDIA GPU, NVML,
``nvidia-smi``, ``nvidia-cuda-mps-control`` and PyTorch with CUDA; everywhere else they are
skipped with the reason below. ``docs/gpu-validation.md`` lists the commands that run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from horus.agent.backend import NodeView
from horus.agent.mps import MpsSupervisor
from horus.agent.nvml import NvmlBackend


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return bool(n) and shutil.which("nvidia-smi") is not None
    except Exception:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU on this machine"),
]

MATMUL = """
import sys, time, torch
n = 4096; a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
torch.cuda.synchronize(); t = time.perf_counter(); k = 0
while time.perf_counter() - t < float(sys.argv[1]):
    for _ in range(10): a @ b
    torch.cuda.synchronize(); k += 10
print(k / (time.perf_counter() - t))
"""
ALLOC = """
import sys, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
print("allocated", x.numel())
"""


def _mps(tmp_path: Path) -> MpsSupervisor:
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    sup = MpsSupervisor("nvidia-cuda-mps-control", tmp_path / "pipe", tmp_path / "log")
    assert sup.check(), "MPS control daemon did not start"
    return sup


def _env(sup: MpsSupervisor, **extra: str) -> dict[str, str]:
    return {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(sup.pipe_directory), **extra}


def test_nvml_matches_nvidia_smi() -> None:
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=index,uuid,memory.total,memory.used",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sample = NvmlBackend().sample(NodeView("local", []), [])
    for line, gpu in zip(out.strip().splitlines(), sample.gpus, strict=True):
        index, uuid, total, used = (s.strip() for s in line.split(","))
        assert int(index) == gpu.index and uuid == gpu.uuid
        assert abs(float(total) - gpu.memory_total_bytes / 2**20) <= 1
        assert abs(float(used) - gpu.memory_used_bytes / 2**20) <= 64  # moving target


def test_mps_daemon_starts_and_restarts(tmp_path: Path) -> None:
    sup = _mps(tmp_path)
    try:
        assert sup.alive()
    finally:
        sup.stop()


def test_2gib_share_blocks_3gib_allocation(tmp_path: Path) -> None:
    sup = _mps(tmp_path)
    try:
        neighbour = subprocess.Popen(
            [sys.executable, "-c", MATMUL, "20"], env=_env(sup), stdout=subprocess.PIPE, text=True
        )
        limited = _env(
            sup, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2G", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50"
        )
        ok = subprocess.run(
            [sys.executable, "-c", ALLOC, "1"], env=limited, capture_output=True, text=True
        )
        over = subprocess.run(
            [sys.executable, "-c", ALLOC, "3"], env=limited, capture_output=True, text=True
        )
        assert ok.returncode == 0, ok.stderr
        assert over.returncode != 0 and "out of memory" in over.stderr.lower()
        assert neighbour.poll() is None, "the neighbour must keep running"
        neighbour.wait(60)
        assert neighbour.returncode == 0
    finally:
        sup.stop()


def test_quarter_thread_share_quarter_throughput(tmp_path: Path) -> None:
    sup = _mps(tmp_path)
    try:
        full = float(
            subprocess.run(
                [sys.executable, "-c", MATMUL, "10"],
                env=_env(sup),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        env25 = _env(sup, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
        quarter = float(
            subprocess.run(
                [sys.executable, "-c", MATMUL, "10"],
                env=env25,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        ratio = quarter / full
        print(f"MPS 25% thread share: throughput ratio {ratio:.3f}")
        assert 0.15 <= ratio <= 0.40
    finally:
        sup.stop()


def test_watchdog_catches_real_process_over_share() -> None:
    from horus.agent.pods import PodInfo
    from horus.agent.watchdog import MemoryWatchdog
    from horus.api.assignment import GpuAssignment

    hog = subprocess.Popen(
        [
            sys.executable,
            "-c",
            ALLOC.replace('print("allocated", x.numel())', "import time; time.sleep(60)"),
            "3",
        ]
    )
    try:
        backend = NvmlBackend()
        uid = "00000000-0000-0000-0000-000000000001"
        pod = PodInfo("ns", "hog", uid, "local", GpuAssignment("local", "GPU", 0, 50, 2048))
        acted: list[str] = []

        class Record:
            def evict(self, p: PodInfo, message: str) -> bool:
                acted.append(message)
                return True

            def event(self, p: PodInfo, reason: str, message: str) -> None:
                pass

        wd = MemoryWatchdog("evict", 0.0, Record())
        deadline = time.monotonic() + 60
        while not acted and time.monotonic() < deadline:
            import pynvml

            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            used = sum(
                p.usedGpuMemory or 0
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                if p.pid == hog.pid
            )
            wd.check(pod, float(used), backend.name)
            time.sleep(1)
        assert acted and "2048 MiB allowed" in acted[0]
    finally:
        hog.kill()


def test_mps_clients_are_listed_by_the_process_reader(tmp_path: Path) -> None:
    """An MPS client (as a pod with enforcement mps is) must be in what the agent and the
    measuring harness read (``horus.common.nvml.gpu_processes``), with its memory. Which of
    NVML's two lists named it is printed, for docs/gpu-validation.md."""
    import pynvml

    from horus.common.nvml import gpu_processes

    sup = _mps(tmp_path)
    hold = ALLOC.replace('print("allocated", x.numel())', 'print("allocated", flush=True)')
    hold += "import time; time.sleep(60)\n"
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = {p.pid for p in gpu_processes(pynvml, h)}
    client = subprocess.Popen(
        [sys.executable, "-c", hold, "1"], env=_env(sup), stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None and "allocated" in client.stdout.readline()
        new = [p for p in gpu_processes(pynvml, h) if p.pid not in before]
        lists: dict[str, object] = {}
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses",
        ):
            try:
                lists[name] = sorted(int(p.pid) for p in getattr(pynvml, name)(h))
            except Exception as exc:
                lists[name] = f"error: {exc}"
        print(f"MPS client pid {client.pid}; new processes {new}; lists {lists}")
        assert any(p.used_bytes is not None and p.used_bytes >= 2**30 for p in new), new
    finally:
        client.kill()
        sup.stop()
        pynvml.nvmlShutdown()


def test_a_dra_claims_cdi_edits_hold_its_share_on_the_gpu(tmp_path: Path) -> None:
    """The end of the path a decision takes on DRA: the CDI spec the driver writes for a claim
    (``horus.dra.cdi.build_spec`` over ``horus.node.grant.build_grant``, what containerd
    applies to the container) is all a workload gets. Run under the MPS daemon with exactly
    that environment, a 25 %/2,048 MiB share must hold: the GPU is the one named by UUID, an
    allocation over the share fails, throughput is about a quarter of a full share's, and the
    agent's process reader sees the client."""
    import pynvml

    from horus.api.assignment import GpuAssignment
    from horus.common.nvml import gpu_processes
    from horus.dra.cdi import build_spec
    from horus.node.gpus import open_backend
    from horus.node.grant import Consumer, GrantPolicy, build_grant

    backend = open_backend("nvml", "gpu-node")
    try:
        gpu = backend.discover()[0]  # type: ignore[attr-defined]
    finally:
        backend.close()  # type: ignore[attr-defined]
    sup = _mps(tmp_path)
    try:
        policy = GrantPolicy("gpu-node", "mps", sup.pipe_directory)

        def claim_env(core: int, mib: int, uid: str) -> dict[str, str]:
            share = GpuAssignment("gpu-node", gpu.uuid, gpu.index, core, mib)
            grant = build_grant(policy, share, Consumer("team-a", "train-0", uid))
            spec = build_spec(uid, grant)
            edits = spec["devices"][0]["containerEdits"]
            env = dict(e.split("=", 1) for e in edits["env"])
            # the container's own environment: only what CDI put there, plus the basics
            base = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH") if k in os.environ}
            return base | env

        quarter = claim_env(25, 2048, "00000000-0000-0000-0000-0000000000a1")
        full = claim_env(100, 8192, "00000000-0000-0000-0000-0000000000a2")
        assert quarter["CUDA_VISIBLE_DEVICES"] == gpu.uuid
        assert quarter["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert quarter["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"

        def run(code: str, arg: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-c", code, arg], env=env, capture_output=True, text=True
            )

        ok, over = run(ALLOC, "1", quarter), run(ALLOC, "3", quarter)
        assert ok.returncode == 0, ok.stderr
        assert over.returncode != 0 and "out of memory" in over.stderr.lower(), over.stderr
        rate_full = float(run(MATMUL, "10", full).stdout)
        rate_quarter = float(run(MATMUL, "10", quarter).stdout)
        ratio = rate_quarter / rate_full
        print(f"DRA claim env, 25 % cores: matmul throughput {ratio:.3f} of a 100 % claim's")
        assert 0.15 <= ratio <= 0.40

        hold = ALLOC.replace('print("allocated", x.numel())', 'print("allocated", flush=True)')
        hold += "import time; time.sleep(30)\n"
        client = subprocess.Popen(
            [sys.executable, "-c", hold, "1"], env=quarter, stdout=subprocess.PIPE, text=True
        )
        pynvml.nvmlInit()
        try:
            assert client.stdout is not None and "allocated" in client.stdout.readline()
            h = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
            seen = {p.pid: p.used_bytes for p in gpu_processes(pynvml, h)}
            print(f"claim client pid {client.pid}: NVML sees {seen.get(client.pid)} bytes")
            assert (seen.get(client.pid) or 0) >= 2**30, seen
        finally:
            client.kill()
            pynvml.nvmlShutdown()
    finally:
        sup.stop()
