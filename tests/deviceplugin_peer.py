"""The kubelet's side of the device-plugin API v1beta1, written from the API spec, for tests.

It does what the kubelet's device manager does, over real unix sockets: serve
``Registration.Register`` on ``<dir>/kubelet.sock``; on each registration dial the plugin's
endpoint in the same directory, call ``GetDevicePluginOptions`` and keep a ``ListAndWatch``
stream open, remembering the latest device list per resource; call ``Allocate`` and
``GetPreferredAllocation`` the way admission does (one container request per call). ``stop``
removes ``kubelet.sock`` as a stopping kubelet does, so a new instance on the same directory is
a kubelet restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from horus.api.signing import KeyRing
from horus.deviceplugin.api import api_pb2 as pb
from horus.deviceplugin.api import api_pb2_grpc as pb_grpc


class FakeKubelet:
    def __init__(self, plugin_dir: Path, accept: bool = True) -> None:
        self.dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.accept = accept
        self.registrations: list[Any] = []
        self.options: dict[str, Any] = {}
        self.lists: dict[str, dict[str, str]] = {}
        self.updates: dict[str, int] = {}
        self._channels: dict[str, grpc.Channel] = {}
        self._cond = threading.Condition()
        self._server: Any = None

    # --- Registration service --------------------------------------------------------------

    def Register(self, request: Any, context: Any) -> Any:
        if request.version != "v1beta1":
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}"
            )
        if not self.accept:
            context.abort(grpc.StatusCode.UNAVAILABLE, "test kubelet refuses registrations")
        with self._cond:
            self.registrations.append(request)
            self._cond.notify_all()
        threading.Thread(target=self._watch, args=(request,), daemon=True).start()
        return pb.Empty()

    def _watch(self, request: Any) -> None:
        resource = request.resource_name
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        old = self._channels.pop(resource, None)
        if old is not None:
            old.close()
        self._channels[resource] = channel
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            self.options[resource] = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
            for response in stub.ListAndWatch(pb.Empty()):
                with self._cond:
                    self.lists[resource] = {d.ID: d.health for d in response.devices}
                    self.updates[resource] = self.updates.get(resource, 0) + 1
                    self._cond.notify_all()
        except grpc.RpcError:
            return
        except ValueError:  # "Channel closed!": stop() or a re-registration closed it first
            return

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    self.Register,
                    request_deserializer=pb.RegisterRequest.FromString,
                    response_serializer=pb.Empty.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        # Stop serving first: a Register call still in flight adds to _channels from a gRPC
        # thread, so iterate a snapshot.
        if self._server is not None:
            self._server.stop(0).wait(2)
        for channel in list(self._channels.values()):
            channel.close()
        self._channels.clear()
        self.socket.unlink(missing_ok=True)

    def wait(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
        return True

    # --- calls the kubelet makes on admission ---------------------------------------------

    def _stub(self, resource: str) -> Any:
        return pb_grpc.DevicePluginStub(self._channels[resource])

    def allocate(self, resource: str, device_ids: list[str]) -> Any:
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=device_ids)]
        )
        return self._stub(resource).Allocate(request, timeout=10).container_responses[0]

    def allocate_n(self, resource: str, n: int) -> Any:
        """Allocate ``n`` healthy devices, chosen with the plugin's preferred allocation."""
        healthy = [i for i, h in self.lists[resource].items() if h == "Healthy"]
        return self.allocate(resource, self.preferred(resource, healthy, n))

    def preferred(self, resource: str, available: list[str], size: int) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, allocation_size=size
                )
            ]
        )
        response = self._stub(resource).GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)


# --- pods as the scheduler would make them -----------------------------------------------------


def assignment_annotations(
    key: KeyRing | None,
    namespace: str,
    name: str,
    node: str,
    gpu_uuid: str,
    gpu_index: int,
    core: int,
    memory_mib: int,
    sign_as: tuple[str, str] | None = None,
    uid: str | None = None,
) -> dict[str, str]:
    """The scheduler's annotations; ``key=None`` leaves the signature out, ``sign_as`` signs
    for another pod (a copied signature). The signature binds the pod's UID: ``uid``, else
    ``uid-<name>`` (what the unit tests' fake apiserver gives a pod); on a real apiserver sign
    after the create with :func:`sign_created_pod`."""
    from horus.api.assignment import GpuAssignment, encode_assignment
    from horus.common import constants as c

    text = encode_assignment(GpuAssignment(node, gpu_uuid, gpu_index, core, memory_mib))
    out = {c.ANNOTATION_GPU_ASSIGNMENT: text}
    if key is not None:
        ns, pod = sign_as or (namespace, name)
        out[c.ANNOTATION_ASSIGNMENT_SIGNATURE] = key.sign_assignment(
            ns, pod, uid or f"uid-{pod}", "", 0, text
        )
    return out


def sign_created_pod(
    core: Any, key: KeyRing, namespace: str, name: str, sign_as: tuple[str, str] | None = None
) -> dict[str, Any]:
    """Sign a pod that exists (its UID is the apiserver's) as the extender's bind does: the
    signature annotation is patched onto it (``sign_as``: a signature made for another pod,
    as if copied from it). Returns the pod as read."""
    from horus.common import constants as c

    pod = core.read_namespaced_pod(name, namespace)
    text = (pod.metadata.annotations or {})[c.ANNOTATION_GPU_ASSIGNMENT]
    ns, who = sign_as or (namespace, name)
    uid = pod.metadata.uid if sign_as is None else f"uid-{who}"
    signature = key.sign_assignment(ns, who, uid, "", 0, text)
    body = {"metadata": {"annotations": {c.ANNOTATION_ASSIGNMENT_SIGNATURE: signature}}}
    return core.patch_namespaced_pod(name, namespace, body).to_dict()  # type: ignore[no-any-return]


def pod_manifest(
    namespace: str,
    name: str,
    node: str,
    core: int,
    memory_units: int,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod bound to ``node`` whose one container requests the Horus resources."""
    from horus.common import constants as c

    amounts = {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: str(memory_units)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "schedulerName": c.SCHEDULER_NAME,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "train",
                    "image": "registry.invalid/train:1",
                    "resources": {"limits": amounts, "requests": amounts},
                }
            ],
        },
    }
