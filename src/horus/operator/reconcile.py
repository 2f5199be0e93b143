"""One reconcile pass: from the live API objects to validated, predicted, placed and bound jobs.

Why one idempotent pass instead of per-object handlers: placement is a decision about the
*whole* cluster (every GPU, every queued job), and a crash may interrupt it anywhere. So each
pass lists everything, rebuilds the cluster state with :mod:`horus.operator.livestate`, and
moves every DLJob one step forward. Running a pass twice, or after a ``kill -9`` at any
instant, is safe because of the order of writes for one placement:

1. **status first** — ``status.placements`` + phase ``Scheduled`` with a ``resourceVersion``
   precondition. Once this write lands, the shares are committed: the next pass (ours or
   another replica's) counts them, and never places the job again (only ``Queued`` jobs are
   placed, and the precondition makes two writers race-free);
2. **then the pods**, with deterministic names ``<job>-<replica>`` — ``AlreadyExists`` means
   a previous attempt created it;
3. **then the Binding** — "already assigned" means a previous attempt bound it.

A job with placements whose pods are missing or unbound is therefore *finished* from its
record, never re-placed. Status is a JSON merge patch of the fields this operator owns
(``status.observed`` belongs to the node agent).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from horus.api.assignment import (
    GpuAssignment,
    GpuRef,
    PredictedUsage,
    decode_assignment,
    encode_assignment,
    encode_predicted,
)
from horus.api.dljob import (
    ConfigMapProfileRef,
    DLJob,
    InlineProfile,
    parse_dljob,
    parse_profile_document,
)
from horus.api.nodematch import NodeConstraints, constraints_of
from horus.api.raw import discard, read_items, read_object
from horus.api.resources import node_memory_unit_mib, pod_gpu_requests
from horus.api.signing import KeyRing, sign_assignment
from horus.common import constants as c
from horus.common.errors import HorusError, ValidationError
from horus.operator import status as st
from horus.operator.livestate import (
    TERMINAL_POD_PHASES,
    UNKNOWN_KIND,
    build_live_state,
    dljob_job_name,
    dljob_record_trusted,
    graph_profile,
    pod_assignment_trusted,
)
from horus.operator.metrics import OperatorMetrics
from horus.predictor.interface import (
    PAIR_TEACH_HINT,
    GraphProfile,
    Predictor,
    ResourcePrediction,
    pair_extrapolated,
)
from horus.scheduler import (
    ClusterState,
    GpuShare,
    JobRequest,
    Placement,
    Scheduler,
    SchedulerSettings,
    job_kind,
    published_pair_error,
)

log = logging.getLogger(__name__)

COMPONENT = "horus-operator"
TERMINAL_PHASES = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)
#: Pair speed assumed next to a resident whose profile nobody knows (a plain pod without a
#: graph-profile annotation): pessimistic enough that Horus prefers idle GPUs.
UNKNOWN_PAIR_SPEED = 0.6
#: While a pass is placing jobs, a placed job's Scheduled → Running status write (a CRD write,
#: 3-4x a pod write) waits, so placements get the apiserver first; never for longer than this
#: after the job was scheduled.
RUNNING_SYNC_DEFER_SECONDS = 10.0
_MAX_MESSAGE = 1024
#: Seconds a successful server-side dry run of a job's pod template is reused for other jobs
#: with the same template in the same namespace (a burst of copies costs one dry run).
DRY_RUN_CACHE_SECONDS = 300.0
#: A container waiting for one of these reasons makes no progress on its own.
STUCK_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
        "RunContainerError",
    }
)
#: The same per-object error is logged (and posted as an Event) at most this often.
PROBLEM_REPEAT_SECONDS = 300.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ts(value: object) -> float:
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


class Conflict(HorusError):
    """A write lost an optimistic-concurrency race (HTTP 409): retry on the next pass."""


class PodRejected(HorusError):
    """The apiserver refused a replica pod for good (HTTP 4xx other than 409/429)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def quota(self) -> bool:
        """Refused by a ResourceQuota: may pass later, when the namespace's usage drops."""
        return self.status == 403 and "exceeded quota" in str(self)


def api_message(exc: Any) -> str:
    """The apiserver's own sentence from an ``ApiException`` (its Status ``message``)."""
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        body = {}
    msg = body.get("message") if isinstance(body, dict) else None
    return str(msg or exc.reason or f"HTTP {exc.status}")[:_MAX_MESSAGE]


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

    @property
    def meta(self) -> dict[str, Any]:
        m = self.obj.get("metadata")
        return m if isinstance(m, dict) else {}

    @property
    def name(self) -> str:
        return str(self.meta.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace", "default"))

    @property
    def key(self) -> str:
        return dljob_job_name(self.namespace, self.name)

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid", ""))

    @property
    def rv(self) -> str:
        return str(self.meta.get("resourceVersion", ""))

    @property
    def phase(self) -> str | None:
        p = self.status.get("phase")
        return str(p) if p else None


@dataclass
class PassReport:
    """What one pass did (logged, and used by tests)."""

    placed: int = 0
    refused: int = 0
    queued: int = 0
    failed: int = 0
    pods_created: int = 0
    pods_bound: int = 0
    pods_deleted: int = 0
    status_writes: int = 0
    conflicts: int = 0
    #: Scheduled → Running writes held back because this pass was placing jobs
    deferred: int = 0
    #: measured pair speeds handed to the scheduler (DLJobs' status.observed.pairs)
    pairs_observed: int = 0
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, what: str, n: int = 1) -> None:
        """Add ``n`` to counter ``what`` (called from many commit threads at once)."""
        with self._lock:
            setattr(self, what, getattr(self, what) + n)


