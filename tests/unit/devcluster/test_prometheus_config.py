"""The local Prometheus' configuration and discovery identity (horus.devcluster.prometheus):
the built Prometheus accepts the Kubernetes discovery that Debian's refuses, and the identity
it discovers with can only read. Discovery against a real apiserver:
tests/integration/test_prometheus_discovery.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from horus.common import constants as c
from horus.devcluster import prometheus
from horus.devcluster.cluster import write_kubeconfig

ROOT = Path(__file__).resolve().parents[3]


def test_the_built_promtool_accepts_the_kubernetes_discovery_config(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "sd.kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:6443", tmp_path / "ca.crt", "t", "u")
    rules = ROOT / "manifests" / "prometheus" / "horus-alerts.rules.yaml"
    config = prometheus.write_config(tmp_path, prometheus.scrape_configs(kubeconfig), [rules])
    got = subprocess.run(
        [str(prometheus.binary("promtool")), "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    jobs = yaml.safe_load(config.read_text())["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["horus-operator", "horus-agent"]
    assert all(j["kubernetes_sd_configs"][0]["role"] == "endpointslice" for j in jobs)


def test_the_built_prometheus_has_only_the_kubernetes_discovery(tmp_path: Path) -> None:
    """Built with remove_all_sd + enable_kubernetes_sd: another discovery is refused by its
    config parser, as Debian's refuses the Kubernetes one."""
    config = prometheus.write_config(
        tmp_path, [{"job_name": "x", "consul_sd_configs": [{"server": "127.0.0.1:8500"}]}]
    )
    got = subprocess.run(
        [str(prometheus.binary("promtool")), "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode != 0 and "consul_sd_configs" in got.stdout + got.stderr


def test_the_discovery_identity_may_only_read_what_the_endpointslice_role_reads() -> None:
    docs = {d["kind"]: d for d in prometheus.discovery_rbac()}
    assert set(docs) == {"ServiceAccount", "Role", "RoleBinding"}  # nothing cluster-wide
    for doc in docs.values():
        assert doc["metadata"]["namespace"] == c.HORUS_NAMESPACE
        assert doc["metadata"]["name"] == c.PROMETHEUS_SERVICE_ACCOUNT
    granted = {
        (g, r, v)
        for rule in docs["Role"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    read = ("get", "list", "watch")
    want = [("", r) for r in ("pods", "services", "endpoints")]
    assert granted == {
        (g, r, v) for g, r in [*want, ("discovery.k8s.io", "endpointslices")] for v in read
    }
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": c.PROMETHEUS_SERVICE_ACCOUNT,
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": c.PROMETHEUS_SERVICE_ACCOUNT,
            "namespace": c.HORUS_NAMESPACE,
        }
    ]
