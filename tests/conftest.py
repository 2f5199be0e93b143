"""Shared pytest fixtures.

``cluster`` brings one real local control plane (etcd, kube-apiserver, controller-manager,
kube-scheduler, kwok — see ``horus.devcluster``) up once per test session, in a private
folder, and tears it down at the end. Tests under ``tests/integration`` and ``tests/e2e`` are
marked automatically; unit tests never touch it. Set ``HORUS_TEST_CLUSTER_DIR`` to keep the
cluster's folder somewhere you can inspect.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horus.devcluster.cluster import DevClusterState, LocalCluster

ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test left watch threads behind (``informer-*``): they retry and log
    against clusters that are gone, into other tests' captured output, and at interpreter exit
    a daemon thread writing to stderr aborts the process (CI once ended "Aborted", exit 134)."""
    deadline = time.monotonic() + 20  # a stopped watch ends at its connection's next read
    while True:
        left = [t.name for t in threading.enumerate() if t.name.startswith("informer-")]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if left:
        print(f"\nwatch threads still running after the tests: {sorted(left)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[1]))


@dataclass
class RunningCluster:
    """Handle on the session's control plane."""

    local: LocalCluster
    state: DevClusterState

    @property
    def kubeconfig(self) -> str:
        return self.state.kubeconfig

    @property
    def bin_dir(self) -> Path:
        return Path(self.state.bin_dir)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "PATH": f"{self.bin_dir}:{os.environ['PATH']}",
        }

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), *args],
            env=self.env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    def apply_crds(self, path: Path | str, name: str, timeout: float = 60.0) -> None:
        """``kubectl apply -f path``, then wait until CRD ``name`` is Established.

        Polls the condition itself: ``kubectl wait --for=condition=Established`` errors out
        instead of waiting when a just-created CRD has no ``status.conditions`` yet.
        """
        self.kubectl("apply", "-f", str(path))
        query = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.kubectl("get", "crd", name, "-o", f"jsonpath={query}", check=False)
            if got.returncode == 0 and got.stdout.strip() == "True":
                return
            time.sleep(0.2)
        raise AssertionError(f"CRD {name} not Established within {timeout:.0f}s")

    def diagnose(self, namespace: str) -> str:
        """What a failed wait on kwok needs in its message: pods, nodes, live components, logs."""
        parts = [
            self.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout,
            self.kubectl("get", "nodes", "-o", "wide", check=False).stdout[-3000:],
            self.kubectl(
                "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False
            ).stdout[-3000:],
        ]
        for proc in self.state.processes:
            alive = Path(f"/proc/{proc.pid}").exists()
            parts.append(f"{proc.name} pid {proc.pid}: {'alive' if alive else 'GONE'}")
            if proc.name == "kwok" and Path(proc.log).exists():
                parts.append(Path(proc.log).read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def api_client(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=self.kubeconfig)


@pytest.fixture(scope="session")
def cluster() -> Iterator[RunningCluster]:
    keep = os.environ.get("HORUS_TEST_CLUSTER_DIR")
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="horus-test-cluster-")) / "c"
    local = LocalCluster(folder)
    state = local.up(timeout=180)
    try:
        yield RunningCluster(local, state)
    finally:
        local.down()
