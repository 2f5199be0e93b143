"""Deleting what a DLJob left behind: its pods and claims once it is gone, failed or queued.

A pass finds the leftovers and starts their deletions on a pool of their own, beside the
pass rather than one by one inside it: a pass that finds thousands of a deleted job's pods
still places its queue at once. The pass waits for its own deletions only
``LEFTOVER_DELETE_WAIT_SECONDS``; the rest finish beside the next passes, which skip an
object whose deletion is still under way (their listing may still show it). Only objects
Horus made for a DLJob are ever deleted here (:func:`~horus.operator.podspec.owner_uid`,
the claim's controller ownerReference), whatever their names or labels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from horus.common import constants as c
from horus.operator.claimcommit import claim_owner_uid
from horus.operator.jobapi import JobApi
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.pod_reads import PodFacts

__all__ = ["LeftoverCleanup", "cleanup_workers", "must_stop"]

log = logging.getLogger(__name__)


def cleanup_workers(workers: int) -> int:
    """Threads deleting leftover pods and claims for a reconciler of ``workers`` commit chains
    (the operator sizes its connection pool with it)."""
    return max(2, workers // 4)


def must_stop(ctx: JobCtx) -> bool:
    """Whether a job's running pods must go: it failed, or it is queued without placements."""
    if not ctx.trusted:
        return False
    queued = ctx.phase == c.DLJOB_PHASE_QUEUED and not ctx.status.get("placements")
    return ctx.phase == c.DLJOB_PHASE_FAILED or queued


class LeftoverCleanup:
    """Finds a pass's leftover pods and claims and deletes them on its own pool."""

    def __init__(self, api: JobApi, workers: int, is_leader: Callable[[], bool]) -> None:
        self.api = api
        self.is_leader = is_leader
        #: Up to ``cleanup_workers(workers)`` deletions at a time.
        self.pool = ThreadPoolExecutor(
            max_workers=cleanup_workers(workers), thread_name_prefix="horus-cleanup"
        )
        #: The deletions started and not finished, by (kind, namespace, name, uid).
        self._deleting: set[tuple[str, str, str, str]] = set()
        self._deleting_lock = threading.Lock()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def start(
        self,
        ctxs: Mapping[str, JobCtx],
        facts: Sequence[PodFacts],
        claims: Sequence[Mapping[str, Any]],
        report: PassReport,
    ) -> list[Future[None]]:
        """Start deleting this pass's leftover pods, then claims; the deletions started."""
        deleting: list[Future[None]] = []
        self.pods(ctxs, facts, report, deleting)
        self.claims(ctxs, claims, report, deleting)
        return deleting

    def pods(
        self,
        ctxs: Mapping[str, JobCtx],
        facts: Sequence[PodFacts],
        report: PassReport,
        deleting: list[Future[None]],
    ) -> None:
        """Delete pods Horus made for a DLJob that is gone, and still-running pods of a (signed)
        Failed job or of a job back in the queue (a preemption a crash interrupted before its
        pods were deleted). Any other pod (podspec.owner_uid) is left alone, whatever its name
        or labels."""
        if not self.is_leader():
            return
        jobs = {(x.namespace, x.uid): x for x in ctxs.values()}
        for f in facts:
            if f.owner is None or f.deleting:
                continue  # a pod Horus did not make for a DLJob is never deleted here
            ctx = jobs.get((f.namespace, f.owner))
            if ctx is None or (f.running and must_stop(ctx)):
                # Only the pod read here: one re-created under its name is not touched.
                meta = f.pod.get("metadata") or {}
                self._start_delete(
                    "pod", meta, self.api.delete_pod, "pods_deleted", report, deleting
                )

    def claims(
        self,
        ctxs: Mapping[str, JobCtx],
        claims: Sequence[Mapping[str, Any]],
        report: PassReport,
        deleting: list[Future[None]],
    ) -> None:
        """The DRA path's :meth:`pods` (no claims are listed on the device-plugin path):
        delete claims Horus made for a DLJob (controller ownerReference) that is gone, failed
        or back in the queue without placements (a re-placement or preemption a crash
        interrupted). A claim that is not a DLJob's is never deleted here. The garbage
        collector would delete a gone job's claims too; this does not wait for it."""
        if not self.is_leader():
            return
        jobs = {(x.namespace, x.uid): x for x in ctxs.values()}
        for claim in claims:
            meta = claim.get("metadata") or {}
            owner = claim_owner_uid(claim)
            if not owner or meta.get("deletionTimestamp"):
                continue
            ctx = jobs.get((str(meta.get("namespace")), owner))
            if ctx is None or must_stop(ctx):
                delete = self.api.delete_resource_claim
                self._start_delete("claim", meta, delete, "claims_deleted", report, deleting)

    def _start_delete(
        self,
        what: str,
        meta: Mapping[str, Any],
        delete: Callable[[str, str, str], None],
        counter: str,
        report: PassReport,
        deleting: list[Future[None]],
    ) -> None:
        """Delete one object a cleanup found (UID precondition) on the cleanup pool, logged
        and counted — unless its deletion is already under way (started by an earlier pass
        that did not wait for it). An error is logged; the next pass tries again."""
        ns, name = str(meta.get("namespace")), str(meta.get("name"))
        key = (what, ns, name, str(meta.get("uid")))
        with self._deleting_lock:
            if key in self._deleting:
                return
            self._deleting.add(key)

        def run() -> None:
            try:
                delete(ns, name, str(meta.get("uid") or ""))
                log.info("deleted %s %s/%s (its DLJob is gone, failed or queued)", what, ns, name)
                report.count(counter)
            except Exception as exc:
                log.warning("cannot delete %s %s/%s: %s", what, ns, name, exc)
            finally:
                with self._deleting_lock:
                    self._deleting.discard(key)

        try:
            deleting.append(self.pool.submit(run))
        except BaseException:  # the pool shut down (closing): nothing is under way
            with self._deleting_lock:
                self._deleting.discard(key)
            raise
