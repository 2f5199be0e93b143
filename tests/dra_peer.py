"""The kubelet's side of DRA plugin registration and ``dra/v1``, written from the API, for tests.

What the kubelet does, over real unix sockets: its plugin watcher finds ``*-reg.sock`` in the
registration directory, calls ``Registration.GetInfo``, checks the type (``DRAPlugin``) and that
a supported service (``v1.DRAPlugin``) is listed, dials the endpoint it names and reports with
``NotifyRegistrationStatus``; its DRA manager calls ``NodePrepareResources`` /
``NodeUnprepareResources`` with the claims of a pod (namespace, name, uid) — the
fully qualified service ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc

from horus.dra.api import dra_v1_pb2 as dra_pb
from horus.dra.api import dra_v1_pb2_grpc as dra_grpc
from horus.dra.api import pluginregistration_v1_pb2 as reg_pb
from horus.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc

#: The pod a test claim is reserved for (a real UID: it names the pod's progress directory).
POD_UID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"


class FakeKubelet:
    def __init__(self, registry_dir: Path) -> None:
        self.registry_dir = registry_dir
        self.info: Any = None
        self.channel: grpc.Channel | None = None

    def wait_socket(self, timeout: float = 10.0) -> Path:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = sorted(self.registry_dir.glob("*-reg.sock"))
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no registration socket in {self.registry_dir}")

    def register(self, timeout: float = 10.0, accept: bool = True) -> Any:
        """The plugin watcher's registration round; returns the PluginInfo."""
        socket = self.wait_socket(timeout)
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg_pb.InfoRequest(), timeout=5)
            ok = info.type == "DRAPlugin" and "v1.DRAPlugin" in info.supported_versions
            stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(
                    plugin_registered=ok and accept,
                    error="" if ok and accept else "refused by the test kubelet",
                ),
                timeout=5,
            )
        self.info = info
        if self.channel is not None:
            self.channel.close()
        self.channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        return info

    def _stub(self) -> Any:
        assert self.channel is not None, "register first"
        return dra_grpc.DRAPluginStub(self.channel)

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        request = dra_pb.NodePrepareResourcesRequest(
            claims=[dra_pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        return self._stub().NodePrepareResources(request, timeout=10)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        request = dra_pb.NodeUnprepareResourcesRequest(
            claims=[dra_pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        return self._stub().NodeUnprepareResources(request, timeout=10)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def allocated_claim(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    results: list[dict[str, Any]],
    pod: tuple[str, str] | None = ("p1", POD_UID),
) -> dict[str, Any]:
    """A ResourceClaim as the apiserver returns it once the kube-scheduler allocated it."""
    status: dict[str, Any] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    if pod is not None:
        status["reservedFor"] = [{"resource": "pods", "name": pod[0], "uid": pod[1]}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }


def result(
    node: str,
    index: int,
    cores: str | None = "40",
    memory: str | None = "8192Mi",
    share_id: str = "share-1",
    request: str = "gpu",
    driver: str = "gpu.horus.io",
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": request,
        "driver": driver,
        "pool": node,
        "device": f"gpu-{index}",
        "shareID": share_id,
    }
    consumed = {}
    if cores is not None:
        consumed["cores"] = cores
    if memory is not None:
        consumed["memory"] = memory
    if consumed:
        out["consumedCapacity"] = consumed
    return out
