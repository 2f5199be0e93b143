"""Installing Horus as a cluster admin would, on the real control plane: `kubectl apply -k
manifests/` and `helm install charts/horus` both work, are accepted by the apiserver, give each
role exactly the rights it needs, and refuse bad values with the schema's message.

kwok runs no containers, so the operator and node pods never execute here: these tests prove
the objects, not the processes (the demo runs the processes; see tools/dev/demo.sh).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from chart_support import CHART, NAMESPACE, ROOT, adopt_crd, wait_namespace_gone

NS = ["-n", NAMESPACE]
#: where the images would be (the chart has no default registry; kwok pulls nothing)
REG = ("--set", "images.registry=registry.example.com/horus")
KEY = "secret/horus-signing-key"  # the operator makes it (first install); the chart never
PUB = "configmap/horus-verify-keys"  # the public keys the operator publishes


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_helm_lint_is_clean(helm):
    out = helm("lint", str(CHART), *NS, "--strict")
    assert "0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["enforcement=maybe"], "at '/enforcement': value must be one of 'mps', 'report', 'off'"),
        (["operator.replicas=-1"], "at '/operator/replicas': minimum: got -1, want 0"),
        (["scheduling.policy=fastest"], "at '/scheduling/policy': value must be one of"),
        (["metrics.agentPort=70000"], "at '/metrics/agentPort': maximum: got 70,000, want 65,535"),
        (["images.operator.tag=latest"], "at '/images/operator/tag'"),
        (["predictor.source=configMap"], "at '/predictor/configMap'"),
        (["node.rowsDir=rows"], "at '/node/rowsDir'"),
        (["scheduler.schedulerName=horus-scheduler"], "at '/scheduler/schedulerName'"),
        (
            ["serviceMonitor.enabled=true", "podMonitor.enabled=true"],
            "at '/podMonitor/enabled': value must be false",
        ),
        (["images.registry=https://r.example.com"], "at '/images/registry'"),
        (["node.nvidiaDevicePlugin=both"], "at '/node/nvidiaDevicePlugin'"),
        (["operator.extraEnv[0].value=x"], "at '/operator/extraEnv/0': missing property 'name'"),
        (["images.node.digest=sha256:abc"], "at '/images/node/digest'"),
        (["node.gpuAccess=all"], "at '/node/gpuAccess': value must be one of"),
    ],
)
def test_bad_values_fail_install_with_the_schema_message(helm, cluster, sets, message):
    args = [arg for s in sets for arg in ("--set", s)]
    proc = helm(
        "install", "horus-bad", str(CHART), *NS, "--create-namespace", *REG, *args, check=False
    )
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert helm("list", "-A", "-q").stdout.strip() == ""


def test_chart_refuses_another_namespace(helm):
    proc = helm("template", "horus", str(CHART), "-n", "default", *REG, check=False)
    assert proc.returncode != 0 and "install Horus into the namespace horus-system" in proc.stderr


@pytest.mark.parametrize(
    ("version", "ok"),
    [("1.31.9", False), ("1.36.5", False), ("1.37.0", True), ("1.37.2", True), ("1.38.0", False)],
)
def test_chart_states_the_kubernetes_it_needs(helm, version, ok):
    """kubeVersion 1.37.x: the minor every test of this repository runs on (issue 25); its
    floor reasons (ValidatingAdmissionPolicy GA 1.30, the node claim of bound ServiceAccount
    tokens GA 1.32) hold a fortiori."""
    proc = helm("template", "horus", str(CHART), *NS, *REG, "--kube-version", version, check=False)
    assert (proc.returncode == 0) == ok, proc.stderr
    if not ok:
        assert "is incompatible with Kubernetes v" + version in proc.stderr, proc.stderr


def test_chart_without_a_registry_says_how_to_get_images(helm):
    proc = helm("template", "horus", str(CHART), *NS, check=False)
    assert proc.returncode != 0
    assert "images.registry is empty: build the Horus images" in proc.stderr, proc.stderr
    # nothing that runs a Horus image: no registry needed (the local demo installs this way)
    out = helm(
        "template", "horus", str(CHART), *NS,
        "--set", "operator.enabled=false", "--set", "node.enabled=false",
    ).stdout  # fmt: skip
    assert not {"Deployment", "DaemonSet"} & {d["kind"] for d in _docs(out)}


def test_kustomize_and_chart_make_the_same_objects(helm, cluster):
    """Also: `helm template` needs no --kube-version (helm is built with the offline
    Kubernetes version a released helm has) and, offline, renders no assignment key."""
    kust = _docs(cluster.kubectl("kustomize", str(ROOT / "manifests")).stdout)
    # the manifests are the device-plugin path (manifests/operator/config.yaml)
    path = ("--set", "gpuSharing.path=devicePlugin")
    chart = _docs(helm("template", "horus", str(CHART), *NS, *REG, *path).stdout)
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    k, c = {key(d): d for d in kust}, {key(d): d for d in chart}
    # the chart cannot template its own namespace (helm --create-namespace makes it)
    assert set(k) - set(c) == {("Namespace", "", NAMESPACE)}
    assert set(c) == set(k) - {("Namespace", "", NAMESPACE)}
    for name in set(k) & set(c):
        if name[0] in ("ClusterRole", "Role"):
            assert k[name]["rules"] == c[name]["rules"], name
        if name[0] in ("PodDisruptionBudget", "NetworkPolicy", "Service"):
            assert k[name]["spec"] == c[name]["spec"], name
            assert k[name]["metadata"].get("annotations") == c[name]["metadata"].get(
                "annotations"
            ), name
        if name[0] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert k[name]["spec"] == c[name]["spec"], name
        if name[0] == "CustomResourceDefinition":
            assert k[name]["spec"] == c[name]["spec"], name
            assert c[name]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        if name[0] in ("Deployment", "DaemonSet"):
            ks, cs = k[name]["spec"]["template"]["spec"], c[name]["spec"]["template"]["spec"]
            for field in (
                "serviceAccountName",
                "securityContext",
                "volumes",
                "nodeSelector",
                "affinity",
                "tolerations",
                "priorityClassName",
                "hostPID",
                "runtimeClassName",
            ):
                assert ks.get(field) == cs.get(field), (name, field)
            for kc, cc in zip(ks["containers"], cs["containers"], strict=True):
                for field in (
                    "args",
                    "command",
                    "env",
                    "ports",
                    "securityContext",
                    "volumeMounts",
                    "resources",
                    "livenessProbe",
                    "readinessProbe",
                ):
                    assert kc.get(field) == cc.get(field), (name, kc["name"], field)
                # the same repository and tag; only the registry differs (an overlay sets it)
                assert kc["image"].rsplit("/", 1)[1] == cc["image"].rsplit("/", 1)[1]
                assert kc["image"].startswith("registry.invalid/horus/")
                assert cc["image"].startswith("registry.example.com/horus/")


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["dashboards.enabled=true", "enforcement=report", "extender.enabled=false"],
        [
            "predictor.source=configMap",
            "predictor.configMap=my-model",
            "operator.replicas=3",
            "node.rowsDir=/var/lib/horus/rows",
        ],
        [
            "scheduler.enabled=true",
            "scheduler.replicas=2",
            "assignmentKey.existingSecret=my-key",
            "assignmentKey.secretKey=ed25519.pem",
            "prometheusRule.enabled=false",
            "node.runtimeClassName=nvidia",
            "node.nvidiaDevicePlugin=allow",
            "node.nodeSelector.pool=gpu",
            "operator.extraArgs[0]=--resync-period=30",
            "operator.extraEnv[0].name=HORUS_OPERATOR_POLICY",
            "operator.extraEnv[0].value=binpack",
            "operator.podAnnotations.team=ml",
            "operator.podLabels.tier=control",
            "scheduler.kubeScheduler.extraArgs[0]=--v=2",
            "scheduler.tolerations[0].operator=Exists",
            "node.agent.extraEnv[0].name=HORUS_AGENT_WATCHDOG",
            "node.agent.extraEnv[0].value=report",
            "images.operator.digest=sha256:" + "a" * 64,
            "images.kubeScheduler.tag=v1.37.2",
            "networkPolicy.extenderFrom[0].ipBlock.cidr=10.0.0.0/24",
            "operator.priorityClassName=",
        ],
    ],
    ids=["defaults", "dashboards-report-noextender", "predictor-configmap", "every-knob"],
)
def test_helm_template_is_accepted_by_the_apiserver(helm, cluster, sets):
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    args = [arg for s in sets for arg in ("--set", s)]
    rendered = helm("template", "horus", str(CHART), *NS, *REG, "--include-crds", *args).stdout
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    kinds = {d["kind"] for d in _docs(rendered)}
    assert {"Deployment", "DaemonSet", "ClusterRole", "CustomResourceDefinition"} <= kinds
    if "dashboards.enabled=true" in sets:
        maps = [d for d in _docs(rendered) if d["metadata"]["name"].startswith("horus-dashboard-")]
        assert len(maps) == 4 and all(
            m["metadata"]["labels"]["grafana_dashboard"] == "1" for m in maps
        )
    assert "(server dry run)" in proc.stdout
    if "scheduler.enabled=true" in sets:
        objs = {(d["kind"], d["metadata"]["name"]): d for d in _docs(rendered)}
        op = objs[("Deployment", "horus-operator")]["spec"]["template"]
        assert op["metadata"]["annotations"]["team"] == "ml"
        assert op["metadata"]["labels"]["tier"] == "control"
        assert "priorityClassName" not in op["spec"]
        ctr = {c["name"]: c for c in op["spec"]["containers"]}
        assert ctr["operator"]["args"][-1] == "--resync-period=30"
        assert ctr["operator"]["image"] == "registry.example.com/horus/horus-operator@sha256:" + (
            "a" * 64
        )
        key_env = {
            "name": "HORUS_ASSIGNMENT_KEY_FILE",
            "value": "/var/run/horus/signing-key/ed25519.pem",
        }
        assert key_env in ctr["operator"]["env"] and key_env in ctr["extender"]["env"]
        assert {"name": "signing-key", "secret": {"secretName": "my-key"}} in op["spec"]["volumes"]
        assert ("Secret", "horus-signing-key") not in objs
        # the node pods get only the public keys, never the private key's Secret
        node = objs[("DaemonSet", "horus-node")]["spec"]["template"]["spec"]
        assert "my-key" not in json.dumps(node)
        assert {
            "name": "verify-keys",
            "configMap": {"name": "horus-verify-keys", "optional": True},
        } in node["volumes"]
        sched = objs[("Deployment", "horus-kube-scheduler")]["spec"]["template"]["spec"]
        images = {c["name"]: c["image"] for c in sched["containers"]}
        assert images["kube-scheduler"] == "registry.k8s.io/kube-scheduler:v1.37.2"
        ext = next(c for c in sched["containers"] if c["name"] == "extender")
        assert ext["args"][2:6] == ["--host", "127.0.0.1", "--port", "8888"]
        assert key_env in ext["env"]
        assert ("PodDisruptionBudget", "horus-kube-scheduler") in objs
        ds = objs[("DaemonSet", "horus-node")]["spec"]["template"]["spec"]
        assert ds["runtimeClassName"] == "nvidia" and ds["nodeSelector"] == {"pool": "gpu"}
        terms = ds["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert not any(
            e["key"] == "nvidia.com/gpu.deploy.device-plugin"
            for t in terms["nodeSelectorTerms"]
            for e in t["matchExpressions"]
        )
        np = objs[("NetworkPolicy", "horus-operator")]["spec"]["ingress"]
        assert np[1] == {
            "ports": [{"port": "extender"}],
            "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        }


def test_trained_model_and_rows_dir_reach_the_processes(helm, tmp_path, monkeypatch):
    """predictor.source=configMap mounts the user's artifact into the operator *and* the
    extender and points both at it; node.rowsDir gives the agent a host directory for its
    observed rows. The rendered sections load as the roles' settings."""
    from horus.agent.settings import AgentSettings
    from horus.common.settings import load_settings
    from horus.operator.settings import OperatorSettings

    def render(*sets: str) -> tuple[dict, dict]:
        args = [arg for s in sets for arg in ("--set", s)]
        docs = _docs(helm("template", "horus", str(CHART), *NS, *REG, *args).stdout)
        objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        return objs, yaml.safe_load(objs[("ConfigMap", "horus-config")]["data"]["config.yaml"])

    objs, cfg = render()
    assert "predictor" not in cfg["operator"] and "predictor" not in cfg["extender"]
    assert "training_rows" not in cfg["agent"] and "pair_rows" not in cfg["agent"]

    objs, cfg = render(
        "predictor.source=configMap", "predictor.configMap=horus-model", "node.rowsDir=/srv/rows"
    )
    model = "/var/lib/horus/model/model.json.gz"
    assert cfg["operator"]["predictor"] == cfg["extender"]["predictor"] == model
    op = objs[("Deployment", "horus-operator")]["spec"]["template"]["spec"]
    assert {"name": "predictor-model", "configMap": {"name": "horus-model"}} in op["volumes"]
    for container in op["containers"]:  # operator and extender
        mount = {"name": "predictor-model", "mountPath": "/var/lib/horus/model", "readOnly": True}
        assert mount in container["volumeMounts"], container["name"]
    node = objs[("DaemonSet", "horus-node")]["spec"]["template"]["spec"]
    rows = {"name": "rows", "hostPath": {"path": "/srv/rows", "type": "DirectoryOrCreate"}}
    assert rows in node["volumes"]
    agent = next(x for x in node["containers"] if x["name"] == "agent")
    assert {"name": "rows", "mountPath": "/var/lib/horus/rows"} in agent["volumeMounts"]

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    op_settings = load_settings(OperatorSettings, "operator", config_file=tmp_path / "config.yaml")
    assert str(op_settings.predictor) == model
    monkeypatch.setenv("HORUS_AGENT_NODE_NAME", "gpu-node-0")  # the DaemonSet sets NODE_NAME
    agent_settings = load_settings(AgentSettings, "agent", config_file=tmp_path / "config.yaml")
    assert str(agent_settings.training_rows) == "/var/lib/horus/rows/training-rows.csv"
    assert str(agent_settings.pair_rows) == "/var/lib/horus/rows/pair-rows.csv"


