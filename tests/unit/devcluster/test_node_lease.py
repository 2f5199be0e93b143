"""The kwok nodes' lease: a kubelet's by default, longer only when a benchmark asks, with the
controller-manager's NotReady grace kept above the renewal interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from horus.devcluster.cluster import (
    DEFAULT_NODE_LEASE_SECONDS,
    LocalCluster,
    _kwok_config,
    _node_monitor_grace,
)


def test_default_lease_is_a_kubelets_and_leaves_the_grace_alone() -> None:
    assert _kwok_config()["options"]["nodeLeaseDurationSeconds"] == DEFAULT_NODE_LEASE_SECONDS
    assert _node_monitor_grace(DEFAULT_NODE_LEASE_SECONDS) == []


def test_a_longer_lease_lengthens_the_grace_past_it() -> None:
    assert _kwok_config(600)["options"]["nodeLeaseDurationSeconds"] == 600
    (flag,) = _node_monitor_grace(600)
    grace = int(flag.removeprefix("--node-monitor-grace-period=").removesuffix("s"))
    # kwok renews every quarter of the lease: the grace must outlast several renewals
    assert grace > 600 > 600 // 4


@pytest.mark.parametrize("seconds", [0, 9, 3601])
def test_up_refuses_a_lease_out_of_range_before_starting_anything(
    tmp_path: Path, seconds: int
) -> None:
    cluster = LocalCluster(tmp_path / "c")
    with pytest.raises(ValueError, match=r"node_lease_seconds must be 10\.\.3600"):
        cluster.up(node_lease_seconds=seconds)
    assert not (tmp_path / "c").exists()
