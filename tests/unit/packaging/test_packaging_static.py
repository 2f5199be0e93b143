"""Packaging checks that need no cluster: the chart's copies equal their sources, dashboards
are well-formed and name only exported metrics, the Dockerfiles follow our rules.

Why here and not only in e2e: these are the mistakes that slip in with an innocent edit (a CRD
changed but the chart's copy not re-synced, a metric renamed in constants.py but not in a
panel, an unpinned base image), and they cost milliseconds to catch.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import dashboards as dash  # noqa: E402
import dockerlint  # noqa: E402

from horus.common import constants as c  # noqa: E402

sys.path.pop(0)


def test_chart_copies_equal_their_sources():
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "sync-chart.sh"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for source, copy, pattern in [
        ("manifests/crds", "charts/horus/files/crds", "*.yaml"),
        ("manifests/prometheus", "charts/horus/files/prometheus", "*.rules.yaml"),
        ("manifests/scheduler", "charts/horus/files/scheduler", "*.yaml"),
    ]:
        names = sorted(p.name for p in (ROOT / source).glob(pattern))
        assert names and names == sorted(p.name for p in (ROOT / copy).glob(pattern)), source
        for name in names:
            assert (ROOT / copy / name).read_bytes() == (ROOT / source / name).read_bytes()
    # Helm installs a chart's crds/ before its templates and never upgrades it: the CRD is a
    # template now (templates/crds.yaml), and a crds/ folder would collide with it
    assert not (ROOT / "charts/horus/crds").exists()


def test_dashboard_json_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "dashboards" / "generate.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rendered = gen.render()
    on_disk = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert rendered == on_disk, "run: .venv/bin/python dashboards/generate.py"


#: per-GPU metrics: every query over them must follow the node and GPU variables
PER_GPU_METRICS = {
    c.METRIC_GPU_UTILIZATION,
    c.METRIC_GPU_MEMORY_USED,
    c.METRIC_GPU_MEMORY_TOTAL,
    c.METRIC_GPU_PREDICTED_UTIL_SUM,
    c.METRIC_POD_GPU_MEMORY_USED,
    c.METRIC_POD_GPU_CORE_SHARE,
    c.METRIC_POD_GPU_MEMORY_LIMIT,
    c.METRIC_POD_PREDICTED_UTIL,
    c.METRIC_POD_OBSERVED_UTIL,
    c.METRIC_ENFORCEMENT_EVICTIONS + "_total",
}
#: operator gauges every replica exports; only the Lease holder's are current
LEADER_GAUGES = {c.METRIC_QUEUE_LENGTH, c.METRIC_DLJOB_PHASE, c.METRIC_GPU_PREDICTED_UTIL_SUM}


@pytest.mark.parametrize("name", sorted(dash.load()))
def test_dashboard_shape(name):
    board = dash.load()[name]
    assert board["schemaVersion"] >= 39
    assert board["uid"] and board["title"].startswith("Horus / ")
    ds = [v for v in board["templating"]["list"] if v["name"] == "datasource"]
    assert ds and ds[0]["type"] == "datasource" and ds[0]["query"] == "prometheus"
    names = [v["name"] for v in board["templating"]["list"]]
    assert {"job", "node", "gpu"} <= set(names), names
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        assert len(panel.get("description", "")) >= 30, f"{panel['title']}: no description"
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        if defaults.get("unit") == "percentunit" and "error" not in panel["title"].lower():
            # a non-negative ratio: a 0-based scale with thresholds (the signed prediction
            # error is the one exception); the upper bound is 1 where it is a share of one GPU
            assert defaults.get("min") == 0 and defaults.get("thresholds"), panel["title"]
            if "utilisation" in panel["title"] and "predicted" not in panel["title"].lower():
                assert defaults.get("max") == 1, panel["title"]
    for q in dash.queries({name: board}):
        metrics = dash.metric_names(q.expr)
        if metrics & PER_GPU_METRICS:
            for var in ('node=~"$node"', 'gpu=~"$gpu"', 'job=~"$job"'):
                assert var in q.expr, (q.panel, var, q.expr)
        if "count(" in q.expr:
            assert "max by (node, gpu)" in q.expr, ("count without de-duplication", q.expr)
        if metrics & LEADER_GAUGES:
            assert c.METRIC_OPERATOR_LEADER in q.expr, ("operator gauge of every replica", q.expr)


def test_dashboards_cover_the_issue():
    titles = {n: " | ".join(p["title"] for p in b["panels"]) for n, b in dash.load().items()}
    assert set(titles) == {
        "horus-cluster.json",
        "horus-node-gpu.json",
        "horus-jobs.json",
        "horus-enforcement.json",
    }
    for words, board in [
        (
            [
                "GPUs in use",
                "GPUs free",
                "utilisation",
                "memory",
                "phase",
                "Queue",
                "reasons",
                "per second",
                "latency",
            ],
            "horus-cluster.json",
        ),
        (["GPU utilisation", "memory", "Pods on each GPU"], "horus-node-gpu.json"),
        (["Predicted vs observed", "Prediction error", "Slowdown"], "horus-jobs.json"),
        (["Evictions", "memory limit"], "horus-enforcement.json"),
    ]:
        for w in words:
            assert w in titles[board], (board, w)


def test_every_promql_names_only_exported_metrics():
    known = dash.known_metrics()
    bad = {
        (q.dashboard, q.panel, m)
        for q in dash.queries(dash.load())
        for m in dash.metric_names(q.expr)
        if m not in known
    }
    assert not bad, f"metrics no component exports (not in constants.py): {sorted(bad)}"


def test_metric_name_parser():
    expr = (
        'histogram_quantile(0.99, sum by (le, reason) (rate(horus_a_bucket{node=~"$node",'
        'x="y"}[5m]))) / on (pod) group_left(node) horus_b > bool 1e3 or vector(0)'
    )
    assert dash.metric_names(expr) == {"horus_a_bucket", "horus_b"}
    assert dash.metric_names("no_such_metric_total") == {"no_such_metric_total"}
    assert "horus_typo" not in dash.known_metrics()


def test_substitute_variables():
    board = dash.load()["horus-node-gpu.json"]
    values = dash.variables(board)
    out = dash.substitute('rate(x{node=~"$node"}[$__rate_interval]) ${node} [[node]]', values)
    assert out == 'rate(x{node=~".*"}[1m]) .* .*'


@pytest.mark.parametrize("role", ["operator", "predictor", "device-plugin"])
def test_dockerfile_rules(role):
    problems = dockerlint.check(ROOT / role / "Dockerfile", role)
    assert not problems, "\n".join(problems)


def test_dockerlint_catches_bad_files(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        'FROM python:latest\nFROM debian\nRUN pip install ". with words"\nENTRYPOINT ["horus"]\n'
    )
    problems = " ".join(dockerlint.check(bad, "operator"))
    for text in ("latest", "pinned", "USER", "python -m horus.operator", "pip install"):
        assert text in problems, text


def test_dockerlint_allows_only_requirements_written_from_pyproject(tmp_path):
    """The dependency layer's ``pip install -r`` passes only for a file the same RUN wrote
    from pyproject.toml; any other requirements file is something else installed."""
    head = "FROM python:3.11.7-slim-bookworm\n"
    tail = 'USER 65532\nENTRYPOINT ["python", "-m", "horus.operator"]\n'
    ok = tmp_path / "ok"
    ok.write_text(
        head
        + "RUN python -c \"import tomllib; tomllib.load(open('pyproject.toml', 'rb'))\" "
        + "> /tmp/r.txt && pip install -r /tmp/r.txt\n"
        + tail
    )
    assert dockerlint.check(ok, "operator") == []
    bad = tmp_path / "bad"
    bad.write_text(head + "RUN echo requests > /tmp/r.txt && pip install -r /tmp/r.txt\n" + tail)
    assert "not written from pyproject.toml" in " ".join(dockerlint.check(bad, "operator"))


def test_chart_defaults_point_at_the_images():
    values = yaml.safe_load((ROOT / "charts/horus/values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "charts/horus/Chart.yaml").read_text())
    from horus import __version__

    assert chart["appVersion"] == __version__
    images = values["images"]
    assert images["operator"]["repository"] == "horus-operator"
    assert images["node"]["repository"] == "horus-device-plugin"
    # no default registry: nothing resolves to Docker Hub's library namespace, and nothing
    # to a namespace the project does not own (templates/_helpers.tpl fails with the fix)
    assert images["registry"] == "" and not images["operator"]["registry"]
    assert images["kubeScheduler"]["registry"] == "registry.k8s.io"
    for role in ("operator", "device-plugin"):
        assert f"-t horus-{role}:{__version__}" in (ROOT / role / "Dockerfile").read_text()
    schema = json.loads((ROOT / "charts/horus/values.schema.json").read_text())
    assert set(schema["properties"]) - {"global"} == set(values), "schema and values disagree"
    # kustomize: the same repositories under a registry that never resolves (RFC 2606)
    kust = yaml.safe_load((ROOT / "manifests/kustomization.yaml").read_text())
    assert {i["name"]: i["newName"] for i in kust["images"]} == {
        "horus-operator": "registry.invalid/horus/horus-operator",
        "horus-device-plugin": "registry.invalid/horus/horus-device-plugin",
    }


def _schema_paths(schema: dict, node: dict, path: str = "") -> set[str]:
    if "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    out = {path} if path else set()
    for key, sub in (node.get("properties") or {}).items():
        out |= _schema_paths(schema, sub, f"{path}.{key}" if path else key)
    return out


def _value_paths(values: dict, path: str = "") -> set[str]:
    out = set()
    for key, v in values.items():
        p = f"{path}.{key}" if path else key
        out.add(p)
        if (
            isinstance(v, dict)
            and v
            and not key.endswith(
                ("affinity", "Annotations", "Labels", "nodeSelector", "labels", "resources")
            )
        ):
            out |= _value_paths(v, p)
    return out


def test_every_value_is_in_the_schema():
    """additionalProperties: false everywhere, so a value the schema does not name would make
    the chart refuse its own defaults; and each workload takes the same pod-level knobs."""
    values = yaml.safe_load((ROOT / "charts/horus/values.yaml").read_text())
    schema = json.loads((ROOT / "charts/horus/values.schema.json").read_text())
    known = _schema_paths(schema, schema)
    missing = {p for p in _value_paths(values) if p not in known}
    assert not missing, sorted(missing)
    pod_knobs = {"podAnnotations", "podLabels", "nodeSelector", "tolerations", "affinity"}
    for workload in ("operator", "node", "scheduler"):
        assert pod_knobs | {"priorityClassName"} <= set(values[workload]), workload
    for container in ("operator", "extender", "node.devicePlugin", "node.agent",
                      "scheduler.kubeScheduler", "scheduler.extender"):  # fmt: skip
        v = values
        for part in container.split("."):
            v = v[part]
        assert {"extraArgs", "extraEnv", "resources"} <= set(v), container


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((ROOT / "manifests/kustomization.yaml").read_text())
    listed = {r for r in kust["resources"]}
    files = {
        str(p.relative_to(ROOT / "manifests"))
        for p in (ROOT / "manifests").rglob("*.yaml")
        # the extender snippet and the Prometheus rule file are not Kubernetes objects
        if p.name != "kustomization.yaml" and p.parent.name not in ("scheduler", "prometheus")
    }
    assert files <= listed, f"not in kustomization.yaml: {sorted(files - listed)}"


def _load_every_section(text: str, tmp_path: Path, env: dict[str, str]) -> dict[str, object]:
    """Load each role's section with its real settings class: a misspelled key fails here."""
    from horus.agent.settings import AgentSettings
    from horus.common.settings import load_settings
    from horus.deviceplugin.settings import load as load_deviceplugin
    from horus.operator.extender import ExtenderSettings
    from horus.operator.settings import OperatorSettings
    from horus.scheduler import SchedulerSettings

    path = tmp_path / "config.yaml"
    path.write_text(text)
    return {
        "operator": load_settings(OperatorSettings, "operator", env=env, config_file=path),
        "extender": load_settings(ExtenderSettings, "extender", env=env, config_file=path),
        "scheduler": load_settings(SchedulerSettings, "scheduler", env=env, config_file=path),
        "agent": load_settings(AgentSettings, "agent", env=env, config_file=path),
        "deviceplugin": load_deviceplugin(env=env, config_file=path),
    }


