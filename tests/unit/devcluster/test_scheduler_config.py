"""The dev cluster's KubeSchedulerConfiguration: callers' additions merge, never drop the kubeconfig."""

from __future__ import annotations

from pathlib import Path

from horus.devcluster.cluster import _scheduler_config


def test_plain_config_names_the_kubeconfig() -> None:
    cfg = _scheduler_config(Path("/k/sched.kubeconfig"), None)
    assert cfg["clientConnection"] == {"kubeconfig": "/k/sched.kubeconfig"}
    assert cfg["leaderElection"] == {"leaderElect": False}


def test_client_connection_is_merged_and_other_sections_added() -> None:
    extenders = [{"urlPrefix": "http://127.0.0.1:1/", "filterVerb": "filter"}]
    cfg = _scheduler_config(
        Path("/k/sched.kubeconfig"),
        {"clientConnection": {"qps": 500, "burst": 1000}, "extenders": extenders},
    )
    assert cfg["clientConnection"] == {
        "kubeconfig": "/k/sched.kubeconfig",
        "qps": 500,
        "burst": 1000,
    }
    assert cfg["extenders"] == extenders
