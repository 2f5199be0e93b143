"""The NVML backend: physical GPUs through ``nvidia-ml-py`` (import name ``pynvml``).

Per GPU it reads utilisation, memory used/total and health; per process the GPU memory it holds
(compute processes and MPS clients, ``horus.common.nvml``) and, where the driver supports it,
its SM utilisation (``nvmlDeviceGetProcessUtilization``: several samples per process per
cycle, averaged over time per process, then summed over a pod's processes — :func:`pod_sm_util`).
A process is mapped to its pod through
``/proc/<pid>/cgroup``: kubelet puts every container in a cgroup whose path carries the pod UID
(``…/kubepods-burstable-pod<uid with _>.slice/…`` with the systemd driver,
``/kubepods/burstable/pod<uid>/<container>`` with cgroupfs). NVML reports host PIDs, so the
agent's DaemonSet needs ``hostPID: true`` (or ``proc_root`` pointing at the host's /proc).

When NVML cannot load (no driver, no ``libnvidia-ml.so.1``, or the package missing) the
constructor raises :class:`BackendUnavailable` with a message that says what to check; the agent
keeps running and retries, instead of crash-looping.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from horus.agent.backend import BackendUnavailable, GpuSample, NodeSample, NodeView, PodSample
from horus.agent.pods import PodInfo
from horus.common.constants import BACKEND_NVML
from horus.common.nvml import (
    ProcessUtilSample,
    busy_share_scale,
    gpu_memory,
    gpu_processes,
    mean_sm_util,
    process_util_samples,
)
from horus.predictor.interface import GraphProfile

log = logging.getLogger("horus.agent.nvml")

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in the contents of a ``/proc/<pid>/cgroup`` file, or None (not a pod)."""
    for line in text.splitlines():
        m = _POD_UID.search(line)
        if m:
            return m.group(1).replace("_", "-")
    return None


def pod_uid_of_pid(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    try:
        return pod_uid_from_cgroup((proc_root / str(pid) / "cgroup").read_text())
    except OSError:
        return None


def pod_sm_util(
    samples: Iterable[ProcessUtilSample],
    pid_pod: Mapping[int, str],
    gpu_util: float | None = None,
) -> dict[str, float]:
    """Each pod's utilisation of one GPU over one read window, 0..1 of the GPU: the time
    average of each of its processes (:func:`horus.common.nvml.mean_sm_util`), summed over the
    pod's processes, at most 1. Processes of no wanted pod (``pid_pod`` lacks them) are left
    out; a pod none of whose processes has a sample in the window is absent.

    The driver returns several samples per process per agent cycle; adding them all up
    (``util[uid] += sm_util / 100``) would clip every busy pod at 100 %. Averaging first,
    then summing over processes, reads what the GPU gave the pod.

    ``gpu_util`` (0..1, the GPU's own figure for the window): where every process on the GPU
    (a pod's or not) adds up to more, each is scaled to its share of the GPU's busy time
    (:func:`horus.common.nvml.busy_share_scale`: under time-slicing each process reads about
    the whole GPU, measured on an H200).
    """
    means = mean_sm_util(samples)
    scale = busy_share_scale(sum(means.values()) / 100.0, gpu_util)
    out: dict[str, float] = {}
    for pid, percent in means.items():
        uid = pid_pod.get(pid)
        if uid is not None:
            out[uid] = out.get(uid, 0.0) + percent / 100.0 * scale
    return {uid: min(1.0, u) for uid, u in out.items()}


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise BackendUnavailable(
            "NVML backend: the Python package nvidia-ml-py (import pynvml) is not installed; "
            "install it (pip install nvidia-ml-py) or run with --backend simulated on simulated "
            "nodes"
        ) from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise BackendUnavailable(
            f"NVML backend: NVML did not initialise ({exc}). Is the NVIDIA driver installed and "
            "was the agent's container started with the NVIDIA runtime (libnvidia-ml.so.1 "
            "visible)? On a node without GPUs use --backend simulated."
        ) from exc
    return pynvml


class NvmlBackend:
    """Reads the node's physical GPUs; see the module docstring."""

    def __init__(self, proc_root: Path = Path("/proc"), nvml: Any = None) -> None:
        self._nvml = nvml if nvml is not None else _load_pynvml()
        self._proc_root = proc_root
        self._last_seen: dict[int, int] = {}

    @property
    def name(self) -> str:
        return BACKEND_NVML

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def sample(
        self,
        node: NodeView,
        pods: Sequence[PodInfo],
        profiles: Mapping[str, GraphProfile] | None = None,
    ) -> NodeSample:
        nv = self._nvml
        wanted = {p.uid for p in pods}
        gpus: list[GpuSample] = []
        mem: dict[str, float] = {}
        util_by_gpu: dict[str, list[float]] = {}  # pod → its utilisation of each GPU
        pods_on_gpu: dict[int, set[str]] = {}
        for index in range(int(nv.nvmlDeviceGetCount())):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = self._text(nv.nvmlDeviceGetUUID(handle))
            model = self._text(nv.nvmlDeviceGetName(handle))
            healthy = True
            try:
                rates = nv.nvmlDeviceGetUtilizationRates(handle)
                meminfo = gpu_memory(nv, handle)
                gpu_util, used, total = (
                    float(rates.gpu) / 100.0,
                    meminfo.used_bytes,
                    meminfo.total_bytes,
                )
            except Exception as exc:  # GPU lost / fallen off the bus: unhealthy
                log.warning("NVML: GPU %d (%s) does not answer: %s", index, uuid, exc)
                healthy, gpu_util, used, total = False, 0.0, 0.0, 0.0
            gpus.append(GpuSample(index, uuid, model, gpu_util, used, total, healthy))
            if not healthy:
                continue
            pid_pod: dict[int, str] = {}
            for proc in gpu_processes(nv, handle):  # MPS clients included
                uid = pod_uid_of_pid(proc.pid, self._proc_root)
                if uid is None or uid not in wanted:
                    continue
                pid_pod[proc.pid] = uid
                pods_on_gpu.setdefault(index, set()).add(uid)
                if proc.used_bytes is not None:
                    mem[uid] = mem.get(uid, 0.0) + proc.used_bytes
            per_pod: dict[str, float] = {}
            with contextlib.suppress(Exception):  # unsupported, or no sample since the last call
                samples, self._last_seen[index] = process_util_samples(
                    nv, handle, self._last_seen.get(index, 0)
                )
                per_pod = pod_sm_util(samples, pid_pod, gpu_util)
            on_gpu = pods_on_gpu.get(index, set())
            if per_pod:
                # NVML lists only processes that used the GPU in a sample period: a pod beside
                # one that did, with no sample of its own, was idle
                per_pod = {uid: per_pod.get(uid, 0.0) for uid in on_gpu}
            elif len(on_gpu) == 1:
                # No sample for any pod here: unsupported, or MPS, where NVML attributes the
                # samples to the MPS server, not its clients (docs/gpu-validation.md).
                # A pod alone gets the GPU's utilisation; shared GPUs leave it unknown.
                per_pod = {next(iter(on_gpu)): gpu_util}
            for uid, u in per_pod.items():
                util_by_gpu.setdefault(uid, []).append(u)
        # A pod on several GPUs: its mean over them (a pod's utilisation is 0..1 of a GPU).
        util = {uid: sum(v) / len(v) for uid, v in util_by_gpu.items()}
        samples_out = {
            uid: PodSample(memory_used_bytes=mem.get(uid, 0.0), utilization=util.get(uid))
            for uid in wanted
        }
        return NodeSample(node=node.name, backend=self.name, gpus=gpus, pods=samples_out)
