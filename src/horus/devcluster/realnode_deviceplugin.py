"""The Horus device plugin as a host process of a real node (``device_plugin="host"``;
:mod:`horus.devcluster.realnodes`): simulated GPUs, a dev-only client-certificate identity
bound to the chart's node role, run inside the node's mount namespace so the kubelet finds its
socket."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from horus.devcluster import certs
from horus.devcluster.processes import ManagedProcess, spawn
from horus.devcluster.realnode_config import write_kubeconfig
from horus.devcluster.realnode_state import RealNode

DEVICE_PLUGIN_USER = "horus-dev:device-plugin"
DEVICE_PLUGIN_GROUP = "horus-dev:device-plugins"
DEVICE_PLUGIN_ROLE = "horus-dev-device-plugin"


def spawn_device_plugin(node: RealNode, cstate: Any, nsenter: list[str]) -> ManagedProcess:
    """Start the node's device plugin (``nsenter`` enters the node's mount namespace) as
    ``horus-dev:device-plugin:<node>``."""
    d = Path(node.directory)
    pki = Path(cstate.directory) / "pki"
    certs.issue_client_cert(
        pki,
        f"{DEVICE_PLUGIN_USER}:{node.name}",
        [DEVICE_PLUGIN_GROUP],
        d / "pki" / "device-plugin.crt",
        d / "pki" / "device-plugin.key",
    )
    write_kubeconfig(
        d / "device-plugin.kubeconfig",
        cstate.server,
        pki / "ca.crt",
        f"{DEVICE_PLUGIN_USER}:{node.name}",
        d / "pki" / "device-plugin.crt",
        d / "pki" / "device-plugin.key",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
    env.pop("KUBECONFIG", None)
    env["PYTHONUNBUFFERED"] = "1"
    argv = [
        *nsenter,
        sys.executable,
        "-m",
        "horus",
        "deviceplugin",
        "run",
        "--node-name",
        node.name,
        "--backend",
        "simulated",
        "--sim-gpu-count",
        str(node.gpus),
        "--sim-gpu-model",
        node.gpu_model,
        "--sim-gpu-memory-mib",
        str(node.gpu_memory_mib),
        "--enforcement",
        "mps",
        "--kubeconfig",
        str(d / "device-plugin.kubeconfig"),
    ]
    return spawn("device-plugin", argv, d, env)


def ensure_device_plugin_rbac(kubeconfig: str) -> None:
    """The host device plugin's rights: the chart's node role (manifests/rbac/node.yaml, the
    one source; its configmaps get covers the published verify keys it reads)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from horus.devcluster.binaries import repo_root

    docs = yaml.safe_load_all((repo_root() / "manifests" / "rbac" / "node.yaml").read_text())
    role = next(d for d in docs if d and d.get("kind") == "ClusterRole")
    rules = list(role["rules"])
    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    rbac: Any = client.RbacAuthorizationV1Api(api)
    objects: list[tuple[Any, Any, dict[str, Any]]] = [
        (
            rbac.create_cluster_role,
            rbac.replace_cluster_role,
            {"metadata": {"name": DEVICE_PLUGIN_ROLE}, "rules": rules},
        ),
        (
            rbac.create_cluster_role_binding,
            rbac.replace_cluster_role_binding,
            {
                "metadata": {"name": DEVICE_PLUGIN_ROLE},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": DEVICE_PLUGIN_ROLE,
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": DEVICE_PLUGIN_GROUP,
                    }
                ],
            },
        ),
    ]
    for create, replace, body in objects:
        try:
            create(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(body["metadata"]["name"], body)
