"""The device plugin's lifecycle: health loop, kubelet watch, (re-)registration, inventory.

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
from pathlib import Path

import grpc

from horus.api.inventory import GpuDevice, encode_inventory
from horus.common import constants as c
from horus.deviceplugin.coexistence import CoexistenceGuard
from horus.deviceplugin.kube import NodeApi
from horus.deviceplugin.server import ResourcePlugin
from horus.node.gpus import GpuInventory

log = logging.getLogger(__name__)


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
