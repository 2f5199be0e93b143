"""Types shared by the device-plugin cluster tests (kept out of conftest.py, whose module name
``conftest`` is shared by every conftest in the tree)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deviceplugin_peer import FakeKubelet


@dataclass
class DpEnv:
    core: Any
    key: bytes
    namespace: str
    node: str
    kubeconfig: str


@dataclass
class RunningPlugin:
    kubelet: FakeKubelet
    thread: threading.Thread
    stop: threading.Event
    plugin_dir: Path
