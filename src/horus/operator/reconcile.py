"""One reconcile pass: from the live API objects to validated, predicted, placed and bound jobs.

Why one idempotent pass instead of per-object handlers: placement is a decision about the
*whole* cluster (every GPU, every queued job), and a crash may interrupt it anywhere. So each
pass lists everything, rebuilds the cluster state with :mod:`horus.operator.livestate`, and
moves every DLJob one step forward. Running a pass twice, or after a ``kill -9`` at any
instant, is safe because of the order of writes for one placement:

1. **status first** — ``status.placements`` + phase ``Scheduled``, signed, with a
   ``resourceVersion`` precondition. Once this write lands, the shares are committed: the next
   pass (ours or another replica's) counts them, and never places the job again (only
   ``Queued`` jobs are placed, and the precondition makes two writers race-free);
2. **then the pods**, with deterministic names ``<job>-<replica>`` — ``AlreadyExists`` means
   a previous attempt created it;
3. **then the Binding** — "already assigned" means a previous attempt bound it.

A job with placements whose pods are missing or unbound is therefore *finished* from its
record, never re-placed. Status is a JSON merge patch of the fields this operator owns
(``status.observed`` belongs to the node agent).

:meth:`Reconciler.run_pass` is a list of named phases; each lives where its name says —
:mod:`~horus.operator.admission`, :mod:`~horus.operator.queueing`,
:mod:`~horus.operator.commit`, :mod:`~horus.operator.restore` — over one
:class:`~horus.operator.jobapi.JobApi`, so the pass runs in unit tests on an in-memory API.
It stays one module (about 760 lines) on purpose: what is left here is the order of the
phases and the guards around each job (one bad job never stops a pass), which a reader
should see in one place next to the order of writes above. Issue 24 added the trust steps
every pass takes before it acts — rollbacks distrusted, nothing placed or deleted while the
signing key is missing (``_hold``), foreign pods under a replica's name — which belong to the
same order; moving them out is the next split if this module grows again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from horus.api.dljob import DLJob, parse_dljob
from horus.api.inventory import decode_inventory
from horus.api.resources import node_memory_unit_mib
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.common.errors import ValidationError
from horus.common.memo import PerObject, sweep_all
from horus.kube.errors import Conflict
from horus.node.claims import slice_gpus
from horus.operator import status as st
from horus.operator.admission import Admission, Verdict
from horus.operator.bindgate import BindGate
from horus.operator.claimcommit import (
    REASON_CLAIM_NAME_TAKEN,
    ClaimNameTaken,
    ClaimPath,
    claim_epoch,
    claim_owner_uid,
)
from horus.operator.claims import pod_share_claim
from horus.operator.commit import Committer
from horus.operator.convert import pending_conversions
from horus.operator.correction import Corrector
from horus.operator.jobapi import (
    REASON_POD_NAME_TAKEN,
    JobApi,
    KubeJobApi,
    PodRejected,
    ProfileUnavailable,
    taken_message,
)
from horus.operator.livedelta import KeptBuild, LiveDelta
from horus.operator.livestate import (
    LiveObjects,
    LiveState,
    dljob_job_name,
    dljob_record_trusted,
    slices_by_node,
)
from horus.operator.metrics import OperatorMetrics
from horus.operator.passctx import JobCtx, PassReport
from horus.operator.podfacts import PodFacts, PodFactsCache, by_pod
from horus.operator.podspec import pod_name
from horus.operator.priority import PriorityClasses
from horus.operator.queueing import NodeEligibility, job_request, refuse, stable_refusal
from horus.operator.records import pods_epoch, record_epoch
from horus.operator.restore import restore
from horus.operator.session import PlacementSession
from horus.operator.writer import COMPONENT, StatusWriter
from horus.predictor.interface import GraphProfile, Predictor
from horus.scheduler import (
    ClusterState,
    JobRequest,
    Placement,
    RefusalCode,
    Scheduler,
    SchedulerSettings,
)
from horus.scheduler.types import MigrationSettings, PreemptionSettings

__all__ = ["COMPONENT", "Conflict", "JobCtx", "PassReport", "Reconciler", "cleanup_workers"]

log = logging.getLogger(__name__)

TERMINAL_PHASES = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)
#: Condition on a job while placement is paused for want of a signing key (False).
COND_SIGNING_KEY = "SigningKey"


@dataclass
class _Snapshot:
    """One pass's listing. Pods are listed before DLJobs: a pod in this list belongs to a
    DLJob that existed when it was created, so a DLJob missing from the later list really was
    deleted."""

    pods: list[dict[str, Any]]
    dljobs: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    #: ResourceClaims and ResourceSlices, on the DRA path only (``placement_path: dra``)
    claims: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] | None = None


@dataclass
class _Queue:
    """What the queue phase decided, before it is written."""

    futures: list[Future[None]] = field(default_factory=list)
    by_reason: Counter[str] = field(default_factory=Counter)
    #: Jobs the core could not place this pass (for preemption), highest priority first.
    waiting: list[JobRequest] = field(default_factory=list)
    #: Which nodes each pod template allows this pass (set by the queue phase, every pass;
    #: used for queued jobs, then for moves).
    eligible: NodeEligibility | None = None


class Reconciler:
    """The operator's loop body: holds the API, the placement session and the signing key."""

    def __init__(
        self,
        api: Any,
        predictor: Predictor,
        key: KeyRing | Callable[[], KeyRing],
        policy: str = "horus",
        workers: int = 16,
        metrics: OperatorMetrics | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        identity: str = COMPONENT,
        scheduler_settings: SchedulerSettings | None = None,
        progress_deadline: float = 300.0,
        correction: tuple[MigrationSettings, PreemptionSettings] | None = None,
        correction_period: float = 30.0,
        restart_seconds: float = 60.0,
        placement_path: str = c.PLACEMENT_PATH_DEVICE_PLUGIN,
        lifecycle_events: bool = False,
        max_jobs_per_pass: int = 1000,
    ) -> None:
        #: a :class:`JobApi`, or a ``kubernetes.client.ApiClient`` to make a KubeJobApi of
        self.api: JobApi = api if hasattr(api, "list_dljobs") else KubeJobApi(api)
        self.key = key
        self.metrics = metrics or OperatorMetrics()
        self.is_leader = is_leader
        self.identity = identity
        self.session = PlacementSession(policy, predictor, scheduler_settings)
        #: New jobs admitted, and jobs placed, in one pass at most (``OperatorSettings``):
        #: the rest wait, untouched, for the next pass (``PassReport.held_back``).
        self.max_jobs_per_pass = max_jobs_per_pass
        #: New (never admitted) job UID → the admission round that last tried it. Under the
        #: cap, jobs not tried yet go first and tried ones in the order they were last tried:
        #: jobs that stay Pending (a missing PriorityClass, a quota) cannot hold the cap's
        #: places pass after pass and starve newer jobs, whoever created them.
        self._admission_tries: dict[str, int] = {}
        self._admission_round = 0
        #: One job's commit chain (status → its pods → their Bindings) per task: up to
        #: ``workers`` chains in flight, each in its own order.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="horus-commit")
        #: A job's replicas after its status write (pod create → Binding per replica). A
        #: separate pool: a chain waits on its replicas, so sharing ``pool`` could deadlock.
        self.replica_pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="horus-replica"
        )
        #: Deletions of leftover pods and claims (a gone job's): up to ``workers / 4`` at a
        #: time, beside the pass instead of one by one inside it — at 5,000 nodes a pass that
        #: found 5,683 pods of deleted jobs spent 422 s deleting them before placing anything.
        self.cleanup_pool = ThreadPoolExecutor(
            max_workers=cleanup_workers(workers), thread_name_prefix="horus-cleanup"
        )
        #: The deletions started and not finished, by (kind, namespace, name, uid). A pass
        #: waits for its own deletions only ``LEFTOVER_DELETE_WAIT_SECONDS``: at 5,000 nodes a
        #: pass that found 6,355 pods of deleted jobs placed its 1,000 jobs, then waited 9
        #: minutes for the deletions before the next pass could place any. A later pass skips
        #: an object whose deletion is still under way (its view may still list it).
        self._deleting: set[tuple[str, str, str, str]] = set()
        self._deleting_lock = threading.Lock()
        self.writer = StatusWriter(
            self.api, self.keys, self.metrics, identity, workers // 4, lifecycle_events
        )
        self.admission = Admission(self.api, lambda: self.session, self.keys)
        #: node → MiB per unit of horus.io/gpu-memory (refreshed every pass; 1 if unset)
        self.node_units: dict[str, int] = {}
        #: The cluster's live state kept from pass to pass, counted again only where objects,
        #: profiles or trust changed (device-plugin path); the DRA path's full build, kept
        #: while nothing it is built from changed (LiveDelta takes no claims or slices).
        self._delta = LiveDelta(predictor, _no_profile)
        self._kept_build = KeptBuild()
        #: What a pass reads of each pod, and each DLJob parsed and its record checked, kept
        #: per version of the object (the view's same dict while it is unchanged).
        self._pod_facts = PodFactsCache()
        self._job_facts: PerObject[tuple[DLJob | None, bool]] = PerObject()
        #: The session's core that took in the last pass's residents (a new core — a new
        #: predictor — must take them all in again).
        self._observer: Scheduler | None = None
        migration, preemption = correction or (None, None)
        #: Run-time correction (moves, preemptions); a period of 0 turns it off.
        self.corrector = Corrector(
            self.api, self.writer, migration, preemption, correction_period, restart_seconds
        )
        #: The DRA path (issue 25): replicas as ResourceClaims the kube-scheduler allocates.
        self.claim_path = (
            ClaimPath(self.api, self.writer) if placement_path == c.PLACEMENT_PATH_DRA else None
        )
        self.committer = Committer(
            self.api,
            self.writer,
            is_leader,
            lambda: self.node_units,
            self.replica_pool,
            progress_deadline,
            self.claim_path,
        )

    # --- setup ---------------------------------------------------------------------------
    @property
    def predictor(self) -> Predictor:
        return self.session.predictor

    @property
    def scheduler(self) -> Scheduler:
        return self.session.scheduler

    def keys(self) -> KeyRing:
        """The key ring now (an ``AssignmentKeySource`` re-reads it)."""
        k = self.key
        return k if isinstance(k, KeyRing) else k()

    def set_predictor(self, predictor: Predictor) -> None:
        """Predict and place with ``predictor`` from the next pass on (a reloaded artifact).

        Call between passes. Jobs already admitted keep the prediction recorded in their
        status; measured pair speeds come back from the DLJobs at the next pass."""
        self.session.set_predictor(predictor)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.replica_pool.shutdown(wait=True, cancel_futures=True)
        self.cleanup_pool.shutdown(wait=True, cancel_futures=True)
        self.writer.close()

    # --- the pass ------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        t0 = time.monotonic()
        report = PassReport()
        snap = _Snapshot(self.api.list_pods(), self.api.list_dljobs(), self.api.list_nodes())
        if self.claim_path is not None:
            snap.claims = self.api.list_resource_claims()
            snap.slices = self.api.list_resource_slices()
        self.node_units = _node_units(snap.nodes)
        self.committer.gate = BindGate(snap.pods, snap.nodes)
        report.timings["list"] = time.monotonic() - t0
        ring = self.keys()
        facts = self._pod_facts.read(snap.pods, ring)
        every = self._contexts(snap, facts)
        uids = {x.uid for x in every.values()}
        self.admission.retain(uids)
        self.writer.retain(uids)
        self._distrust_rollbacks(every, ring, snap.claims, by_pod(facts))
        self.metrics.signing_key.set(1 if ring.can_sign else 0)
        if not ring.can_sign:
            return self._hold(snap, every, ring, report, t0)
        self._tell_resumed(every, report)
        restores = self._restore_untrusted(every, report, snap.claims)
        ctxs = {k: x for k, x in every.items() if x.trusted}
        placed_before = [
            x
            for x in ctxs.values()
            if x.status.get("placements") and x.phase not in TERMINAL_PHASES
        ]
        deleting: list[Future[None]] = []
        self._cleanup(every, facts, report, deleting)
        self._cleanup_claims(every, snap.claims, report, deleting)
        live = self._live_state(snap, ctxs, report)
        report.timings["state"] = time.monotonic() - t0 - report.timings["list"]
        t_admit = time.monotonic()
        self._admit_new(ctxs, live.state, snap, report, restores)
        report.timings["admit"] = time.monotonic() - t_admit
        queue = self._place_queue(ctxs, live.state, snap.nodes, report)
        self._convert_pods(snap, live, report)
        t_commit = time.monotonic()
        self._follow_placed(placed_before, ctxs, queue, report)
        report.timings["commit"] = time.monotonic() - t_commit
        self._correct(ctxs, live, queue, report)
        self.metrics.set_queue(queue.by_reason)
        self.metrics.set_phases(
            Counter(str(x.phase or c.DLJOB_PHASE_PENDING) for x in ctxs.values())
        )
        self.metrics.set_state_gpus(live.state)
        # the pass's report counts the deletions done by now; the rest finish beside the
        # next passes
        wait(deleting, timeout=c.LEFTOVER_DELETE_WAIT_SECONDS)
        sweep_all()  # answers about objects this pass no longer saw (deleted) go
        report.seconds = time.monotonic() - t0
        return report

    def _contexts(
        self, snap: _Snapshot, facts: Sequence[PodFacts] | None = None
    ) -> dict[str, JobCtx]:
        """One context per DLJob, with its trust and its own replica pods (``facts``: those
        of ``snap.pods``, read anew when not given)."""
        keys = self.keys()
        if facts is None:
            facts = PodFactsCache().read(snap.pods, keys)
        ctxs: dict[str, JobCtx] = {}
        # each DLJob parsed and its record checked once per version of it (per key ring)
        read = self._job_facts.read(
            snap.dljobs, lambda obj: (_parsed(obj), dljob_record_trusted(obj, keys)), keys
        )
        for obj, (job, trusted) in zip(snap.dljobs, read, strict=True):
            raw = obj.get("status")
            status: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            ctx = JobCtx(obj, job, status, trusted=trusted)
            ctxs[ctx.key] = ctx
        # A pod is a job's only if Horus made it for that job (podspec.owner_uid: controller
        # ownerReference and the Horus-owned assignment annotation) in the job's namespace.
        by_uid = {(x.namespace, x.uid): x for x in ctxs.values()}
        by_name = {(x.namespace, x.name): x for x in ctxs.values()}
        for f in facts:  # the pods' facts, read once per version of each pod
            owner = f.owner
            mine = by_uid.get((f.namespace, owner)) if owner is not None else None
            if mine is None or f.view is None:
                if owner is None:  # no Horus pod at all: does it hold a replica's name?
                    _note_taken(by_name, f.namespace, f.name)
                continue
            if f.deleting:
                mine.leaving.append(f.pod)
            elif mine.pods.setdefault(f.view.replica, f.pod) is f.pod:
                mine.known_views[id(f.pod)] = (f.pod, f.view)
        return ctxs

    def _distrust_rollbacks(
        self,
        every: Mapping[str, JobCtx],
        ring: KeyRing,
        claims: Sequence[Mapping[str, Any]],
        facts: Mapping[int, PodFacts],
    ) -> None:
        """A validly signed record older than its pods (they carry the epoch they were bound
        in), than its claims on the DRA path (each carries the epoch it was made in) or than
        what this process signed last is a rollback: not trusted (restored)."""
        made_in: dict[str, int] = {}
        for claim in claims:
            epoch = claim_epoch(claim, ring)
            if epoch is not None:
                uid = claim_owner_uid(claim)
                made_in[uid] = max(made_in.get(uid, 0), epoch)
        for ctx in every.values():
            if not ctx.trusted or not (ctx.phase or ctx.status.get("placements")):
                continue
            floor = max(
                self.writer.highest_signed(ctx.uid),
                _pods_epoch([*ctx.pods.values(), *ctx.leaving], ring, facts),
                made_in.get(ctx.uid, 0),
            )
            if record_epoch(ctx.status) < floor:
                log.warning(
                    "DLJob %s: its record (epoch %d) is older than epoch %d its pods or this "
                    "operator signed: a rollback, not trusted",
                    ctx.key,
                    record_epoch(ctx.status),
                    floor,
                )
                ctx.trusted = False

    def _hold(
        self,
        snap: _Snapshot,
        every: Mapping[str, JobCtx],
        ring: KeyRing,
        report: PassReport,
        t0: float,
    ) -> PassReport:
        """No key to sign with (module :mod:`~horus.operator.assignment_key`): nothing is
        placed, bound, moved, reset or deleted this pass; the cluster is still counted (for the
        metrics) and every unfinished job is told once per outage (Warning Event, condition
        ``SigningKey=False``). The next pass that finds the key goes on where this stopped."""
        ctxs = {k: x for k, x in every.items() if x.trusted}
        live = self._live_state(snap, ctxs, report)
        if self.is_leader():
            waiting = [
                x
                for x in every.values()
                if x.phase not in TERMINAL_PHASES and not _signing_condition(x, "False")
            ]
            for f in [
                self.pool.submit(self._guarded, self._tell_held, x, ring.why_not, report)
                for x in waiting
            ]:
                f.result()
        report.count("held")
        self.metrics.set_phases(
            Counter(str(x.phase or c.DLJOB_PHASE_PENDING) for x in ctxs.values())
        )
        self.metrics.set_state_gpus(live.state)
        report.seconds = time.monotonic() - t0
        return report

    def _tell_held(self, ctx: JobCtx, why: str, report: PassReport) -> None:
        now = now_rfc3339()
        conds = st.set_condition(
            ctx.status.get("conditions") or [],
            COND_SIGNING_KEY,
            "False",
            "KeyUnavailable",
            why,
            now,
        )
        self.writer.patch(ctx, {"conditions": conds})
        report.count("status_writes")
        self.writer.event(ctx, "SigningKeyUnavailable", why, warning=True)

    def _tell_resumed(self, every: Mapping[str, JobCtx], report: PassReport) -> None:
        """The key is back: the jobs told it was missing are told this too (``SigningKey``
        condition True, an Event)."""
        if not self.is_leader():
            return
        message = "the signing key is available again; placement resumed"

        def tell(ctx: JobCtx) -> None:
            conds = st.set_condition(
                ctx.status.get("conditions") or [],
                COND_SIGNING_KEY,
                "True",
                "KeyAvailable",
                message,
                now_rfc3339(),
            )
            self.writer.patch(ctx, {"conditions": conds})
            report.count("status_writes")
            self.writer.event(ctx, "SigningKeyAvailable", message)

        for f in [
            self.pool.submit(self._guarded, tell, x)
            for x in every.values()
            if _signing_condition(x, "False")
        ]:
            f.result()

    def _restore_untrusted(
        self,
        every: Mapping[str, JobCtx],
        report: PassReport,
        claims: Sequence[Mapping[str, Any]] = (),
    ) -> list[Future[None]]:
        """A record the operator did not sign takes no part in this pass: it is restored from
        the job's own pods (on the DRA path, with their claims), or reset so the job is
        admitted again (:mod:`restore`)."""
        if not self.is_leader():
            return []
        index = {
            (
                str((cl.get("metadata") or {}).get("namespace")),
                str((cl.get("metadata") or {}).get("name")),
            ): cl
            for cl in claims
        }
        return [
            self.pool.submit(self._guarded, restore, x, self.writer, report, index)
            for x in every.values()
            if not x.trusted
        ]

    def _cleanup(
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
            if ctx is None or (f.running and _must_stop(ctx)):
                # Only the pod read here: one re-created under its name is not touched.
                meta = f.pod.get("metadata") or {}
                self._start_delete(
                    "pod", meta, self.api.delete_pod, "pods_deleted", report, deleting
                )

    def _cleanup_claims(
        self,
        ctxs: Mapping[str, JobCtx],
        claims: list[dict[str, Any]],
        report: PassReport,
        deleting: list[Future[None]],
    ) -> None:
        """The DRA path's :meth:`_cleanup`: delete claims Horus made for a DLJob (controller
        ownerReference) that is gone, failed or back in the queue without placements (a
        re-placement or preemption a crash interrupted). A claim that is not a DLJob's is
        never deleted here. The garbage collector would delete a gone job's claims too; this
        does not wait for it."""
        if self.claim_path is None or not self.is_leader():
            return
        jobs = {(x.namespace, x.uid): x for x in ctxs.values()}
        for claim in claims:
            meta = claim.get("metadata") or {}
            owner = claim_owner_uid(claim)
            if not owner or meta.get("deletionTimestamp"):
                continue
            ctx = jobs.get((str(meta.get("namespace")), owner))
            if ctx is None or _must_stop(ctx):
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
            deleting.append(self.cleanup_pool.submit(run))
        except BaseException:  # the pool shut down (closing): nothing is under way
            with self._deleting_lock:
                self._deleting.discard(key)
            raise

    def _live_state(
        self, snap: _Snapshot, ctxs: Mapping[str, JobCtx], report: PassReport
    ) -> LiveState:
        """The cluster as the apiserver holds it (signed records only), fed to the session.
        Its own time is ``timings["live"]`` (a part of the pass's ``state``)."""
        t0 = time.monotonic()
        profiles = {
            k: p for k, x in ctxs.items() if (p := self.admission.known_profile(x.uid)) is not None
        }
        every = {dljob_job_name(*_ns_name(o)) for o in snap.dljobs}
        distrusted = every - set(ctxs)  # unsigned or rolled-back records: pods count instead
        residents: tuple[str, ...] | None = None
        if self.claim_path is None:
            # kept from the last pass, counted again where something changed; the pass
            # places, moves and dry-runs on a fork, so the kept state stays the cluster's
            if self._delta.predictor is not self.predictor:  # residents sized by the new one
                self._delta = LiveDelta(self.predictor, _no_profile)
            builds = self._delta.full_builds
            objs = LiveObjects(snap.nodes, snap.pods, snap.dljobs)
            kept = self._delta.update(objs, self.keys(), profiles, distrusted)
            live = dataclasses.replace(kept, state=kept.state.fork())
            kept_state = self._delta.full_builds == builds
            report.live_state = "kept" if kept_state else f"full: {self._delta.full_reason}"
            if kept_state and self._observer is self.session.scheduler:
                residents = self._delta.added  # the session remembered the others already
        else:
            # built in full, and kept while nothing it is built from changes (a still
            # cluster's passes); placed on a fork as above
            objs = LiveObjects(snap.nodes, snap.pods, snap.dljobs)
            held, same = self._kept_build.update(
                objs,
                snap.claims,
                snap.slices or [],
                self.predictor,
                self.keys(),
                profiles,
                distrusted,
            )
            live = dataclasses.replace(held, state=held.state.fork())
            report.live_state = "kept" if same else "full: dra"
            if same and self._observer is self.session.scheduler:
                residents = ()  # the same state: the session took all of it in already
        if self.claim_path is not None:
            st_ = live.state
            unhealthy = (str(u) for u, ok in zip(st_.gpu_uuid, st_.healthy, strict=True) if not ok)
            self.claim_path.set_pass(snap.claims, live.overtaken, unhealthy)
        self.metrics.live_state_builds.labels(how=report.live_state).inc()
        report.timings["live"] = time.monotonic() - t0
        report.problems.extend(live.problems)
        report.pairs_observed = self.session.observe(live, residents)
        self._observer = self.session.scheduler
        return live

    # --- admission -------------------------------------------------------------------------
    def _admit_new(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        snap: _Snapshot,
        report: PassReport,
        restores: list[Future[None]],
    ) -> None:
        """New jobs: validate, resolve the priority, predict once, dry-run (in parallel: each
        is its own write)."""
        model, max_gpu_mib = _main_model(state), _max_gpu_memory(snap.nodes, snap.slices)
        new = [
            ctx
            for ctx in ctxs.values()
            if ctx.phase in (None, c.DLJOB_PHASE_PENDING) and not ctx.status.get("placements")
        ]
        classes = self._priority_classes() if new else None
        new = self._admission_turn(new, classes, report)
        admitted = [
            self.pool.submit(self._guarded, self._admit, ctx, model, max_gpu_mib, classes, report)
            for ctx in new
        ]
        for f in (*restores, *admitted):
            f.result()

    def _admission_turn(
        self, new: list[JobCtx], classes: PriorityClasses | None, report: PassReport
    ) -> list[JobCtx]:
        """The new jobs this pass admits: all of them, or under the cap the jobs not tried
        yet (highest priority, then oldest, first), then those tried longest ago.

        Only untried jobs held back call for the next pass at once (``held_back``): a pass
        whose leftovers were all tried before (they stay Pending for a reason of their own)
        must not start the next at once, or a thousand such jobs keep the operator passing
        back to back, each pass dry-running them again."""
        self._admission_round += 1
        tries = self._admission_tries
        if len(new) > self.max_jobs_per_pass:
            new.sort(key=lambda ctx: (tries.get(ctx.uid, -1), *_admission_rank(ctx, classes)))
            behind = new[self.max_jobs_per_pass :]
            report.count("held_back", sum(1 for ctx in behind if ctx.uid not in tries))
            new_tries = {ctx.uid: tries[ctx.uid] for ctx in behind if ctx.uid in tries}
            new = new[: self.max_jobs_per_pass]
        else:
            new_tries = {}
        # Kept only for jobs still new: an admitted or deleted job leaves the map.
        new_tries.update((ctx.uid, self._admission_round) for ctx in new)
        self._admission_tries = new_tries
        return new

    def _priority_classes(self) -> PriorityClasses:
        """The cluster's PriorityClasses, listed once per pass that admits jobs (few objects).
        Unreadable: new jobs wait (Pending) rather than being admitted at a wrong priority."""
        try:
            return PriorityClasses.from_objects(self.api.list_priority_classes())
        except Exception as exc:
            log.warning("cannot list PriorityClasses (%s); new jobs wait", exc)
            return PriorityClasses(error=f"{type(exc).__name__}: {exc}"[:300])

    def _admit(
        self,
        ctx: JobCtx,
        model: str,
        max_gpu_mib: int | None,
        classes: PriorityClasses | None,
        report: PassReport,
    ) -> None:
        if not self.is_leader() or ctx.meta.get("deletionTimestamp"):
            return
        verdict: Verdict = self.admission.admit(ctx, model, max_gpu_mib, classes)
        if verdict.outcome == "failed":
            assert verdict.patch is not None
            self.writer.write(ctx, verdict.patch, report, (verdict.reason, verdict.message, True))
            report.count("failed")
            self.metrics.failures.labels(reason=verdict.reason).inc()
            return
        if verdict.outcome == "pending":
            event = (verdict.reason, verdict.message, True)
            self.writer.write(ctx, verdict.patch, report, event)
            return
        if verdict.warning is not None:
            self.writer.event(ctx, "ShareBelowPrediction", verdict.warning, warning=True)
        # Not written yet: the decision of this pass carries it (one write per job).
        ctx.pending = dict(verdict.patch or {})
        ctx.status.update(ctx.pending)
        with contextlib.suppress(ValidationError):
            ctx.job = parse_dljob({**ctx.obj, "status": ctx.status})  # with predicted

    # --- the queue -------------------------------------------------------------------------
    def _place_queue(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        nodes: list[dict[str, Any]],
        report: PassReport,
    ) -> _Queue:
        """Queued jobs: refuse what can never run here, place the rest with the core."""
        queue = _Queue()
        queued = [
            x
            for x in ctxs.values()
            if x.phase == c.DLJOB_PHASE_QUEUED
            and x.job is not None
            and not x.status.get("placements")
            and not x.meta.get("deletionTimestamp")
        ]
        for ctx in ctxs.values():  # e.g. a job queued before an upgrade that refuses its spec
            if ctx.phase == c.DLJOB_PHASE_QUEUED and ctx.job is None and self.is_leader():
                queue.futures.append(
                    self.pool.submit(self._guarded, _invalid, ctx, self.writer, report)
                )
        requests = self._requests(queued, state, nodes, queue, report)
        if requests and state.gpu_count and self.is_leader():
            self._decide(ctxs, state, requests, queue, report)
        elif requests:
            why = "no Ready node offers GPUs (horus.io/gpu-inventory) yet"
            for ctx in queued:
                self._refuse(ctx, "NoGPUNodes", why, queue, report)
        report.queued = len(requests)
        return queue

    def _requests(
        self,
        queued: list[JobCtx],
        state: ClusterState,
        nodes: list[dict[str, Any]],
        queue: _Queue,
        report: PassReport,
    ) -> dict[str, JobRequest]:
        eligible = queue.eligible = NodeEligibility(nodes, state.node_names)
        requests: dict[str, JobRequest] = {}
        for ctx in queued:
            if ctx.taken:  # placed, it would hold a GPU for a pod it cannot create
                why = taken_message(ctx.namespace, ctx.taken)
                self._refuse(ctx, REASON_POD_NAME_TAKEN, why, queue, report)
                continue
            claims_taken = (
                self.claim_path.taken(ctx, ctx.job.spec.replicas)
                if self.claim_path is not None and ctx.job is not None
                else []
            )
            if claims_taken:
                why = str(ClaimNameTaken(ctx.namespace, ", ".join(claims_taken)))
                self._refuse(ctx, REASON_CLAIM_NAME_TAKEN, why, queue, report)
                continue
            try:
                req = job_request(ctx, self.admission.profile(ctx))
            except (ProfileUnavailable, ValidationError) as exc:
                log.warning("DLJob %s: profile unavailable while queued: %s", ctx.key, exc)
                continue
            self.session.remember(req)
            assert ctx.job is not None
            allowed, why_none = eligible.allowed(ctx.job.spec.template)
            if allowed is not None and not allowed and state.gpu_count:
                self._refuse(ctx, RefusalCode.NODES.condition_reason, why_none, queue, report)
                continue
            if allowed is not None:
                req = dataclasses.replace(req, nodes=allowed)
            # A job that can never fit this cluster must not block the queue behind it.
            never = self.scheduler.check_possible(state, req) if state.gpu_count else None
            if never is not None:
                self._refuse(ctx, RefusalCode.IMPOSSIBLE.condition_reason, never, queue, report)
                continue
            requests[req.name] = req
        return requests

    def _decide(
        self,
        ctxs: Mapping[str, JobCtx],
        state: ClusterState,
        requests: Mapping[str, JobRequest],
        queue: _Queue,
        report: PassReport,
    ) -> None:
        t1 = time.perf_counter()
        result = self.scheduler.schedule(
            state, list(requests.values()), now=time.time(), limit=self.max_jobs_per_pass
        )
        decided = {p.job for p in result.placed} | {r.job for r in result.refused}
        unreached = [name for name in requests if name not in decided]
        if unreached:  # past the pass's placements: decided (and written) next pass
            report.count("held_back", len(unreached))
        for name in unreached:  # still waiting: counted under their last refusal's reason
            queue.by_reason[str(ctxs[name].status.get("reason") or c.DLJOB_PHASE_QUEUED)] += 1
        self.metrics.latency.observe(time.perf_counter() - t1)
        report.timings["schedule"] = time.perf_counter() - t1
        for placement in result.placed:
            self.metrics.decisions.labels(outcome="placed").inc()
            queue.futures.append(
                self.pool.submit(self._commit_guarded, ctxs[placement.job], placement, report)
            )
            report.count("placed")
        queue.waiting = sorted(
            (requests[r.job] for r in result.refused if r.code.resolvable),
            key=lambda req: (-req.priority, req.submit_time),
        )
        for refusal in result.refused:
            reason = st.refusal_reason(refusal.code)
            message = stable_refusal(refusal.reason, refusal.code)
            self._refuse(ctxs[refusal.job], reason, message, queue, report)

    def _refuse(
        self, ctx: JobCtx, reason: str, message: str, queue: _Queue, report: PassReport
    ) -> None:
        queue.by_reason[reason] += 1
        queue.futures.append(
            self.pool.submit(self._guarded, refuse, ctx, self.writer, reason, message, report)
        )
        report.count("refused")

    # --- plain pods' converted requests (the DRA path) ----------------------------------------
    def _convert_pods(self, snap: _Snapshot, live: LiveState, report: PassReport) -> None:
        """Plain pods whose ``horus.io/gpu-*`` requests the admission policy turned into a
        claim reference (:mod:`horus.operator.convert`): an overtaken claim of theirs is
        deleted (the pod still names it: decided again next pass); each pod waiting for its
        claim gets one, pinned to the GPU the core chose on this pass's state (DLJobs placed
        this pass included)."""
        if self.claim_path is None or not self.is_leader():
            return
        for key in [k for k in live.overtaken if k.startswith("claim:")]:
            ns, _, name = key.removeprefix("claim:").partition("/")
            claim = self.claim_path.claims.pop((ns, name), None)
            if claim is not None:
                uid = str((claim.get("metadata") or {}).get("uid") or "")
                log.info(
                    "claim %s/%s: %s; deleting it to decide again", ns, name, live.overtaken[key]
                )
                self.api.delete_resource_claim(ns, name, uid)
                report.count("claims_deleted")
        pending = pending_conversions(snap.pods, self.claim_path.claims)
        for conv in pending:
            if conv.problem:  # told on the pod, as the extender's filter would tell it
                self.writer.pod_event_once(conv.pod, conv.reason, conv.problem, True)
        waiting = {conv.request.name: conv for conv in pending if conv.request is not None}
        if not waiting:
            return
        if not live.state.gpu_count:
            why = "no Ready node offers Horus GPUs (a ResourceSlice of gpu.horus.io) yet"
            for conv in waiting.values():
                self.writer.pod_event_once(conv.pod, "NoGPUNodes", why, True)
            return
        result = self.scheduler.schedule(
            live.state, [conv.request for conv in waiting.values() if conv.request], now=time.time()
        )
        for refusal in result.refused:  # the pod waits; the core's sentence says for what
            message = stable_refusal(refusal.reason, refusal.code)
            reason = st.refusal_reason(refusal.code)
            self.writer.pod_event_once(waiting[refusal.job].pod, reason, message, True)
        for placement in result.placed:
            conv = waiting[placement.job]
            share = placement.replicas[0].gpus[0]
            manifest = pod_share_claim(
                conv.pod, conv.claim, share.gpu_uuid, share.core_percent, share.memory_mib
            )
            ns = str((conv.pod.get("metadata") or {}).get("namespace", "default"))
            try:
                if self.api.create_resource_claim(ns, manifest) is not None:
                    report.count("claims_created")
                    self.writer.pod_event_once(
                        conv.pod,
                        "GPUChosen",
                        f"claim {conv.claim}: {share.node}/gpu-{share.gpu_index} "
                        f"({share.core_percent}% core, {share.memory_mib} MiB), predicted "
                        f"speed {placement.predicted_speed:.2f}; the kube-scheduler allocates it",
                    )
                    log.info(
                        "pod %s/%s: claim %s on %s/gpu-%d (%d%% core, %d MiB)",
                        ns, (conv.pod.get("metadata") or {}).get("name"), conv.claim,
                        share.node, share.gpu_index, share.core_percent, share.memory_mib,
                    )  # fmt: skip
            except Exception as exc:
                log.warning("cannot create claim %s/%s: %s", ns, conv.claim, exc)

    # --- run-time correction ---------------------------------------------------------------
    def _correct(
        self, ctxs: Mapping[str, JobCtx], live: LiveState, queue: _Queue, report: PassReport
    ) -> None:
        """Moves and preemptions (``operator.correction``), on the state this pass left."""
        if self.corrector.period_s <= 0 or not self.is_leader():
            return
        t0 = time.monotonic()
        try:
            assert queue.eligible is not None
            self.corrector.correct(self.session, ctxs, live, queue.waiting, queue.eligible, report)
        except Conflict as exc:
            report.count("conflicts")
            log.debug("%s", exc)
        except Exception:  # a bug must not stop placement: log it, the next round retries
            log.exception("run-time correction failed; placement goes on")
            report.problems.append("run-time correction failed")
        report.timings["correct"] = time.monotonic() - t0

    # --- placed jobs -----------------------------------------------------------------------
    def _follow_placed(
        self,
        placed_before: list[JobCtx],
        ctxs: Mapping[str, JobCtx],
        queue: _Queue,
        report: PassReport,
    ) -> None:
        """Finish placed jobs' pods from their record and keep their status in step; wait for
        every write of the pass; then write admissions that got no decision in it."""
        placing = report.placed > 0
        futures = list(queue.futures)
        for ctx in placed_before:
            if not self._settled(ctx):
                futures.append(self.pool.submit(self._follow_guarded, ctx, report, placing))
        for f in futures:
            f.result()
        leftovers = [
            self.pool.submit(self._guarded, self._flush, ctx, report)
            for ctx in ctxs.values()
            if ctx.pending is not None
        ]
        for f in leftovers:
            f.result()

    def _settled(self, ctx: JobCtx) -> bool:
        """``Committer.settled``; a job it cannot judge is followed (and its error reported
        there, for that job alone)."""
        try:
            return self.committer.settled(ctx)
        except Exception:
            return False

    def _flush(self, ctx: JobCtx, report: PassReport) -> None:
        if ctx.pending is None or not self.is_leader():
            return
        self.writer.patch(ctx, {})
        report.count("status_writes")

    # --- one job's step, guarded ---------------------------------------------------------
    def _guarded(self, fn: Callable[..., None], ctx: JobCtx, *args: Any) -> None:
        """Run one job's step; an error for one job never stops the others."""
        if not self.is_leader():
            return
        try:
            fn(ctx, *args)
        except Conflict as exc:
            for arg in args:
                if isinstance(arg, PassReport):
                    arg.count("conflicts")
            log.debug("%s", exc)
        except Exception as exc:
            self.writer.problem(ctx, f"{getattr(fn, '__name__', 'step').strip('_')} failed", exc)

    def _commit_guarded(self, ctx: JobCtx, placement: Placement, report: PassReport) -> None:
        try:
            self.committer.commit(ctx, placement, report)
        except Conflict as exc:
            report.count("conflicts")
            log.info("%s", exc)
        except PodRejected as exc:
            self._guarded(self.committer.pod_rejected, ctx, exc, report)
        except Exception as exc:  # a bug or API outage for one job must not stop the others
            self.writer.problem(ctx, "committing its placement failed", exc)
            report.problems.append(f"commit of {ctx.key} failed")

    def _follow_guarded(self, ctx: JobCtx, report: PassReport, placing: bool) -> None:
        try:
            self.committer.follow(ctx, report, placing)
        except Conflict as exc:
            report.count("conflicts")
            log.debug("%s", exc)
        except PodRejected as exc:
            self._guarded(self.committer.pod_rejected, ctx, exc, report)
        except Exception as exc:
            self.writer.problem(ctx, "following its pods failed", exc)
            report.problems.append(f"follow of {ctx.key} failed")


def _no_profile(pod: Mapping[str, Any]) -> GraphProfile | None:
    """The operator resolves profiles by job (its admission's), never from a plain pod's
    annotation beside the full build's own reading of it (``livestate.pod_profile``)."""
    return None


def _signing_condition(ctx: JobCtx, status: str) -> bool:
    cond = st.condition(ctx.status.get("conditions") or [], COND_SIGNING_KEY)
    return cond is not None and cond.get("status") == status


def _admission_rank(ctx: JobCtx, classes: PriorityClasses | None) -> tuple[int, str, str]:
    """Among new jobs tried equally long ago: the highest priority its class resolves to
    first (a class that does not exist last: the job will wait anyway), then creation time
    (RFC 3339 in UTC, set by the apiserver, so the text sorts as the time), then the key.
    A tenant may name any class; one the quota forbids costs a single early try, after
    which the job queues behind every job not tried yet."""
    name = (ctx.obj.get("spec") or {}).get("priorityClassName")
    value: int | None = 0
    if classes is not None and classes.error is None:
        value = classes.resolve(name if isinstance(name, str) else None)
    rank = -value if value is not None else 2**62
    return (rank, str(ctx.meta.get("creationTimestamp") or ""), ctx.key)


def _ns_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "default")), str(meta.get("name", ""))


