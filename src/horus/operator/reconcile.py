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

:meth:`Reconciler.run_pass` is the numbered list of the pass's phases; each lives in the
module its name says — :mod:`~horus.operator.listing`, :mod:`~horus.operator.trust`,
:mod:`~horus.operator.cleanup`, :mod:`~horus.operator.livesource`,
:mod:`~horus.operator.newjobs`, :mod:`~horus.operator.queue_decision`,
:mod:`~horus.operator.plain_pod_claims`, :mod:`~horus.operator.commit`,
:mod:`~horus.operator.correction` — over one :class:`~horus.operator.jobapi.JobApi`, so the
pass runs in unit tests on an in-memory API. Every job's step runs guarded
(:mod:`~horus.operator.guards`): one bad job never stops a pass.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from horus.api.dljob import DLJob
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.memo import PerObject, sweep_all
from horus.kube.errors import Conflict
from horus.operator.admission import Admission
from horus.operator.allocate_order import BindGate
from horus.operator.claimcommit import ClaimPath
from horus.operator.cleanup import LeftoverCleanup, cleanup_workers
from horus.operator.commit import Committer
from horus.operator.correction import Corrector
from horus.operator.guards import JobGuard
from horus.operator.jobapi import JobApi, KubeJobApi
from horus.operator.kueue.api import KueueApi, KueueNotSynced
from horus.operator.kueue.check import KueueCheck, KueueView
from horus.operator.kueue.gang_pods import fill_slots, is_gang_pod
from horus.operator.listing import Listing, job_contexts, node_units
from horus.operator.livesource import DeltaSource, DraSource, LiveSource
from horus.operator.metrics import OperatorMetrics
from horus.operator.newjobs import NewJobs
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.placeholder_claims import replace_placeholders
from horus.operator.placement_rules import PlacementSession
from horus.operator.plain_pod_claims import convert_pods
from horus.operator.pod_reads import PodFacts, PodFactsCache, by_pod
from horus.operator.queue_decision import QueueOutcome, QueuePhase
from horus.operator.residents import LiveState, dljob_job_name
from horus.operator.trust import COND_SIGNING_KEY, TERMINAL_PHASES, TrustGate
from horus.operator.writer import COMPONENT, StatusWriter
from horus.predictor.interface import Predictor
from horus.scheduler import Scheduler, SchedulerSettings
from horus.scheduler.types import MigrationSettings, PreemptionSettings

__all__ = [
    "COMPONENT",
    "COND_SIGNING_KEY",
    "Conflict",
    "JobCtx",
    "PassReport",
    "Reconciler",
    "cleanup_workers",
]

