"""NVML process readings, one implementation for the node agent and the measuring harness.

Why one module: the agent (what each pod uses) and ``horus predictor measure`` (what each
training process uses) must read processes the same way, or the harness's check of the agent's
pair estimate would check something else.

Why two process lists: a process that is a client of an MPS server has an *MPS* compute context,
which NVML reports through ``nvmlDeviceGetMPSComputeRunningProcesses`` (Volta and newer) and
not necessarily through ``nvmlDeviceGetComputeRunningProcesses``, which lists the MPS server
itself. Horus pods run as MPS clients with ``enforcement: mps``, so reading only the second list
would lose them. Both lists are read and merged by PID; a driver or binding without the MPS call
simply contributes nothing from it.

Nothing here imports ``pynvml``: callers pass the module (or, in tests, a stand-in with the same
calls and return shapes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("horus.common.nvml")

PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses")


@dataclass(frozen=True)
class GpuProcess:
    """A process with a compute context on a GPU, as the driver names it (a host PID)."""

    pid: int
    used_bytes: float | None  # GPU memory it holds; None where the driver does not say
    mps_client: bool = False  # named by the MPS list: a client of an MPS server, not the server


@dataclass(frozen=True)
class GpuMemory:
    """A GPU's memory as ``nvidia-smi`` shows it: ``used`` without the driver's reserve."""

    used_bytes: float
    total_bytes: float


def gpu_memory(nv: Any, handle: Any) -> GpuMemory:
    """The GPU's used and total memory, from NVML's version-2 memory call where there is one.

    Why not the plain call: version 1 counts the memory the driver reserves for itself as used,
    hundreds of MiB on an idle NVIDIA H200 (``tools/gpu-validate.sh``; the figures:
    ``docs/gpu-validation.md``), which the agent would report as a pod-less GPU's use.
    Version 2 gives the reserve apart and ``used`` without it; ``total`` is the same in both.
    A binding or driver without version 2 gets the version-1 figures."""
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            return GpuMemory(float(info.used), float(info.total))
        except Exception as exc:  # driver older than the binding: the plain call below
            log.debug("NVML: memory info version 2 unavailable: %s", exc)
    info = nv.nvmlDeviceGetMemoryInfo(handle)
    return GpuMemory(float(info.used), float(info.total))


def gpu_processes(nv: Any, handle: Any) -> list[GpuProcess]:
    """Every compute process on the GPU ``handle``, MPS clients included, one entry per PID
    (with the larger memory figure where both lists name it). A list the driver cannot give is
    skipped; when neither can be read the result is empty."""
    merged: dict[int, float | None] = {}
    clients: set[int] = set()
    for name in PROCESS_LISTS:
        call = getattr(nv, name, None)
        if call is None:
            continue
        try:
            procs = call(handle)
        except Exception as exc:  # not supported, or the GPU does not answer
            log.debug("NVML: %s unavailable: %s", name, exc)
            continue
        for p in procs:
            pid = int(p.pid)
            raw = getattr(p, "usedGpuMemory", None)
            used = float(raw) if raw is not None else None
            old = merged.get(pid)
            merged[pid] = used if old is None else max(old, used or 0.0)
            if name == PROCESS_LISTS[1]:
                clients.add(pid)
    return [GpuProcess(pid, used, pid in clients) for pid, used in merged.items()]


def process_sm_util(nv: Any, handle: Any, since: int) -> tuple[list[tuple[int, float]], int]:
    """Per-process SM utilisation samples (PID, percent) newer than ``since`` (the driver's
    microsecond timestamp), and the newest timestamp seen (``since`` when there is none).
    Raises what NVML raises where per-process utilisation is unsupported or no sample is new,
    so each caller decides its fallback."""
    newest = since
    out: list[tuple[int, float]] = []
    for s in nv.nvmlDeviceGetProcessUtilization(handle, since):
        newest = max(newest, int(s.timeStamp))
        out.append((int(s.pid), float(s.smUtil)))
    return out, newest


@dataclass(frozen=True)
class ProcessUtilSample:
    """One entry of ``nvmlDeviceGetProcessUtilization``: a process's SM utilisation (percent)
    over one of the driver's sample periods, stamped with the driver's CPU timestamp (us)."""

    pid: int
    timestamp: int
    sm_util: float


def process_util_samples(nv: Any, handle: Any, since: int) -> tuple[list[ProcessUtilSample], int]:
    """Every per-process sample newer than ``since`` (the driver's microsecond timestamp) with
    its timestamp, and the newest timestamp seen (``since`` when there is none). Raises what
    NVML raises where per-process utilisation is unsupported or no sample is new. Values
    outside 0..100 (a driver's garbage) are clipped, never summed as they come."""
    newest = since
    out: list[ProcessUtilSample] = []
    for s in nv.nvmlDeviceGetProcessUtilization(handle, since):
        ts = int(s.timeStamp)
        if ts <= since:  # some drivers hand back the sample at ``since`` again
            continue
        newest = max(newest, ts)
        out.append(ProcessUtilSample(int(s.pid), ts, max(0.0, min(100.0, float(s.smUtil)))))
    return out, newest


def busy_share_scale(process_sum: float, gpu_util: float | None) -> float:
    """The factor that turns processes' SM utilisations into their shares of the GPU's busy
    time: ``gpu_util / process_sum`` when the processes add up to more than the GPU itself was
    busy, else 1 (same units for both: fractions or percent).

    Why: under time-slicing NVML reads each process's SM utilisation over the periods in which
    it held the GPU, not as a share of the GPU. On an NVIDIA H200 (``horus predictor
    measure``) two GPU-bound jobs in a pair each read nearly 100 % while each ran well below
    its solo speed, so a pod's utilisation in the pair over alone read at or above 1, every
    pair at no slowdown (``benchmarks/results/gpu-validation/measure.json``). The GPU's busy
    time is finite (what the simulated backend also assumes), so the sum is split in
    proportion, and the same pairs read close to their speeds
    (``benchmarks/results/gpu-validation/measure-busy-share.json``). A sum at or under the
    GPU's figure is left alone (MPS, where clients have no samples, and jobs that leave the
    GPU idle)."""
    if gpu_util is None or gpu_util <= 0 or process_sum <= gpu_util:
        return 1.0
    return gpu_util / process_sum


def mean_sm_util(samples: Iterable[ProcessUtilSample]) -> dict[int, float]:
    """Each process's SM utilisation over the read window, in percent: the *mean* of its
    samples (one per distinct timestamp; a repeated timestamp is one sample, the last kept).

    Why a mean: the driver keeps a sample per process per sample period (about 1/6 s), so one
    5 s agent cycle returns tens of samples per process. Summing them reads every busy
    process at 100 % and every pair speed near 1; the measuring harness (``horus predictor
    measure``) always averaged. A pod's utilisation is the sum of these means over its
    processes (:func:`horus.agent.nvml.pod_sm_util`)."""
    per: dict[int, dict[int, float]] = {}
    for s in samples:
        per.setdefault(s.pid, {})[s.timestamp] = s.sm_util
    return {pid: sum(v.values()) / len(v) for pid, v in per.items() if v}
