"""The alert rules (``manifests/prometheus/horus-alerts.rules.yaml``) checked by Prometheus' own
tools: ``promtool check rules`` parses every expression, and ``promtool test rules`` evaluates
each alert on synthetic series — it must fire on the failure it is about and stay quiet
otherwise. The live counterpart (real operators, a real Prometheus, the leader stopped) is
``tests/e2e/test_alert_rules_fire.py``.

Why synthetic series here: most failures (a dead MPS daemon, an unready extender, a DaemonSet
pod down) cannot be produced without GPUs or kubelets; ``promtool test rules`` is the
Prometheus project's way to test rules without them, with the same rule engine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "manifests" / "prometheus" / "horus-alerts.rules.yaml"

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import dashboards as dash  # noqa: E402

sys.path.pop(0)

from horus.devcluster import prometheus  # noqa: E402

#: Label sets shared by the cases.
OP = {"job": "horus-operator", "instance": "10.0.0.5:8080"}
AGENT = {"job": "horus-node", "instance": "10.0.1.7:9402"}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


#: alert → (input series, minutes at which it must fire, labels it fires with,
#:          minutes at which it must not fire yet)
CASES: dict[str, tuple[list[dict[str, str]], int, dict[str, str], int]] = {
    "HorusOperatorNoLeader": (
        # leads for 3 minutes, then reports 0 (lost the Lease, no one took it)
        [_series("horus_operator_leader", {**OP, "pod": "op-a"}, "1 1 1 0x10")],
        6,
        {"severity": "critical"},
        2,
    ),
    "HorusSigningKeyUnavailable": (
        # the leader signs for 2 minutes, then its key Secret is gone; a follower (not
        # leading, never passes) still exports its initial 1
        [
            _series("horus_operator_leader", {**OP, "pod": "op-a"}, "1x10"),
            _series("horus_signing_key_available", {**OP, "pod": "op-a"}, "1 1 0x10"),
            _series("horus_operator_leader", {**OP, "instance": "10.0.0.6:8080"}, "0x10"),
            _series("horus_signing_key_available", {**OP, "instance": "10.0.0.6:8080"}, "1x10"),
        ],
        6,
        {"severity": "critical"},
        2,
    ),
    "HorusOperatorSeveralLeaders": (
        [
            _series("horus_operator_leader", {**OP, "pod": "op-a"}, "1x10"),
            _series(
                "horus_operator_leader", {**OP, "instance": "10.0.0.6:8080", "pod": "op-b"}, "0 1x9"
            ),
        ],
        8,
        {"severity": "warning"},
        3,
    ),
    "HorusExtenderDown": (
        [
            _series(
                "kube_pod_container_status_ready",
                {
                    "namespace": "horus-system",
                    "container": "extender",
                    "pod": "horus-operator-7d9c-x1",
                },
                "1 1 0x10",
            )
        ],
        8,
        {"severity": "critical", "namespace": "horus-system", "owner": "horus-operator"},
        4,
    ),
    "HorusNodeAgentsUnavailable": (
        [
            _series(
                "kube_daemonset_status_number_unavailable",
                {"namespace": "horus-system", "daemonset": "horus-node"},
                "0 1x20",
            )
        ],
        17,
        {"severity": "warning", "namespace": "horus-system", "daemonset": "horus-node"},
        10,
    ),
    "HorusAgentGpuBackendDown": (
        [
            _series(
                "horus_agent_gpu_backend_up",
                {**AGENT, "node": "gpu-1", "backend": "nvml"},
                "1 0x10",
            )
        ],
        7,
        {"severity": "critical", "node": "gpu-1", "backend": "nvml"},
        3,
    ),
    "HorusMpsDaemonRestarting": (
        [_series("horus_mps_daemon_restarts_total", AGENT, "0 0 0 0 0+1x10")],
        9,
        {"severity": "warning", **AGENT},
        5,
    ),
    "HorusQueueNotDraining": (
        [
            _series("horus_queue_length", {**OP, "reason": "NoIdleGPU"}, "2x80"),
            _series("horus_operator_leader", {**OP, "pod": "op-a"}, "1x80"),
            # a standby replica still exporting a stale queue must not matter either way
            _series(
                "horus_queue_length",
                {**OP, "instance": "10.0.0.6:8080", "reason": "NoIdleGPU"},
                "5x80",
            ),
            _series(
                "horus_operator_leader", {**OP, "instance": "10.0.0.6:8080", "pod": "op-b"}, "0x80"
            ),
            _series("horus_scheduling_decisions_total", {**OP, "outcome": "placed"}, "0+1x5 5x75"),
        ],
        70,
        {"severity": "warning"},
        40,
    ),
    "HorusSchedulingPassSlow": (
        [
            _series(
                "horus_scheduling_decision_duration_seconds_bucket", {**OP, "le": "5.0"}, "0x40"
            ),
            _series(
                "horus_scheduling_decision_duration_seconds_bucket", {**OP, "le": "10.0"}, "0+6x40"
            ),
            _series(
                "horus_scheduling_decision_duration_seconds_bucket", {**OP, "le": "+Inf"}, "0+6x40"
            ),
        ],
        30,
        {"severity": "warning"},
        10,
    ),
    "HorusPredictorReloadFailed": (
        [_series("horus_predictor_reloads_total", {**OP, "result": "failed"}, "0 0 0 0 1x10")],
        5,
        {"severity": "warning", "result": "failed", **OP},
        2,
    ),
    "HorusPodsEvicted": (
        [
            _series(
                "horus_enforcement_evictions_total",
                {**AGENT, "node": "gpu-1", "namespace": "team-a", "pod": "p", "gpu": "0"},
                "0 0 0 1x10",
            )
        ],
        5,
        {"severity": "info", "node": "gpu-1"},
        2,
    ),
}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _expand(text: str, labels: dict[str, str]) -> str:
    """What Prometheus' template expansion makes of ``{{ $labels.x }}`` in an annotation."""
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), text)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """promtool of the Prometheus that tools/controlplane/build.sh builds (the one the demo
    and the e2e tests run), not any other on the machine."""
    tool = str(prometheus.binary("promtool"))
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)