def test_manifest_config_loads_with_every_roles_settings(tmp_path):
    doc = yaml.safe_load((ROOT / "manifests/operator/config.yaml").read_text())
    text = doc["data"]["config.yaml"]
    assert set(yaml.safe_load(text)) == {
        "operator",
        "extender",
        "scheduler",
        "agent",
        "deviceplugin",
    }
    # the agent maps NODE_NAME (downward API) to HORUS_AGENT_NODE_NAME in its command
    got = _load_every_section(text, tmp_path, {"NODE_NAME": "n1", "HORUS_AGENT_NODE_NAME": "n1"})
    assert got["agent"].enforcement == "mps" and got["agent"].watchdog == "evict"
    assert str(got["agent"].proc_root) == "/host/proc"
    assert got["operator"].metrics_port == 8080 and got["extender"].port == 8888
    # the device plugin hands out the very host directories the DaemonSet mounts for MPS
    ds = yaml.safe_load((ROOT / "manifests/node/daemonset.yaml").read_text())
    host = {
        v["name"]: v["hostPath"]["path"]
        for v in ds["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    }
    dp = got["deviceplugin"]
    assert (str(dp.mps_pipe_dir), str(dp.mps_shm_dir)) == (host["mps-pipe"], host["mps-shm"])
    assert str(got["agent"].mps_pipe_directory) == host["mps-pipe"]
