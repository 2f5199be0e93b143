"""Wiring: settings → GPU backend, API client, allocator, resource plugins, manager.

Kept apart from the CLI so tests and the benchmark run the very same plugin in a thread.
GPU discovery failing (NVML absent) is the one start-up error with a policy of its own: by
default the plugin logs one clear message and retries every ``retry_interval_s`` instead of
exiting, so a DaemonSet pod on a node without a usable driver waits instead of crash-looping.
"""

from __future__ import annotations

import logging
import threading

from horus.api.inventory import GpuDevice
from horus.common.errors import HorusError
from horus.deviceplugin.allocator import Allocator, AssignmentKey
from horus.deviceplugin.coexistence import CoexistenceGuard
from horus.deviceplugin.devices import core_kind, memory_kind
from horus.deviceplugin.kube import KubeApi, NodeApi
from horus.deviceplugin.manager import PluginManager
from horus.deviceplugin.server import ResourcePlugin
from horus.deviceplugin.settings import DevicePluginSettings
from horus.node.gpus import GpuInventory, discover_until_found

log = logging.getLogger(__name__)


def build(
    settings: DevicePluginSettings,
    backend: GpuInventory,
    gpus: list[GpuDevice],
    api: NodeApi | None,
) -> PluginManager:
    manager_ref: list[PluginManager] = []

    def inventory() -> list[GpuDevice]:
        return manager_ref[0].gpus()

    allocator = None
    if api is not None:
        allocator = Allocator(
            api,
            settings.node_name,
            AssignmentKey(api, settings.assignment_key_file),
            inventory,
            settings.memory_unit_mib,
            settings.enforcement,
            settings.mps_pipe_dir,
            settings.pass_device_specs,
            settings.mps_shm_dir,
            settings.gpu_access,
            settings.cdi_kind,
            settings.progress_root,
        )
    plugins = [
        ResourcePlugin(core_kind(), allocator, settings.plugin_dir),
        ResourcePlugin(memory_kind(settings.memory_unit_mib), allocator, settings.plugin_dir),
    ]
    manager = PluginManager(
        plugins,
        backend,
        gpus,
        settings.plugin_dir,
        settings.node_name,
        api if settings.publish_inventory else None,
        settings.memory_unit_mib,
        settings.health_interval_s,
        settings.socket_poll_s,
        guard=(
            CoexistenceGuard(
                api,
                settings.node_name,
                settings.allow_other_gpu_plugin,
                settings.node_check_interval_s,
            )
            if api is not None
            else None
        ),
    )
    manager_ref.append(manager)
    return manager


def run_plugin(
    settings: DevicePluginSettings, stop: threading.Event, api: NodeApi | None = None
) -> int:
    """Run the device plugin until ``stop`` is set; returns the process exit status."""
    found = discover_until_found(
        settings, stop
    )  # first: a node without GPUs waits here, API or not
    if found is None:
        return 0
    backend, gpus = found
    if api is None:
        try:
            api = KubeApi(settings.kubeconfig)
        except HorusError:
            backend.close()
            raise
    try:
        manager = build(settings, backend, gpus, api)
        manager.run(stop)
    except HorusError:
        raise
    finally:
        backend.close()
    return 0