def test_a_trained_model_fits_a_configmap(cluster, tmp_path):
    """docs/operations.md's `kubectl create configmap horus-model --from-file=model.json.gz`: a
    full-size artifact, gzipped, is accepted by the apiserver (ConfigMaps hold at most 1 MiB)
    and what comes back loads as the same model."""
    import base64
    import json

    from horus.predictor.model import DEFAULT_ARTIFACT, load_predictor
    from horus.predictor.train import save_artifact

    path = tmp_path / "model.json.gz"
    save_artifact(json.loads(DEFAULT_ARTIFACT.read_text()), path)
    name = f"horus-model-{tmp_path.name[-8:].lower().replace('_', '-')}".rstrip("-")
    cluster.kubectl("-n", "default", "create", "configmap", name, f"--from-file={path}")
    try:
        got = json.loads(
            cluster.kubectl("-n", "default", "get", "configmap", name, "-o", "json").stdout
        )
        back = tmp_path / "back"
        back.write_bytes(base64.b64decode(got["binaryData"]["model.json.gz"]))
        assert load_predictor(back).version == load_predictor(DEFAULT_ARTIFACT).version
    finally:
        cluster.kubectl("-n", "default", "delete", "configmap", name, check=False)


def test_one_scrape_path_per_endpoint(helm):
    """prometheus.io annotations, a ServiceMonitor or a PodMonitor: never two of them (every
    series would be scraped twice); the schema refuses both monitors (bad-values test)."""

    def render(*sets: str) -> list[dict]:
        args = [a for s in sets for a in ("--set", s)]
        return _docs(helm("template", "horus", str(CHART), *NS, *REG, *args).stdout)

    def annotated(docs: list[dict]) -> list[str]:
        return [
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "Service"
            and "prometheus.io/scrape" in (d["metadata"].get("annotations") or {})
        ]

    docs = render()
    assert sorted(annotated(docs)) == ["horus-node", "horus-operator"]
    assert not {"ServiceMonitor", "PodMonitor"} & {d["kind"] for d in docs}
    for monitor in ("ServiceMonitor", "PodMonitor"):
        key = monitor[0].lower() + monitor[1:]
        docs = render(f"{key}.enabled=true")
        assert [d["kind"] for d in docs].count(monitor) == 1
        assert annotated(docs) == [], monitor
    assert annotated(render("metrics.serviceAnnotations=false")) == []