log = logging.getLogger(__name__)


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
        kueue: KueueApi | None = None,
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
        #: One job's commit chain (status → its pods → their Bindings) per task: up to
        #: ``workers`` chains in flight, each in its own order.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="horus-commit")
        #: A job's replicas after its status write (pod create → Binding per replica). A
        #: separate pool: a chain waits on its replicas, so sharing ``pool`` could deadlock.
        self.replica_pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="horus-replica"
        )
        #: Deletions of leftover pods and claims, beside the pass on a pool of their own.
        self.cleanup = LeftoverCleanup(self.api, workers, is_leader)
        self.writer = StatusWriter(
            self.api, self.keys, self.metrics, identity, workers // 4, lifecycle_events
        )
        self.admission = Admission(self.api, lambda: self.session, self.keys)
        #: node → MiB per unit of horus.io/gpu-memory (refreshed every pass; 1 if unset)
        self.node_units: dict[str, int] = {}
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
        #: The DRA path: replicas as ResourceClaims the kube-scheduler allocates.
        self.claim_path = (
            ClaimPath(self.api, self.writer) if placement_path == c.PLACEMENT_PATH_DRA else None
        )
        #: The cluster's live state, kept from pass to pass, as this placement path reads it.
        self.live_source: LiveSource = (
            DeltaSource(predictor) if self.claim_path is None else DraSource(self.claim_path)
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
        self.guard = JobGuard(self.writer, self.committer, is_leader)
        self.trust = TrustGate(self.writer, self.pool, self.guard, is_leader)
        self.new_jobs = NewJobs(
            self.api,
            self.admission,
            self.writer,
            self.metrics,
            self.pool,
            self.guard,
            is_leader,
            lambda: self.max_jobs_per_pass,
        )
        self.queue = QueuePhase(
            lambda: self.session,
            self.admission,
            self.writer,
            self.metrics,
            self.pool,
            self.guard,
            is_leader,
            self.live_source.claims_taken,
            lambda: self.max_jobs_per_pass,
        )
        #: Horus as Kueue's AdmissionCheck controller (DRA path only: a slot is a pinned claim).
        self.kueue = (
            KueueCheck(kueue, self.api.configmap_data)
            if kueue is not None and self.claim_path is not None
            else None
        )
        if self.claim_path is not None:  # a job overtaken keeps off those GPUs for a while
            path = self.claim_path
            self.queue.avoided = lambda ctx: path.avoided(ctx.uid)

    # --- setup ---------------------------------------------------------------------------
    @property
    def predictor(self) -> Predictor:
        return self.session.predictor

    @property
    def scheduler(self) -> Scheduler:
        return self.session.scheduler

    @property
    def cleanup_pool(self) -> ThreadPoolExecutor:
        return self.cleanup.pool

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
        self.cleanup.close()
        self.writer.close()

    # --- the pass ------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        t0, report = time.monotonic(), PassReport()
        # 1. List everything; one context per DLJob with its own pods.
        snap, ring, facts, every = self._list(report, t0)
        # 2. Trust: rollbacks distrusted; without a signing key the pass only counts (holds).
        self.trust.distrust_rollbacks(every, ring, snap.claims, by_pod(facts))
        self.metrics.signing_key.set(1 if ring.can_sign else 0)
        if not ring.can_sign:
            return self._hold(snap, every, ring, report, t0)
        self.trust.tell_resumed(every, report)
        restores = self.trust.restore_untrusted(every, report, snap.claims)
        ctxs = {k: x for k, x in every.items() if x.trusted}
        placed_before = [
            x
            for x in ctxs.values()
            if x.status.get("placements") and x.phase not in TERMINAL_PHASES
        ]
        # 3. Leftovers of gone, failed or re-queued jobs: deleted beside the pass.
        deleting = self.cleanup.start(every, facts, snap.claims, report)
        # 4. The live state, from this placement path's source, fed to the session.
        live = self._live_state(snap, ctxs, report)
        report.timings["state"] = time.monotonic() - t0 - report.timings["list"]
        # 4b. Kueue Workloads Horus admitted: their unfilled GPU slots held in the state.
        kueue = self._kueue_count(snap, live)
        # 5. Admission of new jobs (under the per-pass cap), and the restores started above.
        t_admit = time.monotonic()
        self.new_jobs.admit(ctxs, live.state, snap.nodes, snap.slices, report, restores)
        report.timings["admit"] = time.monotonic() - t_admit
        # 6. The queue: refusals, and one decision of the core for the rest.
        queue = self.queue.place(ctxs, live.state, snap.nodes, report)
        # 7. Kueue Workloads waiting for Horus' check decided as gangs; then plain pods'
        #    converted requests (DRA path): a Workload's pods fill its slots, others decided.
        self._convert_pods(snap, live, report, kueue)
        # 8. Commit: placed jobs followed, every write of the pass waited for.
        t_commit = time.monotonic()
        self._follow_placed(placed_before, ctxs, queue, report)
        report.timings["commit"] = time.monotonic() - t_commit
        # 9. Run-time correction: moves and preemptions on the state this pass left.
        self._correct(ctxs, live, queue, report)
        # 10. Metrics; the deletions done by now are counted, the rest finish beside.
        self.metrics.set_queue(queue.by_reason)
        self._set_phases(ctxs)
        self.metrics.set_state_gpus(live.state)
        wait(deleting, timeout=c.LEFTOVER_DELETE_WAIT_SECONDS)
        sweep_all()  # answers about objects this pass no longer saw (deleted) go
        report.seconds = time.monotonic() - t0
        return report

    def _list(
        self, report: PassReport, t0: float
    ) -> tuple[Listing, KeyRing, list[PodFacts], dict[str, JobCtx]]:
        """The pass's listing, the key ring, what the pass reads of each pod, and the job
        contexts; the bind gate and the nodes' memory units of this pass."""
        snap = Listing(self.api.list_pods(), self.api.list_dljobs(), self.api.list_nodes())
        self.live_source.list_more(self.api, snap)
        self.node_units = node_units(snap.nodes)
        self.committer.gate = BindGate(snap.pods, snap.nodes)
        report.timings["list"] = time.monotonic() - t0
        ring = self.keys()
        facts = self._pod_facts.read(snap.pods, ring)
        every = self._contexts(snap, facts)
        uids = {x.uid for x in every.values()}  # what is held of jobs gone is forgotten
        self.admission.retain(uids)
        self.writer.retain(uids)
        return snap, ring, facts, every

    def _contexts(
        self, snap: Listing, facts: Sequence[PodFacts] | None = None
    ) -> dict[str, JobCtx]:
        """One context per DLJob, with its trust and its own replica pods (``facts``: those
        of ``snap.pods``, read anew when not given)."""
        keys = self.keys()
        if facts is None:
            facts = PodFactsCache().read(snap.pods, keys)
        return job_contexts(snap, facts, keys, self._job_facts)

    def _hold(
        self,
        snap: Listing,
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
        self.trust.tell_held(every, ring.why_not, report)
        report.count("held")
        self._set_phases(ctxs)
        self.metrics.set_state_gpus(live.state)
        report.seconds = time.monotonic() - t0
        return report

    def _set_phases(self, ctxs: Mapping[str, JobCtx]) -> None:
        self.metrics.set_phases(
            Counter(str(x.phase or c.DLJOB_PHASE_PENDING) for x in ctxs.values())
        )

    def _live_state(
        self, snap: Listing, ctxs: Mapping[str, JobCtx], report: PassReport
    ) -> LiveState:
        """The cluster as the apiserver holds it (signed records only), fed to the session.
        Its own time is ``timings["live"]`` (a part of the pass's ``state``)."""
        t0 = time.monotonic()
        profiles = {
            k: p for k, x in ctxs.items() if (p := self.admission.known_profile(x.uid)) is not None
        }
        every = {dljob_job_name(*_ns_name(o)) for o in snap.dljobs}
        distrusted = every - set(ctxs)  # unsigned or rolled-back records: pods count instead
        reading = self.live_source.read(snap, self.predictor, self.keys(), profiles, distrusted)
        live, report.live_state = reading.live, reading.how
        # the residents the session has not taken in yet (all of them for a new core)
        residents = reading.fresh if self._observer is self.session.scheduler else None
        self.metrics.live_state_builds.labels(how=report.live_state).inc()
        report.timings["live"] = time.monotonic() - t0
        report.problems.extend(live.problems)
        report.pairs_observed = self.session.observe(live, residents)
        self._observer = self.session.scheduler
        return live

    def _kueue_count(self, snap: Listing, live: LiveState) -> KueueView | None:
        """This pass's Kueue Workloads, the Ready ones' unfilled slots put into ``live``."""
        if self.kueue is None or self.claim_path is None:
            return None
        try:
            view = self.kueue.read(snap.pods)
            self.kueue.count(view, live, self.scheduler, self.claim_path.claims.values(), snap.pods)
        except KueueNotSynced as exc:  # the informer logs why its LIST fails
            log.debug("%s; the Kueue check waits this pass", exc)
            return None
        except Exception:  # Kueue's API failing must not stop DLJobs' placement
            log.exception("cannot read Kueue's Workloads; the Kueue check waits this pass")
            return None
        return view

    def _convert_pods(
        self, snap: Listing, live: LiveState, report: PassReport, kueue: KueueView | None
    ) -> None:
        """Kueue Workloads waiting for Horus' check (:mod:`horus.operator.kueue`), then plain
        pods whose ``horus.io/gpu-*`` requests the admission policy turned into a claim
        reference (:mod:`horus.operator.plain_pod_claims`), on the DRA path only. A pod that
        names a Workload fills a slot of it and is never decided alone; a pod under Kueue's pod
        integration that has its claim loses its placeholder
        (:mod:`horus.operator.placeholder_claims`)."""
        if self.claim_path is None or not self.is_leader():
            return
        plain = snap.pods
        if self.kueue is not None:
            # a Workload's pod waits for its slot even in a pass that could not read Kueue
            plain = [p for p in snap.pods if not is_gang_pod(p)]
            if kueue is not None:
                self.kueue.decide(kueue, live, self.scheduler, report)
                fill_slots(self.api, self.writer, kueue, snap.pods, self.claim_path.claims, report)
        convert_pods(self.api, self.writer, self.claim_path, self.scheduler, plain, live, report)
        replace_placeholders(self.api, snap.pods, self.claim_path.claims, report)

    def _correct(
        self, ctxs: Mapping[str, JobCtx], live: LiveState, queue: QueueOutcome, report: PassReport
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

    def _follow_placed(
        self,
        placed_before: list[JobCtx],
        ctxs: Mapping[str, JobCtx],
        queue: QueueOutcome,
        report: PassReport,
    ) -> None:
        """Finish placed jobs' pods from their record and keep their status in step; wait for
        every write of the pass; then write admissions that got no decision in it."""
        placing = report.placed > 0
        futures = list(queue.futures)
        for ctx in placed_before:
            if not self._settled(ctx):
                futures.append(self.pool.submit(self.guard.follow, ctx, report, placing))
        for f in futures:
            f.result()
        leftovers = [
            self.pool.submit(self.guard.step, self._flush, ctx, report)
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


def _ns_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "default")), str(meta.get("name", ""))
