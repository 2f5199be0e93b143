import argparse
from pathlib import Path

import pytest
from agent_helpers import pod
from prometheus_client import generate_latest

from horus.agent.backend import GpuSample, NodeSample, PodSample
from horus.agent.commands import register, settings_from_args
from horus.agent.exporter import Snapshot, make_registry
from horus.common import constants as c
from horus.common.errors import ConfigError


def test_every_metric_with_labels() -> None:
    registry, collector = make_registry()
    p = pod("a", core=25, mem=2048, util=40.0)
    sample = NodeSample(
        "n1",
        "simulated",
        [GpuSample(0, "GPU-x", "H100", 0.4, 1e9, 8e10)],
        {p.uid: PodSample(1e9, 0.38)},
    )
    collector.update(
        Snapshot([sample], {p.uid: p}, {("n1", "ns", "a", "0"): 1}, {("n1", "simulated"): True})
    )
    text = generate_latest(registry).decode()
    for name in (
        c.METRIC_GPU_UTILIZATION,
        c.METRIC_GPU_MEMORY_USED,
        c.METRIC_GPU_MEMORY_TOTAL,
        c.METRIC_POD_GPU_MEMORY_USED,
        c.METRIC_POD_GPU_CORE_SHARE,
        c.METRIC_POD_GPU_MEMORY_LIMIT,
        c.METRIC_POD_PREDICTED_UTIL,
        c.METRIC_POD_OBSERVED_UTIL,
        c.METRIC_ENFORCEMENT_EVICTIONS + "_total",
        c.METRIC_AGENT_BACKEND_UP,
    ):
        lines = [ln for ln in text.splitlines() if ln.startswith(name + "{")]
        assert lines, name
    assert (
        'horus_pod_gpu_core_share_ratio{backend="simulated",gpu="0",namespace="ns",node="n1",pod="a",workload="Pod/a"} 0.25'
        in text
    )
    assert (
        'horus_pod_gpu_memory_limit_bytes{backend="simulated",gpu="0",namespace="ns",node="n1",pod="a",workload="Pod/a"} 2.147483648e+09'
        in text
    )
    # a new snapshot without the pod drops its series
    collector.update(Snapshot())
    assert 'pod="a"' not in generate_latest(registry).decode()


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["agent", "run", *argv])


def test_precedence_cli_env_file_and_node_name_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("agent:\n  grace_seconds: 7\n  watchdog: evict\n  node_name: file-node\n")
    s = settings_from_args(_args(["--config", str(cfg)]), env={"HORUS_AGENT_WATCHDOG": "off"})
    assert s.grace_seconds == 7 and s.watchdog == "off" and s.node_name == "file-node"
    s = settings_from_args(_args(["--config", str(cfg)]), env={"NODE_NAME": "dn"})
    assert s.node_name == "dn"
    s = settings_from_args(_args(["--node-name", "cli"]), env={"NODE_NAME": "dn"})
    assert s.node_name == "cli"
    s = settings_from_args(_args(["--nodes", "a, b"]), env={"NODE_NAME": "dn"})
    assert s.node_list == ["a", "b"] and s.node_name == ""


@pytest.mark.parametrize(
    "argv, words",
    [
        ([], "no node to serve"),
        (["--node-name", "a", "--nodes", "b"], "only one of"),
        (["--nodes", "a,b", "--backend", "nvml"], "exactly the node"),
        (["--node-name", "a", "--grace-seconds", "-1"], "grace"),
        (["--node-name", "a", "--interval-seconds", "soon"], "not a number"),
    ],
)
def test_bad_settings(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        settings_from_args(_args(argv), env={})