# --- RBAC matrix ------------------------------------------------------------------------------
OPERATOR, NODE = "horus-operator", "horus-node"
# (service account, verb, resource, namespace, allowed)
MATRIX = [
    (OPERATOR, "watch", "dljobs.horus.io", "team-a", True),
    (OPERATOR, "patch", "dljobs.horus.io/status", "team-a", True),
    (OPERATOR, "create", "pods", "team-a", True),
    (OPERATOR, "delete", "pods", "team-a", True),
    (OPERATOR, "create", "pods/binding", "team-a", True),
    (OPERATOR, "create", "bindings", "team-a", True),
    (OPERATOR, "list", "nodes", "", True),
    (OPERATOR, "get", "configmaps", "team-a", True),
    (OPERATOR, "create", "events", "team-a", True),
    (OPERATOR, "update", "leases.coordination.k8s.io", NAMESPACE, True),
    (OPERATOR, "get", KEY, NAMESPACE, True),
    (OPERATOR, "create", "pods/exec", "team-a", False),
    (OPERATOR, "get", "pods/exec", "team-a", False),
    (OPERATOR, "create", "pods/eviction", "team-a", False),
    (OPERATOR, "get", "secrets", "team-a", False),
    (OPERATOR, "list", "secrets", NAMESPACE, False),
    (OPERATOR, "get", "secret/other", NAMESPACE, False),
    (OPERATOR, "update", KEY, NAMESPACE, False),
    (OPERATOR, "patch", PUB, NAMESPACE, True),  # it publishes its public key
    (OPERATOR, "patch", "configmap/horus-config", NAMESPACE, False),
    (OPERATOR, "patch", "nodes", "", False),
    (OPERATOR, "create", "dljobs.horus.io", "team-a", False),
    (OPERATOR, "update", "leases.coordination.k8s.io", "kube-system", False),
    (OPERATOR, "create", "deployments.apps", NAMESPACE, False),
    (OPERATOR, "impersonate", "serviceaccounts", NAMESPACE, False),
    # the extender's TLS Secret (issue 24): the operator (and the extenders) read it by name
    (OPERATOR, "get", "secret/horus-extender-tls", NAMESPACE, True),
    (OPERATOR, "update", "secret/horus-extender-tls", NAMESPACE, False),
    (NODE, "patch", "nodes", "", True),
    (NODE, "get", "nodes", "", True),
    (NODE, "list", "pods", "", True),
    (NODE, "patch", "pods", "team-a", True),
    (NODE, "create", "pods/eviction", "team-a", False),  # the watchdog deletes (issue 24)
    (NODE, "delete", "pods", "team-a", True),  # only on its node: horus-node-own-pods
    (NODE, "list", "nodes", "", False),
    (NODE, "patch", "dljobs.horus.io/status", "team-a", True),
    (NODE, "get", "configmaps", "team-a", True),
    (NODE, "create", "events", "team-a", True),
    (NODE, "get", KEY, NAMESPACE, False),
    (NODE, "get", PUB, NAMESPACE, True),  # verifies with the public keys
    (NODE, "patch", PUB, NAMESPACE, False),
    (NODE, "get", "secrets", NAMESPACE, False),
    (NODE, "list", "secrets", "", False),
    (NODE, "get", "secret/horus-extender-tls", NAMESPACE, False),
    (NODE, "create", "pods", "team-a", False),
    (NODE, "create", "pods/binding", "team-a", False),
    (NODE, "create", "bindings", "team-a", False),
    (NODE, "create", "pods/exec", "team-a", False),
    (NODE, "patch", "dljobs.horus.io", "team-a", False),
    (NODE, "delete", "nodes", "", False),
    (NODE, "update", "leases.coordination.k8s.io", NAMESPACE, False),
    ("default", "get", KEY, NAMESPACE, False),
    ("default", "get", "secret/horus-extender-tls", NAMESPACE, False),
]