def _invalid(ctx: JobCtx, writer: StatusWriter, report: PassReport) -> None:
    """A queued job whose spec no longer parses (it was admitted by an older version; spec
    edits are validated by the CRD) fails with the parser's sentence instead of waiting
    silently for ever."""
    try:
        parse_dljob(ctx.obj)
    except ValidationError as exc:
        writer.fail(ctx, "InvalidSpec", f"invalid DLJob: {exc}", report)


def _note_taken(jobs: Mapping[tuple[str, str], JobCtx], namespace: str, name: str) -> None:
    """A pod Horus did not make whose name is one of a job's replica pod names
    (``<job>-<replica>``) holds that name: the job waits for it (never adopts or deletes it)."""
    job, _, index = name.rpartition("-")
    ctx = jobs.get((namespace, job))
    if ctx is None or not index.isdigit() or pod_name(job, int(index)) != name:
        return
    replicas = ctx.job.spec.replicas if ctx.job is not None else 0
    recorded = {int(r["replica"]) for r in ctx.status.get("placements") or []}
    if int(index) < replicas or int(index) in recorded:
        ctx.taken.append(name)


def _parsed(obj: dict[str, Any]) -> DLJob | None:
    """``parse_dljob`` of a DLJob, None where it does not validate (the pass keeps it per
    version of the object: ``Reconciler._job_facts``)."""
    try:
        return parse_dljob(obj)
    except ValidationError:
        return None


