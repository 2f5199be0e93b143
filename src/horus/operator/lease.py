"""Leader election on a coordination.k8s.io/v1 Lease, so only one operator replica writes.

Why a Lease and not kopf peering: kopf peering pauses *handlers*, but our writes come from one
reconcile loop, and the Lease is the standard, observable object (``kubectl get lease``) with
the semantics client-go uses. Every acquire or renew is an update carrying the resourceVersion
that was read, so two replicas can never both believe they won the same round (the loser gets
409 Conflict).

Expiry is judged as client-go does: not from the holder's clock (``renewTime`` written by
another machine), but from *our own* observation — if the Lease record has not changed for
``lease_duration`` seconds of our monotonic clock, the holder is gone. A leader considers
itself leader only while its last successful renew is younger than ``renew_deadline``
(two thirds of the lease duration), so it stops writing before anyone else may take over.

:meth:`LeaseElector.release` is final and runs under the same lock as :meth:`~LeaseElector.tick`:
a renewal in flight on the lease thread when the process is told to stop can neither undo the
release (its update would make ``release`` fail on the resourceVersion and leave the Lease held
for a whole duration) nor make this replica leader again afterwards.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from horus.common.clock import now_rfc3339, rfc3339

log = logging.getLogger(__name__)


@dataclass
class _Observed:
    record: tuple[Any, ...]
    at: float  # monotonic


class LeaseElector:
    """Acquire-or-renew a Lease; call :meth:`tick` every ``lease_duration / 3`` seconds."""

    def __init__(
        self,
        coordination_api: Any,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
    ) -> None:
        self.api = coordination_api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = lease_duration * 2.0 / 3.0
        self._last_renew: float | None = None
        self._observed: _Observed | None = None
        self.transitions = 0
        #: Serialises tick and release; ``_released`` is set once, by release.
        self._lock = threading.Lock()
        self._released = False

    @property
    def retry_period(self) -> float:
        return max(0.2, self.lease_duration / 10.0)

    def is_leader(self) -> bool:
        """True while our last successful acquire/renew is younger than the renew deadline."""
        return (
            self._last_renew is not None
            and time.monotonic() - self._last_renew < self.renew_deadline
        )

    def _body(self, rv: str | None, transitions: int, acquire: bool, old: Any) -> dict[str, Any]:
        now = now_rfc3339(micro=True)
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "renewTime": now,
            "leaseTransitions": transitions,
            "acquireTime": now if acquire else (old or now),
        }
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv is not None:
            meta["resourceVersion"] = rv
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def tick(self) -> bool:
        """One acquire-or-renew round; returns whether we are leader afterwards (never after
        :meth:`release`)."""
        with self._lock:
            if self._released:
                return False
            return self._tick()

    def _tick(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        start = time.monotonic()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot read Lease %s/%s: %s", self.namespace, self.name, exc.reason)
                return self.is_leader()
            try:
                self.api.create_namespaced_lease(self.namespace, self._body(None, 0, True, None))
            except ApiException as exc2:
                if exc2.status == 404:  # namespace missing
                    log.warning(
                        "cannot create Lease %s/%s: namespace %s does not exist",
                        self.namespace,
                        self.name,
                        self.namespace,
                    )
                elif exc2.status != 409:
                    log.warning("cannot create Lease: HTTP %s %s", exc2.status, exc2.reason)
                return self.is_leader()
            self._won(start, "created")
            return True
        spec = lease.spec
        holder = spec.holder_identity or ""
        transitions = int(spec.lease_transitions or 0)
        record = (holder, str(spec.renew_time), transitions, spec.lease_duration_seconds)
        if self._observed is None or self._observed.record != record:
            self._observed = _Observed(record, start)
        rv = lease.metadata.resource_version
        if holder == self.identity:
            acquire_time = rfc3339(spec.acquire_time, micro=True) if spec.acquire_time else None
            body = self._body(rv, transitions, False, acquire_time)
        else:
            duration = float(spec.lease_duration_seconds or self.lease_duration)
            expired = not holder or start - self._observed.at >= duration
            if not expired:
                self._last_renew = None
                return False
            body = self._body(rv, transitions + 1, True, None)
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                log.warning("cannot update Lease: HTTP %s %s", exc.status, exc.reason)
            else:
                self._last_renew = None
            return self.is_leader()
        self._won(start, "renewed" if holder == self.identity else f"took over from {holder!r}")
        return True

    def _won(self, start: float, how: str) -> None:
        if self._last_renew is None:
            log.info("leader election: %s is now leader (%s)", self.identity, how)
            self.transitions += 1
        self._last_renew = start

    def release(self) -> None:
        """Give the Lease up (on shutdown) so another replica takes over at once; after a
        renewal in flight, and for good (no later :meth:`tick` acquires it again)."""
        with self._lock:
            self._released = True
            self._release()

    def _release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        if self._last_renew is None:
            return
        self._last_renew = None
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity != self.identity:
                return
            body = {
                "metadata": {"resourceVersion": lease.metadata.resource_version},
                "spec": {"holderIdentity": None, "renewTime": None, "acquireTime": None},
            }
            self.api.patch_namespaced_lease(self.name, self.namespace, body)
            log.info("leader election: %s released the lease", self.identity)
        except ApiException as exc:
            log.warning("could not release Lease: HTTP %s %s", exc.status, exc.reason)