def _rbac_matrix(cluster) -> list[str]:
    def ask(row):
        sa, verb, resource, ns, want = row
        args = ["auth", "can-i", verb, f"--as=system:serviceaccount:{NAMESPACE}:{sa}"]
        kind, _, sub = resource.partition("/")
        if sub and not kind.startswith(("secret", "configmap")):  # pods/exec: a subresource
            args += [kind, f"--subresource={sub}"]
        else:
            args.append(resource)
        args += ["-n", ns] if ns else []
        got = cluster.kubectl(*args, check=False).stdout.strip() == "yes"
        return None if got == want else f"{sa} {verb} {resource} -n {ns or '-'}: {got}, want {want}"

    with ThreadPoolExecutor(8) as pool:
        return [p for p in pool.map(ask, MATRIX) if p]


def test_kustomize_apply_rbac_and_delete(cluster):
    base = str(ROOT / "manifests")
    out = cluster.kubectl("apply", "-k", base).stdout
    try:
        assert "deployment.apps/horus-operator created" in out or "configured" in out
        got = cluster.kubectl("get", "deploy,ds,svc,sa,cm", *NS, "-o", "name").stdout.split()
        for obj in ("deployment.apps/horus-operator", "daemonset.apps/horus-node",
                    "service/horus-operator", "service/horus-node",
                    "serviceaccount/horus-operator", "serviceaccount/horus-node",
                    "configmap/horus-config"):  # fmt: skip
            assert obj in got
        dep = cluster.kubectl("get", "deploy/horus-operator", *NS, "-o", "yaml").stdout
        spec = yaml.safe_load(dep)["spec"]
        assert spec["replicas"] == 2
        ctr = spec["template"]["spec"]["containers"][0]
        assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert ctr["livenessProbe"] and ctr["readinessProbe"] and ctr["resources"]["limits"]
        assert _rbac_matrix(cluster) == [], _rbac_matrix(cluster)
    finally:
        cluster.kubectl("delete", "-k", base, "--ignore-not-found", "--timeout=90s")
        cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))  # other tests use it
    left = cluster.kubectl("get", "clusterrole", "horus-operator", "--ignore-not-found").stdout
    assert left.strip() == ""
    assert cluster.kubectl("get", "ns", NAMESPACE, check=False).returncode != 0


