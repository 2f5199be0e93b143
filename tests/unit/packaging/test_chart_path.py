"""One chart value, ``gpuSharing.path``, picks the path a GPU share takes (issue 25 item 4):
the node DaemonSet runs the DRA driver or the device plugin — never both, which would be two
allocators of one GPU — and the operator, the extender and the agent read the same choice
(``placement_path``). ``auto`` is dra where the cluster serves ``resource.k8s.io/v1`` on
Kubernetes >= 1.36 (consumable capacity on by default); the node identity on the dra path may
write no pod and no Node (only the watchdog's delete of a pod on its own node remains).

Rendered with the pinned helm (``helm template``; ``--kube-version``/``--api-versions`` stand
in for what the apiserver's discovery tells helm at install)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.agent.settings import AgentSettings
from horus.common import constants as c
from horus.common.settings import load_settings
from horus.operator.extender.settings import ExtenderSettings
from horus.operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "horus"


def _helm() -> str:
    folder = os.environ.get("HORUS_BIN_DIR", "")
    helm = Path(folder) / "helm" if folder else None
    if helm is None or not helm.is_file():
        pytest.skip("helm of the pinned version not found (HORUS_BIN_DIR)")
    return str(helm)


def render(*args: str, chart: Path = CHART) -> dict[tuple[str, str], dict[str, Any]]:
    out = subprocess.run(
        [_helm(), "template", "horus", str(chart), "-n", "horus-system",
         "--set", "images.registry=registry.example.com/horus", *args],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def containers(objs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    spec = objs[("DaemonSet", "horus-node")]["spec"]["template"]["spec"]
    return [c["name"] for c in spec["containers"]]


def config(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    text = objs[("ConfigMap", "horus-config")]["data"]["config.yaml"]
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def node_rules(
    objs: dict[tuple[str, str], dict[str, Any]], role: str = "horus-node"
) -> dict[str, set[str]]:
    rules = objs[("ClusterRole", role)]["rules"]
    out: dict[str, set[str]] = {}
    for rule in rules:
        for res in rule["resources"]:
            out.setdefault(res, set()).update(rule["verbs"])
    return out


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ([], "dra"),  # helm's own list: 1.37 with resource.k8s.io/v1
        (["--set", "gpuSharing.path=devicePlugin"], "deviceplugin"),
        (["--set", "gpuSharing.path=dra"], "dra"),
        (["--set", "gpuSharing.path=auto", "--kube-version", "1.37.2"], "dra"),
    ],
    ids=["auto-offline", "devicePlugin", "dra", "auto-1.37"],
)
def test_one_value_picks_the_path_for_every_role(
    args: list[str], path: str, tmp_path: Path
) -> None:
    objs = render(*args)
    cfg = config(objs)
    assert {cfg[r]["placement_path"] for r in ("operator", "extender", "agent")} == {path}
    # each role's own settings class reads it (a misspelled key would fail here)
    file = tmp_path / "config.yaml"
    file.write_text(objs[("ConfigMap", "horus-config")]["data"]["config.yaml"])
    env = {"HORUS_AGENT_NODE_NAME": "n1"}
    loaded = (
        load_settings(OperatorSettings, "operator", env=env, config_file=file).placement_path,
        load_settings(ExtenderSettings, "extender", env=env, config_file=file).placement_path,
        load_settings(AgentSettings, "agent", env=env, config_file=file).placement_path,
    )
    assert loaded == (path, path, path)
    if path == "dra":
        assert containers(objs) == ["agent", "dra-driver"]
        assert "dra" in cfg and cfg["dra"]["cdi_dir"] == "/var/run/cdi"
        assert node_rules(objs)["pods"] == {"get", "list", "delete"}
        assert node_rules(objs)["nodes"] == {"get"}
        volumes = objs[("DaemonSet", "horus-node")]["spec"]["template"]["spec"]["volumes"]
        assert "device-plugins" not in {v["name"] for v in volumes}
        # the operator makes and removes claims, reads every claim and slice, and never
        # writes an allocation (status is the kube-scheduler's)
        op = node_rules(objs, "horus-operator")
        assert op["resourceclaims"] == {"get", "list", "watch", "create", "delete"}
        assert op["resourceslices"] == {"get", "list", "watch"}
        assert "resourceclaims/status" not in op
        # pods asking for horus.io/gpu-* are converted to a claim the operator pins (the
        # policy as examples/dra/ ships it, so the two never drift)
        example = {
            d["kind"]: d
            for d in yaml.safe_load_all(
                (ROOT / "examples/dra/extended-resources-policy.yaml").read_text()
            )
        }
        for kind in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"):
            assert objs[(kind, "horus-gpu-requests-to-claims")]["spec"] == example[kind]["spec"]
        # a pod under Kueue's pod integration is told by what Kueue puts on it or its template,
        # and names the template Kueue counts
        spec = objs[("MutatingAdmissionPolicy", "horus-gpu-requests-to-claims")]["spec"]
        variables = {v["name"]: v["expression"] for v in spec["variables"]}
        for key in (
            c.KUEUE_QUEUE_NAME_LABEL,
            c.KUEUE_POD_GROUP_LABEL,
            c.KUEUE_SUSPENDING_PARENT_ANNOTATION,
        ):
            assert f"'{key}'" in variables["kueuePod"]
        assert f'"{c.KUEUE_CLAIM_TEMPLATE}"' in variables["entry"]
        assert op["pods/status"] == {"patch"}  # the placeholder's replacement, nothing more
    else:
        assert containers(objs) == ["device-plugin", "agent"]
        assert "dra" not in cfg
        assert node_rules(objs)["pods"] == {"get", "list", "patch", "delete"}
        assert "resourceclaims" not in node_rules(objs, "horus-operator")
        assert "pods/status" not in node_rules(objs, "horus-operator")
        assert ("MutatingAdmissionPolicy", "horus-gpu-requests-to-claims") not in objs
    # the DeviceClass ships either way (a tenant's claim names it; harmless without slices)
    assert ("DeviceClass", "gpu.horus.io") in objs
    # so does the one Kueue counts pods of its pod integrations by: it selects no device, so a
    # claim of it is never allocated, whoever makes it and whatever a node publishes
    counted = objs[("DeviceClass", "kueue.gpu.horus.io")]["spec"]
    assert counted == {"selectors": [{"cel": {"expression": "false"}}]}


def test_auto_needs_the_resource_api_and_its_version() -> None:
    """The rule, checked on a copy of the chart whose kubeVersion admits older clusters
    (the shipped one admits only what is tested: 1.37)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "horus"
        shutil.copytree(CHART, copy)
        meta = yaml.safe_load((copy / "Chart.yaml").read_text())
        meta["kubeVersion"] = ">=1.30.0-0"
        (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
        old = render("--kube-version", "1.35.4", chart=copy)
        assert config(old)["agent"]["placement_path"] == "deviceplugin"
        assert containers(old) == ["device-plugin", "agent"]
        assert (
            config(render("--kube-version", "1.36.0", chart=copy))["agent"]["placement_path"]
            == "dra"
        )


def test_a_path_the_chart_does_not_know_is_refused() -> None:
    proc = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "-n", "horus-system",
         "--set", "images.registry=r.example", "--set", "gpuSharing.path=both"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "/gpuSharing/path" in proc.stderr and "devicePlugin" in proc.stderr


@pytest.mark.parametrize("value", [None, "true", "false"])
def test_operator_lifecycle_events_value_reaches_the_operators_settings(
    tmp_path: Path, value: str | None
) -> None:
    """``operator.lifecycleEvents`` (default off: 4 apiserver writes per job, issue 27) is what
    the operator loads from the chart's config; a value that is not a boolean is refused by
    the schema before anything is installed."""
    args = ["--set", f"operator.lifecycleEvents={value}"] if value else []
    file = tmp_path / "config.yaml"
    file.write_text(render(*args)[("ConfigMap", "horus-config")]["data"]["config.yaml"])
    loaded = load_settings(OperatorSettings, "operator", env={}, config_file=file)
    assert loaded.lifecycle_events is (value == "true")
    bad = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "--set-string", "operator.lifecycleEvents=yes"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "lifecycleEvents" in bad.stderr


@pytest.mark.parametrize("value", [None, "busy", "off"])
def test_operator_gpu_metrics_value_reaches_the_operators_settings(
    tmp_path: Path, value: str | None
) -> None:
    """``operator.gpuMetrics`` (default all; busy or off cut the per-GPU series of a large
    cluster, issue 27) is what the operator loads; another word is refused by the schema."""
    args = ["--set", f"operator.gpuMetrics={value}"] if value else []
    file = tmp_path / "config.yaml"
    file.write_text(render(*args)[("ConfigMap", "horus-config")]["data"]["config.yaml"])
    loaded = load_settings(OperatorSettings, "operator", env={}, config_file=file)
    assert loaded.gpu_metrics == (value or "all")
    bad = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "--set", "operator.gpuMetrics=some"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "gpuMetrics" in bad.stderr


@pytest.mark.parametrize("value", [None, "250"])
def test_operator_max_jobs_per_pass_value_reaches_the_operators_settings(
    tmp_path: Path, value: str | None
) -> None:
    """``operator.maxJobsPerPass`` (the per-pass cap, issue 27) is what the operator loads from
    the chart's config; one outside 1..100000 is refused by the schema."""
    args = ["--set", f"operator.maxJobsPerPass={value}"] if value else []
    file = tmp_path / "config.yaml"
    file.write_text(render(*args)[("ConfigMap", "horus-config")]["data"]["config.yaml"])
    loaded = load_settings(OperatorSettings, "operator", env={}, config_file=file)
    assert loaded.max_jobs_per_pass == int(value or 1000)
    bad = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "--set", "operator.maxJobsPerPass=0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "maxJobsPerPass" in bad.stderr


@pytest.mark.parametrize("value", [None, "45"])
def test_dra_claim_sweep_value_reaches_the_drivers_settings(
    tmp_path: Path, value: str | None
) -> None:
    """``node.draDriver.claimSweepSeconds`` is the DRA driver's stale-claim sweep interval;
    zero is refused by the schema."""
    from horus.dra.settings import DraSettings

    args = ["--set", "gpuSharing.path=dra"]
    if value:
        args += ["--set", f"node.draDriver.claimSweepSeconds={value}"]
    file = tmp_path / "config.yaml"
    file.write_text(render(*args)[("ConfigMap", "horus-config")]["data"]["config.yaml"])
    env = {"HORUS_DRA_NODE_NAME": "n1"}
    loaded = load_settings(DraSettings, "dra", env=env, config_file=file)
    assert loaded.claim_sweep_interval_s == float(value or 600)
    bad = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "--set", "gpuSharing.path=dra",
         "--set", "node.draDriver.claimSweepSeconds=0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode != 0 and "claimSweepSeconds" in bad.stderr


def test_kueue_pod_namespaces_get_the_template_kueue_counts() -> None:
    """One ResourceClaimTemplate per listed namespace, as examples/kueue ships it; none
    without the list or on the device-plugin path (nothing there counts it)."""
    out = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "-n", "horus-system",
         "--set", "images.registry=registry.example.com/horus", "--set", "gpuSharing.path=dra",
         "--set", "kueue.podNamespaces={team-a,team-b}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    made = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ResourceClaimTemplate"]
    assert sorted(d["metadata"]["namespace"] for d in made) == ["team-a", "team-b"]
    example = [
        d
        for d in yaml.safe_load_all((ROOT / "examples/kueue/queues.yaml").read_text())
        if d and d["kind"] == "ResourceClaimTemplate"
    ]
    for doc in made:
        assert doc["metadata"]["name"] == c.KUEUE_CLAIM_TEMPLATE
        assert doc["spec"] == example[0]["spec"]
    plugin = render("--set", "gpuSharing.path=devicePlugin", "--set", "kueue.podNamespaces={a}")
    assert not [k for k in plugin if k[0] == "ResourceClaimTemplate"]
    assert not [
        k for k in render("--set", "gpuSharing.path=dra") if k[0] == "ResourceClaimTemplate"
    ]
