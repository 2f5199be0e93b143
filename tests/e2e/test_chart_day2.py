"""The chart on the real control plane, past the first install: a changed CRD reaches the
apiserver through `helm upgrade`, the operator's PodDisruptionBudget stops a drain from taking
both replicas, the node DaemonSet lands on exactly the GPU nodes its labels select (and
NOTES.txt says how many), the assignment key is generated once and never by an offline render,
and the optional Horus scheduler — its own kube-scheduler configuration, RBAC and loopback
extender, as the chart renders them — places a plain pod.

kwok nodes run no containers, so the Horus scheduler's two containers run here as local
processes with exactly the chart's configuration and the chart's ServiceAccount token (as the
demo runs the operator); the eviction API, the disruption controller and the DaemonSet
controller are the real ones. What still needs real kubelets (the scheduler Deployment's own
pod, a drain of pods that really run) is left to the real-node tests.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, NAMESPACE, ROOT, adopt_crd, wait_namespace_gone

from horus.common import constants as c
from horus.devcluster.cluster import write_kubeconfig
from horus.devcluster.nodes import NodeSpec, add_nodes

NS = ["-n", NAMESPACE]
# the device-plugin path: this cluster's nodes are kwok (no kubelet for a DRA driver)
REG = (
    "--set",
    "images.registry=registry.example.com/horus",
    "--set",
    "gpuSharing.path=devicePlugin",
)
KEY = "secret/horus-signing-key"
CRD = "crd/dljobs.horus.io"


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _sets(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def _wait(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


@pytest.fixture
def install(helm: Any, cluster: Any) -> Iterator[Callable[..., str]]:
    """helm install horus with extra values; uninstalled (and the namespace gone) afterwards."""
    installed: list[bool] = []

    def run(*sets: str, source: Path = CHART) -> str:
        wait_namespace_gone(cluster)
        adopt_crd(cluster)
        out = helm(
            "install", "horus", str(source), *NS, "--create-namespace", *REG, *_sets(*sets)
        ).stdout
        installed.append(True)
        return out

    yield run
    if installed:
        helm("uninstall", "horus", *NS, "--wait", "--timeout=90s", check=False)
        wait_namespace_gone(cluster)
        # leave the CRD as the other tests expect it (kubectl-applied, the shipped schema)
        cluster.kubectl("replace", "-f", str(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- CRD upgrade -------------------------------------------------------------------------------


def test_helm_upgrade_applies_a_changed_crd(helm, cluster, install, tmp_path):
    install("operator.enabled=false", "node.enabled=false")
    live = json.loads(cluster.kubectl("get", CRD, "-o", "json").stdout)
    assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    columns = [col["name"] for col in live["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert "Upgraded" not in columns

    # the next chart version adds a printer column and a status field to the schema
    chart = tmp_path / "horus"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / "horus.io_dljobs.yaml"
    crd = yaml.safe_load(path.read_text())
    version = crd["spec"]["versions"][0]
    version["additionalPrinterColumns"].append(
        {"name": "Upgraded", "type": "string", "jsonPath": ".status.upgradedBy"}
    )
    version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["upgradedBy"] = {
        "type": "string"
    }
    path.write_text(yaml.safe_dump(crd, sort_keys=False))

    helm("upgrade", "horus", str(chart), *NS, *REG, "--reuse-values")
    live = json.loads(cluster.kubectl("get", CRD, "-o", "json").stdout)
    version = live["spec"]["versions"][0]
    assert "Upgraded" in [col["name"] for col in version["additionalPrinterColumns"]]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["upgradedBy"] == {"type": "string"}

    # uninstall keeps the CRD (deleting it would delete every DLJob)
    helm("uninstall", "horus", *NS, "--wait", "--timeout=90s")
    assert cluster.kubectl("get", CRD, "-o", "name").stdout.strip()


def test_a_crd_helm_does_not_own_is_refused_until_adopted(helm, cluster):
    """The one-time step docs/operations.md's "Upgrade" names, for CRDs from the old crds/ folder or
    from kubectl: without it Helm refuses the install; with it Helm takes the CRD over."""
    wait_namespace_gone(cluster)
    cluster.apply_crds(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml", c.DLJOB_CRD_NAME)
    for key in ("meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-"):
        cluster.kubectl("annotate", CRD, key, check=False)
    cluster.kubectl("label", CRD, "app.kubernetes.io/managed-by-", check=False)
    args = ["install", "horus", str(CHART), *NS, "--create-namespace", *REG]
    args += _sets("operator.enabled=false", "node.enabled=false")
    proc = helm(*args, check=False)
    try:
        assert proc.returncode != 0 and "dljobs.horus.io" in proc.stderr, proc.stderr
        assert "invalid ownership metadata" in proc.stderr, proc.stderr
        helm("uninstall", "horus", *NS, check=False)
        adopt_crd(cluster)
        helm(*args)
        owner = cluster.kubectl(
            "get", CRD, "-o", "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}"
        ).stdout
        assert owner == "horus"
    finally:
        helm("uninstall", "horus", *NS, "--wait", "--timeout=90s", check=False)
        wait_namespace_gone(cluster)
        cluster.kubectl("replace", "-f", str(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml"))


# --- the signing key ---------------------------------------------------------------------------


def test_the_chart_never_renders_a_key(helm):
    """Issue 24: the operator makes the Ed25519 pair on its first start; no render, online or
    offline, carries a key (a chart cannot derive the public key to publish)."""
    for _ in range(2):
        out = helm("template", "horus", str(CHART), *NS, *REG).stdout
        names = [d["metadata"]["name"] for d in _docs(out)]
        assert "horus-signing-key" not in names and "horus-verify-keys" not in names


def test_a_key_the_release_does_not_own_is_left_alone(helm, cluster, install):
    """The operator created the key first (or the admin did): helm install, upgrade and
    uninstall neither fail on it nor touch it."""
    wait_namespace_gone(cluster)
    cluster.kubectl("create", "namespace", NAMESPACE)
    mine = "-----BEGIN PRIVATE KEY-----\nnot-read-here\n-----END PRIVATE KEY-----\n"
    cluster.kubectl("-n", NAMESPACE, "create", "secret", "generic", "horus-signing-key",
                    f"--from-literal=private.pem={mine}")  # fmt: skip
    adopt_crd(cluster)
    args = ["install", "horus", str(CHART), *NS, *REG]
    helm(*args, *_sets("operator.enabled=false", "node.enabled=false"))
    try:
        helm("upgrade", "horus", str(CHART), *NS, *REG, "--reuse-values")
        got = cluster.kubectl("get", KEY, *NS, "-o", "jsonpath={.data.private\\.pem}").stdout
        assert base64.b64decode(got).decode() == mine
    finally:
        helm("uninstall", "horus", *NS, "--wait", "--timeout=90s", check=False)
        wait_namespace_gone(cluster)


# --- GPU node selection and NOTES ---------------------------------------------------------------


def _uninstall_then_delete(helm: Any, cluster: Any, nodes: list[str]) -> None:
    """Uninstall while the nodes exist: pods left on a deleted node wait ~40 s for the
    controller-manager's orphan collection, which would hold the namespace up."""
    helm("uninstall", "horus", *NS, "--wait", "--timeout=90s", check=False)
    wait_namespace_gone(cluster)
    cluster.kubectl("delete", "node", *nodes, "--ignore-not-found")