def test_helm_install_rbac_and_uninstall(helm, cluster):
    wait_namespace_gone(cluster)
    adopt_crd(cluster)
    # the MATRIX is the device-plugin path's, as the manifests' (on dra the node identity has
    # no pod or node patch: tests/unit/packaging/test_chart_path.py, realnodes/test_2f)
    path = ("--set", "gpuSharing.path=devicePlugin")
    helm("install", "horus", str(CHART), *NS, "--create-namespace", *REG, *path, "--wait=false")
    try:
        assert helm("status", "horus", *NS).stdout.count("STATUS: deployed") == 1
        got = cluster.kubectl("get", "deploy,ds,svc,secret,cm", *NS, "-o", "name").stdout.split()
        for obj in ("deployment.apps/horus-operator", "daemonset.apps/horus-node",
                    "configmap/horus-config"):  # fmt: skip
            assert obj in got
        assert KEY not in got  # the chart renders no key: the operator makes the pair
        assert _rbac_matrix(cluster) == [], _rbac_matrix(cluster)
        helm("upgrade", "horus", str(CHART), *NS, *REG, "--set", "enforcement=report")
    finally:
        helm("uninstall", "horus", *NS, "--wait", "--timeout=90s")
    assert helm("list", *NS, "-q").stdout.strip() == ""
    left = cluster.kubectl("get", "deploy,ds,sa", *NS, "-o", "name").stdout.split()
    assert [o for o in left if "horus" in o] == []
    assert (
        cluster.kubectl("get", "clusterrole", "horus-operator", "--ignore-not-found").stdout == ""
    )
    # the CRD is kept on uninstall by design (helm.sh/resource-policy: keep); the key pair is
    # the operator's, never the release's
    assert cluster.kubectl("get", "crd", "dljobs.horus.io", "-o", "name").stdout.strip()
    wait_namespace_gone(cluster)


