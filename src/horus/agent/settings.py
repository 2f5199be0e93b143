"""The agent's settings: one frozen dataclass, loaded with :func:`horus.common.settings.load_settings`.

Precedence (as for every role): command line > environment (``HORUS_AGENT_<FIELD>``, plus the
DaemonSet convention ``NODE_NAME`` for ``node_name``) > the ``agent:`` section of the config
file > the defaults below. Each field documents itself because an operator reading a DaemonSet
manifest should not have to read the agent's code to know what a flag does.

Which nodes one agent serves: exactly one of ``node_name`` (the normal case, one agent per node,
real or simulated), ``nodes`` (a comma-separated list) or ``node_selector`` (a label selector,
re-evaluated every cycle). The last two exist for kwok demos and CI, where one process stands in
for the agents of many simulated nodes; they require the simulated backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from horus.common.constants import (
    MPS_LOG_DIRECTORY_DEFAULT,
    MPS_PIPE_DIRECTORY_DEFAULT,
    PLACEMENT_PATH_DEVICE_PLUGIN,
    PlacementPath,
)
from horus.common.errors import ConfigError
from horus.common.settings import check_range, check_seconds
from horus.progress.mount import DEFAULT_HOST_ROOT

SECTION = "agent"

Backend = Literal["auto", "nvml", "simulated"]
Enforcement = Literal["none", "mps"]
WatchdogMode = Literal["off", "report", "evict"]


@dataclass(frozen=True)
class AgentSettings:
    """Settings of ``horus agent run``."""

    node_name: str = ""
    """The one node this agent serves (env ``NODE_NAME`` too, from the downward API)."""
    nodes: str = ""
    """Comma-separated simulated nodes one agent serves (kwok demo/CI only)."""
    node_selector: str = ""
    """Label selector of simulated nodes one agent serves, e.g. ``type=kwok`` (demo/CI only)."""
    placement_path: PlacementPath = PLACEMENT_PATH_DEVICE_PLUGIN
    """Where the shares on the node are read from (the chart sets it from ``gpuSharing.path``):
    ``deviceplugin`` — each pod's signed ``horus.io/gpu-assignment``; ``dra`` — the
    ResourceClaims reserved for the node's pods, as the kube-scheduler allocated them (their
    ``status``, which no tenant can write; docs/agent.md "Where shares come from")."""
    backend: Backend = "auto"
    """``nvml`` (physical GPUs), ``simulated`` (kwok nodes) or ``auto``: NVML when it loads,
    else simulated for kwok nodes."""
    enforcement: Enforcement = "none"
    """``mps``: start and supervise ``nvidia-cuda-mps-control -d`` so core shares are enforced."""
    watchdog: WatchdogMode = "report"
    """Memory watchdog: ``off``, ``report`` (Event + log) or ``evict`` (the pod is deleted)."""
    grace_seconds: float = 30.0
    """How long a pod may stay above its memory share before the watchdog acts."""
    interval_seconds: float = 5.0
    """Sampling period."""
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 9402
    """Prometheus exporter port (0 picks a free one, logged at start)."""
    feedback_interval_seconds: float = 60.0
    """How often observed use is written to the owning DLJobs' ``status.observed``."""
    training_rows: Path | None = None
    """CSV that observed rows are appended to (``horus predictor train --extra-rows``)."""
    pair_rows: Path | None = None
    """CSV that measured pair speeds are appended to (``horus predictor train --extra-pair-rows``)."""
    kubeconfig: Path | None = None
    """Kubeconfig file; in-cluster config when unset."""
    assignment_key_file: Path | None = None
    """The published public keys (``keys.pem`` of the ConfigMap horus-verify-keys, which the
    chart mounts): only assignments that verify are enforced and reported (a pod whose
    assignment stops verifying keeps the share it verified with). Unset: every assignment is
    taken at its word (tools and tests only)."""
    mps_control: str = "nvidia-cuda-mps-control"
    mps_pipe_directory: Path = Path(MPS_PIPE_DIRECTORY_DEFAULT)
    mps_log_directory: Path = Path(MPS_LOG_DIRECTORY_DEFAULT)
    seed: int = 0
    """Seed of the simulated backend's noise."""
    noise: float = 0.05
    """Relative noise (standard deviation) of simulated utilisation."""
    proc_root: Path = Path("/proc")
    """Where host processes are seen (the DaemonSet needs hostPID for NVML pod mapping)."""
    nvml_retry_seconds: float = 60.0
    """How often an unavailable NVML is retried (the agent keeps running meanwhile)."""
    progress_root: Path | None = Path(DEFAULT_HOST_ROOT)
    """Host directory holding each pod's progress directory (``<root>/<pod UID>``, which the
    device plugin mounts into the pod): pair speeds are measured from the jobs' reported
    progress where there is some (docs/agent.md). Unset: utilisation only."""

    def __post_init__(self) -> None:
        chosen = [n for n in ("node_name", "nodes", "node_selector") if getattr(self, n)]
        if len(chosen) > 1:
            raise ConfigError(
                f"set only one of --node-name, --nodes, --node-selector (got {', '.join(chosen)})"
            )
        if not chosen:
            raise ConfigError(
                "no node to serve: set --node-name (or NODE_NAME from the downward API), or for "
                "simulated nodes --nodes a,b or --node-selector type=kwok"
            )
        if (self.nodes or self.node_selector) and self.backend == "nvml":
            raise ConfigError(
                "--backend nvml serves exactly the node it runs on: use --node-name, not "
                "--nodes/--node-selector (those are for simulated nodes)"
            )
        check_seconds("grace_seconds", self.grace_seconds, positive=False)
        check_seconds("interval_seconds", self.interval_seconds)
        check_seconds("feedback_interval_seconds", self.feedback_interval_seconds)
        check_seconds("nvml_retry_seconds", self.nvml_retry_seconds)
        check_range("metrics_port", self.metrics_port, 0, 65535)
        check_range("noise", self.noise, 0.0, 1.0)
        check_range("seed", self.seed, 0, 2**32 - 1)

    @property
    def node_list(self) -> list[str]:
        """The fixed nodes (``node_name`` or ``nodes``); empty when a selector is used."""
        if self.node_name:
            return [self.node_name]
        return [n.strip() for n in self.nodes.split(",") if n.strip()]
