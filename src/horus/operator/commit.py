"""Committing a placement and following a placed job until it runs, finishes or gives up.

The order of one placement is what makes a crash at any instant safe (the module docstring of
:mod:`horus.operator.reconcile` says why): the signed record first, then one pod per replica
(deterministic names: ``AlreadyExists`` means a previous attempt made it), then its Binding
("already assigned" means a previous attempt bound it). The Binding carries the assignment's
signature, which binds the pod's UID (known only once the pod exists) and the record's epoch;
the apiserver copies it onto the pod in the write that binds it, only if the UID still matches. A placed job whose pods are missing
or unbound is *finished* from its record on every pass, never placed again — unless it cannot
make progress: a pod the apiserver refuses, or nothing started within the progress deadline,
gives the share back (requeued without pods, failed otherwise).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from horus.api.podassignment import read_pod_assignment
from horus.common import constants as c
from horus.common.clock import now_rfc3339, timestamp
from horus.kube.errors import Conflict
from horus.operator import status as st
from horus.operator import transitions as tr
from horus.operator.allocate_order import BindGate
from horus.operator.claim_manifests import use_claim
from horus.operator.claimcommit import REASON_KEPT, ClaimPath, running_pods
from horus.operator.jobapi import JobApi, PodNameTaken, PodRejected, bound_pod
from horus.operator.object_reads import record_epoch
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.podspec import (
    binding_annotations,
    owner_uid,
    placement_record,
    pod_manifest,
    pod_name,
)
from horus.operator.residents import TERMINAL_POD_PHASES
from horus.operator.writer import StatusWriter
from horus.scheduler import Placement

__all__ = ["RUNNING_SYNC_DEFER_SECONDS", "STUCK_WAITING_REASONS", "Committer"]

log = logging.getLogger(__name__)

#: While a pass is placing jobs, a placed job's Scheduled → Running status write (a CRD write,
#: 3-4x a pod write) waits, so placements get the apiserver first; never for longer than this
#: after the job was scheduled.
RUNNING_SYNC_DEFER_SECONDS = 10.0
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


class Committer:
    """Writes placements and keeps placed jobs' pods and phases in step with their record."""

    def __init__(
        self,
        api: JobApi,
        writer: StatusWriter,
        is_leader: Callable[[], bool],
        node_units: Callable[[], Mapping[str, int]],
        replica_pool: ThreadPoolExecutor,
        progress_deadline: float,
        claim_path: ClaimPath | None = None,
    ) -> None:
        self.api = api
        #: The DRA path (``placement_path: dra``): claims and pods for the kube-scheduler
        #: instead of Bindings (:mod:`horus.operator.claimcommit`); None: the device plugin's.
        self.claim_path = claim_path
        self.writer = writer
        self.is_leader = is_leader
        self.node_units = node_units
        self.replica_pool = replica_pool
        self.progress_deadline = progress_deadline
        #: Set by each pass from its listing (:mod:`horus.operator.allocate_order`); None: no gate.
        self.gate: BindGate | None = None

    # --- a new placement -------------------------------------------------------------------
    def commit(self, ctx: JobCtx, placement: Placement, report: PassReport) -> None:
        """The signed record (``Conflict`` if the job changed since it was read), then pods
        and Bindings."""
        if not self.is_leader():
            return
        t0 = time.perf_counter()
        records: list[dict[str, Any]] = []
        where: list[str] = []
        for r in placement.replicas:
            pod = pod_name(ctx.name, r.replica)
            records += [placement_record(r.replica, pod, g.node, g) for g in r.gpus]
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
        self.writer.patch(
            ctx, tr.placed(ctx.status, records, message, now_rfc3339(), ctx.generation)
        )
        report.count("status_writes")
        self.writer.lifecycle(ctx, "Scheduled", message)
        self.ensure_pods(ctx, report)
        self.writer.metrics.commit_latency.observe(time.perf_counter() - t0)

    # --- a placed job ----------------------------------------------------------------------
    def follow(self, ctx: JobCtx, report: PassReport, placing: bool = False) -> None:
        """Finish the job's pods from its record, give up past the deadline, sync its phase."""
        if ctx.phase == c.DLJOB_PHASE_SCHEDULED and self.is_leader():
            if self.claim_path is not None and self._replaced(ctx, self.claim_path, report):
                return
            error: Exception | None = None
            try:
                self.ensure_pods(ctx, report)
            except (Conflict, PodRejected):
                raise
            except Exception as exc:  # e.g. the apiserver is down: the deadline still runs
                error = exc
            if self._past_deadline(ctx, report):
                return
            if error is not None:
                raise error
            self._close_move(ctx, report)
        self.sync_status(ctx, report, placing)

    def _replaced(self, ctx: JobCtx, path: ClaimPath, report: PassReport) -> bool:
        """The DRA path: re-place a decision the kube-scheduler cannot honour (another claim
        overtook it, a recorded GPU turned unhealthy) — only while none of the job's pods
        runs. A job some of whose pods run is kept, its running pods untouched, and told
        (Warning Event, once): its waiting replicas start when their GPU has room."""
        redo = path.why_replace(ctx)
        crossed = path.held_over.get(ctx.key)
        if redo is None and crossed is None:
            return False
        running = running_pods(ctx)
        if redo is not None and not running:
            path.replace(ctx, *redo, report)
            return True
        why = redo[1] if redo is not None else str(crossed)
        self.writer.event_once(
            ctx,
            REASON_KEPT,
            f"{why}; kept, not re-placed: pod(s) {', '.join(running[:8])} run, and nothing "
            "that runs is deleted for another's claim; the waiting replicas start when their "
            "GPU has room",
            warning=True,
        )
        return False

    def _close_move(self, ctx: JobCtx, report: PassReport) -> None:
        """A move is over once none of the job's old pods is left and every replica's pod is
        the recorded one: the GPUs it left stop counting (``status.migration`` goes)."""
        if not ctx.status.get("migration") or ctx.leaving:
            return
        replicas = {int(r["replica"]) for r in ctx.status.get("placements") or []}
        if any(r not in ctx.pods for r in replicas):
            return
        self.writer.patch(ctx, {"migration": None})
        report.count("status_writes")

    def pod_rejected(self, ctx: JobCtx, exc: PodRejected, report: PassReport) -> None:
        """The apiserver will not take a replica pod: give the GPU share back. A refusal that
        may pass later (:attr:`PodRejected.wait_reason`) sends a job without pods back to
        the queue; anything else is the template's fault and the job fails with the
        apiserver's sentence."""
        if exc.wait_reason is not None and not ctx.pods:
            self._requeue(ctx, exc.wait_reason, f"replica pod refused: {exc}", report)
            return
        if isinstance(exc, PodNameTaken):  # other replicas run: the progress deadline decides
            self.writer.problem(ctx, "a replica pod name is taken", exc)
            return
        self.writer.fail(ctx, "InvalidSpec", f"the apiserver refused a replica pod: {exc}", report)

    def _requeue(self, ctx: JobCtx, reason: str, message: str, report: PassReport) -> None:
        self.writer.write(
            ctx,
            tr.requeued(ctx.status, reason, message, now_rfc3339()),
            report,
            (reason, f"{message}; its GPU share is given back", True),
        )

    def _past_deadline(self, ctx: JobCtx, report: PassReport) -> bool:
        """True when the job gave its share back for not starting within the deadline."""
        waited = time.time() - timestamp(ctx.status.get("scheduledTime"))
        if not ctx.status.get("scheduledTime") or waited < self.progress_deadline:
            return False
        stuck = stuck_container(ctx.pods.values())
        if stuck is not None:
            self.writer.fail(ctx, "ReplicaStuck", stuck, report)
            return True
        replicas = sorted({int(r["replica"]) for r in ctx.status.get("placements") or []})
        unbound = [
            r for r in replicas if not ((ctx.pods.get(r) or {}).get("spec") or {}).get("nodeName")
        ]
        if not unbound:
            return False
        why = (
            f"replica pod(s) {', '.join(map(str, unbound[:8]))} not created and bound "
            f"{waited:.0f} s after placement (progress deadline {self.progress_deadline:.0f} s)"
        )
        if self.claim_path is not None:  # the kube-scheduler did not schedule it: place again
            running = running_pods(ctx)
            if running:  # never delete what runs: the waiting replicas wait, the job is told
                self.writer.event_once(
                    ctx,
                    REASON_KEPT,
                    f"{why}; kept, not re-placed: pod(s) {', '.join(running[:8])} run",
                    warning=True,
                )
                return False
            self.claim_path.replace(ctx, "ProgressDeadlineExceeded", why, report)
        elif not ctx.pods:
            self._requeue(ctx, "ProgressDeadlineExceeded", why, report)
        else:
            self.writer.fail(ctx, "ProgressDeadlineExceeded", why, report)
        return True

    def ensure_pods(self, ctx: JobCtx, report: PassReport) -> None:
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
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    def _ensure_replica(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], report: PassReport
    ) -> None:
        """One replica: create its pod (if missing), then bind it to its recorded node."""
        if not self.is_leader():
            return
        if self.claim_path is not None:
            self._ensure_claimed(ctx, replica, recs, report)
            return
        pod = ctx.pods.get(replica) or self._create(ctx, replica, recs, report)
        if pod is None or not self._is_recorded(ctx, replica, recs, pod):
            return
        name, node = pod_name(ctx.name, replica), str(recs[0]["node"])
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound == node or not self.is_leader():  # lost the lease: the next leader binds
            return
        if self.gate is not None and not self.gate.claim(node, pod):
            report.count("binds_deferred")  # a twin on the node awaits Allocate; next pass
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        signed = binding_annotations(pod, record_epoch(ctx.status), self.writer.keys())
        if self.api.bind(ctx.namespace, name, node, uid, signed):
            report.count("pods_bound")
        # The rest of this pass sees the replica bound. ``pod`` belongs to the view (shared
        # with the extender and later passes) and is never changed in place: the view's own
        # copy changes by ``Informer.assume`` in the API's bind, until the watch event.
        ctx.pods[replica] = bound_pod(pod, node, signed)

    def _is_recorded(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], pod: dict[str, Any]
    ) -> bool:
        """Whether ``pod`` is the one the record describes; if not, it goes (if ours) or the
        job waits for its name (:class:`PodNameTaken`)."""
        name, node = pod_name(ctx.name, replica), str(recs[0]["node"])
        bound = (pod.get("spec") or {}).get("nodeName")
        found = _not_the_recorded_pod(pod, ctx.namespace, ctx.uid, recs, bound, node)
        if found is None:
            return True
        why, ours = found
        ctx.pods.pop(replica, None)
        if not ours:  # never adopted, never deleted: the job waits for the name
            raise PodNameTaken(ctx.namespace, name)
        # An older DLJob's pod, or this job's pod on the GPUs a move leaves: it goes (with
        # its grace period: a movable job writes its checkpoint), and the next pass makes
        # the recorded one once the name is free.
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            log.info("pod %s/%s %s; deleting it to redo", ctx.namespace, name, why)
            self.api.delete_pod(ctx.namespace, name, str(meta.get("uid") or ""))
        return False

    def _ensure_claimed(
        self, ctx: JobCtx, replica: int, recs: list[dict[str, Any]], report: PassReport
    ) -> None:
        """The DRA path's replica (:mod:`horus.operator.claimcommit`): an older pod under the
        name goes first (it may hold the older claim), then the claim, then the pod that
        uses it; the kube-scheduler allocates the claim and binds the pod."""
        assert self.claim_path is not None
        pod = ctx.pods.get(replica)
        if pod is not None and not self._is_recorded(ctx, replica, recs, pod):
            return
        claim = self.claim_path.ensure_claim(ctx, replica, recs, report)
        if claim is None or pod is not None or not self.is_leader():
            return
        made = self._create(ctx, replica, recs, report, claim)
        if made is not None:  # read back after AlreadyExists: the recorded pod, or it goes
            self._is_recorded(ctx, replica, recs, made)

    def _create(
        self,
        ctx: JobCtx,
        replica: int,
        recs: list[dict[str, Any]],
        report: PassReport,
        claim: str | None = None,
    ) -> dict[str, Any] | None:
        unit = self.node_units().get(str(recs[0]["node"]), 1)
        predicted = ctx.status.get("predicted")
        manifest = pod_manifest(
            ctx.obj, replica, recs, unit, predicted if isinstance(predicted, dict) else None
        )
        if claim is not None:  # the DRA path: the claim instead of extended resources
            manifest = use_claim(manifest, claim, str(recs[0]["node"]))
        pod = self.api.create_pod(ctx.namespace, manifest)
        if pod is not None:
            report.count("pods_created")
        else:  # AlreadyExists: a previous attempt made it, or an older pod still holds the name
            pod = self.api.read_pod(ctx.namespace, pod_name(ctx.name, replica))
            if pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp"):
                # An older pod still stopping (a move's: on the DRA path its claim is freed
                # once it is terminal, before its object goes) is not this record's pod: its
                # phase (Succeeded after its checkpoint) must not finish the job. The next
                # pass makes the recorded one when the name is free.
                known = {(p.get("metadata") or {}).get("uid") for p in ctx.leaving}
                if pod["metadata"].get("uid") not in known:
                    ctx.leaving.append(pod)
                return None
        if pod is not None:
            ctx.pods[replica] = pod
        return pod

    def settled(self, ctx: JobCtx) -> bool:
        """Whether :meth:`follow` has nothing to do for the job now: it is past ``Scheduled``
        (no pod to finish) and its pods give the phase it has. Pure and cheap, so a pass
        follows only the jobs that are not (at 3,000 running jobs, handing every one to the
        commit pool cost a steady pass 0.3 s of thread hand-offs)."""
        return ctx.phase != c.DLJOB_PHASE_SCHEDULED and self._progress(ctx).phase == ctx.phase

    @staticmethod
    def _progress(ctx: JobCtx) -> st.Progress:
        replicas = (
            ctx.job.spec.replicas
            if ctx.job is not None
            else len({int(r["replica"]) for r in ctx.status.get("placements") or []})
        )
        return st.progress(replicas, ctx.pod_views(), ctx.phase)

    def sync_status(self, ctx: JobCtx, report: PassReport, placing: bool = False) -> None:
        """The phase the pods give the job, written when it changed (Running, or final)."""
        prog = self._progress(ctx)
        if prog.phase == ctx.phase or not self.is_leader():
            return
        if (
            placing
            and prog.phase == c.DLJOB_PHASE_RUNNING
            and time.time() - timestamp(ctx.status.get("scheduledTime"))
            < RUNNING_SYNC_DEFER_SECONDS
        ):
            report.count("deferred")  # the next pass writes it (the controller nudges one)
            return
        patch = tr.progressed(ctx.status, prog, now_rfc3339())
        if patch is None:
            return
        self.writer.patch(ctx, patch)
        report.count("status_writes")
        if prog.phase != c.DLJOB_PHASE_FAILED:
            self.writer.lifecycle(ctx, prog.phase, prog.message)
            return
        self.writer.metrics.failures.labels(reason=prog.reason).inc()
        self.writer.event(ctx, prog.reason, prog.message, warning=True)
        for pod in ctx.pods.values():
            if (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES:
                meta = pod.get("metadata") or {}
                self.api.delete_pod(
                    ctx.namespace, str(meta.get("name")), str(meta.get("uid") or "")
                )


def _not_the_recorded_pod(
    pod: Mapping[str, Any],
    namespace: str,
    uid: str,
    recs: list[dict[str, Any]],
    bound: str | None,
    node: str,
) -> tuple[str, bool] | None:
    """Why ``pod`` (under a replica's name) is not the one the record describes, and whether
    Horus may delete it; None when it is the recorded pod.

    Only a pod Horus made for a DLJob (:func:`~horus.operator.podspec.owner_uid`) in this
    namespace is ever deleted — this job's, or an older DLJob's of the same name; any other
    pod under the name (a tenant's StatefulSet ``foo`` beside DLJob ``foo``, a pod made in
    advance) is neither adopted nor deleted."""
    owner = owner_uid(pod)
    if owner is None or (pod.get("metadata") or {}).get("namespace") != namespace:
        return "was not created by Horus for a DLJob", False
    if owner != uid:
        return "belongs to an older DLJob of the same name", True
    if bound and bound != node:
        return f"is bound to {bound}, not its assigned node {node}", True
    held = read_pod_assignment(pod, None).assignment
    want = {(str(r["gpuUUID"]), int(r["corePercent"]), int(r["memoryMiB"])) for r in recs}
    got = (
        {(g.gpu_uuid, g.core_percent, g.memory_mib) for g in held.all_gpus}
        if held is not None
        else set()
    )
    if got != want:
        return "holds other GPUs or shares than its record (a move)", True
    return None


def stuck_container(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """Why a replica cannot start on its own (a container waiting for a reason in
    :data:`STUCK_WAITING_REASONS`), or None."""
    for pod in pods:
        status = pod.get("status") or {}
        statuses = [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING_REASONS:
                name = (pod.get("metadata") or {}).get("name")
                return (
                    f"pod {name} container {cs.get('name')} is stuck in {waiting['reason']}: "
                    f"{waiting.get('message') or 'no message'}"
                )[: tr.MAX_MESSAGE]
    return None
