"""The stale-claim sweep: checkpointed claims the apiserver no longer has are unprepared.

The kubelet unprepares a claim when its pod is done with it. When that call cannot reach the
driver (the driver was down while the pod and its claim were deleted) or the kubelet forgets
it (its own state lost), the checkpoint entry and the claim's CDI spec stay behind for good.
So, as NVIDIA's kubelet plugin does (``CheckpointCleanupManager``), the driver sweeps: once
soon after it starts — a claim deleted while it was down is cleaned by that first sweep — and
then every ``claim_sweep_interval_s``.

For each checkpointed claim the sweep reads ``namespace/name`` from the apiserver (a ``get``,
the one verb the node identity has on claims). The claim is stale only on evidence: the
apiserver answers 404, or the claim under that name has another UID (deleted and made again).
A stale claim is unprepared by :meth:`horus.dra.driver.Driver.unprepare`, the very path of
``NodeUnprepareResources``: CDI spec removed, checkpoint entry removed. Any other answer
(apiserver down, forbidden, a timeout, a malformed object) leaves the entry to the next sweep:
never unprepare on doubt. A claim cannot leave the apiserver while a pod still reserves it
(its delete-protection finalizer holds it until it is deallocated), so a 404 never takes a
running pod's share. One entry's failure is logged and counted, and the sweep goes on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from horus.dra.checkpoint import PreparedClaim
from horus.dra.driver import Driver
from horus.dra.kube import DraApi
from horus.node.claim_checks import ClaimRef, check_claim_ref

log = logging.getLogger(__name__)

#: What the sweep decided about one checkpointed claim.
KEPT = "kept"  # the apiserver has it, same UID
STALE = "stale"  # 404 or another UID: unprepared
DOUBT = "doubt"  # no answer to trust (or the unprepare failed): left to the next sweep


@dataclass
class SweepResult:
    """One sweep: the UIDs of each outcome."""

    kept: list[str] = field(default_factory=list)
    unprepared: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


@dataclass
class SweepCounts:
    """Totals since the driver started (the driver exports no metrics; its log says these)."""

    sweeps: int = 0
    unprepared: int = 0
    left: int = 0  # entries a sweep could not decide or unprepare (each sweep counts them)


def _uid_of(doc: Any) -> str:
    """The UID of a claim the apiserver returned ('' when the object has none)."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


class ClaimSweeper:
    """Unprepares checkpointed claims that no longer exist; :meth:`run` on a timer."""

    def __init__(self, driver: Driver, api: DraApi, interval_s: float) -> None:
        self.driver = driver
        self.api = api
        self.interval_s = interval_s
        self.counts = SweepCounts()
        self._lock = threading.Lock()  # one sweep at a time (the timer's, or a caller's)

    def _judge(self, ref: ClaimRef) -> str:
        """KEPT, STALE or DOUBT for one claim, from the apiserver's answer."""
        doc = self.api.get_claim(ref.namespace, ref.name)
        if doc is None:
            log.info("claim sweep: %s is gone from the apiserver: unpreparing it", ref)
            return STALE
        uid = _uid_of(doc)
        if not uid:
            log.warning("claim sweep: the apiserver's %s has no uid: kept for now", ref)
            return DOUBT
        if uid != ref.uid:
            log.info(
                "claim sweep: %s was deleted and made again (uid now %s): unpreparing the old one",
                ref,
                uid,
            )
            return STALE
        return KEPT

    def _one(self, entry: PreparedClaim) -> str:
        try:
            ref = check_claim_ref(entry.namespace, entry.name, entry.uid)
            verdict = self._judge(ref)
            if verdict == STALE:
                self.driver.unprepare(ref)
            return verdict
        except Exception as exc:  # apiserver down, disk full, a damaged entry: next sweep
            log.warning(
                "claim sweep: %s/%s (uid %s) left for the next sweep: %s: %s",
                entry.namespace[:80],
                entry.name[:80],
                entry.uid[:80],
                type(exc).__name__,
                exc,
            )
            return DOUBT

    def sweep(self, stop: threading.Event | None = None) -> SweepResult:
        """Check every checkpointed claim once (stops early when ``stop`` is set)."""
        with self._lock:
            result = SweepResult()
            checkpoint = self.driver.checkpoint
            for uid in checkpoint.uids():
                if stop is not None and stop.is_set():
                    break
                entry = checkpoint.get(uid)
                if entry is None:  # unprepared by the kubelet meanwhile
                    continue
                outcome = {KEPT: result.kept, STALE: result.unprepared, DOUBT: result.left}
                outcome[self._one(entry)].append(uid)
            self.counts.sweeps += 1
            self.counts.unprepared += len(result.unprepared)
            self.counts.left += len(result.left)
            level = logging.INFO if result.unprepared or result.left else logging.DEBUG
            log.log(
                level,
                "claim sweep: %d checkpointed claim(s) kept, %d stale unprepared, %d left for "
                "the next sweep (totals since start: %d unprepared, %d left, %d sweeps)",
                len(result.kept),
                len(result.unprepared),
                len(result.left),
                self.counts.unprepared,
                self.counts.left,
                self.counts.sweeps,
            )
            return result

    def run(self, stop: threading.Event) -> None:
        """Sweep now, then every ``interval_s`` until ``stop``; nothing a sweep meets ends it."""
        while not stop.is_set():
            try:
                self.sweep(stop)
            except Exception:  # a bug: say so, sweep again next time
                log.exception("claim sweep failed")
            stop.wait(self.interval_s)

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread (an apiserver call that hangs holds only it)."""
        thread = threading.Thread(target=self.run, args=(stop,), name="claim-sweep", daemon=True)
        thread.start()
        return thread
