"""The gRPC side: one DevicePlugin server per resource, registration, kubelet-restart handling.

Lifecycle, as the kubelet's device manager expects it (and as NVIDIA's plugin does it):

* each resource (``horus.io/gpu-core``, ``horus.io/gpu-memory``) gets its own server on its own
  unix socket in the kubelet's device-plugin directory, started *before* registering;
* the plugin then calls ``Registration.Register`` on ``<dir>/kubelet.sock``; the kubelet dials
  back and opens ``ListAndWatch``;
* a restarting kubelet deletes every socket in the directory and creates a new
  ``kubelet.sock``: the manager polls the directory (a ``stat`` every ``socket_poll_s``), and
  when ``kubelet.sock`` is a new file or our own socket vanished, restarts the servers and
  registers again. A missing ``kubelet.sock`` is logged once, clearly, and waited for;
* health is re-checked every ``health_interval_s``; a change is pushed to every open
  ``ListAndWatch`` stream (an unhealthy GPU's IDs turn ``Unhealthy``) and republished in the
  node's ``horus.io/gpu-inventory`` annotation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from horus.api.inventory import GpuDevice, encode_inventory
from horus.common import constants as c
from horus.deviceplugin.allocator import AllocationRefused, Allocator
from horus.deviceplugin.api import api_pb2 as pb
from horus.deviceplugin.api import api_pb2_grpc as _pb_grpc
from horus.deviceplugin.coexistence import CoexistenceGuard
from horus.deviceplugin.devices import ResourceKind
from horus.deviceplugin.gpus import GpuInventory
from horus.deviceplugin.kube import NodeApi

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


def _rpc_details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return str(details() if callable(details) else exc)


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class PluginManager:
    """Runs the resource plugins: health loop, kubelet watch, (re-)registration, inventory."""

    def __init__(
        self,
        plugins: list[ResourcePlugin],
        backend: GpuInventory,
        gpus: list[GpuDevice],
        plugin_dir: Path,
        node_name: str,
        api: NodeApi | None = None,
        memory_unit_mib: int = c.DEFAULT_GPU_MEMORY_UNIT_MIB,
        health_interval_s: float = 5.0,
        socket_poll_s: float = 0.5,
        guard: CoexistenceGuard | None = None,
    ) -> None:
        self.plugins = plugins
        self.backend = backend
        self.plugin_dir = plugin_dir
        self.kubelet_socket = plugin_dir / c.KUBELET_SOCKET_NAME
        self.node = node_name
        self.api = api
        self.unit_mib = memory_unit_mib
        self.health_interval_s = health_interval_s
        self.socket_poll_s = socket_poll_s
        self._gpus = gpus
        self._gpus_lock = threading.Lock()
        self._published: str | None = None
        self._registered_to: tuple[int, int, int] | None = None
        self._serving = False
        self._waiting_logged = False
        self.registrations = 0  # successful Register rounds (tests and logs)
        self._retry_at = 0.0
        self._failures = 0
        self.guard = guard  # another device plugin on the node: do not advertise
        self._withdrawn = False
        for plugin in plugins:
            plugin.set_gpus(gpus)

    def gpus(self) -> list[GpuDevice]:
        with self._gpus_lock:
            return list(self._gpus)

    # --- inventory -------------------------------------------------------------------------

    def publish(self) -> None:
        if self.api is None or (self.guard is not None and self.guard.refusal is not None):
            return
        text = encode_inventory(self.gpus())
        if text == self._published:
            return
        try:
            self.api.patch_node_annotations(
                self.node,
                {
                    c.ANNOTATION_GPU_INVENTORY: text,
                    c.ANNOTATION_GPU_MEMORY_UNIT: str(self.unit_mib),
                },
            )
            self._published = text
            log.info("published %s on node %s", c.ANNOTATION_GPU_INVENTORY, self.node)
        except Exception as exc:
            log.warning("could not publish the GPU inventory on node %s: %s", self.node, exc)

    def check_health(self) -> None:
        new = self.backend.check_health(self.gpus())
        with self._gpus_lock:
            old, self._gpus = self._gpus, new
        for before, after in zip(old, new, strict=False):
            if before.health != after.health:
                log.warning("GPU %d (%s) is now %s", after.index, after.uuid, after.health)
        if old != new:
            for plugin in self.plugins:
                plugin.set_gpus(new)
        self.publish()

    def _withdraw(self) -> None:
        """Stop advertising: servers down (the kubelet drops the resources) and the node's
        inventory withdrawn (the placers skip the node), once per refusal."""
        if self._serving:
            log.error("not advertising Horus GPUs on node %s: stopping the servers", self.node)
            self.stop()
        self._registered_to = None
        if self._withdrawn or self.api is None:
            return
        self._withdrawn = True
        self._published = None
        try:
            self.api.patch_node_annotations(
                self.node, {c.ANNOTATION_GPU_INVENTORY: None, c.ANNOTATION_GPU_MEMORY_UNIT: None}
            )
        except Exception as exc:
            log.warning("could not withdraw the GPU inventory of node %s: %s", self.node, exc)

    def may_advertise(self) -> bool:
        """The coexistence check (:mod:`horus.deviceplugin.coexistence`, when due); withdraws
        on a refusal. Advertising resumes through :meth:`watch_kubelet` (registration) and
        :meth:`check_health` (the inventory, within ``health_interval_s``)."""
        if self.guard is None or self.guard.may_advertise():
            self._withdrawn = False
            return True
        self._withdraw()
        return False

    # --- kubelet ---------------------------------------------------------------------------

    def _start_servers(self) -> None:
        for plugin in self.plugins:
            plugin.stop()
            plugin.start()
        self._serving = True

    def stop(self) -> None:
        for plugin in self.plugins:
            plugin.stop()
        self._serving = False

    def watch_kubelet(self) -> None:
        """One look at the device-plugin directory; (re-)register when needed."""
        ident = _identity(self.kubelet_socket)
        if ident is None:
            if not self._waiting_logged:
                log.warning(
                    "kubelet socket %s not found: is the kubelet running, with device plugins "
                    "enabled, and is --plugin-dir its device-plugin directory? Waiting for it "
                    "(checking every %.1fs)",
                    self.kubelet_socket,
                    self.socket_poll_s,
                )
                self._waiting_logged = True
            self._registered_to = None
            return
        own_missing = any(not p.socket_path.exists() for p in self.plugins)
        if ident == self._registered_to and not own_missing:
            return
        if time.monotonic() < self._retry_at:
            return
        if self._registered_to is not None or own_missing or not self._serving:
            if self._registered_to is not None:
                log.info(
                    "kubelet socket re-created (kubelet restart): restarting and re-registering"
                )
            self._start_servers()
        try:
            for plugin in self.plugins:
                plugin.register(self.kubelet_socket)
        except grpc.RpcError as exc:
            self._failures += 1
            delay = min(30.0, 0.5 * 2**self._failures)
            log.error(
                "registration with the kubelet at %s failed (%s); retrying in %.0fs",
                self.kubelet_socket,
                _rpc_details(exc),
                delay,
            )
            self._registered_to = None
            self._retry_at = time.monotonic() + delay
            return
        self._failures = 0
        self._registered_to = ident
        self._waiting_logged = False
        self.registrations += 1
        log.info(
            "registered %s with the kubelet",
            ", ".join(p.kind.resource for p in self.plugins),
        )

    def _watch_directory(self) -> None:
        if self.plugin_dir.is_dir():
            self.watch_kubelet()
        elif not self._waiting_logged:
            log.warning("device-plugin directory %s does not exist yet; waiting", self.plugin_dir)
            self._waiting_logged = True

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set."""
        advertise = self.may_advertise()
        self.publish()
        if advertise and self.plugin_dir.is_dir():
            self._start_servers()
        next_health = time.monotonic() + self.health_interval_s
        try:
            while not stop.is_set():
                if self.may_advertise():
                    self._watch_directory()
                if time.monotonic() >= next_health:
                    try:
                        self.check_health()
                    except Exception:
                        log.exception("GPU health check failed")
                    next_health = time.monotonic() + self.health_interval_s
                stop.wait(self.socket_poll_s)
        finally:
            self.stop()
