"""How a node role's ``run`` command starts: it needs its node's name, and stops on a signal.

The device plugin and the DRA driver run as DaemonSet containers that the kubelet stops with
SIGTERM; both must finish their current call and unregister rather than die mid-write, and
both are useless without the node name the downward API gives them. One function does it for
both, so their start-up cannot drift apart.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from horus.common.errors import ConfigError

log = logging.getLogger(__name__)


def run_until_signalled(node_name: str, run: Callable[[threading.Event], int]) -> int:
    """``run(stop)`` with ``stop`` set on SIGTERM or SIGINT; refuses an empty node name."""
    if not node_name:
        raise ConfigError(
            "the node name is unknown: pass --node-name or set NODE_NAME (the DaemonSet sets "
            "it from the downward API, spec.nodeName)"
        )
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return run(stop)