def test_chart_config_loads_with_every_roles_settings(helm, tmp_path):
    """Non-default values render a config every role's settings class accepts."""
    sys_path = str(ROOT / "tests" / "unit" / "packaging")
    import sys

    sys.path.insert(0, sys_path)
    try:
        from test_packaging_static import _load_every_section
    finally:
        sys.path.remove(sys_path)
    for sets, agent in [
        (["enforcement=report", "node.backend=simulated"], ("none", "report")),
        (
            ["enforcement=off", "scheduling.policy=binpack", "scheduling.utilCap=150"],
            ("none", "off"),
        ),
        (
            ["enforcement=mps", "predictor.source=configMap", "predictor.configMap=m"],
            ("mps", "evict"),
        ),
    ]:
        args = [a for s in sets for a in ("--set", s)]
        out = helm("template", "horus", str(CHART), *NS, *REG, "-s", "templates/config.yaml", *args)
        text = yaml.safe_load(out.stdout)["data"]["config.yaml"]
        got = _load_every_section(text, tmp_path, {"HORUS_AGENT_NODE_NAME": "n1"})
        assert (got["agent"].enforcement, got["agent"].watchdog) == agent
        assert got["deviceplugin"].enforcement == agent[0]
        # MPS clients get the daemon's shm dir as /dev/shm only with MPS
        shm = got["deviceplugin"].mps_shm_dir
        assert str(shm) == "/run/horus/mps/shm" if agent[0] == "mps" else shm is None
        if "scheduling.policy=binpack" in sets:
            assert got["operator"].policy == got["extender"].policy == "binpack"
            assert got["scheduler"].util_cap == 150.0


def test_prometheus_rule_carries_the_shipped_rules(helm):
    docs = _docs(
        helm(
            "template", "horus", str(CHART), *NS, *REG,
            "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps",
        ).stdout
    )  # fmt: skip
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kps"
    shipped = yaml.safe_load((ROOT / "manifests/prometheus/horus-alerts.rules.yaml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]
    default = _docs(helm("template", "horus", str(CHART), *NS, *REG).stdout)
    assert "PrometheusRule" not in {d["kind"] for d in default}
