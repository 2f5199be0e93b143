"""Real-node configuration that needs no root: node specs, containerd/CNI/kubelet config."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from horus.common.errors import ValidationError
from horus.devcluster import dns
from horus.devcluster.cluster import SERVICE_CIDR
from horus.devcluster.hostenv import PRIVATE_MOUNTS
from horus.devcluster.realnode_config import (
    CDI_SPEC_DIR,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
)
from horus.devcluster.realnode_state import RealNode, RealNodeSpec


def node(tmp_path: Path) -> RealNode:
    return RealNode(
        name="real-node-0000",
        index=0,
        directory=str(tmp_path / "n"),
        bridge="hd200n0",
        node_ip="10.200.0.1",
        subnet="10.200.0.0/24",
        cgroup_root="/horus-dev-200-0",
        kubelet_port=10250,
        healthz_port=10248,
        gpus=2,
        gpu_model="H100",
        gpu_memory_mib=81920,
        device_plugin="host",
        socket_dir="/run/horus-dev/sockets/200-0",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "--count must be between 1 and 16"),
        ({"count": 1, "gpus_per_node": 0}, "--gpus-per-node"),
        ({"count": 1, "device_plugin": "daemon"}, "--device-plugin must be 'host' or 'none'"),
        ({"count": 1, "prefix": "Bad_Name"}, "--prefix must be a DNS label"),
        ({"count": 1, "gpu_model": "H 100"}, "--gpu-model"),
    ],
)
def test_bad_specs_name_the_flag(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RealNodeSpec(**kwargs)  # type: ignore[arg-type]


def test_containerd_config_keeps_everything_under_the_node(tmp_path: Path) -> None:
    text = containerd_config(node(tmp_path), "horus.local/horus-pause:abc")
    conf = tomllib.loads(text)
    assert conf["version"] == 4  # containerd 2.4's own format
    plugins = conf["plugins"]
    sock = "/run/horus-dev/sockets/200-0/containerd.sock"
    assert plugins["io.containerd.server.v1.grpc"]["address"] == sock
    assert plugins["io.containerd.server.v1.ttrpc"]["address"] == sock + ".ttrpc"
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE on this VM
    # CDI specs only from the node's private /var/run/cdi, never the host's /etc/cdi
    assert runtime["cdi_spec_dirs"] == [CDI_SPEC_DIR] == ["/var/run/cdi"]
    assert "/run/cdi" in PRIVATE_MOUNTS
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["Root"] == str(
        tmp_path / "n" / "runc"
    )
    images = plugins["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "horus.local/horus-pause:abc"
    assert "io.containerd.nri.v1.nri" in conf["disabled_plugins"]  # one NRI socket per host
    for key in ("root", "state"):
        assert conf[key] == str(tmp_path / "n" / "containerd" / key)


def test_containerd_2_reads_the_config_as_written(tmp_path: Path) -> None:
    """The built containerd (tools/controlplane/build.sh) parses the file and its effective
    configuration has our values: a key in the wrong place would be ignored silently."""
    bin_dir = os.environ.get("HORUS_BIN_DIR")
    binary = Path(bin_dir) / "containerd" if bin_dir else None
    if binary is None or not binary.is_file():
        pytest.skip("no containerd in HORUS_BIN_DIR (tools/controlplane/build.sh builds it)")
    conf = tmp_path / "containerd.toml"
    conf.write_text(containerd_config(node(tmp_path), "horus.local/horus-pause:abc"))
    out = subprocess.run(
        [str(binary), "--config", str(conf), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    dumped = tomllib.loads(out)
    runtime = dumped["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == ["/var/run/cdi"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cni"]["conf_dir"] == str(tmp_path / "n" / "cni" / "net.d")
    assert dumped["plugins"]["io.containerd.server.v1.grpc"]["address"] == (
        "/run/horus-dev/sockets/200-0/containerd.sock"
    )
    images = dumped["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "horus.local/horus-pause:abc"


def test_cni_uses_the_node_bridge_without_touching_host_forwarding(tmp_path: Path) -> None:
    plugin = cni_config(node(tmp_path))["plugins"][0]
    assert plugin["bridge"] == "hd200n0" and plugin["isGateway"] is False
    assert plugin["ipMasq"] is False
    assert plugin["ipam"]["ranges"][0][0] == {"subnet": "10.200.0.0/24", "gateway": "10.200.0.1"}


def test_kubelet_authenticates_and_authorizes_callers(tmp_path: Path) -> None:
    cfg = kubelet_config(node(tmp_path), Path("/ca.crt"))
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authorization"]["mode"] == "Webhook" and cfg["readOnlyPort"] == 0
    assert cfg["address"] == "10.200.0.1" and cfg["cgroupRoot"] == "/horus-dev-200-0"


def test_kubelet_names_the_cluster_dns(tmp_path: Path) -> None:
    cfg = kubelet_config(node(tmp_path), Path("/ca.crt"))
    assert cfg["clusterDNS"] == [dns.DNS_SERVICE_IP] and cfg["clusterDomain"] == "cluster.local"
    assert ipaddress.ip_address(dns.DNS_SERVICE_IP) in ipaddress.ip_network(SERVICE_CIDR)


def test_kube_proxy_leaves_host_settings_alone_and_masquerades_services(tmp_path: Path) -> None:
    n = node(tmp_path)
    n.proxy_healthz_port, n.proxy_metrics_port = 10256, 10249
    cfg = kube_proxy_config(n, Path("/k.kubeconfig"), "10.200.0.0/16")
    assert cfg["kind"] == "KubeProxyConfiguration" and cfg["mode"] == "iptables"
    assert cfg["hostnameOverride"] == "real-node-0000"
    # no conntrack sysctls written, no route_localnet for localhost NodePorts
    assert set(cfg["conntrack"].values()) == {0, "0s"}
    assert cfg["iptables"] == {"masqueradeAll": True, "localhostNodePorts": False}
    # its ports on loopback only, NodePorts only on the node's own address
    assert cfg["healthzBindAddress"] == "127.0.0.1:10256"
    assert cfg["metricsBindAddress"] == "127.0.0.1:10249"
    assert cfg["nodePortAddresses"] == ["10.200.0.1/32"]


def test_coredns_service_reaches_the_port_the_corefile_serves() -> None:
    objects = {o["kind"]: o for o in dns.manifests("horus.local/coredns:v1.15.0")}
    service = objects["Service"]["spec"]
    assert service["clusterIP"] == dns.DNS_SERVICE_IP
    container = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "horus.local/coredns:v1.15.0"
    served = {(p["containerPort"], p["protocol"]) for p in container["ports"]}
    assert {(p["targetPort"], p["protocol"]) for p in service["ports"]} == served
    assert {p["port"] for p in service["ports"]} == {53}
    assert f".:{dns.PORT} {{" in objects["ConfigMap"]["data"]["Corefile"]
    assert container["securityContext"]["runAsNonRoot"] is True
    # the kubernetes plugin's reads, and nothing to write
    rules = objects["ClusterRole"]["rules"]
    assert {v for r in rules for v in r["verbs"]} == {"list", "watch"}
