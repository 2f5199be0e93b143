"""The kwok demo agent's dev-only ServiceAccount (issue 24): the chart's node identity writes
only with a pod-bound token naming its node, which a local process serving every kwok node
cannot have, so the demo's agent gets an account of its own — never shipped, and never more
than the agent does on simulated nodes."""

from __future__ import annotations

from pathlib import Path

import yaml

from horus.common import constants as c
from horus.devcluster.demo_startup import kwok_agent_rbac

ROOT = Path(__file__).resolve().parents[3]


def _granted() -> set[tuple[str, str, str]]:
    [role] = [d for d in kwok_agent_rbac() if d["kind"] == "ClusterRole"]
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_the_dev_agent_may_do_what_the_agent_does_on_kwok_nodes() -> None:
    granted = _granted()
    for need in [
        ("", "nodes", "list"),  # --node-selector type=kwok
        ("", "pods", "list"),
        ("", "pods", "delete"),  # the watchdog
        ("", "configmaps", "get"),  # profiles in ConfigMaps
        (c.API_GROUP, f"{c.DLJOB_PLURAL}/status", "patch"),  # status.observed
        ("", "events", "create"),
    ]:
        assert need in granted, need


def test_the_dev_agent_writes_no_pod_or_node_and_evicts_nothing() -> None:
    writes = {(r, v) for _, r, v in _granted() if v not in ("get", "list", "watch")}
    assert writes == {
        ("pods", "delete"),
        (f"{c.DLJOB_PLURAL}/status", "patch"),
        ("events", "create"),
        ("events", "patch"),
    }


def test_the_dev_account_is_bound_to_its_role_and_never_shipped() -> None:
    docs = {d["kind"]: d for d in kwok_agent_rbac()}
    assert docs["ServiceAccount"]["metadata"]["namespace"] == c.HORUS_NAMESPACE
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": c.KWOK_AGENT_SERVICE_ACCOUNT,
            "namespace": "horus-system",
        }
    ]
    assert yaml.safe_load_all(yaml.safe_dump_all(kwok_agent_rbac()))  # what kubectl apply reads
    shipped = [*(ROOT / "charts").rglob("*.yaml"), *(ROOT / "manifests").rglob("*.yaml")]
    assert not [p for p in shipped if c.KWOK_AGENT_SERVICE_ACCOUNT in p.read_text()]
