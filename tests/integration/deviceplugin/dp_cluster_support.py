"""Types shared by the device-plugin cluster tests (kept out of conftest.py, whose module name
``conftest`` is shared by every conftest in the tree)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deviceplugin_peer import FakeKubelet
from horus.api.signing import KeyRing
from horus.deviceplugin.settings import DevicePluginSettings


@dataclass
class DpEnv:
    core: Any
    key: KeyRing  # the operator's pair: the test signs, the plugin verifies with the public keys
    namespace: str
    node: str
    kubeconfig: str


@dataclass
class RunningPlugin:
    kubelet: FakeKubelet
    thread: threading.Thread
    stop: threading.Event
    plugin_dir: Path


def sim_settings(node: str, plugin_dir: Path, kubeconfig: str, **more: Any) -> DevicePluginSettings:
    """The real plugin for ``node`` with two simulated GPUs, on the test's apiserver, polling
    fast (tests wait on what it does). Progress directories go beside ``plugin_dir``, not
    into the host's /run/horus/progress."""
    more.setdefault("progress_root", plugin_dir.parent / "progress")
    return DevicePluginSettings(
        node_name=node,
        plugin_dir=plugin_dir,
        backend="simulated",
        sim_gpu_count=2,
        kubeconfig=Path(kubeconfig),
        socket_poll_s=0.1,
        **more,
    )
