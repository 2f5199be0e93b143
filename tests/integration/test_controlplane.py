"""The local control plane is a real Kubernetes: API, CRD validation, kwok nodes, helm, RBAC."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from horus.common import constants as c

DATA = Path(__file__).parent / "data"


def test_kubectl_version_and_readyz(cluster):
    out = cluster.kubectl("version", "-o", "json").stdout
    info = json.loads(out)
    assert info["serverVersion"]["gitVersion"].startswith("v1.")
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_python_client_lists_namespaces(cluster):
    from kubernetes import client

    names = {
        ns.metadata.name for ns in client.CoreV1Api(cluster.api_client()).list_namespace().items
    }
    assert {"default", "kube-system"} <= names


def test_crd_is_served_and_its_schema_enforced(cluster):
    cluster.apply_crds(DATA / "widget-crd.yaml", "widgets.test.horus.io")
    good = "apiVersion: test.horus.io/v1\nkind: Widget\nmetadata: {name: ok}\nspec: {size: 3}\n"
    cluster.kubectl("apply", "-f", "-", input=good)
    assert cluster.kubectl("get", "widget", "ok", "-o", "jsonpath={.spec.size}").stdout == "3"
    bad = "apiVersion: test.horus.io/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {size: 99}\n"
    proc = cluster.kubectl("apply", "-f", "-", input=bad, check=False)
    assert proc.returncode != 0
    assert "spec.size" in proc.stderr and "less than or equal to 10" in proc.stderr


def _add_nodes(cluster, count: int, prefix: str) -> list[str]:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "horus",
            "dev",
            "cluster",
            "--dir",
            cluster.state.directory,
            "add-nodes",
            "--count",
            str(count),
            "--gpus-per-node",
            "4",
            "--gpu-model",
            "A100",
            "--gpu-memory-mib",
            "40960",
            "--prefix",
            prefix,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return [f"{prefix}-{i:04d}" for i in range(count)]


def test_kwok_gpu_nodes_ready_and_bound_pod_runs(cluster):
    names = _add_nodes(cluster, 3, "it-node")
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    ours = {n["metadata"]["name"]: n for n in nodes if n["metadata"]["name"] in names}
    assert set(ours) == set(names)
    for node in ours.values():
        conds = {x["type"]: x["status"] for x in node["status"]["conditions"]}
        assert conds["Ready"] == "True"
        assert node["status"]["capacity"][c.RESOURCE_GPU_CORE] == "400"
        assert node["status"]["capacity"][c.RESOURCE_GPU_MEMORY] == str(4 * 40960)
        inventory = json.loads(node["metadata"]["annotations"][c.ANNOTATION_GPU_INVENTORY])
        assert [g["index"] for g in inventory] == [0, 1, 2, 3]
        assert all(g["model"] == "A100" and g["memoryMiB"] == 40960 for g in inventory)

    # A pod nobody schedules (unknown scheduler), bound by us through a Binding object.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound-by-hand"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bound-by-hand"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": names[1]},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(binding))
    deadline = time.monotonic() + 120  # kwok may still be busy with earlier tests' pods
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl(
            "get", "pod", "bound-by-hand", "-o", "jsonpath={.status.phase}"
        ).stdout
        if phase == "Running":
            break
        time.sleep(0.5)
    assert phase == "Running"
    assert (
        cluster.kubectl("get", "pod", "bound-by-hand", "-o", "jsonpath={.spec.nodeName}").stdout
        == names[1]
    )


def test_default_scheduler_places_pods_on_kwok_nodes(cluster):
    """The real kube-scheduler runs: a plain pod requesting GPU cores lands on a GPU node."""
    _add_nodes(cluster, 1, "sched-node")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "scheduled-by-kube-scheduler"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "requests": {c.RESOURCE_GPU_CORE: "50"},
                        "limits": {c.RESOURCE_GPU_CORE: "50"},
                    },
                }
            ]
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    cluster.kubectl(
        "wait", "--for=condition=Ready", "pod/scheduled-by-kube-scheduler", "--timeout=60s"
    )


def test_helm_version_and_install(cluster):
    helm = [str(cluster.bin_dir / "helm"), "--kubeconfig", cluster.kubeconfig]
    import subprocess

    version = subprocess.run([*helm, "version", "--short"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("v3."), version.stderr
    install = subprocess.run(
        [
            *helm,
            "install",
            "tiny",
            str(DATA / "tinychart"),
            "--namespace",
            "helm-test",
            "--create-namespace",
            "--wait",
            "--timeout",
            "60s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr
    got = cluster.kubectl(
        "get", "configmap", "tiny-greeting", "-n", "helm-test", "-o", "jsonpath={.data.greeting}"
    ).stdout
    assert got == "hello from helm"
    uninstall = subprocess.run(
        [*helm, "uninstall", "tiny", "-n", "helm-test"], capture_output=True, text=True
    )
    assert uninstall.returncode == 0, uninstall.stderr


def test_rbac_is_enforced(cluster):
    cluster.kubectl("create", "namespace", "rbac-test")
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", "rbac-test")
    sa = "system:serviceaccount:rbac-test:nobody"
    can = cluster.kubectl(
        "auth", "can-i", "list", "pods", "-n", "rbac-test", f"--as={sa}", check=False
    )
    assert can.returncode != 0 and can.stdout.strip() == "no"
    # A real token issued by the apiserver for that account gets 403 when it reads pods.
    token = cluster.kubectl("create", "token", "nobody", "-n", "rbac-test").stdout.strip()
    denied = cluster.kubectl("get", "pods", "-n", "rbac-test", f"--token={token}", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    # Granting the right flips both answers.
    cluster.kubectl(
        "create", "role", "pod-reader", "--verb=list", "--resource=pods", "-n", "rbac-test"
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "nobody-reads",
        "--role=pod-reader",
        "--serviceaccount=rbac-test:nobody",
        "-n",
        "rbac-test",
    )
    assert (
        cluster.kubectl(
            "auth", "can-i", "list", "pods", "-n", "rbac-test", f"--as={sa}"
        ).stdout.strip()
        == "yes"
    )
    assert cluster.kubectl("get", "pods", "-n", "rbac-test", f"--token={token}").returncode == 0


def test_namespaced_service_accounts_exist(cluster):
    """The controller-manager runs: new namespaces get their default service account."""
    count = 2
    for i in range(count):
        cluster.kubectl("create", "namespace", f"sa-test-{i}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(
            cluster.kubectl("get", "sa", "default", "-n", f"sa-test-{i}", check=False).returncode
            == 0
            for i in range(count)
        ):
            return
        time.sleep(0.5)
    pytest.fail("controller-manager did not create default service accounts")


def test_a_watch_from_resource_version_0_streams_events(cluster):
    """kwok's informers watch from resourceVersion 0. With the apiserver's WatchList gate on,
    such a watch becomes a watch-list stream, which Debian's etcd cannot serve: the watch
    ends in an error at once and kwok only notices new pods when it re-lists, 20-50 s later.
    The dev cluster turns the gate off; this checks the watch now delivers objects."""
    from kubernetes import client, config, watch

    cluster.kubectl("create", "configmap", "watch-rv0", "--from-literal=a=b")
    core = client.CoreV1Api(config.new_client_from_config(config_file=cluster.kubeconfig))
    w = watch.Watch()
    events = []
    for ev in w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version="0",
        allow_watch_bookmarks=True,  # as client-go's reflector asks
        field_selector="metadata.name=watch-rv0",
        timeout_seconds=5,
    ):
        events.append(ev["type"])
        if ev["type"] in ("ADDED", "ERROR"):
            w.stop()
    assert events[:1] == ["ADDED"], events
