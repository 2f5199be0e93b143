"""What one reconcile pass carries per DLJob (:class:`JobCtx`) and reports (:class:`PassReport`).

A context is made from the listed objects at the start of a pass and only lives as long as
the pass: the reconciler keeps no job state between passes (the apiserver is the truth, see
``horus.operator.reconcile``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from horus.api.dljob import DLJob
from horus.operator import status as st
from horus.operator.residents import dljob_job_name

__all__ = ["JobCtx", "PassReport"]


@dataclass
class JobCtx:
    """One DLJob during a pass: its raw object, typed view and the status we are building."""

    obj: dict[str, Any]
    job: DLJob | None
    status: dict[str, Any]
    pods: dict[int, dict[str, Any]] = field(default_factory=dict)  # replica → pod
    #: Admission result (phase Queued, predicted) not yet written: it goes out with this
    #: pass's decision for the job (placement or refusal) in one status write.
    pending: dict[str, Any] | None = None
    #: Phase and placements carry the operator's valid signature (or are both unset).
    trusted: bool = True
    #: The job's pods being deleted (an old pod of a move still stopping, its GPU still held).
    leaving: list[dict[str, Any]] = field(default_factory=list)
    #: Names of the job's replica pods held by pods Horus did not create for it (a tenant's
    #: StatefulSet ``foo`` beside DLJob ``foo``): never adopted nor deleted; the job waits.
    taken: list[str] = field(default_factory=list)
    #: The replica views the pass's pod facts already read, by the identity of their pod
    #: (the pod held with its view, so while the entry lives no other dict can have its
    #: id): :meth:`pod_views` reads a view again only for a pod the pass put in
    #: :attr:`pods` since (one it created or bound).
    known_views: dict[int, tuple[dict[str, Any], st.PodView]] = field(default_factory=dict)

    def pod_views(self) -> list[st.PodView]:
        """The views of :attr:`pods` (those with a readable replica index)."""
        views = []
        for pod in self.pods.values():
            known = self.known_views.get(id(pod))
            view = known[1] if known is not None else st.PodView.from_pod(pod)
            if view is not None:
                views.append(view)
        return views

    @property
    def meta(self) -> dict[str, Any]:
        m = self.obj.get("metadata")
        return m if isinstance(m, dict) else {}

    # Read once, when the context is made: name, namespace and uid never change while the job
    # exists (a status write hands back the same object at a later ``resourceVersion``), and
    # a pass reads them many times per job.
    name: str = field(init=False)
    namespace: str = field(init=False)
    key: str = field(init=False)
    uid: str = field(init=False)

    def __post_init__(self) -> None:
        meta = self.meta
        self.name = str(meta.get("name", ""))
        self.namespace = str(meta.get("namespace", "default"))
        self.key = dljob_job_name(self.namespace, self.name)
        self.uid = str(meta.get("uid", ""))

    @property
    def rv(self) -> str:
        return str(self.meta.get("resourceVersion", ""))

    @property
    def generation(self) -> int | None:
        return int(self.meta.get("generation") or 0) or None

    @property
    def phase(self) -> str | None:
        p = self.status.get("phase")
        return str(p) if p else None

    @property
    def involved(self) -> dict[str, str]:
        """The job as an Event's ``involvedObject``."""
        from horus.common import constants as c

        return {
            "apiVersion": c.API_GROUP_VERSION,
            "kind": c.DLJOB_KIND,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }


@dataclass
class PassReport:
    """What one pass did (logged, and used by tests)."""

    placed: int = 0
    refused: int = 0
    queued: int = 0
    failed: int = 0
    pods_created: int = 0
    pods_bound: int = 0
    #: Bindings held for a later pass: a pod with the same requests on that node still
    #: awaits its Allocate (horus.operator.allocate_order)
    binds_deferred: int = 0
    pods_deleted: int = 0
    status_writes: int = 0
    conflicts: int = 0
    #: Scheduled → Running writes held back because this pass was placing jobs
    deferred: int = 0
    #: measured pair speeds handed to the scheduler (DLJobs' status.observed.pairs)
    pairs_observed: int = 0
    #: passes that placed nothing for want of a signing key (reconcile._hold)
    held: int = 0
    #: jobs left for the next pass by the per-pass cap (new jobs not admitted, queued jobs
    #: the scheduler did not reach): the controller runs the next pass at once
    held_back: int = 0
    #: the DRA path: ResourceClaims created and deleted, decisions re-placed because the
    #: kube-scheduler could not honour them (horus.operator.claimcommit)
    claims_created: int = 0
    claims_deleted: int = 0
    replaced: int = 0
    #: placeholder claims of pods under Kueue's pod integration deleted once Horus' own claim
    #: for the pod exists (horus.operator.placeholder_claims)
    placeholders_deleted: int = 0
    #: Horus' claims recorded in such a pod's status (horus.operator.placeholder_claims)
    claims_recorded: int = 0
    #: Kueue Workloads whose Horus check this pass answered, by answer (horus.operator.kueue)
    kueue_ready: int = 0
    kueue_retry: int = 0
    kueue_rejected: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    #: How the pass had its live state: "kept", or "full: <why>" (metric
    #: ``horus_operator_live_state_builds_total``)
    live_state: str = ""
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to counter ``what`` (called from many commit threads at once)."""
        with self._lock:
            setattr(self, what, getattr(self, what) + n)
