"""The one interface every GPU backend implements, and the samples it returns.

Two backends stand behind it: :mod:`horus.agent.nvml` reads physical GPUs, and
:mod:`horus.agent.simulated` stands in for them on kwok nodes and in CI. Everything downstream
(exporter, watchdog, feedback) sees only :class:`NodeSample`, so it is tested once against the
simulated backend and runs unchanged on real GPUs. Each sample carries its backend's name,
which the exporter turns into a ``backend`` label: simulated numbers can never pass for measured
ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from horus.agent.pods import PodInfo
from horus.api.inventory import GpuDevice
from horus.predictor.interface import GraphProfile


class BackendUnavailable(Exception):
    """The backend cannot run here (e.g. no NVML); the message says why and what to do."""


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str
    model: str
    utilization: float  # 0..1
    memory_used_bytes: float
    memory_total_bytes: float
    healthy: bool = True


@dataclass(frozen=True)
class PodSample:
    memory_used_bytes: float
    utilization: float | None  # 0..1 of the whole GPU; None when the backend cannot tell


@dataclass(frozen=True)
class NodeSample:
    node: str
    backend: str
    gpus: list[GpuSample]
    pods: dict[str, PodSample] = field(default_factory=dict)  # by pod UID


@dataclass(frozen=True)
class NodeView:
    """A node as the agent sees it: name and (for simulated nodes) its inventory."""

    name: str
    inventory: list[GpuDevice]


class UsageSampler(Protocol):
    """Samples the GPUs of one node and the use of each pod on them."""

    @property
    def name(self) -> str: ...

    def sample(
        self,
        node: NodeView,
        pods: Sequence[PodInfo],
        profiles: Mapping[str, GraphProfile] | None = None,
    ) -> NodeSample:
        """One reading of ``node``; ``profiles`` (by pod UID) are the pods' graph profiles
        where known (the simulated backend's interference model uses them)."""
        ...

    def close(self) -> None: ...
