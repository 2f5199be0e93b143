"""Upgrades and alerts of the chart on real nodes (issue 21): ``helm upgrade`` to a chart whose
DLJob CRD gained a field applies the CRD and leaves the running pods alone; the shipped alert
rules, loaded into a real Prometheus that scrapes the in-cluster operator pods, fire when no
operator replica runs and resolve once the Deployment is back.

Runs after test_1b and before test_2 and leaves the cluster as it found it: the shipped chart
installed again (the same values, the shipped CRD) and two Ready operator replicas, one of
them holding the Lease. tests/e2e/test_chart_day2.py and tests/e2e/test_alert_rules_fire.py
check the same on kwok nodes and with operators as local processes.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from realnode_support import diagnose, wait_for, workload_job

from horus.common import constants as c
from horus.devcluster.binaries import repo_root
from horus.devcluster.chart import NAMESPACE, RELEASE, RealCluster, install

FIELD = "upgradeNote"  # the field the "next chart version" adds to the DLJob spec
OPERATOR = "horus-operator"  # the chart's Deployment and Lease
NO_LEADER = "HorusOperatorNoLeader"


def _chart_values(rc: RealCluster) -> dict[str, Any]:
    """The values the release was installed with, as Helm stored them."""
    out = rc.kube.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml").stdout
    values: dict[str, Any] = yaml.safe_load(out)
    return values


def _pods(rc: RealCluster) -> dict[str, tuple[str, int]]:
    """Each pod of the release: its uid and its containers' restarts."""
    items = rc.kube.json("get", "pods", "-n", NAMESPACE)["items"]
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(s["restartCount"] for s in (p.get("status") or {}).get("containerStatuses") or []),
        )
        for p in items
    }


def _spec_fields(rc: RealCluster) -> set[str]:
    crd = rc.kube.json("get", "crd", c.DLJOB_CRD_NAME)
    (version,) = crd["spec"]["versions"]
    return set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def _dry_run_with_field(rc: RealCluster) -> Any:
    """A DLJob carrying the new field, created by the apiserver in a dry run (strict field
    validation: an unknown field is an error, not silently pruned)."""
    job = workload_job("upgrade-probe", 1, 10, 1024, ["--steps", "0"])
    job["spec"][FIELD] = "added by the upgraded chart"
    return rc.kube.kubectl(
        *("create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-"),
        input=json.dumps(job),
        check=False,
    )


def test_helm_upgrade_to_a_chart_with_a_changed_crd_applies_it(
    rc: RealCluster, tmp_path: Path
) -> None:
    shipped = _spec_fields(rc)
    assert FIELD not in shipped
    refused = _dry_run_with_field(rc)
    assert refused.returncode != 0 and FIELD in refused.stderr, refused.stdout + refused.stderr
    values = _chart_values(rc)
    before = _pods(rc)

    # the next chart version: the same chart, its DLJob CRD with one more optional field
    chart = tmp_path / "horus"
    shutil.copytree(repo_root() / "charts" / "horus", chart)
    path = chart / "files" / "crds" / "horus.io_dljobs.yaml"
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"][FIELD] = {"type": "string", "description": "added by an upgrade test"}
    path.write_text(yaml.safe_dump(crd, sort_keys=False))

    t = time.monotonic()
    install(rc.kube, values, chart=chart)  # helm upgrade --install … --wait, as the install
    print(f"helm upgrade to the changed CRD in {time.monotonic() - t:.0f}s")
    try:
        assert _spec_fields(rc) == shipped | {FIELD}
        kept = _dry_run_with_field(rc)
        assert kept.returncode == 0, kept.stderr
        assert json.loads(kept.stdout)["spec"][FIELD] == "added by the upgraded chart"
        # only the CRD changed: the pod templates render the same, so no pod was replaced or
        # restarted (a changed template would roll the Deployment and the DaemonSet)
        assert _pods(rc) == before, diagnose(rc, NAMESPACE)()
    finally:
        install(rc.kube, values)  # back to the shipped chart for the later tests
    assert _spec_fields(rc) == shipped
    assert _pods(rc) == before, diagnose(rc, NAMESPACE)()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


def _alert(prometheus: str, name: str) -> dict[str, Any] | None:
    """The alert as Prometheus evaluates it now (pending or firing), or None (inactive)."""
    for alert in _get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]:
        if alert["labels"]["alertname"] == name:
            found: dict[str, Any] = alert
            return found
    return None


