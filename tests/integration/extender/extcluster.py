"""The handle the extender integration tests get: cluster, extender server, API clients."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from horus.devcluster.cluster import LocalCluster
from horus.operator.extender import ExtenderServer


@dataclass
class ExtenderCluster:
    """The cluster, its extender and helpers for the tests."""

    local: LocalCluster
    kubeconfig: str
    bin_dir: Path
    server: ExtenderServer
    api: Any
    core: Any
    nodes: list[str]
    #: The extender's TLS files (ca.crt, client.crt, …), as kube-scheduler's tlsConfig uses them.
    pki: dict[str, Path]

    def kubectl(self, *args: str, input: str | None = None) -> str:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def wait_for(
        self, what: str, check: Callable[[], Any], timeout: float = 90.0, every: float = 0.3
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(every)