def test_node_daemonset_lands_on_the_selected_gpu_nodes(helm, cluster, install):
    nodes = add_nodes(cluster.kubeconfig, NodeSpec(count=4, gpus_per_node=1, prefix="sel"))
    try:
        opted_out, nvidia, nfd, plain = nodes
        # kwok nodes carry horus.io/gpu-node=true; these say otherwise
        cluster.kubectl("label", "node", opted_out, "horus.io/gpu-node=false", "--overwrite")
        cluster.kubectl("label", "node", nvidia, "nvidia.com/gpu.deploy.device-plugin=true")
        cluster.kubectl("label", "node", nfd, "horus.io/gpu-node-", "pool=sel",
                        "feature.node.kubernetes.io/pci-10de.present=true")  # fmt: skip
        cluster.kubectl("label", "node", plain, "pool=sel")
        out = install("operator.enabled=false", "node.nodeSelector.pool=sel")
        assert "GPU nodes selected for the Horus DaemonSet: 2." in out, out

        def placed() -> set[str] | None:
            pods = json.loads(
                cluster.kubectl(
                    "get", "pods", *NS, "-l", "app.kubernetes.io/component=node", "-o", "json"
                ).stdout
            )["items"]
            got = {p["spec"].get("nodeName") for p in pods}
            return got if len(pods) == 2 and None not in got else None

        assert _wait("the node DaemonSet's pods", placed) == {nfd, plain}
        spec = json.loads(cluster.kubectl("get", "ds/horus-node", *NS, "-o", "json").stdout)
        tpl = spec["spec"]["template"]["spec"]
        assert tpl["hostPID"] is True
        env = {e["name"]: e.get("value") for e in tpl["containers"][0]["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    finally:
        _uninstall_then_delete(helm, cluster, nodes)


def test_notes_warn_when_no_node_is_selected(helm, install):
    out = install("operator.enabled=false", "node.nodeSelector.no-such-pool=x")
    assert "WARNING: no node matches the node DaemonSet's selection" in out, out
    assert "kubectl label node <gpu-node> horus.io/gpu-node=true" in out
    # offline there is nothing to count: no warning, no number
    offline = helm("template", "horus", str(CHART), *NS, *REG, "--set", "node.enabled=true")
    assert "WARNING" not in offline.stdout


# --- PodDisruptionBudget -----------------------------------------------------------------------


def test_pdb_stops_a_drain_from_taking_the_last_operator_replica(helm, cluster, install):
    nodes = add_nodes(cluster.kubeconfig, NodeSpec(count=2, gpus_per_node=1, prefix="pdb"))
    try:
        for n in nodes:
            cluster.kubectl("label", "node", n, "pool=pdb")
        install("node.enabled=false", "operator.nodeSelector.pool=pdb")
        pdb = json.loads(cluster.kubectl("get", "pdb/horus-operator", *NS, "-o", "json").stdout)
        assert pdb["spec"]["minAvailable"] == 1

        def running() -> set[str]:
            items = json.loads(
                cluster.kubectl(
                    "get", "pods", *NS, "-l", "app.kubernetes.io/component=operator", "-o", "json"
                ).stdout
            )["items"]
            return {
                p["metadata"]["name"]
                for p in items
                if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            }

        _wait("both operator replicas running", lambda: len(running()) == 2)
        _wait(
            "the disruption controller to allow one eviction",
            lambda: (
                cluster.kubectl(
                    "get", "pdb/horus-operator", *NS, "-o", "jsonpath={.status.disruptionsAllowed}"
                ).stdout
                == "1"
            ),
        )
        before = running()
        for n in nodes:  # nowhere for a replacement to go
            cluster.kubectl("cordon", n)
        # drain both nodes (the replicas may share one: the anti-affinity is preferred only)
        outputs = []
        for n in nodes:
            proc = cluster.kubectl(
                "drain", n, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10s",
                check=False,
            )  # fmt: skip
            outputs.append(proc.stdout + proc.stderr)
        text = "\n".join(outputs)
        assert "Cannot evict pod as it would violate the pod's disruption budget" in text, text
        assert text.count(" evicted") == 1, text
        after = _wait("the evicted replica gone", lambda: (r := running()) < before and r)
        assert len(after) == 1, "the last replica still runs"
    finally:
        _uninstall_then_delete(helm, cluster, nodes)


# --- the Horus scheduler -----------------------------------------------------------------------


def _sa_kubeconfig(cluster: Any, sa: str, path: Path) -> Path:
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]["server"]
    ca = Path(admin["clusters"][0]["cluster"]["certificate-authority"])
    token = cluster.kubectl("create", "token", sa, *NS, "--duration=1h").stdout.strip()
    write_kubeconfig(path, server, ca, token, f"system:serviceaccount:{NAMESPACE}:{sa}")
    return path


@contextmanager
def _process(argv: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        print(f"=== {argv[0]} … log (tail) ===\n{log.read_text(errors='replace')[-3000:]}")


def test_horus_scheduler_places_a_plain_pod_through_its_loopback_extender(
    cluster, install, tmp_path
):
    nodes = add_nodes(cluster.kubeconfig, NodeSpec(count=2, gpus_per_node=2, prefix="hsched"))
    try:
        # the Deployment's own pods must not run anywhere here: kwok would only pretend
        install(
            "operator.enabled=false",
            "node.enabled=false",
            "scheduler.enabled=true",
            "scheduler.nodeSelector.no-such-pool=x",
        )
        cfg = yaml.safe_load(
            cluster.kubectl(
                "get",
                "configmap",
                "horus-kube-scheduler",
                *NS,
                "-o",
                "jsonpath={.data.config\\.yaml}",
            ).stdout
        )
        assert [p["schedulerName"] for p in cfg["profiles"]] == ["horus-kube-scheduler"]
        (extender,) = cfg["extenders"]
        # mutual TLS even on loopback, with the client certificate the pod mounts
        assert extender["urlPrefix"] == "https://127.0.0.1:8888"
        assert extender["enableHTTPS"] is True
        tls_dir = "/etc/horus-extender-tls"
        assert extender["tlsConfig"] == {"caFile": f"{tls_dir}/ca.crt",
                                         "certFile": f"{tls_dir}/client.crt",
                                         "keyFile": f"{tls_dir}/client.key"}  # fmt: skip
        deploy = json.loads(
            cluster.kubectl("get", "deploy/horus-kube-scheduler", *NS, "-o", "json").stdout
        )
        containers = {x["name"]: x for x in deploy["spec"]["template"]["spec"]["containers"]}
        ext_args = containers["extender"]["args"]
        assert ext_args[ext_args.index("--host") + 1] == "127.0.0.1"
        assert ext_args[ext_args.index("--health-port") + 1] == "8889"
        mounts = {m["name"]: m["mountPath"] for m in containers["kube-scheduler"]["volumeMounts"]}
        assert mounts["extender-tls"] == tls_dir
        volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
        assert volumes["extender-tls"]["secret"]["secretName"] == c.EXTENDER_TLS_SECRET

        # run both containers as they would run in the pod: the chart's config, the chart's
        # ServiceAccount (so its RBAC does the work), free loopback ports instead of 8888/8889,
        # and the client certificate from the Secret the extender creates (operator is off)
        sa = _sa_kubeconfig(cluster, "horus-kube-scheduler", tmp_path / "sa.kubeconfig")
        port = _free_port()
        extender["urlPrefix"] = f"https://127.0.0.1:{port}"
        for field, entry in (("caFile", "ca.crt"), ("certFile", "client.crt"),
                             ("keyFile", "client.key")):  # fmt: skip
            extender["tlsConfig"][field] = str(tmp_path / entry)
        cfg["clientConnection"] = {"kubeconfig": str(sa)}
        (tmp_path / "scheduler.yaml").write_text(yaml.safe_dump(cfg))
        horus_cfg = tmp_path / "horus.yaml"
        horus_cfg.write_text(
            cluster.kubectl(
                "get", "configmap", "horus-config", *NS, "-o", "jsonpath={.data.config\\.yaml}"
            ).stdout
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HORUS_", "KUBECONFIG"))}
        ext_argv = [sys.executable, "-m", "horus", "operator", "extender", "--config",
                    str(horus_cfg), "--host", "127.0.0.1", "--port", str(port),
                    "--health-port", str(_free_port()), "--kubeconfig", str(sa)]  # fmt: skip
        sched_argv = [str(cluster.bin_dir / "kube-scheduler"),
                      f"--config={tmp_path / 'scheduler.yaml'}", "--bind-address=127.0.0.1",
                      f"--secure-port={_free_port()}", f"--authentication-kubeconfig={sa}",
                      f"--authorization-kubeconfig={sa}", "--v=2"]  # fmt: skip

        def tls_secret() -> dict[str, str] | None:
            got = cluster.kubectl("get", "secret", c.EXTENDER_TLS_SECRET, *NS, "-o", "json",
                                  check=False)  # fmt: skip
            return json.loads(got.stdout)["data"] if got.returncode == 0 else None

        with ExitStack() as stack:
            ext = stack.enter_context(_process(ext_argv, tmp_path / "extender.log", env))
            data = _wait("the extender's TLS Secret, made by the extender itself",
                         lambda: (ext.poll() is None or pytest.fail("extender exited"))
                         and tls_secret())  # fmt: skip
            for entry in ("ca.crt", "client.crt", "client.key"):
                (tmp_path / entry).write_bytes(base64.b64decode(data[entry]))
            sched = stack.enter_context(_process(sched_argv, tmp_path / "kube-scheduler.log", env))
            profile = (ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()
            res = {c.RESOURCE_GPU_CORE: "40", c.RESOURCE_GPU_MEMORY: "10000"}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "via-horus-scheduler",
                    "namespace": "default",
                    "annotations": {c.ANNOTATION_GRAPH_PROFILE: profile},
                },
                "spec": {
                    "schedulerName": "horus-kube-scheduler",
                    "nodeSelector": {"kubernetes.io/hostname": nodes[1]},
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": res, "limits": res},
                        }
                    ],
                },
            }
            cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
            try:

                def bound() -> dict[str, Any] | None:
                    assert sched.poll() is None, "kube-scheduler exited"
                    got = json.loads(
                        cluster.kubectl("get", "pod", "via-horus-scheduler", "-o", "json").stdout
                    )
                    return got if got["spec"].get("nodeName") else None

                got = _wait("the pod bound by the Horus scheduler", bound, timeout=120)
                assert got["spec"]["nodeName"] == nodes[1]
                ann = got["metadata"]["annotations"]
                assignment = json.loads(ann[c.ANNOTATION_GPU_ASSIGNMENT])
                assert assignment["node"] == nodes[1] and assignment["corePercent"] == 40
                assert ann[c.ANNOTATION_ASSIGNMENT_SIGNATURE]
                lease = cluster.kubectl(
                    "get", "lease", "horus-kube-scheduler", *NS,
                    "-o", "jsonpath={.spec.holderIdentity}",
                ).stdout  # fmt: skip
                assert lease, "the scheduler took its own leader Lease with the chart's Role"
            finally:
                cluster.kubectl("delete", "pod", "via-horus-scheduler", "--grace-period=0",
                                "--force", "--ignore-not-found")  # fmt: skip
    finally:
        cluster.kubectl("delete", "node", *nodes, "--ignore-not-found")
