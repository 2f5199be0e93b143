"""The GPU as the measuring harness sees it: readings through NVML (device utilisation,
per-process SM utilisation and memory, as the node agent reads them), their summary over a
measurement window, and the machine's MPS state (a sharing mode it contradicts is refused
before anything runs)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from horus.common.constants import BACKEND_NVML, MIB
from horus.common.errors import ValidationError
from horus.common.nvml import gpu_memory, gpu_processes, process_sm_util

SHARING_TIME_SLICING, SHARING_MPS = "time-slicing", "mps"
SHARING_MODES = (SHARING_TIME_SLICING, SHARING_MPS)


@dataclass(frozen=True)
class Reading:
    """One look at the GPU: device utilisation (percent, None when unknown), and per process
    its SM utilisation (percent) and GPU memory (MiB), where the driver reports them."""

    gpu_util: float | None
    proc_util: Mapping[int, float] = field(default_factory=dict)
    proc_mem_mib: Mapping[int, float] = field(default_factory=dict)
    gpu_mem_mib: float | None = None  # memory used on the whole GPU


class GpuSampler(Protocol):
    """What the harness needs from the GPU; :class:`NvmlSampler` on a real one."""

    @property
    def backend(self) -> str: ...

    @property
    def gpu_name(self) -> str | None:
        """The GPU's model name, or None when there is no GPU (a dry run)."""
        ...

    def read(self, pids: Sequence[int]) -> Reading:
        """One reading; per-process figures only for ``pids`` (the workers' NVML PIDs)."""
        ...

    def pids(self) -> set[int]:
        """The PIDs of the compute processes on the GPU, as the driver reports them."""
        ...


class NoGpuSampler:
    """``--device cpu``: nothing to read."""

    backend = "none"
    gpu_name: str | None = None

    def read(self, pids: Sequence[int]) -> Reading:
        return Reading(None)

    def pids(self) -> set[int]:
        return set()


class NvmlSampler:
    """Reads GPU ``index`` through NVML (``nvidia-ml-py``) with the agent's process readers
    (``horus.common.nvml``): device utilisation, per-process memory (compute processes and MPS
    clients) and per-process SM utilisation (where the driver supports it)."""

    backend = BACKEND_NVML

    def __init__(self, index: int, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                raise ValidationError(
                    "measuring on a GPU needs nvidia-ml-py (pip install nvidia-ml-py)"
                ) from None
            nvml = pynvml
            try:
                nvml.nvmlInit()
            except Exception as exc:
                raise ValidationError(
                    f"NVML did not initialise ({exc}); is the NVIDIA driver installed? "
                    "Use --device cpu for a dry run without a GPU"
                ) from None
        self._nvml = nvml
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            raise ValidationError(f"NVML has no GPU {index}: {exc}") from None
        name = nvml.nvmlDeviceGetName(self._handle)
        self._name = name.decode() if isinstance(name, bytes) else str(name)
        self._last_seen = 0

    @property
    def gpu_name(self) -> str | None:
        return self._name

    def pids(self) -> set[int]:
        """The compute processes; once MPS clients are listed, only those: the MPS server that
        starts with the first client is never a worker, and would make its match ambiguous."""
        procs = gpu_processes(self._nvml, self._handle)
        return {p.pid for p in procs if p.mps_client} or {p.pid for p in procs}

    def read(self, pids: Sequence[int]) -> Reading:
        nv, h = self._nvml, self._handle
        wanted = set(pids)
        gpu_util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        gpu_mem: float | None = None
        with contextlib.suppress(Exception):
            gpu_mem = gpu_memory(nv, h).used_bytes / MIB
        mem = {
            p.pid: p.used_bytes / MIB
            for p in gpu_processes(nv, h)
            if p.used_bytes is not None and p.pid in wanted
        }
        util: dict[int, list[float]] = {}
        with contextlib.suppress(Exception):  # unsupported, or no sample since the last call
            samples, self._last_seen = process_sm_util(nv, h, self._last_seen)
            for pid, sm_util in samples:
                if pid in wanted:
                    util.setdefault(pid, []).append(sm_util)
        return Reading(gpu_util, {p: sum(v) / len(v) for p, v in util.items()}, mem, gpu_mem)


@dataclass
class Window:
    """Readings taken while the workers' windows ran, summarised."""

    gpu_util: list[float] = field(default_factory=list)
    proc_util: dict[int, list[float]] = field(default_factory=dict)
    mem_peak: dict[int, float] = field(default_factory=dict)
    gpu_mem_peak: float | None = None
    idle_mem: float | None = None  # GPU memory used before the workers started

    def add(self, r: Reading) -> None:
        if r.gpu_util is not None:
            self.gpu_util.append(r.gpu_util)
        if r.gpu_mem_mib is not None:
            self.gpu_mem_peak = max(self.gpu_mem_peak or 0.0, r.gpu_mem_mib)
        for pid, u in r.proc_util.items():
            self.proc_util.setdefault(pid, []).append(u)
        for pid, m in r.proc_mem_mib.items():
            self.mem_peak[pid] = max(self.mem_peak.get(pid, 0.0), m)

    def util(self) -> float | None:
        return sum(self.gpu_util) / len(self.gpu_util) if self.gpu_util else None

    def util_of(self, pid: int | None) -> float | None:
        v = self.proc_util.get(pid) if pid is not None else None
        return sum(v) / len(v) if v else None

    def mem_of(self, pid: int | None) -> float | None:
        return self.mem_peak.get(pid) if pid is not None else None


def mps_daemon_answers(binary: str = "nvidia-cuda-mps-control") -> bool | None:
    """Whether an MPS control daemon answers ``get_server_list`` (through the
    ``CUDA_MPS_PIPE_DIRECTORY`` of this process, which the workers inherit); None when the
    binary is not on PATH."""
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        rc = subprocess.run(
            [path], input="get_server_list\n", capture_output=True, text=True, timeout=10
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return False
    return rc == 0


def check_mps_daemon(sharing: str, binary: str = "nvidia-cuda-mps-control") -> None:
    """Refuse a sharing mode the machine's MPS state contradicts, before anything runs.

    ``--sharing mps`` needs a daemon: the workers run as its clients, as Horus pods do. Plain
    time-slicing needs there to be *none*: while a control daemon runs, every CUDA process that
    can reach it becomes its client on its own, so the rows would be MPS measurements filed as
    time-slicing."""
    answers = mps_daemon_answers(binary)
    if sharing == SHARING_MPS and answers is None:
        raise ValidationError(
            f"--sharing mps needs {binary} on PATH (the NVIDIA driver's MPS tools)"
        )
    if sharing == SHARING_MPS and not answers:
        raise ValidationError(
            "--sharing mps: no MPS control daemon answers; start one first "
            f"({binary} -d, with the same CUDA_MPS_PIPE_DIRECTORY as this shell)"
        )
    if sharing == SHARING_TIME_SLICING and answers:
        raise ValidationError(
            "an MPS control daemon is running, so every worker would become its client and "
            "the rows would be MPS measurements filed as time-slicing; stop it "
            f"(echo quit | {binary}) or measure with --sharing mps"
        )


def gpu_index(device: str) -> int:
    """The NVML index of ``--device`` (cuda → 0, cuda:N → N)."""
    return int(device[5:]) if device.startswith("cuda:") else 0
