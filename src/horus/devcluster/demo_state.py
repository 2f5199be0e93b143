"""What the demo is asked to be (``DemoOptions``) and what it started (``DemoState``), plus the
one way it runs ``kubectl`` and ``helm`` against its own cluster.

Why a module of its own: ``up`` and ``down`` run in *different* processes — ``down`` only
knows what ``up`` recorded in ``demo.json`` — so the recorded state is the contract between
the demo's start-up (``demo_startup``), its watch (``demo_table``) and its teardown
(``demo``), and each of them reads it from here rather than from one another.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horus.common.errors import ClusterError
from horus.devcluster.processes import ManagedProcess, load_state_fields, save_state

STATE_FILE = "demo.json"
REPORT_FILE = "report.png"


def default_dir() -> Path:
    env = os.environ.get("HORUS_DEMO_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "horus" / "demo"


@dataclass(frozen=True)
class DemoOptions:
    """How big the demo is and how long it watches."""

    directory: Path
    #: The test suite's variant: 2 nodes × 2 GPUs, the examples only, a shorter watch.
    quick: bool = False
    nodes: int = 3
    gpus_per_node: int = 4
    #: Longest time the live table refreshes before the report is drawn anyway.
    watch_seconds: float = 150.0
    #: Seconds of metrics the report shows at least after every job has settled (running,
    #: or refused/queued with a reason).
    min_history_seconds: float = 40.0
    #: Fixed Prometheus port (0: a free one).
    prometheus_port: int = 0
    #: Seconds between live-table refreshes.
    refresh_seconds: float = 2.0
    #: kwok nodes (no containers; the operator and agent run as local processes) instead of
    #: real kubelet nodes with Horus in-cluster. For machines where root is not available.
    kwok: bool = False

    @classmethod
    def make(cls, directory: Path | None, quick: bool, **overrides: Any) -> DemoOptions:
        base: dict[str, Any] = {"directory": directory or default_dir(), "quick": quick}
        if quick:
            base.update(nodes=2, gpus_per_node=2, watch_seconds=90.0, min_history_seconds=10.0)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass
class DemoState:
    """What ``up`` started; ``down`` (another process, later) reads it."""

    directory: str
    cluster_dir: str
    kubeconfig: str
    bin_dir: str
    prometheus_url: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ManagedProcess] = field(default_factory=list)
    started_at: float = 0.0
    report: str = ""

    def save(self) -> None:
        save_state(Path(self.directory) / STATE_FILE, self)

    @classmethod
    def load(cls, directory: Path) -> DemoState | None:
        raw = load_state_fields(directory / STATE_FILE)
        return None if raw is None else cls(**raw)


def kubectl(
    state: DemoState, *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``kubectl`` of the demo's cluster, as its admin."""
    return run_tool(state, "kubectl", args, input=input, check=check)


def helm(state: DemoState, *args: str) -> subprocess.CompletedProcess[str]:
    """``helm`` of the demo's cluster, its caches kept in the demo folder."""
    return run_tool(state, "helm", args)


def run_tool(
    state: DemoState,
    tool: str,
    args: Sequence[str],
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECONFIG": state.kubeconfig,
        "HELM_CACHE_HOME": str(Path(state.directory) / "helm" / "cache"),
        "HELM_CONFIG_HOME": str(Path(state.directory) / "helm" / "config"),
        "HELM_DATA_HOME": str(Path(state.directory) / "helm" / "data"),
    }
    proc = subprocess.run(
        [str(Path(state.bin_dir) / tool), *args],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if check and proc.returncode != 0:
        raise ClusterError(f"{tool} {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc
