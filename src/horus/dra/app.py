"""Wiring and lifecycle: settings → GPUs, API, driver, sockets, ResourceSlice.

Kept apart from the CLI so tests run the very same driver in a thread. The loop:

* GPUs come from the backend the device plugin uses (:mod:`horus.node.gpus`: NVML, or the
  simulated GPUs of kwok nodes and CI); discovery failing waits and retries (or exits with
  ``fail_on_init_error``), as the device plugin does;
* the sockets are served until ``stop``; one that disappears (someone cleaned the directory)
  is served again, and the kubelet's plugin watcher registers the new socket;
* health is re-checked every ``health_interval_s``; a change republishes the ResourceSlice at
  once (an unhealthy GPU gets its taint), and the slice is re-read every ``slice_resync_s``
  to repair a deleted or edited one. An apiserver error is logged and retried next tick;
* checkpointed claims the apiserver no longer has are unprepared by the stale-claim sweep
  (:mod:`horus.dra.sweep`), in its own thread: once as the sockets are served, then every
  ``claim_sweep_interval_s``.
"""

from __future__ import annotations

import logging
import threading
import time

from horus.api.inventory import GpuDevice
from horus.common.errors import HorusError
from horus.dra.checkpoint import Checkpoint
from horus.dra.driver import Driver
from horus.dra.kube import DraApi, KubeDraApi
from horus.dra.server import PluginServers
from horus.dra.settings import DraSettings
from horus.dra.slices import SlicePublisher
from horus.dra.sweep import ClaimSweeper
from horus.node.gpus import GpuInventory, discover_until_found
from horus.node.grant import GrantPolicy

log = logging.getLogger(__name__)

#: Seconds ``run`` waits, once stopped, for a sweep in progress to end.
SWEEP_STOP_WAIT_S = 5.0


def grant_policy(settings: DraSettings) -> GrantPolicy:
    return GrantPolicy(
        settings.node_name,
        settings.enforcement,
        settings.mps_pipe_dir,
        settings.mps_shm_dir,
        settings.pass_device_specs,
        settings.gpu_access,
        settings.cdi_kind,
        settings.progress_root,
    )


class DraPlugin:
    """The running driver: GPUs, sockets, slice."""

    def __init__(
        self, settings: DraSettings, backend: GpuInventory, gpus: list[GpuDevice], api: DraApi
    ) -> None:
        self.settings = settings
        self.backend = backend
        self._gpus = gpus
        self._gpus_lock = threading.Lock()
        self.driver = Driver(
            api,
            grant_policy(settings),
            self.gpus,
            settings.cdi_dir,
            Checkpoint(settings.checkpoint_path),
        )
        self.servers = PluginServers(self.driver, settings.registration_socket, settings.dra_socket)
        self.sweeper = ClaimSweeper(self.driver, api, settings.claim_sweep_interval_s)
        self.publisher = (
            SlicePublisher(api, settings.node_name) if settings.publish_slices else None
        )
        self._slice_due = 0.0
        self._slice_dirty = True

    def gpus(self) -> list[GpuDevice]:
        with self._gpus_lock:
            return list(self._gpus)

    def check_health(self) -> None:
        new = self.backend.check_health(self.gpus())
        with self._gpus_lock:
            old, self._gpus = self._gpus, new
        for before, after in zip(old, new, strict=False):
            if before.health != after.health:
                log.warning("GPU %d (%s) is now %s", after.index, after.uuid, after.health)
        if old != new:
            self._slice_dirty = True

    def publish(self) -> None:
        """Sync the slice when the GPUs changed or the resync is due (errors: next tick)."""
        if self.publisher is None:
            return
        now = time.monotonic()
        if not self._slice_dirty and now < self._slice_due:
            return
        try:
            self.publisher.sync(self.gpus())
            self._slice_dirty = False
            self._slice_due = now + self.settings.slice_resync_s
        except HorusError as exc:
            log.warning(
                "could not publish the ResourceSlice of %s: %s", self.settings.node_name, exc
            )
            self._slice_due = now + min(self.settings.slice_resync_s, 5.0)

    def run(self, stop: threading.Event) -> None:
        self.servers.start()
        sweeping = self.sweeper.start(stop)
        next_health = time.monotonic() + self.settings.health_interval_s
        try:
            while not stop.is_set():
                if not self.servers.sockets_present():
                    log.warning("a DRA socket was removed: serving again")
                    self.servers.start()
                if time.monotonic() >= next_health:
                    try:
                        self.check_health()
                    except Exception:
                        log.exception("GPU health check failed")
                    next_health = time.monotonic() + self.settings.health_interval_s
                self.publish()
                stop.wait(self.settings.socket_poll_s)
        finally:
            self.servers.stop()
            # the sweep ends at its next claim; one stuck in an apiserver call is a daemon
            sweeping.join(SWEEP_STOP_WAIT_S)


def run_driver(settings: DraSettings, stop: threading.Event, api: DraApi | None = None) -> int:
    """Run the DRA driver until ``stop`` is set; returns the process exit status."""
    found = discover_until_found(settings, stop)
    if found is None:
        return 0
    backend, gpus = found
    try:
        plugin = DraPlugin(settings, backend, gpus, api or KubeDraApi(settings.kubeconfig))
        plugin.run(stop)
    finally:
        backend.close()
    return 0
