"""Prometheus' discovery of the chart's metrics endpoints (horus.devcluster.prometheus), on the
real apiserver: the built ``promtool check service-discovery`` runs the Kubernetes discovery
and relabelling of the demo's and the e2e tests' scrape configuration as its least-privileged
identity, and the targets are exactly the ``metrics`` ports of the chart's annotated metrics
Services — not another port of the same Service, not another annotated Service, not a Service
whose annotation is gone. That identity, used as an attacker would, reads nothing else and
writes nothing.

The Services here have no selector and hand-written EndpointSlices (kwok pods are not
reachable), so only discovery is exercised; the real-node test
``tests/e2e/realnodes/test_1_chart.py`` scrapes real pods found this way.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.common import constants as c
from horus.devcluster import prometheus
from horus.devcluster.chart import KubeCli

OPERATOR_IPS = ("10.244.0.5", "10.244.1.6")
AGENT_IP = "10.244.0.7"
OTHER_IP = "10.244.0.9"


def _service(name: str, ports: dict[str, int], scrape: bool = True) -> dict[str, Any]:
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": annotations if scrape else {}},
        "spec": {"ports": [{"name": n, "port": p} for n, p in ports.items()]},
    }


def _slice(service: str, ips: tuple[str, ...], ports: dict[str, int]) -> dict[str, Any]:
    """An EndpointSlice of ``service``; the second address is not ready (a replica starting),
    which Prometheus scrapes as well."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-x", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": i == 0}} for i, ip in enumerate(ips)
        ],
        "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports.items()],
    }


@pytest.fixture
def namespace(cluster: Any) -> Any:
    name = f"prom-sd-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _targets(config: Path, job: str) -> set[tuple[str, str]]:
    """(instance, metrics path) of each target ``job`` keeps, from the built promtool (a
    discovered target the relabelling drops comes with no labels)."""
    tool = str(prometheus.binary("promtool"))
    got = subprocess.run(
        [tool, "check", "service-discovery", "--timeout=20s", str(config), job],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    kept = [t["labels"] for t in out if t["labels"]]
    assert all(t["job"] == job for t in kept), kept
    return {(t["instance"], t["__metrics_path__"]) for t in kept}


def test_discovery_finds_exactly_the_metrics_ports_of_the_annotated_chart_services(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    operator_ports = {"metrics": 8080, "extender": 8888, "extender-health": 8889}
    docs = [
        _service(c.OPERATOR_METRICS_SERVICE, operator_ports),
        _slice(c.OPERATOR_METRICS_SERVICE, OPERATOR_IPS, operator_ports),
        _service(c.NODE_METRICS_SERVICE, {"metrics": 9402}),
        _slice(c.NODE_METRICS_SERVICE, (AGENT_IP,), {"metrics": 9402}),
        # annotated, port named metrics, but not one of the chart's metrics Services
        _service("someone-else", {"metrics": 9402}),
        _slice("someone-else", (OTHER_IP,), {"metrics": 9402}),
    ]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))
    kube = KubeCli(cluster.kubeconfig, cluster.bin_dir, tmp_path / "helm")
    kubeconfig = prometheus.grant_discovery(
        kube, cluster.state.server, cluster.state.ca_file(), tmp_path / "sd.kubeconfig", namespace
    )
    config = prometheus.write_config(
        tmp_path, prometheus.scrape_configs(kubeconfig, namespace=namespace)
    )
    assert _targets(config, "horus-operator") == {(f"{ip}:8080", "/metrics") for ip in OPERATOR_IPS}
    assert _targets(config, "horus-agent") == {(f"{AGENT_IP}:9402", "/metrics")}

    # the Service's scrape annotation is what opts it in: removed, its endpoints go
    cluster.kubectl(
        "annotate", "service", c.NODE_METRICS_SERVICE, "-n", namespace, "prometheus.io/scrape-"
    )
    assert _targets(config, "horus-agent") == set()
    assert len(_targets(config, "horus-operator")) == 2


def test_the_discovery_identity_reads_only_what_discovery_needs(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    """Its token, used as an attacker would: it lists the namespace's pods, Services,
    Endpoints and EndpointSlices, and nothing else — no Secret, no ConfigMap, no other
    namespace, nothing cluster-wide, no write."""
    cluster.kubectl("create", "secret", "generic", "key", "-n", namespace, "--from-literal=k=v")
    cluster.kubectl("create", "namespace", f"{namespace}-other")
    try:
        admin = KubeCli(cluster.kubeconfig, cluster.bin_dir, tmp_path / "helm")
        path = prometheus.grant_discovery(
            admin, cluster.state.server, cluster.state.ca_file(), tmp_path / "sd", namespace
        )
        sd = KubeCli(str(path), cluster.bin_dir, tmp_path / "helm")
        for kind in ("pods", "services", "endpoints", "endpointslices.discovery.k8s.io"):
            assert sd.kubectl("get", kind, "-n", namespace, check=False).returncode == 0, kind
        denied = [
            ("get", "secret", "key", "-n", namespace),
            ("get", "secrets", "-n", namespace),
            ("get", "configmaps", "-n", namespace),
            ("get", "pods", "-n", f"{namespace}-other"),
            ("get", "pods", "-A"),
            ("get", "nodes"),
            ("create", "service", "clusterip", "x", "--tcp=80", "-n", namespace),
            ("annotate", "serviceaccount", c.PROMETHEUS_SERVICE_ACCOUNT, "a=b", "-n", namespace),
            ("create", "token", c.PROMETHEUS_SERVICE_ACCOUNT, "-n", namespace),
            ("delete", "rolebinding", c.PROMETHEUS_SERVICE_ACCOUNT, "-n", namespace),
        ]
        for args in denied:
            got = sd.kubectl(*args, check=False)
            assert got.returncode != 0 and "forbidden" in got.stderr.lower(), (args, got.stderr)
        # and the attempts changed nothing
        assert not cluster.kubectl("get", "services", "-n", namespace, "-o", "name").stdout
        assert (
            cluster.kubectl(
                "get", "rolebinding", c.PROMETHEUS_SERVICE_ACCOUNT, "-n", namespace, check=False
            ).returncode
            == 0
        )
    finally:
        cluster.kubectl("delete", "namespace", f"{namespace}-other", "--wait=false", check=False)


def test_the_discovery_token_lasts_the_clusters_life_and_dies_with_its_account(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    """Not renewed, so it must not run out while the cluster is up (24 h did: a demo left up
    for a day lost its discovery): the apiserver grants the whole duration asked, the
    certificates' validity; and it is no key that outlives its account."""
    import base64

    from horus.devcluster import certs

    admin = KubeCli(cluster.kubeconfig, cluster.bin_dir, tmp_path / "helm")
    path = prometheus.grant_discovery(
        admin, cluster.state.server, cluster.state.ca_file(), tmp_path / "sd", namespace
    )
    token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["exp"] - claims["iat"] == certs.VALIDITY.total_seconds()
    sd = KubeCli(str(path), cluster.bin_dir, tmp_path / "helm")
    assert sd.kubectl("get", "services", "-n", namespace, check=False).returncode == 0
    admin.kubectl("delete", "serviceaccount", c.PROMETHEUS_SERVICE_ACCOUNT, "-n", namespace)
    # (the apiserver caches a token's authentication for 10 s)
    deadline = time.monotonic() + 30
    while (gone := sd.kubectl("get", "services", "-n", namespace, check=False)).returncode == 0:
        assert time.monotonic() < deadline, "the token still works 30 s after its account went"
        time.sleep(1)
    assert "Unauthorized" in gone.stderr, gone.stderr
