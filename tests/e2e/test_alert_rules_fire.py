"""The alert rules loaded into a real Prometheus, fed by real operators on the real control
plane: while a replica holds the Lease the no-leader alert stays quiet — also across a
fail-over to the standby — and once no replica leads it fires.

The rule file is the shipped one; only each rule's ``for:`` is shortened (to 10 s, still well
above the 4 s Lease the test's operators use, as the shipped 2 min are above the default 15 s)
so the test does not wait minutes; the expressions are untouched. ``tests/unit/packaging/test_alerts.py``
covers every alert with synthetic series.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import ROOT, write_fast_alert_rules

from horus.api.signing import SigningKey
from horus.common import constants as c
from horus.devcluster import prometheus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def _wait(what: str, check: Callable[[], Any], timeout: float, procs: list[Any]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            assert p.poll() is None, f"{p.args[0]} … exited while waiting for {what}"
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


class Procs:
    """Processes this test started, stopped (SIGTERM, then SIGKILL) whatever happens."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.started.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def close(self) -> None:
        for name, proc in reversed(self.started):
            self.stop(proc)
            log = (self.folder / f"{name}.log").read_text(errors="replace")
            print(f"=== {name} log (tail) ===\n{log[-2500:]}")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


def test_no_leader_alert_fires_when_the_last_leader_stops(cluster, procs, tmp_path):
    cluster.apply_crds(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml", c.DLJOB_CRD_NAME)
    key = tmp_path / "private.pem"  # the operators' own signing key (Ed25519, PEM)
    key.write_bytes(SigningKey.generate().to_pem())
    lease = f"alerts-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
    env["PYTHONUNBUFFERED"] = "1"
    ports = {name: _free_port() for name in ("op-a", "op-b", "prometheus")}
    operators = {}
    for name in ("op-a", "op-b"):
        operators[name] = procs.start(
            name,
            [sys.executable, "-m", "horus.operator", "--kubeconfig", cluster.kubeconfig,
             "--namespace", "default", "--lease-name", lease, "--lease-duration", "4",
             "--resync-period", "2", "--identity", name, "--assignment-key-file", str(key),
             "--key-publish-delay", "0",
             "--metrics-host", "127.0.0.1", "--metrics-port", str(ports[name])],
            env,
        )  # fmt: skip

    rules = write_fast_alert_rules(tmp_path / "rules.yaml", interval="1s")
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(tmp_path / "rules.yaml")],
                "scrape_configs": [
                    {
                        "job_name": "horus-operator",
                        "static_configs": [
                            {
                                "targets": [
                                    f"127.0.0.1:{ports['op-a']}",
                                    f"127.0.0.1:{ports['op-b']}",
                                ]
                            }
                        ],
                    }
                ],
            }
        )
    )
    url = f"http://127.0.0.1:{ports['prometheus']}"
    prom = procs.start(
        "prometheus",
        [str(prometheus.binary()), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{ports['prometheus']}"],
        env,
    )  # fmt: skip
    alive = [prom, *operators.values()]

    def query(expr: str) -> list[dict[str, Any]]:
        return list(
            _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]
        )

    def alert_state(name: str) -> str:
        for a in _get(f"{url}/api/v1/alerts")["data"]["alerts"]:
            if a["labels"]["alertname"] == name:
                return str(a["state"])
        return "inactive"

    # the rules loaded: Prometheus lists every alert of the shipped file
    groups = _wait("rules loaded", lambda: _get(f"{url}/api/v1/rules")["data"]["groups"], 60, alive)
    names = {r["name"] for g in groups for r in g["rules"]}
    assert names == {r["alert"] for g in rules["groups"] for r in g["rules"]}

    def leaders() -> dict[str, float]:
        return {
            r["metric"]["instance"]: float(r["value"][1]) for r in query(c.METRIC_OPERATOR_LEADER)
        }

    _wait(
        "both replicas scraped, one leading",
        lambda: sorted(leaders().values()) == [0, 1],
        120,
        alive,
    )
    time.sleep(12)  # longer than the shortened for: — a quiet rule would have fired by now
    assert alert_state("HorusOperatorNoLeader") == "inactive"
    assert alert_state("HorusOperatorSeveralLeaders") == "inactive"

    # fail-over: stop the leader; the standby takes the Lease and the alert stays quiet
    first = next(i for i, v in leaders().items() if v == 1)
    name = "op-a" if first.endswith(f":{ports['op-a']}") else "op-b"
    other = "op-b" if name == "op-a" else "op-a"
    stopped_at = time.time()
    procs.stop(operators[name])
    alive = [prom, operators[other]]
    _wait(
        "the standby to lead",
        lambda: leaders().get(f"127.0.0.1:{ports[other]}") == 1.0,
        60,
        alive,
    )
    time.sleep(12)
    # never firing across the hand-over (ALERTS keeps the history, /api/v1/alerts only now)
    firing = 'ALERTS{alertname="HorusOperatorNoLeader", alertstate="firing"}'
    # (before the operators were first scraped it may have fired: count from the stop on)
    since = int(time.time() - stopped_at) + 1
    assert query(f"count_over_time({firing}[{since}s])") == [], "a fail-over raised the alert"
    assert alert_state("HorusOperatorNoLeader") == "inactive"

    # the last leader stops: nobody holds the Lease, the alert fires
    procs.stop(operators[other])
    alive = [prom]
    _wait(
        "HorusOperatorNoLeader firing",
        lambda: alert_state("HorusOperatorNoLeader") == "firing",
        90,
        alive,
    )
    (fired,) = [
        a
        for a in _get(f"{url}/api/v1/alerts")["data"]["alerts"]
        if a["labels"]["alertname"] == "HorusOperatorNoLeader"
    ]
    assert fired["labels"]["severity"] == "critical"
    assert "no DLJob is placed" in fired["annotations"]["description"]
