"""The operator's writes to a DLJob: signed status patches, Events, and per-job errors.

Every status write goes through :meth:`StatusWriter.patch`, which signs the record (uid, phase,
placements and move after the patch, and a new ``status.placementEpoch`` one above anything the
job's record, its pods or this process carried before:
:meth:`horus.api.signing.SigningKey.sign_placements`) and carries the ``resourceVersion``
precondition that makes two writers race-free. Without a signing key
(:class:`~horus.api.signing.SigningUnavailable`) a write that needs a signature is not made. Events are posted off the
critical path. The life-cycle Events of a job that goes well (``Scheduled``, ``Running``,
``Succeeded``) are off unless asked for (:meth:`StatusWriter.lifecycle`): their text is already
in the status conditions ``kubectl describe dlj`` shows, with its time, and at two Events per
job they would be a large share of the operator's writes. Warnings (a refusal when its reason
changes, failures, errors) are always posted. An unexpected error for one job is logged once per five minutes (its
traceback the first time) and posted as a ``ReconcileError`` Event on that job, so one
poisoned object never floods the log while the loop goes on for every other job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.kube.errors import Conflict
from horus.kube.events import event_body
from horus.operator import transitions as tr
from horus.operator.jobapi import JobApi
from horus.operator.metrics import OperatorMetrics
from horus.operator.object_reads import pods_epoch, record_epoch
from horus.operator.pass_state import JobCtx, PassReport

__all__ = ["COMPONENT", "PROBLEM_REPEAT_SECONDS", "StatusWriter"]

log = logging.getLogger(__name__)

COMPONENT = "horus-operator"
#: The same per-object error is logged (and posted as an Event) at most this often.
PROBLEM_REPEAT_SECONDS = 300.0


class StatusWriter:
    """Signed, preconditioned status writes and best-effort Events for one operator."""

    def __init__(
        self,
        api: JobApi,
        keys: Callable[[], KeyRing],
        metrics: OperatorMetrics,
        identity: str,
        event_workers: int = 4,
        lifecycle_events: bool = False,
    ) -> None:
        self.api = api
        #: Post the Events of a job that goes well (Scheduled, Running, Succeeded) as well.
        self.lifecycle_events = lifecycle_events
        self.keys = keys
        self.metrics = metrics
        self.identity = identity
        self._events = ThreadPoolExecutor(
            max_workers=max(2, event_workers), thread_name_prefix="horus-events"
        )
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._posting: list[Future[None]] = []
        #: job UID → the highest record epoch this process signed (a rollback below it is
        #: not trusted: :func:`horus.operator.object_reads.dljob_record_trusted`).
        self._signed: dict[str, int] = {}

    def highest_signed(self, uid: str) -> int:
        with self._lock:
            return self._signed.get(uid, 0)

    def retain(self, uids: Collection[str]) -> None:
        """Forget the epochs signed for jobs not in ``uids`` (each pass: the DLJobs that
        exist; a UID never comes back). Without it every job ever signed stayed until 100,000
        had piled up, and then the map was cleared — live jobs' floors with the dead ones'."""
        with self._lock:
            for uid in [u for u in self._signed if u not in uids]:
                del self._signed[uid]

    def close(self) -> None:
        self._events.shutdown(wait=False, cancel_futures=True)

    def patch(self, ctx: JobCtx, fields: Mapping[str, Any], precondition: bool = True) -> None:
        """Merge-patch owned status fields (plus the job's unwritten admission); with
        ``precondition`` fail with ``Conflict`` when the job changed since it was read."""
        new: dict[str, Any] = {**(ctx.pending or {}), **fields}
        epoch: int | None = None
        if "phase" in new or "placements" in new or "migration" in new:
            # The signature covers the phase, placements, move and epoch *after* this patch.
            after = {**ctx.status, **new}
            ring = self.keys()
            epoch = 1 + max(
                record_epoch(ctx.status),
                self.highest_signed(ctx.uid),
                pods_epoch([*ctx.pods.values(), *ctx.leaving], ring),
            )
            new[c.STATUS_PLACEMENT_EPOCH] = epoch
            new[c.STATUS_PLACEMENT_SIGNATURE] = ring.sign_placements(
                ctx.namespace,
                ctx.name,
                ctx.uid,
                after.get("phase"),
                after.get("placements"),
                epoch,
                after.get("migration"),
            )
        body: dict[str, Any] = {"status": new}
        if precondition:
            body["metadata"] = {"resourceVersion": ctx.rv}
        try:
            ctx.obj = self.api.patch_dljob_status(ctx.namespace, ctx.name, body)
        except Conflict:
            ctx.pending = None  # stale: the next pass reads the job again and admits it anew
            raise
        ctx.status.update(new)
        ctx.pending = None
        if epoch is not None:
            with self._lock:
                if len(self._signed) > 100_000:
                    self._signed.clear()
                self._signed[ctx.uid] = max(epoch, self._signed.get(ctx.uid, 0))

    def event(self, ctx: JobCtx, reason: str, message: str, warning: bool = False) -> None:
        """A Kubernetes Event on the DLJob (best effort: an event never blocks a decision)."""
        self._post(ctx.involved, reason, message, warning)

    def lifecycle(self, ctx: JobCtx, reason: str, message: str) -> None:
        """A Normal Event of a job that goes well (Scheduled, Running, Succeeded), posted only
        with ``lifecycle_events``: the status condition written with it says the same."""
        if self.lifecycle_events:
            self.event(ctx, reason, message)

    def pod_event_once(
        self, pod: Mapping[str, Any], reason: str, message: str, warning: bool = False
    ) -> None:
        """:meth:`event_once` about a pod (a plain pod Horus places on the DRA path)."""
        meta = pod.get("metadata") or {}
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": str(meta.get("name", "")),
            "namespace": str(meta.get("namespace", "default")),
            "uid": str(meta.get("uid", "")),
        }
        if self._first_time(f"pod:{involved['namespace']}/{involved['name']}", reason, message):
            self._post(involved, reason, message, warning)

    def _post(self, involved: Mapping[str, str], reason: str, message: str, warning: bool) -> None:
        body = event_body(
            involved,
            reason,
            message,
            warning=warning,
            component=COMPONENT,
            instance=self.identity,
        )
        future = self._events.submit(self.api.post_event, body)
        with self._lock:
            self._posting = [f for f in self._posting if not f.done()]
            self._posting.append(future)

    def event_once(self, ctx: JobCtx, reason: str, message: str, warning: bool = False) -> None:
        """:meth:`event`, at most once per :data:`PROBLEM_REPEAT_SECONDS` for the same job,
        reason and message (a state that lasts is told, not repeated every pass)."""
        if self._first_time(ctx.key, reason, message):
            self.event(ctx, reason, message, warning)

    def _first_time(self, who: str, reason: str, message: str) -> bool:
        """Whether ``who`` was not told ``reason``/``message`` in the last
        :data:`PROBLEM_REPEAT_SECONDS` (and remember that it is told now)."""
        key = (who, f"{reason}\0{message}")
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < PROBLEM_REPEAT_SECONDS:
                return False
            self._seen[key] = now
        return True

    def drain(self, timeout: float = 10.0) -> None:
        """Wait until the Events posted so far have gone out (tests; an orderly stop)."""
        with self._lock:
            pending = list(self._posting)
        wait(pending, timeout=timeout)

    def fail(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        """Final: the job cannot run; written, counted and told."""
        self.patch(ctx, tr.failed(ctx.status, reason, message, now_rfc3339()))
        report.count("status_writes")
        report.count("failed")
        self.metrics.failures.labels(reason=reason).inc()
        self.event(ctx, reason, message, warning=True)

    def write(
        self,
        ctx: JobCtx,
        fields: Mapping[str, Any] | None,
        report: PassReport,
        event: tuple[str, str, bool] | None = None,
    ) -> None:
        """Write ``fields`` (nothing when None) and post ``event`` (reason, message, warning)."""
        if fields is None:
            return
        self.patch(ctx, fields)
        report.count("status_writes")
        if event is not None:
            self.event(ctx, *event[:2], warning=event[2])

    def problem(self, ctx: JobCtx, what: str, exc: BaseException) -> None:
        """One job's unexpected error, rate-limited (see the module docstring)."""
        text = f"{what}: {type(exc).__name__}: {exc}"[: tr.MAX_MESSAGE]
        key = (ctx.key, text)
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < PROBLEM_REPEAT_SECONDS:
                return
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[key] = now
        log.error("DLJob %s: %s; retrying next pass", ctx.key, text, exc_info=last is None)
        self.event(ctx, "ReconcileError", f"{text} (retrying every pass)", warning=True)
