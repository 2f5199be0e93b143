"""Fixtures of the agent's integration tests: kwok GPU nodes, the DLJob CRD, a signing key and
a real Prometheus (the one tools/controlplane/build.sh builds, as the demo runs) on a free
loopback port."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from horus.devcluster import prometheus

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, folder: Path, target: str) -> None:
        self.port = free_port()
        cfg = folder / "prometheus.yml"
        cfg.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: horus-agent\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = (folder / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                str(prometheus.binary()),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = self.query(expr)
                if result:
                    return result
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"prometheus: no series for {expr} after {timeout}s ({last})")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Any]:
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        p = Prometheus(tmp_path, target)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
