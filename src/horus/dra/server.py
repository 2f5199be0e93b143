"""The gRPC side: plugin registration and the ``dra/v1`` DRAPlugin service.

As ``k8s.io/dynamic-resource-allocation/kubeletplugin`` does it (the library every Go DRA
driver uses), two unix sockets:

* ``<registry dir>/gpu.horus.io-reg.sock`` serves ``pluginregistration.Registration``: the
  kubelet's plugin watcher finds the socket (at start it walks the directory, afterwards it
  watches it), calls ``GetInfo`` — type ``DRAPlugin``, name ``gpu.horus.io``, endpoint the DRA
  socket, supported versions ``v1.DRAPlugin`` — and reports with
  ``NotifyRegistrationStatus``;
* ``<plugin dir>/dra.sock`` serves ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``
  (``NodePrepareResources``, ``NodeUnprepareResources``).

Every claim of a request is answered in the response map under its UID, with its devices or
its error: a bad claim reference, a claim that is not ours, the apiserver being down — each is
that claim's error, and the other claims of the call are still prepared.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from horus.common import constants as c
from horus.dra.api import dra_v1_pb2 as dra_pb
from horus.dra.api import dra_v1_pb2_grpc as _dra_grpc
from horus.dra.api import pluginregistration_v1_pb2 as reg_pb
from horus.dra.api import pluginregistration_v1_pb2_grpc as _reg_grpc
from horus.dra.checkpoint import PreparedDevice
from horus.dra.driver import Driver
from horus.kube.errors import ApiError
from horus.node.claim_checks import ClaimRefused, check_claim_ref

log = logging.getLogger(__name__)
dra_grpc: Any = _dra_grpc  # generated without annotations
reg_grpc: Any = _reg_grpc

#: Largest gRPC message accepted (gRPC's own default, stated): a request names claims by three
#: short strings, so even thousands of claims fit.
MAX_MESSAGE_BYTES = 4 << 20
#: Claims in one call. The kubelet sends the claims of one pod (a handful).
MAX_CLAIMS = 256


class RegistrationServicer:
    """``pluginregistration.Registration``: what the kubelet's plugin watcher asks."""

    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: Any, context: Any) -> Any:
        return reg_pb.PluginInfo(
            type=c.DRA_PLUGIN_TYPE,
            name=c.DRA_DRIVER_NAME,
            endpoint=str(self.endpoint),
            supported_versions=[c.DRA_PLUGIN_SERVICE],
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", c.DRA_DRIVER_NAME)
            self.last_error = ""
            self.registered.set()
        else:
            self.last_error = request.error
            self.registered.clear()
            log.error("the kubelet refused the registration: %s", request.error)
        return reg_pb.RegistrationStatusResponse()


def _device(d: PreparedDevice) -> Any:
    out = dra_pb.Device(
        request_names=list(d.request_names),
        pool_name=d.pool_name,
        device_name=d.device_name,
        cdi_device_ids=list(d.cdi_device_ids),
    )
    if d.share_id:
        out.share_id = d.share_id
    return out


class DraServicer:
    """``dra/v1 DRAPlugin`` over a :class:`~horus.dra.driver.Driver`."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def _claims(self, request: Any, context: Any, call: str) -> list[Any]:
        claims = list(request.claims)
        if len(claims) > MAX_CLAIMS:
            message = f"horus: {call}: {len(claims)} claims in one call, at most {MAX_CLAIMS}"
            log.warning("%s", message)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        return claims

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra_pb.NodePrepareResourcesResponse()
        for claim in self._claims(request, context, "NodePrepareResources"):
            entry = response.claims[claim.uid]
            try:
                ref = check_claim_ref(claim.namespace, claim.name, claim.uid)
                entry.devices.extend(_device(d) for d in self.driver.prepare(ref))
            except Exception as exc:
                del entry.devices[:]
                entry.error = self._error("prepare", claim, exc)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = dra_pb.NodeUnprepareResourcesResponse()
        for claim in self._claims(request, context, "NodeUnprepareResources"):
            entry = response.claims[claim.uid]
            try:
                self.driver.unprepare(check_claim_ref(claim.namespace, claim.name, claim.uid))
            except Exception as exc:
                entry.error = self._error("unprepare", claim, exc)
        return response

    @staticmethod
    def _error(what: str, claim: Any, exc: Exception) -> str:
        name = f"{claim.namespace[:80]}/{claim.name[:80]}"
        if isinstance(exc, ClaimRefused):
            log.warning("cannot %s claim %s: %s", what, name, exc)
            return f"horus: {exc}"
        if isinstance(exc, ApiError | OSError):  # apiserver down, disk full: the kubelet retries
            log.error("cannot %s claim %s: %s", what, name, exc)
            return f"horus: cannot {what} claim {name} now: {exc}"
        log.exception("cannot %s claim %s", what, name)  # a bug: say so, keep serving
        return f"horus: cannot {what} claim {name}: internal error {type(exc).__name__}: {exc}"


class PluginServers:
    """The two sockets, started and stopped together."""

    def __init__(self, driver: Driver, registration_socket: Path, dra_socket: Path) -> None:
        self.registration_socket = registration_socket
        self.dra_socket = dra_socket
        self.registration = RegistrationServicer(dra_socket)
        self.dra = DraServicer(driver)
        self._servers: list[Any] = []

    def _server(self) -> Any:
        return grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )

    def start(self) -> None:
        """Serve the DRA socket first, then the registration socket (the kubelet dials the
        endpoint as soon as it reads GetInfo)."""
        self.stop()
        for path in (self.dra_socket, self.registration_socket):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
        dra = self._server()
        dra_grpc.add_DRAPluginServicer_to_server(self.dra, dra)
        dra.add_insecure_port(f"unix://{self.dra_socket}")
        dra.start()
        reg = self._server()
        reg_grpc.add_RegistrationServicer_to_server(self.registration, reg)
        reg.add_insecure_port(f"unix://{self.registration_socket}")
        reg.start()
        self._servers = [reg, dra]
        log.info("serving %s and %s", self.registration_socket, self.dra_socket)

    def sockets_present(self) -> bool:
        return self.registration_socket.exists() and self.dra_socket.exists()

    def stop(self) -> None:
        for server in self._servers:
            server.stop(grace=0.5).wait(2.0)
        self._servers = []
        self.registration.registered.clear()
        for path in (self.registration_socket, self.dra_socket):
            path.unlink(missing_ok=True)
