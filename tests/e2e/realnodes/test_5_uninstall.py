"""helm uninstall on real nodes leaves nothing running: no Horus pod, no plugin socket in the
kubelet's device-plugin folder, no Horus capacity left to hand out. (Kept on purpose, as
docs/operations.md says: the DLJob CRD; and the signing key pair the operator made, which is
no part of the release.)"""

from __future__ import annotations

import json
import subprocess

from realnode_support import diagnose, wait_for

from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RELEASE, RealCluster


def test_uninstall_leaves_nothing_running(rc: RealCluster) -> None:
    for job in rc.kube.json("get", "dljobs", "-n", "default")["items"]:
        rc.kube.kubectl("delete", "dljob", job["metadata"]["name"], "--wait=false")
    rc.kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s", timeout=180)
    wait_for(
        "every pod gone",
        # every pod but the cluster's own DNS (CoreDNS in kube-system is no part of Horus)
        lambda: (
            not [
                p
                for p in rc.kube.json("get", "pods", "-A")["items"]
                if p["metadata"]["namespace"] != "kube-system"
            ]
        ),
        120,
        diagnose(rc, NAMESPACE),
    )
    left = rc.kube.json(
        "get", "all,configmaps,serviceaccounts,roles,rolebindings", "-n", NAMESPACE
    )["items"]
    names = {(o["kind"], o["metadata"]["name"]) for o in left}
    # what any namespace has, and the published public keys (the operator's, never the
    # release's: kept so a reinstall verifies running pods)
    names -= {
        ("ConfigMap", "kube-root-ca.crt"),
        ("ServiceAccount", "default"),
        ("ConfigMap", c.VERIFY_KEYS_CONFIGMAP),
    }
    # the test's own Prometheus identity (horus.devcluster.prometheus), no part of the release
    names -= {(k, c.PROMETHEUS_SERVICE_ACCOUNT) for k in ("ServiceAccount", "Role", "RoleBinding")}
    assert names == set(), names
    assert rc.kube.kubectl("get", "secret", c.SIGNING_KEY_SECRET, "-n", NAMESPACE).returncode == 0
    for node in rc.nodes:
        sockets = {p.name for p in rc.real.device_plugin_dir(node).glob("*.sock")}
        assert sockets == {"kubelet.sock"}, sockets
        wait_for(
            f"{node} hands out no Horus GPU",
            lambda n=node: (
                rc.kube.json("get", "node", n)["status"]["allocatable"].get(
                    c.RESOURCE_GPU_CORE, "0"
                )
                == "0"
            ),
            60,
            diagnose(rc, NAMESPACE),
        )

        def no_tasks(n: str = node) -> bool:
            ctr = ["ctr", "--address", str(rc.real.socket(n)), "-n", "k8s.io"]
            out = subprocess.run(
                [*ctr, "tasks", "ls", "-q"], capture_output=True, text=True, check=True
            ).stdout.split()
            # the cluster's own DNS (CoreDNS, kube-system) keeps running: no part of Horus
            return not [t for t in out if _pod_namespace(ctr, t) != "kube-system"]

        wait_for(f"no container left running on {node}", no_tasks, 60, diagnose(rc, NAMESPACE))
    roles = rc.kube.json(
        "get", "clusterroles,clusterrolebindings", "-l", "app.kubernetes.io/name=horus"
    )["items"]
    assert roles == [], [r["metadata"]["name"] for r in roles]


def _pod_namespace(ctr: list[str], container: str) -> str:
    """The Kubernetes namespace the CRI labelled a containerd container with."""
    info = subprocess.run(
        [*ctr, "containers", "info", container], capture_output=True, text=True, check=False
    ).stdout
    try:
        labels = json.loads(info).get("Labels") or {}
    except ValueError:
        return ""
    return str(labels.get("io.kubernetes.pod.namespace", ""))