def test_promtool_check_rules():
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout, proc.stdout


def test_every_alert_has_a_case_severity_and_text():
    rules = _rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert set(names) == set(CASES), "each alert needs a promtool case below"
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"] and len(r["annotations"]["description"]) > 40


def test_alerts_name_only_exported_metrics():
    known = dash.known_metrics()
    # kube-state-metrics series (documented as needed in the rules file) are not ours
    bad = {
        (r["alert"], m)
        for r in _rules()
        for m in dash.metric_names(r["expr"])
        if m not in known and not m.startswith("kube_")
    }
    assert not bad, f"metrics no Horus component exports: {sorted(bad)}"


def test_each_alert_fires_on_its_failure_and_not_before(tmp_path):
    rules = {r["alert"]: r for r in _rules()}
    tests = []
    for alert, (series, fire_at, labels, quiet_at) in CASES.items():
        annotations = {k: _expand(v, labels) for k, v in rules[alert]["annotations"].items()}
        tests.append(
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": f"{quiet_at}m", "alertname": alert, "exp_alerts": []},
                    {
                        "eval_time": f"{fire_at}m",
                        "alertname": alert,
                        "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations}],
                    },
                ],
            }
        )
    # the no-leader alert also fires when no replica is scraped at all (series gone stale)
    tests.append(
        {
            "interval": "1m",
            "input_series": [_series("horus_operator_leader", {**OP, "pod": "op-a"}, "1 1 stale")],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "HorusOperatorNoLeader", "exp_alerts": []},
                {
                    "eval_time": "5m",
                    "alertname": "HorusOperatorNoLeader",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical"},
                            "exp_annotations": rules["HorusOperatorNoLeader"]["annotations"],
                        }
                    ],
                },
            ],
        }
    )
    spec = tmp_path / "horus-alerts.test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests})
    )
    proc = _promtool("test", "rules", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout, proc.stdout
