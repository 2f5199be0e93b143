"""GPU discovery for the node roles (device plugin, DRA driver), behind one small interface.

Two backends:

* :class:`NvmlGpus` — the real thing: enumerates GPUs through NVML (``nvidia-ml-py``, import
  name ``pynvml``) and checks their health by querying each device (a GPU that fell off the
  bus or hit a fatal Xid stops answering, or reports it through NVML events).
* :class:`SimulatedGpus` — a **stand-in for NVML on kwok nodes and in CI**, where no GPU
  exists. It invents ``count`` identical GPUs (model and memory from settings) with the same
  stable UUIDs the simulated nodes of ``horus dev cluster add-nodes`` carry, and reads their
  health from an optional JSON file so tests can fail a GPU. Nothing it reports was measured.

When NVML cannot be loaded or initialised the backend raises :class:`GpuDiscoveryError` with a
message that says why and what to do; the caller decides whether that is fatal (see the
``fail_on_init_error`` setting) so a node without a driver does not crash-loop.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from horus.api.inventory import GpuDevice, simulated_gpu_uuid
from horus.common.constants import GPU_HEALTHY, GPU_UNHEALTHY, MIB
from horus.common.documents import load_json, read_text_file
from horus.common.errors import HorusError, ValidationError

log = logging.getLogger(__name__)

# Xid errors after which a GPU cannot be used until reset (NVIDIA k8s-device-plugin keeps the
# same kind of list; application errors such as 13/31/43/45/68 are *not* device faults).
FATAL_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120})


class GpuDiscoveryError(HorusError):
    """The GPUs of this node could not be discovered; the message says why and how to fix it."""


class GpuInventory(Protocol):
    """What the node roles need from a GPU backend."""

    name: str

    def discover(self) -> list[GpuDevice]:
        """Every GPU of the node with its current health (raises GpuDiscoveryError)."""
        ...

    def check_health(self, gpus: list[GpuDevice]) -> list[GpuDevice]:
        """``gpus`` with their health refreshed (never raises for one bad GPU)."""
        ...

    def close(self) -> None: ...


class SimulatedGpus:
    """Stand-in for NVML on kwok nodes and in CI: GPUs that exist only in settings."""

    name = "simulated"

    def __init__(
        self,
        node_name: str,
        count: int,
        model: str,
        memory_mib: int,
        health_file: Path | None = None,
    ) -> None:
        self.node_name = node_name
        self.count = count
        self.model = model
        self.memory_mib = memory_mib
        self.health_file = health_file
        self._overrides: dict[int, str] = {}

    def set_health(self, index: int, health: str) -> None:
        """Force GPU ``index`` Healthy/Unhealthy (tests; the file does the same from outside)."""
        self._overrides[index] = health

    def _file_health(self) -> dict[int, str]:
        if self.health_file is None or not self.health_file.is_file():
            return {}
        try:  # bounded: a test or demo writes this file, but nothing it holds may crash us
            text = read_text_file(self.health_file, max_bytes=64 * 1024) or "{}"
            raw = load_json(text, str(self.health_file), max_bytes=64 * 1024, max_depth=2)
            out = {int(k): str(v) for k, v in dict(raw).items()}
        except (ValidationError, ValueError, TypeError) as exc:
            log.warning("ignoring simulated health file %s: %s", self.health_file, exc)
            return {}
        return {k: v for k, v in out.items() if v in (GPU_HEALTHY, GPU_UNHEALTHY)}

    def discover(self) -> list[GpuDevice]:
        gpus = [
            GpuDevice(
                index=i,
                uuid=simulated_gpu_uuid(self.node_name, i),
                model=self.model,
                memory_mib=self.memory_mib,
            )
            for i in range(self.count)
        ]
        return self.check_health(gpus)

    def check_health(self, gpus: list[GpuDevice]) -> list[GpuDevice]:
        health = {**self._file_health(), **self._overrides}
        return [replace(g, health=health.get(g.index, GPU_HEALTHY)) for g in gpus]

    def close(self) -> None:
        pass


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise GpuDiscoveryError(
            "NVML backend selected but the Python package nvidia-ml-py (import pynvml) is not "
            "installed: pip install nvidia-ml-py, or run with --backend simulated on nodes "
            "without NVIDIA GPUs"
        ) from None
    return pynvml


class NvmlGpus:
    """Real GPUs through NVML. Health: a device that stops answering, or a fatal Xid event."""

    name = "nvml"

    def __init__(self) -> None:
        self._nvml = _import_pynvml()
        try:
            self._nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise GpuDiscoveryError(
                f"NVML could not be initialised ({exc}): is the NVIDIA driver installed and "
                "libnvidia-ml.so.1 visible in this container (NVIDIA container toolkit, or "
                "mount the driver)? On nodes without NVIDIA GPUs run with --backend simulated "
                "or keep the DaemonSet off them (label horus.io/gpu-node)"
            ) from None
        self._events: Any = None
        self._unhealthy: set[str] = set()
        self._setup_events()

    def _setup_events(self) -> None:
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                try:
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._events
                    )
                except Exception as exc:  # not supported on some GPUs (e.g. in VMs)
                    log.info("GPU %d: Xid events unavailable (%s); polling only", i, exc)
        except Exception as exc:
            log.info("NVML events unavailable (%s); health is checked by polling only", exc)
            self._events = None

    def discover(self) -> list[GpuDevice]:
        nvml = self._nvml
        gpus: list[GpuDevice] = []
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            raise GpuDiscoveryError(f"NVML could not count GPUs: {exc}") from None
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                model = _text(nvml.nvmlDeviceGetName(handle)).replace("NVIDIA ", "")
                memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB
            except Exception as exc:
                raise GpuDiscoveryError(f"NVML could not describe GPU {i}: {exc}") from None
            gpus.append(GpuDevice(index=i, uuid=uuid, model=model, memory_mib=memory_mib))
        return self.check_health(gpus)

    def _drain_events(self) -> None:
        nvml = self._nvml
        if self._events is None:
            return
        while True:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except Exception:  # NVMLError_Timeout: no pending event
                return
            xid = int(getattr(data, "eventData", 0))
            if xid in FATAL_XIDS:
                try:
                    uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
                except Exception:
                    continue
                log.error("GPU %s: fatal Xid %d; marking it Unhealthy", uuid, xid)
                self._unhealthy.add(uuid)

    def check_health(self, gpus: list[GpuDevice]) -> list[GpuDevice]:
        nvml = self._nvml
        self._drain_events()
        out: list[GpuDevice] = []
        for g in gpus:
            health = GPU_HEALTHY
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(g.uuid)
                nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:  # GPU lost, fallen off the bus, ...
                log.error("GPU %d (%s) does not answer NVML: %s", g.index, g.uuid, exc)
                health = GPU_UNHEALTHY
            if g.uuid in self._unhealthy:
                health = GPU_UNHEALTHY
            out.append(replace(g, health=health))
        return out

    def close(self) -> None:
        try:
            if self._events is not None:
                self._nvml.nvmlEventSetFree(self._events)
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_backend(
    kind: str,
    node_name: str,
    sim_count: int = 1,
    sim_model: str = "H100",
    sim_memory_mib: int = 81920,
    sim_health_file: Path | None = None,
) -> GpuInventory:
    """The backend named ``kind`` ("nvml" or "simulated"); raises GpuDiscoveryError."""
    if kind == "simulated":
        return SimulatedGpus(node_name, sim_count, sim_model, sim_memory_mib, sim_health_file)
    if kind == "nvml":
        return NvmlGpus()
    raise GpuDiscoveryError(f"unknown GPU backend {kind!r}; use nvml or simulated")


class DiscoverySettings(Protocol):
    """The settings fields GPU discovery reads (the device plugin's and the DRA driver's)."""

    @property
    def backend(self) -> str: ...
    @property
    def node_name(self) -> str: ...
    @property
    def sim_gpu_count(self) -> int: ...
    @property
    def sim_gpu_model(self) -> str: ...
    @property
    def sim_gpu_memory_mib(self) -> int: ...
    @property
    def sim_health_file(self) -> Path | None: ...
    @property
    def fail_on_init_error(self) -> bool: ...
    @property
    def retry_interval_s(self) -> float: ...


def discover_until_found(
    settings: DiscoverySettings, stop: threading.Event
) -> tuple[GpuInventory, list[GpuDevice]] | None:
    """The backend and its GPUs, waiting and retrying on failure (None once ``stop`` is set):
    a node whose driver is not there yet waits instead of crash-looping, unless
    ``fail_on_init_error`` asks for the exit. One loop for both node roles."""
    logged = False
    while not stop.is_set():
        try:
            backend = open_backend(
                settings.backend,
                settings.node_name,
                settings.sim_gpu_count,
                settings.sim_gpu_model,
                settings.sim_gpu_memory_mib,
                settings.sim_health_file,
            )
            gpus = backend.discover()
            if settings.backend == "simulated":
                log.warning(
                    "SIMULATED GPUs (backend=simulated): %d x %s %d MiB stand in for NVML; "
                    "nothing reported here was measured",
                    len(gpus),
                    settings.sim_gpu_model,
                    settings.sim_gpu_memory_mib,
                )
            return backend, gpus
        except GpuDiscoveryError as exc:
            if settings.fail_on_init_error:
                raise
            if not logged:
                log.error(
                    "%s. Not exiting (fail_on_init_error=false): retrying every %gs",
                    exc,
                    settings.retry_interval_s,
                )
                logged = True
            stop.wait(settings.retry_interval_s)
    return None