def _leaders(prometheus: str) -> dict[str, float]:
    url = f"{prometheus}/api/v1/query?query={c.METRIC_OPERATOR_LEADER}"
    return {r["metric"]["instance"]: float(r["value"][1]) for r in _get(url)["data"]["result"]}


def _by_ip(leaders: dict[str, float]) -> dict[str, float]:
    return {instance.split(":")[0]: v for instance, v in leaders.items()}


def _ready_operators(rc: RealCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    return [
        p
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and (statuses := (p.get("status") or {}).get("containerStatuses") or [])
        and all(s.get("ready") for s in statuses)
    ]


def _holder(rc: RealCluster) -> str:
    lease = rc.kube.json("get", "lease", OPERATOR, "-n", NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


def test_no_leader_alert_fires_on_real_prometheus_when_the_operator_stops(
    rc: RealCluster, prometheus: str
) -> None:
    def explain() -> str:
        alerts = _get(f"{prometheus}/api/v1/alerts")["data"]["alerts"]
        lease = rc.kube.kubectl(
            "get", "lease", OPERATOR, "-n", NAMESPACE, "-o", "yaml", check=False
        )
        return (
            f"{diagnose(rc, NAMESPACE)()}\nleader series: {_leaders(prometheus)}\n"
            f"alerts: {alerts}\nlease: {lease.stdout}"
        )

    # the shipped rules loaded into the real Prometheus
    rules = yaml.safe_load(
        (repo_root() / "manifests" / "prometheus" / "horus-alerts.rules.yaml").read_text()
    )
    groups = wait_for(
        "rules loaded", lambda: _get(f"{prometheus}/api/v1/rules")["data"]["groups"], 30, explain
    )
    assert {r["name"] for g in groups for r in g["rules"]} == {
        r["alert"] for g in rules["groups"] for r in g["rules"]
    }
    # both in-cluster replicas scraped by pod IP, one leading, the alert quiet
    pods = wait_for(
        "two Ready operator replicas",
        lambda: len(r := _ready_operators(rc)) == 2 and r,
        60,
        explain,
    )
    ips = {p["status"]["podIP"] for p in pods}
    wait_for(
        "both operator pods scraped, one leading",
        lambda: set(got := _by_ip(_leaders(prometheus))) == ips and sorted(got.values()) == [0, 1],
        60,
        explain,
    )
    # (a Prometheus started moments ago has it pending from before the first scrape until the
    # rule's next evaluation)
    wait_for(
        f"{NO_LEADER} inactive while a replica leads",
        lambda: _alert(prometheus, NO_LEADER) is None,
        30,
        explain,
    )

    # every replica stops: nobody leads, the alert fires (after its shortened for: of 10 s)
    stopped = time.monotonic()
    rc.kube.kubectl("scale", "deployment", OPERATOR, "-n", NAMESPACE, "--replicas=0")
    try:
        wait_for(
            "operator pods gone",
            lambda: (
                not rc.kube.json(
                    "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator"
                )["items"]
            ),
            60,
            explain,
        )
        fired = wait_for(
            f"{NO_LEADER} firing",
            lambda: (a := _alert(prometheus, NO_LEADER)) and a["state"] == "firing" and a,
            60,
            explain,
        )
        print(f"{NO_LEADER} firing {time.monotonic() - stopped:.0f}s after the scale to 0")
        assert fired["labels"]["severity"] == "critical"
        assert "no DLJob is placed" in fired["annotations"]["description"]
    finally:
        rc.kube.kubectl("scale", "deployment", OPERATOR, "-n", NAMESPACE, "--replicas=2")

    # back: two Ready replicas, one holds the Lease, Prometheus sees it, the alert resolves
    back = wait_for(
        "two Ready operator replicas again",
        lambda: len(r := _ready_operators(rc)) == 2 and r,
        120,
        explain,
    )
    names = {p["metadata"]["name"] for p in back}
    wait_for(
        "a new replica holds the Lease",
        lambda: any(map(_holder(rc).startswith, names)),
        60,
        explain,
    )
    # the replacement pods are found by Prometheus itself (EndpointSlices), no target rewritten
    ips = {p["status"]["podIP"] for p in back}
    wait_for(
        f"the new leader scraped and {NO_LEADER} resolved",
        lambda: (
            1.0 in {v for ip, v in _by_ip(_leaders(prometheus)).items() if ip in ips}
            and _alert(prometheus, NO_LEADER) is None
        ),
        60,
        explain,
    )
