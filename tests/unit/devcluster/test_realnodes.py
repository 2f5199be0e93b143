"""Real-node configuration that needs no root: node specs, containerd/CNI/kubelet config."""

from __future__ import annotations

from pathlib import Path

import pytest

from horus.common.errors import ValidationError
from horus.devcluster.realnodes import (
    RealNode,
    RealNodeSpec,
    cni_config,
    containerd_config,
    kubelet_config,
)


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
    assert 'address = "/run/horus-dev/sockets/200-0/containerd.sock"' in text
    assert "restrict_oom_score_adj = true" in text  # no CAP_SYS_RESOURCE on this VM
    assert 'sandbox_image = "horus.local/horus-pause:abc"' in text
    for key in ("root", "state"):
        assert f'{key} = "{tmp_path / "n" / "containerd"}' in text


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
