"""The memory watchdog: a pod that stays above its GPU memory share loses it.

MPS's pinned-memory limit stops most overruns at allocation time, but not every path (other
runtimes, memory taken before the limit was set, the simulated backend), and without a share
enforced a neighbour OOMs instead of the offender. So the agent compares each pod's measured GPU
memory with the ``memoryMiB`` of its (signed) assignment every cycle. Brief spikes are allowed:
only a pod above its share for longer than ``grace_seconds`` is acted on, by mode:

* ``off``: nothing;
* ``report``: a Warning Event on the pod (``GPUMemoryOverShare``) and a log line, once per
  episode;
* ``evict``: the pod is deleted (a DELETE with its own grace period and a UID precondition, not
  the Eviction API: ``horus.agent.kube.AgentApi.delete_pod`` says why) with a Warning Event
  (``GPUMemoryEvicted``) that says measured vs allowed; counted in
  ``horus_enforcement_evictions_total``. A refused delete is retried on the next cycle. The
  mode keeps its name (settings and dashboards say "evict"): the pod loses its GPU share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from horus.agent.pods import PodInfo
from horus.common.constants import (
    EVENT_REASON_GPU_MEMORY_EVICTED,
    EVENT_REASON_GPU_MEMORY_OVER_SHARE,
    MIB,
)

log = logging.getLogger("horus.agent.watchdog")


class EnforcementActions(Protocol):
    def evict(self, pod: PodInfo, message: str) -> bool:
        """Remove ``pod`` from its GPU (the real agent deletes it); True when the API accepted."""
        ...

    def event(self, pod: PodInfo, reason: str, message: str) -> None: ...


@dataclass
class _Episode:
    since: float
    reported: bool = False
    evicted: bool = False


class MemoryWatchdog:
    """Tracks over-share episodes per pod and acts after the grace period."""

    def __init__(
        self,
        mode: str,
        grace_seconds: float,
        actions: EnforcementActions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in ("off", "report", "evict"):
            raise ValueError(f"watchdog mode must be off, report or evict, got {mode!r}")
        self.mode = mode
        self.grace = grace_seconds
        self._actions = actions
        self._clock = clock
        self._episodes: dict[str, _Episode] = {}
        self.evictions: dict[tuple[str, str, str, str], int] = {}  # (node, ns, pod, gpu) -> n

    def check(self, pod: PodInfo, used_bytes: float, backend: str) -> str | None:
        """Observe one reading; returns ``"reported"``/``"evicted"`` when it acted now."""
        if self.mode == "off":
            return None
        limit = pod.memory_limit_bytes
        if used_bytes <= limit:
            self._episodes.pop(pod.uid, None)
            return None
        now = self._clock()
        ep = self._episodes.setdefault(pod.uid, _Episode(since=now))
        over_for = now - ep.since
        if over_for < self.grace or ep.evicted:
            return None
        message = (
            f"GPU memory {used_bytes / MIB:.0f} MiB measured > {pod.assignment.memory_mib} MiB "
            f"allowed (its horus.io/gpu-assignment share on GPU {pod.assignment.gpu_index}) for "
            f"{over_for:.0f}s (grace {self.grace:.0f}s); backend {backend}"
        )
        if self.mode == "report":
            if ep.reported:
                return None
            ep.reported = True
            log.warning("watchdog: pod %s over its share: %s", pod.key, message)
            self._actions.event(pod, EVENT_REASON_GPU_MEMORY_OVER_SHARE, message)
            return "reported"
        log.warning("watchdog: evicting pod %s: %s", pod.key, message)
        if not self._actions.evict(pod, "evicted: " + message):
            return None
        ep.evicted = True
        self._actions.event(pod, EVENT_REASON_GPU_MEMORY_EVICTED, "evicted: " + message)
        key = (pod.node, pod.namespace, pod.name, str(pod.assignment.gpu_index))
        self.evictions[key] = self.evictions.get(key, 0) + 1
        return "evicted"

    def forget(self, present_uids: Iterable[str]) -> None:
        """Drop state of pods no longer seen."""
        keep = set(present_uids)
        for uid in list(self._episodes):
            if uid not in keep:
                del self._episodes[uid]
