"""The gRPC side: one DevicePlugin server per resource.

Each resource (``horus.io/gpu-core``, ``horus.io/gpu-memory``) gets its own
:class:`ResourcePlugin` on its own unix socket in the kubelet's device-plugin directory: it
streams the resource's device IDs (``ListAndWatch``), prefers IDs on the GPU the pending pod
was assigned (``GetPreferredAllocation``), answers ``Allocate`` through the
:class:`~horus.deviceplugin.allocator.Allocator`, and registers itself with the kubelet. Every
request field is checked before use (count, length, duplicates, advertised IDs) and refused
with ``INVALID_ARGUMENT`` naming the field. When the servers start, stop and re-register is
:mod:`horus.deviceplugin.manager`'s job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from horus.api.inventory import GpuDevice
from horus.common import constants as c
from horus.deviceplugin.allocator import AllocationRefused, Allocator
from horus.deviceplugin.api import api_pb2 as pb
from horus.deviceplugin.api import api_pb2_grpc as _pb_grpc
from horus.deviceplugin.devices import ResourceKind

log = logging.getLogger(__name__)
pb_grpc: Any = _pb_grpc  # generated without annotations

#: Largest gRPC message the plugin accepts. The biggest legitimate one is a
#: GetPreferredAllocation listing every free ID of a node: 16 GPUs x 1,024 IDs x ~50 bytes
#: is under 1 MiB. gRPC's own default (4 MiB) is kept as the bound, stated here.
MAX_MESSAGE_BYTES = 4 << 20
#: Container requests in one Allocate/GetPreferredAllocation call (the kubelet sends one).
MAX_CONTAINER_REQUESTS = 64
#: Longest device ID the device-plugin API allows (a DNS label).
MAX_DEVICE_ID_LENGTH = 63


class BadRequest(Exception):
    """An RPC request field the plugin cannot use: INVALID_ARGUMENT with this message."""


class ResourcePlugin:
    """The DevicePlugin service of one resource (duck-typed servicer of the generated stubs)."""

    def __init__(self, kind: ResourceKind, allocator: Allocator | None, plugin_dir: Path) -> None:
        self.kind = kind
        self.allocator = allocator
        self.socket_path = plugin_dir / kind.socket_name
        self._cond = threading.Condition()
        self._devices: list[tuple[str, str]] = []
        self._version = 0
        self._stopped = False
        self._server: Any = None

    # --- state -----------------------------------------------------------------------------

    def set_gpus(self, gpus: list[GpuDevice]) -> None:
        devices = self.kind.devices(gpus)
        with self._cond:
            if devices != self._devices:
                self._devices = devices
                self._version += 1
                self._cond.notify_all()

    def _gpu_of_ids(self, ids: list[str]) -> dict[str, list[str]]:
        by_gpu: dict[str, list[str]] = {}
        for device_id in ids:
            uuid = self.kind.gpu_uuid_of(device_id)
            if uuid is not None:
                by_gpu.setdefault(uuid, []).append(device_id)
        return by_gpu

    # --- gRPC methods ----------------------------------------------------------------------

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        while True:
            with self._cond:
                while self._version == seen and not self._stopped and context.is_active():
                    self._cond.wait(timeout=1.0)
                if self._stopped or not context.is_active():
                    return
                seen = self._version
                devices = list(self._devices)
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health=h) for i, h in devices])

    # --- request checks --------------------------------------------------------------------

    def _known_ids(self) -> set[str]:
        with self._cond:
            return {device_id for device_id, _ in self._devices}

    def _check_ids(self, ids: list[str], where: str, known: set[str]) -> list[str]:
        """``ids`` unique, well formed and advertised by this plugin, else :class:`BadRequest`."""
        if len(ids) > len(known):
            raise BadRequest(
                f"{where}: {len(ids)} device IDs, but this plugin advertises {len(known)} "
                f"of {self.kind.resource}"
            )
        seen: set[str] = set()
        for i, device_id in enumerate(ids):
            if not device_id or len(device_id) > MAX_DEVICE_ID_LENGTH:
                raise BadRequest(
                    f"{where}[{i}]: a device ID has 1..{MAX_DEVICE_ID_LENGTH} characters, "
                    f"got {len(device_id)}"
                )
            if device_id in seen:
                raise BadRequest(f"{where}[{i}]: device ID {device_id!r} is listed twice")
            if device_id not in known:
                raise BadRequest(
                    f"{where}[{i}]: {device_id!r} is not a {self.kind.resource} device this "
                    "plugin advertised (is the kubelet's checkpoint from another plugin?)"
                )
            seen.add(device_id)
        return ids

    def _container_requests(self, request: Any, where: str) -> list[Any]:
        reqs = list(request.container_requests)
        if not 1 <= len(reqs) <= MAX_CONTAINER_REQUESTS:
            raise BadRequest(
                f"{where}: needs 1..{MAX_CONTAINER_REQUESTS} container requests, got {len(reqs)}"
            )
        return reqs

    @staticmethod
    def _abort(context: Any, code: Any, message: str) -> None:
        log.warning("%s", message)
        context.abort(code, f"horus: {message}")

    # --- gRPC methods (continued) -----------------------------------------------------------

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        where = f"GetPreferredAllocation({self.kind.resource})"
        try:
            known = self._known_ids()
            responses = []
            for n, creq in enumerate(self._container_requests(request, where)):
                path = f"{where}.container_requests[{n}]"
                available = self._check_ids(
                    list(creq.available_deviceIDs), f"{path}.available_deviceIDs", known
                )
                must = self._check_ids(
                    list(creq.must_include_deviceIDs), f"{path}.must_include_deviceIDs", known
                )
                size = int(creq.allocation_size)
                if not 1 <= size <= len(available):
                    raise BadRequest(
                        f"{path}.allocation_size: must be 1..{len(available)} (the available "
                        f"IDs), got {size}"
                    )
                if len(must) > size or not set(must) <= set(available):
                    raise BadRequest(
                        f"{path}.must_include_deviceIDs: must be at most allocation_size IDs, "
                        "all of them available"
                    )
                responses.append(
                    pb.ContainerPreferredAllocationResponse(
                        deviceIDs=self.preferred(available, must, size)
                    )
                )
        except BadRequest as exc:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        """IDs on the GPU(s) the pending pod's assignment names, else packed on the fullest GPU.

        Keeping a container's IDs on its assigned GPU makes the kubelet's bookkeeping true to
        the hardware (an unhealthy GPU takes exactly its pods' IDs with it).
        """
        chosen = list(dict.fromkeys(must))[:size]
        rest = [i for i in available if i not in set(chosen)]
        by_gpu = self._gpu_of_ids(rest)
        order: list[str] = []
        assignment = self.allocator.match(self.kind.resource, size) if self.allocator else None
        if assignment is not None:
            order = [g.gpu_uuid for g in assignment.all_gpus if g.gpu_uuid in by_gpu]
        order += sorted((u for u in by_gpu if u not in order), key=lambda u: len(by_gpu[u]))
        for uuid in order:
            for device_id in by_gpu[uuid]:
                if len(chosen) >= size:
                    return chosen
                chosen.append(device_id)
        return chosen

    def Allocate(self, request: Any, context: Any) -> Any:
        if self.allocator is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the device plugin has no API access")
        where = f"Allocate({self.kind.resource})"
        try:
            known = self._known_ids()
            creqs = self._container_requests(request, where)
            for n, creq in enumerate(creqs):
                ids = self._check_ids(
                    list(creq.devices_ids), f"{where}.container_requests[{n}].devices_ids", known
                )
                if not ids:
                    raise BadRequest(
                        f"{where}.container_requests[{n}].devices_ids: empty; a container "
                        "that asks for this resource gets at least one device"
                    )
        except BadRequest as exc:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        responses = []
        for creq in creqs:
            try:
                grant = self.allocator.allocate(self.kind.resource, len(creq.devices_ids))  # type: ignore[union-attr]
            except AllocationRefused as exc:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"horus: {exc}")
            except Exception as exc:  # API server down, ...: say so, do not hang the kubelet
                log.exception("Allocate failed")
                context.abort(grpc.StatusCode.UNAVAILABLE, f"horus: Allocate failed: {exc}")
            responses.append(
                pb.ContainerAllocateResponse(
                    envs=grant.envs,
                    mounts=[
                        pb.Mount(
                            container_path=m.container_path,
                            host_path=m.host_path,
                            read_only=m.read_only,
                        )
                        for m in grant.mounts
                    ],
                    devices=[
                        pb.DeviceSpec(
                            container_path=d.container_path,
                            host_path=d.host_path,
                            permissions=d.permissions,
                        )
                        for d in grant.devices
                    ],
                    cdi_devices=[pb.CDIDevice(name=n) for n in grant.cdi_devices],
                )
            )
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    # --- serving ---------------------------------------------------------------------------

    def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        with self._cond:
            self._stopped = False
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        log.info("%s: serving on %s", self.kind.resource, self.socket_path)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2.0)
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def register(self, kubelet_socket: Path, timeout: float = 5.0) -> None:
        """Register with the kubelet (raises grpc.RpcError when it refuses or is not there)."""
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)
            stub.Register(
                pb.RegisterRequest(
                    version=c.DEVICE_PLUGIN_API_VERSION,
                    endpoint=self.kind.socket_name,
                    resource_name=self.kind.resource,
                    options=pb.DevicePluginOptions(
                        pre_start_required=False, get_preferred_allocation_available=True
                    ),
                ),
                timeout=timeout,
            )