def _pods_epoch(
    pods: Sequence[Mapping[str, Any]], ring: KeyRing, facts: Mapping[int, PodFacts]
) -> int:
    """:func:`pods_epoch` of ``pods``, from the pass's facts where it read the pod."""
    best = 0
    for pod in pods:
        f = facts.get(id(pod))
        best = max(best, f.epoch if f is not None and f.pod is pod else pods_epoch([pod], ring))
    return best


def _must_stop(ctx: JobCtx) -> bool:
    """Whether a job's running pods must go: it failed, or it is queued without placements."""
    if not ctx.trusted:
        return False
    queued = ctx.phase == c.DLJOB_PHASE_QUEUED and not ctx.status.get("placements")
    return ctx.phase == c.DLJOB_PHASE_FAILED or queued


def _main_model(state: ClusterState) -> str:
    """The GPU model predictions are made for: the cluster's most common one."""
    if not state.gpu_model:
        return "H100"
    return Counter(state.gpu_model).most_common(1)[0][0]


def _max_gpu_memory(
    nodes: list[dict[str, Any]], slices: list[dict[str, Any]] | None = None
) -> int | None:
    """The largest GPU of any inventory node (Ready or not) — on the DRA path, of any node's
    ResourceSlice; None when there is none."""
    best: int | None = None
    if slices is not None:
        for name, items in slices_by_node(slices).items():
            for gpu in slice_gpus(items, name):
                best = max(best or 0, gpu.memory_mib)
        return best
    for node in nodes:
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(
            c.ANNOTATION_GPU_INVENTORY
        )
        if not text:
            continue
        largest = _largest_gpu_mib(text)
        if largest is not None:
            best = max(best or 0, largest)
    return best


@functools.lru_cache(maxsize=16384)
def _largest_gpu_mib(inventory: str) -> int | None:
    """The largest GPU of one inventory annotation (None: unreadable or empty), decoded once
    per text: the node's annotation is the same string from pass to pass."""
    try:
        return max((gpu.memory_mib for gpu in decode_inventory(inventory)), default=None)
    except ValidationError:
        return None


def _node_units(nodes: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        try:
            out[name] = node_memory_unit_mib(meta.get("annotations") or {}, f"node {name}")
        except ValidationError as exc:
            log.warning("%s; assuming 1 MiB units", exc)
            out[name] = 1
    return out


def cleanup_workers(workers: int) -> int:
    """Threads deleting leftover pods and claims for a reconciler of ``workers`` commit chains
    (the operator sizes its connection pool with it)."""
    return max(2, workers // 4)