class Reconciler:
    """Holds the API clients, the scheduler (with its caches) and the signing key."""

    def __init__(
        self,
        api_client: Any,
        predictor: Predictor,
        key: bytes | KeyRing | Callable[[], KeyRing],
        policy: str = "horus",
        workers: int = 16,
        metrics: OperatorMetrics | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        identity: str = COMPONENT,
        scheduler_settings: SchedulerSettings | None = None,
        progress_deadline: float = 300.0,
    ) -> None:
        from kubernetes import client

        self.api = api_client
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.predictor = predictor
        self.key = key
        self.metrics = metrics or OperatorMetrics()
        self.is_leader = is_leader
        self.identity = identity
        self._policy, self._scheduler_settings = policy, scheduler_settings
        self.scheduler = self._new_scheduler(predictor)
        #: One job's commit chain (status → its pods → their Bindings) per task: up to
        #: ``workers`` chains in flight, each in its own order.
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="horus-commit")
        #: A job's replicas after its status write (pod create → Binding per replica). A
        #: separate pool: a chain waits on its replicas, so sharing ``pool`` could deadlock.
        self.replica_pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="horus-replica"
        )
        # Events are best effort and off the critical path (status → pod → binding).
        self.event_pool = ThreadPoolExecutor(
            max_workers=max(2, workers // 4), thread_name_prefix="horus-events"
        )
        #: node → MiB per unit of horus.io/gpu-memory (refreshed every pass; 1 if unset)
        self.node_units: dict[str, int] = {}
        self._kind_profiles: dict[str, GraphProfile] = {}
        self._uid_profiles: dict[str, GraphProfile] = {}
        self.progress_deadline = progress_deadline
        #: (namespace, template digest) → when a server-side dry run of it last passed
        self._dry_run_ok: dict[tuple[str, str], float] = {}
        #: (job, error) → when it was last logged and posted (one line per error per 5 min)
        self._problems_seen: dict[tuple[str, str], float] = {}
        self._problems_lock = threading.Lock()

    def keys(self) -> KeyRing:
        """The assignment key ring now (a :class:`AssignmentKeySource` re-reads it)."""
        k = self.key
        if isinstance(k, bytes):
            return KeyRing(k)
        return k if isinstance(k, KeyRing) else k()

    def _new_scheduler(self, predictor: Predictor) -> Scheduler:
        # The pair-speed wrapper only adds a guess for unknown kinds, so the uncertainty
        # margin stays the predictor's published error (as in the simulator).
        return Scheduler(
            self._policy,
            predictor,
            self._scheduler_settings,
            pair_speed=self._pair_speed,
            pair_error=published_pair_error(predictor),
        )

    def set_predictor(self, predictor: Predictor) -> None:
        """Predict and place with ``predictor`` from the next pass on (a reloaded artifact).

        Call between passes. The scheduler starts afresh (its caches hold the old model's
        answers); measured pair speeds come back from the DLJobs at the next pass, and jobs
        already admitted keep the prediction recorded in their status.
        """
        self.predictor = predictor
        self.scheduler = self._new_scheduler(predictor)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.replica_pool.shutdown(wait=True, cancel_futures=True)
        self.event_pool.shutdown(wait=False, cancel_futures=True)

    # --- pair speeds (known profiles from the predictor, a fixed guess for unknown ones) ----
    def _pair_speed(self, kind: str, other: str, gpu_model: str) -> float:
        a, b = self._kind_profiles.get(kind), self._kind_profiles.get(other)
        if a is None or b is None or not a.features or not b.features:
            return UNKNOWN_PAIR_SPEED
        return self.predictor.pair_speed(a, b, gpu_model)

    def _remember(self, req: JobRequest) -> None:
        if req.kind != UNKNOWN_KIND and req.profile.features:
            self._kind_profiles.setdefault(req.kind, req.profile)

    # --- API helpers ----------------------------------------------------------------------
    def _list(self, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return read_items(call(*args, _preload_content=False, **kwargs))

    def patch_status(self, ctx: JobCtx, fields: Mapping[str, Any], precondition: bool) -> None:
        """Merge-patch owned status fields; with ``precondition`` fail on a stale object."""
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {"status": {**(ctx.pending or {}), **fields}}
        new = body["status"]
        if "phase" in new or "placements" in new:
            # The record's signature covers the phase and placements *after* this patch.
            after = {**ctx.status, **new}
            new[c.STATUS_PLACEMENT_SIGNATURE] = self.keys().sign_placements(
                ctx.namespace, ctx.name, ctx.uid, after.get("phase"), after.get("placements")
            )
        if precondition:
            body["metadata"] = {"resourceVersion": ctx.rv}
        try:
            out = self.custom.patch_namespaced_custom_object_status(
                c.API_GROUP,
                c.API_VERSION,
                ctx.namespace,
                c.DLJOB_PLURAL,
                ctx.name,
                body,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                raise Conflict(
                    f"DLJob {ctx.key} changed or vanished (HTTP {exc.status}); retrying next pass"
                ) from None
            raise
        ctx.obj = out
        ctx.status.update(body["status"])
        ctx.pending = None

    def event(self, ctx: JobCtx, reason: str, message: str, warning: bool = False) -> None:
        """A Kubernetes Event on the DLJob (best effort: an event never blocks a decision)."""
        self.event_pool.submit(
            self._post_event, ctx.name, ctx.namespace, ctx.uid, reason, message, warning
        )

    def _post_event(
        self, name: str, namespace: str, uid: str, reason: str, message: str, warning: bool
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": c.API_GROUP_VERSION,
                "kind": c.DLJOB_KIND,
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity[:128],
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        try:
            discard(self.core.create_namespaced_event(namespace, body, _preload_content=False))
        except ApiException as exc:
            log.warning(
                "could not post event %s on DLJob %s: %s", reason, f"{namespace}/{name}", exc.reason
            )

    # --- the pass -------------------------------------------------------------------------
    def run_pass(self) -> PassReport:
        t0 = time.monotonic()
        report = PassReport()
        # Pods are listed before DLJobs: a pod in this list belongs to a DLJob that existed
        # when it was created, so a DLJob missing from the later list really was deleted.
        pods = self._list(self.core.list_pod_for_all_namespaces)
        dljobs = self._list(
            self.custom.list_cluster_custom_object, c.API_GROUP, c.API_VERSION, c.DLJOB_PLURAL
        )
        nodes = self._list(self.core.list_node)
        self.node_units = _node_units(nodes)
        report.timings["list"] = time.monotonic() - t0
        every = self._contexts(dljobs, pods)
        # A record the operator did not write (no valid placementSignature) takes no part in
        # this pass: it is restored from the job's own pods, or reset so the job is admitted
        # again. Its pods are kept (cleanup sees every job) and counted from their signed
        # assignments, never from the record.
        restores = [
            self.pool.submit(self._guarded, self._restore, x, report)
            for x in every.values()
            if not x.trusted
        ]
        ctxs = {k: x for k, x in every.items() if x.trusted}
        placed_before = [
            x
            for x in ctxs.values()
            if x.status.get("placements") and x.phase not in TERMINAL_PHASES
        ]
        self._cleanup(every, pods, report)
        profiles = {
            k: p for k, x in ctxs.items() if (p := self._uid_profiles.get(x.uid)) is not None
        }
        report.pairs_observed = self._observe_pairs(ctxs)
        live = build_live_state(nodes, pods, dljobs, self.predictor, profiles, self.keys())
        report.problems.extend(live.problems)
        for resident in live.residents.values():
            self._remember(resident.request)
        state = live.state
        max_gpu_mib = _max_gpu_memory(nodes)
        report.timings["state"] = time.monotonic() - t0 - report.timings["list"]
        # New jobs: validate, predict once, enqueue (in parallel: each is its own write).
        t_admit = time.monotonic()
        admitted = [
            self.pool.submit(self._guarded, self._admit, ctx, state, max_gpu_mib, report)
            for ctx in ctxs.values()
            if ctx.phase in (None, c.DLJOB_PHASE_PENDING) and not ctx.status.get("placements")
        ]
        for f in (*restores, *admitted):
            f.result()
        report.timings["admit"] = time.monotonic() - t_admit
        # Place the queue.
        queued = [
            ctx
            for ctx in ctxs.values()
            if ctx.phase == c.DLJOB_PHASE_QUEUED
            and ctx.job is not None
            and not ctx.status.get("placements")
            and not ctx.meta.get("deletionTimestamp")
        ]
        requests: dict[str, JobRequest] = {}
        futures: list[Future[None]] = []
        by_reason: Tally[str] = Tally()
        eligible = _NodeEligibility(nodes, state.node_names)
        for ctx in queued:
            req = self._request(ctx)
            if req is None:
                continue
            self._remember(req)
            assert ctx.job is not None
            allowed, why_none = eligible.allowed(ctx.job.spec.template)
            if allowed is not None and not allowed and state.gpu_count:
                reason = st.refusal_reason("nodes")
                by_reason[reason] += 1
                futures.append(
                    self.pool.submit(self._guarded, self._refused, ctx, reason, why_none, report)
                )
                report.count("refused")
                continue
            if allowed is not None:
                req = dataclasses.replace(req, nodes=allowed)
            # A job that can never fit this cluster must not block the queue behind it.
            never = self.scheduler.check_possible(state, req) if state.gpu_count else None
            if never is not None:
                reason = st.refusal_reason("impossible")
                by_reason[reason] += 1
                futures.append(
                    self.pool.submit(self._guarded, self._refused, ctx, reason, never, report)
                )
                report.count("refused")
                continue
            requests[req.name] = req
        if requests and state.gpu_count and self.is_leader():
            t1 = time.perf_counter()
            result = self.scheduler.schedule(state, list(requests.values()), now=time.time())
            self.metrics.latency.observe(time.perf_counter() - t1)
            report.timings["schedule"] = time.perf_counter() - t1
            for placement in result.placed:
                ctx = ctxs[placement.job]
                self.metrics.decisions.labels(outcome="placed").inc()
                futures.append(self.pool.submit(self._commit_guarded, ctx, placement, report))
                report.count("placed")
            for refusal in result.refused:
                ctx = ctxs[refusal.job]
                reason = st.refusal_reason(refusal.code)
                by_reason[reason] += 1
                message = _stable_refusal(refusal.reason, refusal.code)
                futures.append(
                    self.pool.submit(self._guarded, self._refused, ctx, reason, message, report)
                )
                report.count("refused")
        elif requests:
            reason = "NoGPUNodes"
            for ctx in queued:
                by_reason[reason] += 1
                futures.append(
                    self.pool.submit(
                        self._refused,
                        ctx,
                        reason,
                        "no Ready node offers GPUs (horus.io/gpu-inventory) yet",
                        report,
                    )
                )
        report.queued = len(requests)
        # Placed jobs: finish their pods from the record, keep status in step with the pods.
        placing = report.placed > 0
        for ctx in placed_before:
            futures.append(self.pool.submit(self._follow_guarded, ctx, report, placing))
        t_commit = time.monotonic()
        for f in futures:
            f.result()
        leftovers = [
            self.pool.submit(self._guarded, self._flush, ctx, report)
            for ctx in ctxs.values()
            if ctx.pending is not None
        ]
        for f in leftovers:
            f.result()
        report.timings["commit"] = time.monotonic() - t_commit
        self.metrics.set_queue(by_reason)
        self.metrics.set_phases(Tally(str(x.phase or c.DLJOB_PHASE_PENDING) for x in ctxs.values()))
        self.metrics.set_gpus(state.views())
        report.seconds = time.monotonic() - t0
        return report

    def _observe_pairs(self, ctxs: Mapping[str, JobCtx]) -> int:
        """Hand the scheduler every pair speed node agents measured (``status.observed.pairs``):
        it uses them instead of predicted ones. Jobs whose profile is not known here yet (a
        ConfigMap profile not read since this process started) are skipped until it is."""
        n = 0
        for ctx in ctxs.values():
            job = ctx.job
            observed = job.status.observed if job is not None else None
            if job is None or observed is None or not observed.pairs:
                continue
            profile = self._uid_profiles.get(ctx.uid)
            if profile is None and isinstance(job.spec.profile, InlineProfile):
                profile = self._profile(ctx)  # parses and caches; no API call for inline ones
            if profile is None:
                continue
            kind = job_kind(profile)
            for pair in observed.pairs:
                self.scheduler.observe_pair(kind, pair.other, pair.gpu_model, pair.speed)
                n += 1
        return n

    # --- contexts and cleanup ---------------------------------------------------------------
    def _contexts(
        self, dljobs: list[dict[str, Any]], pods: list[dict[str, Any]]
    ) -> dict[str, JobCtx]:
        keys = self.keys()
        ctxs: dict[str, JobCtx] = {}
        for obj in dljobs:
            raw_status = obj.get("status")
            status: dict[str, Any] = (
                copy.deepcopy(raw_status) if isinstance(raw_status, dict) else {}
            )
            try:
                job: DLJob | None = parse_dljob(obj)
            except ValidationError:
                job = None
            ctx = JobCtx(obj, job, status, trusted=dljob_record_trusted(obj, keys))
            ctxs[ctx.key] = ctx
        by_uid = {x.uid: x for x in ctxs.values()}
        for pod in pods:
            meta = pod.get("metadata") or {}
            owner = _owner_uid(pod)
            if owner is None or owner not in by_uid:
                continue
            view = st.PodView.from_pod(pod)
            if view is not None and not meta.get("deletionTimestamp"):
                by_uid[owner].pods.setdefault(view.replica, pod)
        return ctxs

    def _restore(self, ctx: JobCtx, report: PassReport) -> None:
        """Put back the truth of a job whose phase or placements someone else wrote.

        The job's own pods with signed assignments say where it runs: the record is rebuilt
        from them and the phase from their states. Without any such pod a job that is not
        finished is reset (no phase, no placements), so it is admitted and placed again. A
        finished job without pods holds nothing and is left alone.
        """
        if not self.is_leader():
            return
        keys = self.keys()
        pods = {
            r: p
            for r, p in ctx.pods.items()
            if c.ANNOTATION_GPU_ASSIGNMENT in ((p.get("metadata") or {}).get("annotations") or {})
            and pod_assignment_trusted(p, keys)
        }
        live = [
            p
            for p in pods.values()
            if (p.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
        ]
        if not live and ctx.phase in TERMINAL_PHASES:
            return
        records: list[dict[str, Any]] = []
        for replica, pod in sorted(pods.items()):
            meta = pod.get("metadata") or {}
            try:
                a = decode_assignment(str(meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]))
            except (ValidationError, KeyError):
                continue
            records += [_record(replica, str(meta.get("name")), a.node, g) for g in a.all_gpus]
        now = now_rfc3339()
        if records and live:
            replicas = ctx.job.spec.replicas if ctx.job is not None else len(pods)
            views = [v for p in pods.values() if (v := st.PodView.from_pod(p)) is not None]
            phase = st.progress(replicas, views, None).phase
            message = (
                f"status.phase/placements were not written by the operator (no valid "
                f"{c.STATUS_PLACEMENT_SIGNATURE}); restored from the job's {len(pods)} pod(s)"
            )
            fields: dict[str, Any] = {"phase": phase, "placements": records}
        else:
            phase = None
            message = (
                f"status.phase/placements were not written by the operator (no valid "
                f"{c.STATUS_PLACEMENT_SIGNATURE}) and the job has no pods: reset, it is "
                "admitted and placed again"
            )
            fields = {"phase": None, "placements": None, "scheduledTime": None}
        fields.update(
            reason="StatusRestored",
            message=message,
            conditions=st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "True" if phase else "False",
                "StatusRestored",
                message,
                now,
            ),
        )
        log.warning("DLJob %s: %s", ctx.key, message)
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        self.event(ctx, "StatusRestored", message, warning=True)

    def _cleanup(
        self, ctxs: dict[str, JobCtx], pods: list[dict[str, Any]], report: PassReport
    ) -> None:
        """Delete pods whose DLJob is gone, and still-running pods of a Failed job."""
        if not self.is_leader():
            return
        uids = {x.uid: x for x in ctxs.values()}
        doomed: list[tuple[str, str]] = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            if c.LABEL_DLJOB_NAME not in labels or meta.get("deletionTimestamp"):
                continue
            owner = _owner_uid(pod)
            if owner is None:
                continue
            ctx = uids.get(owner)
            phase = (pod.get("status") or {}).get("phase")
            if ctx is None or (
                ctx.trusted
                and ctx.phase == c.DLJOB_PHASE_FAILED
                and phase not in TERMINAL_POD_PHASES
            ):
                doomed.append((str(meta.get("namespace")), str(meta.get("name"))))
        for ns, name in doomed:
            self._delete_pod(ns, name)
            report.count("pods_deleted")

    def _delete_pod(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            # The pod's own grace period: its GPU is not free until its containers stopped.
            discard(self.core.delete_namespaced_pod(name, namespace, _preload_content=False))
            log.info("deleted pod %s/%s (its DLJob is gone or failed)", namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete pod %s/%s: %s", namespace, name, exc.reason)

    # --- admission: validate, resolve the profile, predict, enqueue --------------------------
    def _profile(self, ctx: JobCtx) -> GraphProfile:
        assert ctx.job is not None
        hit = self._uid_profiles.get(ctx.uid)
        if hit is not None:
            return hit
        source = ctx.job.spec.profile
        if isinstance(source, InlineProfile):
            profile = graph_profile(source)
        else:
            profile = graph_profile(self._configmap_profile(ctx.namespace, source))
        self._uid_profiles[ctx.uid] = profile
        return profile

    def _configmap_profile(self, namespace: str, ref: ConfigMapProfileRef) -> InlineProfile:
        from kubernetes.client.exceptions import ApiException

        where = f"configmap {namespace}/{ref.name}[{ref.key}]"
        try:
            cm = self.core.read_namespaced_config_map(ref.name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise ProfileUnavailable(
                    f"ConfigMap {namespace}/{ref.name} (spec.profile.configMapRef) does not "
                    "exist; create it with `kubectl create configmap ... "
                    "--from-file=profile.yaml=<horus profile output>`"
                ) from None
            raise ProfileUnavailable(
                f"cannot read ConfigMap {namespace}/{ref.name}: HTTP {exc.status} {exc.reason}"
            ) from None
        text = (cm.data or {}).get(ref.key)
        if text is None:
            keys = ", ".join(sorted(cm.data or {})) or "none"
            raise ProfileUnavailable(
                f"ConfigMap {namespace}/{ref.name} has no key {ref.key!r} (keys: {keys})"
            )
        return parse_profile_document(text, where)

    def _admit(
        self, ctx: JobCtx, state: ClusterState, max_gpu_mib: int | None, report: PassReport
    ) -> None:
        if not self.is_leader() or ctx.meta.get("deletionTimestamp"):
            return
        now = now_rfc3339()
        gen = int(ctx.meta.get("generation") or 0) or None
        try:
            try:
                job = parse_dljob(ctx.obj)
            except ValidationError as exc:
                self._fail(ctx, "InvalidSpec", f"invalid DLJob: {exc}", report)
                return
            try:
                profile = self._profile(ctx)
            except ProfileUnavailable as exc:
                self._pending(ctx, "ProfileUnavailable", str(exc), report)
                return
            except ValidationError as exc:
                self._fail(ctx, "InvalidProfile", f"invalid graph profile: {exc}", report)
                return
            model = _main_model(state)
            try:
                pred = self.predictor.predict(profile, model)
            except (ValidationError, ValueError, KeyError) as exc:
                self._fail(ctx, "PredictionFailed", f"cannot predict on {model}: {exc}", report)
                return
            need_mib = job.spec.gpu.memory_mib or pred.memory_mib_upper
            if max_gpu_mib is not None and need_mib > max_gpu_mib:
                why = "requests" if job.spec.gpu.memory_mib else "is predicted to need"
                self._fail(
                    ctx,
                    "NeverFits",
                    f"each replica {why} {need_mib:.0f} MiB of GPU memory but the largest GPU "
                    f"in the cluster has {max_gpu_mib} MiB",
                    report,
                )
                return
            predicted = PredictedUsage(
                util_mean=round(min(100.0, max(0.0, pred.util_mean)), 3),
                util_upper=round(min(100.0, max(pred.util_mean, pred.util_upper)), 3),
                memory_mib_mean=round(max(0.0, pred.memory_mib_mean), 1),
                memory_mib_upper=round(max(pred.memory_mib_mean, pred.memory_mib_upper), 1),
                model_version=pred.model_version or self.predictor.version,
                low_confidence=pred.low_confidence,
                quantile=pred.quantile,
                pair_low_confidence=pair_extrapolated(self.predictor, model),
            )
            message = (
                f"predicted {predicted.util_mean:.0f}% GPU util, "
                f"{predicted.memory_mib_upper:.0f} MiB (on {model}); waiting for GPUs"
            )
            if predicted.pair_low_confidence:
                message += f" (sharing slowdowns on {model} are extrapolated; {PAIR_TEACH_HINT})"
            if not self._template_accepted(ctx, report):
                return
            conditions = st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "False",
                "Queued",
                message,
                now,
                gen,
            )
            short = _share_shortfall(job, predicted)
            if short is not None:
                conditions = st.set_condition(
                    conditions,
                    st.COND_SHARE_SUFFICIENT,
                    "False",
                    "MemoryBelowPrediction",
                    short,
                    now,
                )
                self.event(ctx, "ShareBelowPrediction", short, warning=True)
            fields: dict[str, Any] = {
                "phase": c.DLJOB_PHASE_QUEUED,
                "reason": "Queued",
                "message": message,
                "predicted": predicted.to_json(),
                "queuedTime": now,
                "conditions": conditions,
            }
            if gen is not None:
                fields["observedGeneration"] = gen
            # Not written yet: the decision of this pass carries it (one write per job).
            ctx.pending = fields
            ctx.status.update(fields)
            try:
                ctx.job = parse_dljob({**ctx.obj, "status": ctx.status})  # with predicted
            except ValidationError:
                ctx.job = job
        except Conflict as exc:
            report.count("conflicts")
            log.debug("%s", exc)

    def _template_accepted(self, ctx: JobCtx, report: PassReport) -> bool:
        """Whether the apiserver would create the job's first pod (a server-side dry run,
        with every admission plugin), asked *before* any GPU share is committed. A template
        it refuses (a bad container name or label, a missing PriorityClass) ends the job
        ``Failed/InvalidSpec`` with the apiserver's own sentence; a quota refusal leaves it
        Pending until the namespace has room. One dry run serves every job with the same
        template in the namespace for :data:`DRY_RUN_CACHE_SECONDS`."""
        template = (ctx.obj.get("spec") or {}).get("template") or {}
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
        key = (ctx.namespace, digest)
        now = time.monotonic()
        if now - self._dry_run_ok.get(key, -DRY_RUN_CACHE_SECONDS) < DRY_RUN_CACHE_SECONDS:
            return True
        record = {"replica": 0, "node": "dry-run", "gpuUUID": "GPU-dry-run", "gpuIndex": 0}
        manifest = self.pod_manifest(ctx, 0, [{**record, "corePercent": 1, "memoryMiB": 1}])
        try:
            self._create_pod(ctx.namespace, manifest, dry_run=True)
        except PodRejected as exc:
            if exc.quota:
                self._pending(ctx, "PodQuotaExceeded", f"replica pod refused: {exc}", report)
            else:
                self._fail(
                    ctx,
                    "InvalidSpec",
                    f"the apiserver would not create its pods: {exc} (fix spec.template and "
                    "create the DLJob again)",
                    report,
                )
            return False
        if len(self._dry_run_ok) > 4096:
            self._dry_run_ok.clear()
        self._dry_run_ok[key] = now
        return True

    def _flush(self, ctx: JobCtx, report: PassReport) -> None:
        """Write an admission that got no decision in this pass (e.g. leadership lapsed)."""
        if ctx.pending is None or not self.is_leader():
            return
        self.patch_status(ctx, {}, precondition=True)
        report.count("status_writes")

    def _fail(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        now = now_rfc3339()
        fields = {
            "phase": c.DLJOB_PHASE_FAILED,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "completionTime": now,
            "conditions": st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_FINISHED,
                "True",
                reason,
                message,
                now,
            ),
        }
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        report.count("failed")
        self.metrics.failures.labels(reason=reason).inc()
        self.event(ctx, reason, message, warning=True)

    def _pending(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        if ctx.status.get("reason") == reason and ctx.status.get("message") == message:
            return
        now = now_rfc3339()
        fields = {
            "phase": c.DLJOB_PHASE_PENDING,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "conditions": st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "False",
                reason,
                message,
                now,
            ),
        }
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        self.event(ctx, reason, message, warning=True)

    # --- queue → requests -------------------------------------------------------------------
    def _request(self, ctx: JobCtx) -> JobRequest | None:
        assert ctx.job is not None
        spec = ctx.job.spec
        try:
            profile = self._profile(ctx)
        except (ProfileUnavailable, ValidationError) as exc:
            log.warning("DLJob %s: profile unavailable while queued: %s", ctx.key, exc)
            return None
        pred = ctx.job.status.predicted
        prediction = (
            ResourcePrediction(
                pred.util_mean,
                pred.util_upper,
                pred.memory_mib_mean,
                pred.memory_mib_upper,
                pred.quantile if pred.quantile is not None else 0.9,
                pred.low_confidence,
                pred.model_version,
            )
            if pred is not None
            else None
        )
        return JobRequest(
            name=ctx.key,
            profile=profile,
            replicas=spec.replicas,
            gpus_per_replica=spec.gpus_per_replica,
            core_percent=spec.gpu.core_percent if spec.gpu.explicit else None,
            memory_mib=spec.gpu.memory_mib if spec.gpu.explicit else None,
            priority=spec.priority,
            submit_time=_ts(ctx.meta.get("creationTimestamp")),
            prediction=prediction,
        )

    def _refused(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        cond = st.condition(ctx.status.get("conditions") or [], st.COND_SCHEDULED) or {}
        if (
            ctx.pending is None
            and cond.get("reason") == reason
            and ctx.status.get("message") == message
        ):
            return
        if not self.is_leader():
            return
        self.metrics.decisions.labels(outcome=reason).inc()
        now = now_rfc3339()
        fields = {
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "conditions": st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "False",
                reason,
                message,
                now,
                int(ctx.meta.get("generation") or 0) or None,
            ),
        }
        try:
            self.patch_status(ctx, fields, precondition=True)
        except Conflict:
            report.count("conflicts")
            return
        report.count("status_writes")
        if cond.get("reason") != reason:  # events only when the reason changes: no storms
            self.event(ctx, reason, message, warning=True)

    # --- committing a placement ---------------------------------------------------------------
    def _guarded(self, fn: Callable[..., None], ctx: JobCtx, *args: Any) -> None:
        """Run one job's step; an API error for one job must not stop the others."""
        try:
            fn(ctx, *args)
        except Conflict as exc:
            log.debug("%s", exc)
        except Exception as exc:
            self._problem(ctx, f"{fn.__name__.strip('_')} failed", exc)

    def _problem(self, ctx: JobCtx, what: str, exc: BaseException) -> None:
        """One job's unexpected error: logged (with its traceback the first time) and posted
        as a Warning Event on the job — each distinct error at most every 5 minutes, so one
        poisoned object never floods the log or the Events while the loop goes on."""
        text = f"{what}: {type(exc).__name__}: {exc}"[:_MAX_MESSAGE]
        key = (ctx.key, text)
        now = time.monotonic()
        with self._problems_lock:
            last = self._problems_seen.get(key)
            if last is not None and now - last < PROBLEM_REPEAT_SECONDS:
                return
            first = last is None
            if len(self._problems_seen) > 10_000:
                self._problems_seen.clear()
            self._problems_seen[key] = now
        log.error("DLJob %s: %s; retrying next pass", ctx.key, text, exc_info=first)
        self.event(ctx, "ReconcileError", f"{text} (retrying every pass)", warning=True)

    def _commit_guarded(self, ctx: JobCtx, placement: Placement, report: PassReport) -> None:
        try:
            self._commit(ctx, placement, report)
        except Conflict as exc:
            report.count("conflicts")
            log.info("%s", exc)
        except PodRejected as exc:
            self._pod_rejected(ctx, exc, report)
        except Exception as exc:  # a bug or API outage for one job must not stop the others
            self._problem(ctx, "committing its placement failed", exc)
            report.problems.append(f"commit of {ctx.key} failed")

    def _commit(self, ctx: JobCtx, placement: Placement, report: PassReport) -> None:
        if not self.is_leader():
            return
        t0 = time.perf_counter()
        now = now_rfc3339()
        records: list[dict[str, Any]] = []
        where: list[str] = []
        for r in placement.replicas:
            pod = pod_name(ctx.name, r.replica)
            records += [_record(r.replica, pod, g.node, g) for g in r.gpus]
            first = r.gpus[0]
            where.append(
                f"replica {r.replica} → {r.node}/gpu-{first.gpu_index}"
                + (f" (+{len(r.gpus) - 1} GPUs)" if len(r.gpus) > 1 else "")
                + f" ({first.core_percent}% core, {first.memory_mib} MiB)"
            )
        message = (
            f"placed by policy {placement.policy}: {'; '.join(where[:8])}"
            + (f"; … {len(where) - 8} more" if len(where) > 8 else "")
            + f"; predicted speed {placement.predicted_speed:.2f}"
        )
        fields = {
            "phase": c.DLJOB_PHASE_SCHEDULED,
            "reason": "Placed",
            "message": message[:_MAX_MESSAGE],
            "placements": records,
            "scheduledTime": now,
            "conditions": st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "True",
                "Placed",
                message,
                now,
                int(ctx.meta.get("generation") or 0) or None,
            ),
        }
        # 1. the durable record (fails with Conflict if the job changed since we read it)
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        self.event(ctx, "Scheduled", message)
        # 2. + 3. pods and bindings
        self._ensure_pods(ctx, report)
        self.metrics.commit_latency.observe(time.perf_counter() - t0)

    def _follow_guarded(self, ctx: JobCtx, report: PassReport, placing: bool = False) -> None:
        try:
            if ctx.phase == c.DLJOB_PHASE_SCHEDULED and self.is_leader():
                error: Exception | None = None
                try:
                    self._ensure_pods(ctx, report)
                except (Conflict, PodRejected):
                    raise
                except Exception as exc:  # e.g. the apiserver is down: the deadline still runs
                    error = exc
                if self._past_deadline(ctx, report):
                    return
                if error is not None:
                    raise error
            self._sync_status(ctx, report, placing)
        except Conflict as exc:
            report.count("conflicts")
            log.debug("%s", exc)
        except PodRejected as exc:
            self._pod_rejected(ctx, exc, report)
        except Exception as exc:
            self._problem(ctx, "following its pods failed", exc)
            report.problems.append(f"follow of {ctx.key} failed")

    def _pod_rejected(self, ctx: JobCtx, exc: PodRejected, report: PassReport) -> None:
        """The apiserver will not take a replica pod: give the GPU share back.

        A quota refusal may pass later, so a job without pods goes back to the queue (its
        share freed meanwhile); anything else is the template's fault and the job fails with
        the apiserver's sentence (its other pods are then deleted).
        """
        if exc.quota and not ctx.pods:
            self._requeue(ctx, "PodQuotaExceeded", f"replica pod refused: {exc}", report)
            return
        self._fail(ctx, "InvalidSpec", f"the apiserver refused a replica pod: {exc}", report)

    def _requeue(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        """Back to the queue without placements (only for a job that has no pod)."""
        now = now_rfc3339()
        fields = {
            "phase": c.DLJOB_PHASE_QUEUED,
            "placements": None,
            "scheduledTime": None,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "conditions": st.set_condition(
                ctx.status.get("conditions") or [],
                st.COND_SCHEDULED,
                "False",
                reason,
                message,
                now,
            ),
        }
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        self.event(ctx, reason, f"{message}; its GPU share is given back", warning=True)

    def _past_deadline(self, ctx: JobCtx, report: PassReport) -> bool:
        """A placed job that has not started within ``progress_deadline`` gives its share
        back: requeued when none of its pods exists, failed when a replica cannot start.
        True when it did (nothing more to do for the job in this pass)."""
        waited = time.time() - _ts(ctx.status.get("scheduledTime"))
        if not ctx.status.get("scheduledTime") or waited < self.progress_deadline:
            return False
        stuck = _stuck_container(ctx.pods.values())
        if stuck is not None:
            self._fail(ctx, "ReplicaStuck", stuck, report)
            return True
        replicas = {int(r["replica"]) for r in ctx.status.get("placements") or []}
        unbound = [
            r
            for r in sorted(replicas)
            if not ((ctx.pods.get(r) or {}).get("spec") or {}).get("nodeName")
        ]
        if not unbound:
            return False
        why = (
            f"replica pod(s) {', '.join(map(str, unbound[:8]))} not created and bound "
            f"{waited:.0f} s after placement (progress deadline {self.progress_deadline:.0f} s)"
        )
        if not ctx.pods:
            self._requeue(ctx, "ProgressDeadlineExceeded", why, report)
        else:
            self._fail(ctx, "ProgressDeadlineExceeded", why, report)
        return True

    def _ensure_pods(self, ctx: JobCtx, report: PassReport) -> None:
        """Create and bind every replica pod from ``status.placements`` (idempotent).

        Replicas are independent of each other (each has its own record in the status that
        was written first), so they go out concurrently; each replica keeps its own order,
        pod create → Binding. The first error is re-raised after every replica has finished,
        so the pass sees the job as not done and the next pass finishes it from the record.
        """
        by_replica: dict[int, list[dict[str, Any]]] = {}
        for rec in ctx.status.get("placements") or []:
            by_replica.setdefault(int(rec["replica"]), []).append(rec)
        items = sorted(by_replica.items())
        if len(items) <= 1:
            for replica, recs in items:
                self._ensure_replica(ctx, replica, recs, report)
            return
        futures = [
            self.replica_pool.submit(self._ensure_replica, ctx, replica, recs, report)
            for replica, recs in items
        ]
        first: BaseException | None = None
        for f in futures:
            exc = f.exception()
            if exc is not None and first is None:
                first = exc
        if first is not None:
            raise first

    def _ensure_replica(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], report: PassReport
    ) -> None:
        """One replica: create its pod (if missing), then bind it to its recorded node."""
        if not self.is_leader():
            return
        pod = ctx.pods.get(replica)
        node = str(recs[0]["node"])
        name = pod_name(ctx.name, replica)
        if pod is None:
            manifest = self.pod_manifest(ctx, replica, recs)
            created = self._create_pod(ctx.namespace, manifest)
            if created is not None:
                report.count("pods_created")
                pod = created
            else:  # AlreadyExists: a previous attempt made it; read it back
                pod = self._read_pod(ctx.namespace, name)
                if pod is None:
                    return
            ctx.pods[replica] = pod
        if _owner_uid(pod) != ctx.uid:
            log.warning(
                "pod %s/%s belongs to an older DLJob of the same name; deleting it",
                ctx.namespace,
                name,
            )
            self._delete_pod(ctx.namespace, name)
            ctx.pods.pop(replica, None)
            return
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound == node:
            return
        if bound:
            log.warning(
                "pod %s/%s is bound to %s, not its assigned node %s; deleting it to redo",
                ctx.namespace,
                name,
                bound,
                node,
            )
            self._delete_pod(ctx.namespace, name)
            ctx.pods.pop(replica, None)
            return
        if not self.is_leader():  # lost the lease between create and bind: the next leader binds
            return
        if self._bind(ctx.namespace, name, node):
            report.count("pods_bound")
        pod.setdefault("spec", {})["nodeName"] = node

    def pod_manifest(self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]]) -> dict[str, Any]:
        """The replica pod: template + owner, scheduler name, GPU resources, annotations."""
        spec_raw = ctx.obj.get("spec") or {}
        template = copy.deepcopy(spec_raw.get("template") or {})
        meta = template.get("metadata") or {}
        pspec = template.get("spec") or {}
        name = pod_name(ctx.name, replica)
        first = recs[0]
        gpus = tuple(
            GpuRef(
                str(r["gpuUUID"]), int(r["gpuIndex"]), int(r["corePercent"]), int(r["memoryMiB"])
            )
            for r in recs
        )
        assignment = GpuAssignment(
            node=str(first["node"]),
            gpu_uuid=gpus[0].gpu_uuid,
            gpu_index=gpus[0].gpu_index,
            core_percent=gpus[0].core_percent,
            memory_mib=gpus[0].memory_mib,
            job=ctx.name,
            replica=replica,
            gpus=gpus if len(gpus) > 1 else (),
        )
        text = encode_assignment(assignment)
        annotations = dict(meta.get("annotations") or {})
        annotations[c.ANNOTATION_GPU_ASSIGNMENT] = text
        annotations[c.ANNOTATION_ASSIGNMENT_SIGNATURE] = sign_assignment(
            self.keys().current, ctx.namespace, name, text
        )
        predicted = ctx.status.get("predicted")
        if isinstance(predicted, dict):
            try:
                from horus.api.assignment import parse_predicted

                annotations[c.ANNOTATION_PREDICTED] = encode_predicted(parse_predicted(predicted))
            except ValidationError:
                pass
        labels = dict(meta.get("labels") or {})
        labels[c.LABEL_DLJOB_NAME] = ctx.name
        labels[c.LABEL_REPLICA_INDEX] = str(replica)
        pspec["schedulerName"] = c.SCHEDULER_NAME
        pspec.setdefault("restartPolicy", "Never")
        pspec.pop("nodeName", None)
        # Quantities in the chosen node's gpu-memory unit (docs/decisions.md, device plugin).
        wanted = pod_gpu_requests(assignment, self.node_units.get(assignment.node, 1))
        containers = pspec.get("containers") or []
        if containers:
            res = containers[0].setdefault("resources", {})
            for kind in ("requests", "limits"):
                res.setdefault(kind, {})
                for resource, amount in wanted.items():
                    res[kind][resource] = str(amount)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ctx.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": c.API_GROUP_VERSION,
                        "kind": c.DLJOB_KIND,
                        "name": ctx.name,
                        "uid": ctx.uid,
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": pspec,
        }

    def _create_pod(
        self, namespace: str, manifest: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any] | None:
        """Create a pod (None: it exists already). A refusal for good is :class:`PodRejected`."""
        from kubernetes.client.exceptions import ApiException

        extra = {"dry_run": "All"} if dry_run else {}
        try:
            resp = self.core.create_namespaced_pod(
                namespace, manifest, _preload_content=False, **extra
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                raise PodRejected(exc.status, api_message(exc)) from None
            raise
        except (ValueError, TypeError) as exc:  # the client could not even encode it
            raise PodRejected(400, f"not a valid pod: {exc}") from None
        return read_object(resp)

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def _bind(self, namespace: str, name: str, node: str) -> bool:
        """Bind; False when a previous attempt already did (HTTP 409 "already assigned")."""
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            discard(self.core.create_namespaced_binding(namespace, body, _preload_content=False))
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 404:
                raise Conflict(f"pod {namespace}/{name} vanished before binding") from None
            raise
        return True

    # --- status in step with pods ---------------------------------------------------------
    def _sync_status(self, ctx: JobCtx, report: PassReport, placing: bool = False) -> None:
        replicas = (
            ctx.job.spec.replicas
            if ctx.job is not None
            else len({int(r["replica"]) for r in ctx.status.get("placements") or []})
        )
        views = [v for p in ctx.pods.values() if (v := st.PodView.from_pod(p)) is not None]
        prog = st.progress(replicas, views, ctx.phase)
        if prog.phase == ctx.phase:
            return
        if not self.is_leader():
            return
        if (
            placing
            and prog.phase == c.DLJOB_PHASE_RUNNING
            and time.time() - _ts(ctx.status.get("scheduledTime")) < RUNNING_SYNC_DEFER_SECONDS
        ):
            report.count("deferred")  # the next pass writes it (the controller nudges one)
            return
        now = now_rfc3339()
        conds = ctx.status.get("conditions") or []
        fields: dict[str, Any] = {
            "phase": prog.phase,
            "reason": prog.reason,
            "message": prog.message,
        }
        if prog.phase == c.DLJOB_PHASE_RUNNING:
            fields["startTime"] = ctx.status.get("startTime") or now
            conds = st.set_condition(conds, st.COND_RUNNING, "True", prog.reason, prog.message, now)
        elif prog.phase in TERMINAL_PHASES:
            fields["completionTime"] = now
            conds = st.set_condition(
                conds, st.COND_RUNNING, "False", prog.reason, prog.message, now
            )
            conds = st.set_condition(
                conds, st.COND_FINISHED, "True", prog.reason, prog.message, now
            )
        else:
            return  # Scheduled → Scheduled with another count: not worth a write
        fields["conditions"] = conds
        self.patch_status(ctx, fields, precondition=True)
        report.count("status_writes")
        if prog.phase == c.DLJOB_PHASE_FAILED:
            self.metrics.failures.labels(reason=prog.reason).inc()
            self.event(ctx, prog.reason, prog.message, warning=True)
            for pod in ctx.pods.values():
                if (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES:
                    meta = pod.get("metadata") or {}
                    self._delete_pod(ctx.namespace, str(meta.get("name")))
        else:
            self.event(ctx, prog.phase, prog.message)


class ProfileUnavailable(HorusError):
    """The job's profile ConfigMap is missing or unreadable (may appear later: stay Pending)."""


def _share_shortfall(job: DLJob, predicted: PredictedUsage) -> str | None:
    """A warning when an explicit memory share is below what the job is predicted to use:
    the agent's memory watchdog would stop it soon after it starts."""
    mib = job.spec.gpu.memory_mib
    if not job.spec.gpu.explicit or mib is None or mib >= predicted.memory_mib_mean:
        return None
    return (
        f"spec.gpu.memoryMiB {mib} is below the predicted peak memory "
        f"{predicted.memory_mib_mean:.0f} MiB (upper bound {predicted.memory_mib_upper:.0f} MiB): "
        "the memory watchdog stops a replica that uses more than its share; raise memoryMiB or "
        "use mode auto"
    )


def _stuck_container(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """Why a replica cannot start on its own (a container waiting for a reason in
    :data:`STUCK_WAITING_REASONS`), or None."""
    for pod in pods:
        status = pod.get("status") or {}
        for cs in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING_REASONS:
                name = (pod.get("metadata") or {}).get("name")
                return (
                    f"pod {name} container {cs.get('name')} is stuck in {waiting['reason']}: "
                    f"{waiting.get('message') or 'no message'}"
                )[:_MAX_MESSAGE]
    return None


def _record(replica: int, pod: str, node: str, gpu: GpuRef | GpuShare) -> dict[str, Any]:
    """One ``status.placements`` entry: replica ``replica`` (pod ``pod``) on one GPU."""
    return {
        "replica": replica,
        "pod": pod,
        "node": node,
        "gpuUUID": gpu.gpu_uuid,
        "gpuIndex": gpu.gpu_index,
        "corePercent": gpu.core_percent,
        "memoryMiB": gpu.memory_mib,
    }


def pod_name(job: str, replica: int) -> str:
    """The deterministic name of replica ``replica`` of DLJob ``job``."""
    return f"{job}-{replica}"


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == c.DLJOB_KIND and ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _main_model(state: ClusterState) -> str:
    """The GPU model predictions are made for: the cluster's most common one."""
    if not state.gpu_model:
        return "H100"
    counts = Tally(state.gpu_model)
    return counts.most_common(1)[0][0]


def _max_gpu_memory(nodes: list[dict[str, Any]]) -> int | None:
    """The largest GPU of any inventory node (Ready or not); None when there is none."""
    from horus.api.inventory import decode_inventory

    best: int | None = None
    for node in nodes:
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(
            c.ANNOTATION_GPU_INVENTORY
        )
        if not text:
            continue
        try:
            for gpu in decode_inventory(text):
                best = max(best or 0, gpu.memory_mib)
        except ValidationError:
            continue
    return best


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


class _NodeEligibility:
    """Which GPU nodes each pod template allows (``horus.api.nodematch``), once per distinct
    set of constraints in a pass: most jobs share one (none at all)."""

    def __init__(self, nodes: list[dict[str, Any]], gpu_nodes: list[str]) -> None:
        wanted = set(gpu_nodes)
        self._nodes = [n for n in nodes if (n.get("metadata") or {}).get("name") in wanted]
        self._all = frozenset(wanted)
        self._cache: dict[NodeConstraints, tuple[frozenset[str] | None, str]] = {}

    def allowed(self, template: Mapping[str, Any]) -> tuple[frozenset[str] | None, str]:
        """(the nodes allowed, or None for all of them; why none is, when none is)."""
        constraints = constraints_of(template)
        hit = self._cache.get(constraints)
        if hit is None:
            hit = self._compute(constraints)
            self._cache[constraints] = hit
        return hit

    def _compute(self, constraints: NodeConstraints) -> tuple[frozenset[str] | None, str]:
        ok: set[str] = set()
        why: Tally[str] = Tally()
        for node in self._nodes:
            reason = constraints.why_not(node)
            if reason is None:
                ok.add(str(node["metadata"]["name"]))
            else:
                why[reason] += 1
        if ok == self._all:
            return None, ""
        parts = [f"{n} node{'s' if n > 1 else ''}: {r}" for r, n in why.most_common(4)]
        message = (
            f"no GPU node allows the pod template ({'; '.join(parts)}); waiting until a node "
            "matches its nodeSelector, node affinity and tolerations"
        )
        return frozenset(ok), message


def _stable_refusal(reason: str, code: str) -> str:
    """The refusal text, without the parts that change every pass (queue positions)."""
    if code == "queued":
        return "waiting in queue: jobs ahead of it do not fit yet (backfill depth reached)"
    return reason
