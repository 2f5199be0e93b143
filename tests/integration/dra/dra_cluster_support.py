"""Support for the DRA driver's tests on the real control plane (fixtures in conftest.py).

``dra_env`` makes, once per module, a namespace, one kwok GPU node, the DeviceClass and the
node RBAC and admission policies as shipped (manifests/), and a token of the node identity
``horus-node`` bound to a pod on that node, as the kubelet mounts it in the DaemonSet's pod.
``driver`` runs the real driver (``horus.dra.app.run_driver``) with that token — so every call
it makes is one the shipped RBAC and policies allow — on the simulated GPU backend (two GPUs of
81,559 MiB, an H100's real size), with private socket, CDI and checkpoint folders, and a
kubelet-side peer (tests/dra_peer.py) registered with it.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_peer import FakeKubelet
from horus.common import constants as c
from horus.dra.kube import KubeDraApi
from horus.dra.settings import DraSettings
from horus.kube.rest import RestClient
from horus.operator.jobapi import KubeJobApi

ROOT = Path(__file__).resolve().parents[3]
GPU_MIB = 81559


@dataclass
class DraEnv:
    cluster: Any
    namespace: str
    node: str
    node_token: str

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> Any:
        return self.cluster.kubectl(*args, check=check, input=input)

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(
            self.kubectl("get", kind, name, "-n", self.namespace, "-o", "json").stdout
        )
        return out

    def slices(self) -> list[dict[str, Any]]:
        out = self.kubectl(
            "get", "resourceslices", "-o", "json",
            f"--field-selector=spec.nodeName={self.node},spec.driver={c.DRA_DRIVER_NAME}",
        )  # fmt: skip
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items


@dataclass
class RunningDriver:
    kubelet: FakeKubelet
    settings: DraSettings
    thread: threading.Thread
    stop: threading.Event
    health: Path


def server_minor(cluster: Any) -> int:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    return int(re.sub(r"\D.*", "", version["minor"]))


def node_token(cluster: Any, node: str) -> str:
    """A token of ``horus-node`` bound to a pod on ``node`` (it names the node)."""
    name = f"horus-node-{node}"[:63]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": c.NODE_SERVICE_ACCOUNT,
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    cluster.kubectl("apply", "-n", c.HORUS_NAMESPACE, "-f", "-", input=json.dumps(pod))
    uid = cluster.kubectl(
        "get", "pod", name, "-n", c.HORUS_NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    bound = ("--bound-object-kind=Pod", f"--bound-object-name={name}", f"--bound-object-uid={uid}")
    token: str = cluster.kubectl(
        "create", "token", c.NODE_SERVICE_ACCOUNT, "-n", c.HORUS_NAMESPACE, *bound
    ).stdout
    return token.strip()


def token_api(cluster: Any, token: str) -> KubeDraApi:
    """The driver's API client as the DaemonSet's pod would have it: only the token."""
    from kubernetes import client

    admin = cluster.api_client().configuration
    conf = client.Configuration()
    conf.host = admin.host
    conf.ssl_ca_cert = admin.ssl_ca_cert
    conf.api_key = {"authorization": token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    return KubeDraApi(rest=RestClient(client.ApiClient(conf)))


class ScopedJobs(KubeJobApi):
    """The real API, seeing only one namespace and the given nodes."""

    def __init__(self, api_client: Any, namespace: str, nodes: set[str]) -> None:
        super().__init__(api_client)
        self.namespace, self.nodes = namespace, nodes

    def _mine(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [o for o in items if (o.get("metadata") or {}).get("namespace") == self.namespace]

    def list_pods(self, active_only: bool = False) -> list[dict[str, Any]]:
        return self._mine(super().list_pods(active_only))

    def list_dljobs(self) -> list[dict[str, Any]]:
        return self._mine(super().list_dljobs())

    def list_resource_claims(self) -> list[dict[str, Any]]:
        return self._mine(super().list_resource_claims())

    def list_nodes(self) -> list[dict[str, Any]]:
        return [n for n in super().list_nodes() if n["metadata"]["name"] in self.nodes]

    def list_resource_slices(self) -> list[dict[str, Any]]:
        return [
            s for s in super().list_resource_slices() if s["spec"].get("nodeName") in self.nodes
        ]
