"""Admission of a new DLJob: validate, resolve its profile, predict once, dry-run its pod.

Why before the queue: every way a job can be wrong must be found *before* a GPU share is
committed for it, so that no share is ever held by a job that cannot run. The order is the
cheapest first — the spec (pure), its PriorityClass (from the pass's list,
:mod:`horus.operator.priority`), the profile (inline, or one ConfigMap read), the prediction
(in process), memory against the largest GPU, then one server-side dry run of the first pod
(cached per template, class and namespace) — and each failure is a :class:`Verdict` saying how
the job ends: ``Failed`` with a reason a user can act on, or ``Pending`` when the cause may go
away by itself (a ConfigMap, PriorityClass or service account not created yet, a namespace
quota).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from horus.api.assignment import PredictedUsage
from horus.api.dljob import ConfigMapProfileRef, DLJob, InlineProfile, parse_dljob
from horus.api.profile import parse_profile_document
from horus.api.signing import KeyRing
from horus.common.clock import now_rfc3339
from horus.common.errors import ValidationError
from horus.operator import transitions as tr
from horus.operator.jobapi import JobApi, PodRejected, ProfileUnavailable
from horus.operator.pass_state import JobCtx
from horus.operator.placement_rules import PlacementSession
from horus.operator.podspec import pod_manifest
from horus.operator.priority import (
    REASON_CLASS_NOT_FOUND,
    REASON_CLASSES_UNREADABLE,
    PriorityClasses,
)
from horus.predictor.interface import PAIR_TEACH_HINT, GraphProfile
from horus.predictor.schema import graph_profile

__all__ = ["DRY_RUN_CACHE_SECONDS", "Admission", "Verdict"]

#: Seconds a successful server-side dry run of a job's pod template is reused for other jobs
#: with the same template in the same namespace (a burst of copies costs one dry run).
DRY_RUN_CACHE_SECONDS = 300.0


@dataclass(frozen=True)
class Verdict:
    """How admission ended for one job: ``patch`` to write (Queued: carried by the pass's
    decision; Failed/Pending: written at once), and a Warning Event when ``warning``."""

    outcome: str  # "queued" | "failed" | "pending"
    patch: dict[str, object] | None
    reason: str = ""
    message: str = ""
    #: Queued with a caveat (an explicit share below the prediction): its Event text.
    warning: str | None = None


class Admission:
    """The admission steps over one :class:`JobApi` (profiles are cached by job uid)."""

    def __init__(
        self,
        api: JobApi,
        session: Callable[[], PlacementSession],
        keys: Callable[[], KeyRing],
    ) -> None:
        self.api = api
        self._session = session
        self._keys = keys
        self._profiles: dict[str, GraphProfile] = {}
        self._dry_run_ok: dict[tuple[str, str], float] = {}
        #: One dry run at a time per template and class: the jobs of a burst (admitted in
        #: parallel) wait for the first one's answer instead of each asking the apiserver.
        self._dry_run_gates: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    # --- profiles --------------------------------------------------------------------------
    def known_profile(self, uid: str) -> GraphProfile | None:
        return self._profiles.get(uid)

    def retain(self, uids: Collection[str]) -> None:
        """Forget the profiles of jobs not in ``uids`` (each pass: the DLJobs that exist).
        Without it every job ever admitted keeps its profile for the life of the process,
        and the operator's memory grows with each create/delete cycle."""
        with self._lock:
            for uid in [u for u in self._profiles if u not in uids]:
                del self._profiles[uid]

    def profile(self, ctx: JobCtx) -> GraphProfile:
        """The job's profile (cached by uid): inline, or read from its ConfigMap.

        Raises :class:`ProfileUnavailable` (may appear later) or :class:`ValidationError`."""
        assert ctx.job is not None
        hit = self._profiles.get(ctx.uid)
        if hit is not None:
            return hit
        source = ctx.job.spec.profile
        if isinstance(source, InlineProfile):
            profile = graph_profile(source)
        else:
            profile = graph_profile(self._configmap_profile(ctx.namespace, source))
        with self._lock:
            self._profiles[ctx.uid] = profile
        return profile

    def _configmap_profile(self, namespace: str, ref: ConfigMapProfileRef) -> InlineProfile:
        data = self.api.configmap_data(namespace, ref.name)
        text = data.get(ref.key)
        if text is None:
            keys = ", ".join(sorted(data)) or "none"
            raise ProfileUnavailable(
                f"ConfigMap {namespace}/{ref.name} has no key {ref.key!r} (keys: {keys})"
            )
        return parse_profile_document(text, f"configmap {namespace}/{ref.name}[{ref.key}]")

    # --- the steps -------------------------------------------------------------------------
    def admit(
        self,
        ctx: JobCtx,
        gpu_model: str,
        max_gpu_mib: int | None,
        classes: PriorityClasses | None = None,
    ) -> Verdict:
        """Validate, resolve its priority from ``classes`` (the cluster's PriorityClasses;
        None: every job gets 0 — unit tests), predict on ``gpu_model`` and dry-run one new job."""
        now = now_rfc3339()
        try:
            job = parse_dljob(ctx.obj)
        except ValidationError as exc:
            return _failed(ctx, "InvalidSpec", f"invalid DLJob: {exc}", now)
        ctx.job = job
        klass = job.spec.priority_class_name
        if classes is not None and classes.error is not None:
            why = f"cannot list PriorityClasses to resolve the job's priority: {classes.error}"
            return _pending(ctx, REASON_CLASSES_UNREADABLE, why, now)
        priority = classes.resolve(klass) if classes is not None else 0
        if priority is None:
            assert klass is not None
            return _pending(ctx, REASON_CLASS_NOT_FOUND, PriorityClasses.not_found(klass), now)
        try:
            profile = self.profile(ctx)
        except ProfileUnavailable as exc:
            return _pending(ctx, "ProfileUnavailable", str(exc), now)
        except ValidationError as exc:
            return _failed(ctx, "InvalidProfile", f"invalid graph profile: {exc}", now)
        session = self._session()
        try:
            pred = session.predictor.predict(profile, gpu_model)
        except (ValidationError, ValueError, KeyError) as exc:
            return _failed(ctx, "PredictionFailed", f"cannot predict on {gpu_model}: {exc}", now)
        need_mib = job.spec.gpu.memory_mib or pred.memory_mib_upper
        if max_gpu_mib is not None and need_mib > max_gpu_mib:
            why = "requests" if job.spec.gpu.memory_mib else "is predicted to need"
            return _failed(
                ctx,
                "NeverFits",
                f"each replica {why} {need_mib:.0f} MiB of GPU memory but the largest GPU "
                f"in the cluster has {max_gpu_mib} MiB",
                now,
            )
        refused = self._dry_run(ctx, now)
        if refused is not None:
            return refused
        predicted = session.predicted_usage(pred, gpu_model)
        message = (
            f"predicted {predicted.util_mean:.0f}% GPU util, "
            f"{predicted.memory_mib_upper:.0f} MiB (on {gpu_model}); waiting for GPUs"
        )
        if predicted.pair_low_confidence:
            message += f" (sharing slowdowns on {gpu_model} are extrapolated; {PAIR_TEACH_HINT})"
        warning = share_shortfall(job, predicted)
        patch = tr.admitted(ctx.status, message, predicted, now, ctx.generation, warning)
        # Resolved once, as the apiserver resolves a pod's spec.priority (horus.operator.priority).
        patch["priority"] = priority
        return Verdict("queued", patch, "Queued", message, warning)

    def _dry_run(self, ctx: JobCtx, now: str) -> Verdict | None:
        """Whether the apiserver would create the job's first pod (a server-side dry run,
        with every admission plugin): None when it would. A template it refuses (a bad
        container name or label, a missing PriorityClass) fails the job with the apiserver's
        own sentence; a refusal that may pass later (a quota, a service account not created
        yet: :attr:`PodRejected.wait_reason`) leaves it Pending."""
        spec = ctx.obj.get("spec") or {}
        # The class is part of the pod: a ResourceQuota may allow one class and not another.
        what = [spec.get("template") or {}, spec.get("priorityClassName")]
        digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
        key = (ctx.namespace, digest)
        with self._lock:
            gate = self._dry_run_gates.setdefault(key, threading.Lock())
        with gate:
            return self._dry_run_once(ctx, key, now)

    def _dry_run_once(self, ctx: JobCtx, key: tuple[str, str], now: str) -> Verdict | None:
        started = time.monotonic()
        seen = self._dry_run_ok.get(key)
        if seen is not None and started - seen < DRY_RUN_CACHE_SECONDS:
            return None
        record = {"replica": 0, "node": "dry-run", "gpuUUID": "GPU-dry-run", "gpuIndex": 0}
        manifest = pod_manifest(ctx.obj, 0, [{**record, "corePercent": 1, "memoryMiB": 1}])
        try:
            self.api.create_pod(ctx.namespace, manifest, dry_run=True)
        except PodRejected as exc:
            if exc.wait_reason is not None:
                return _pending(ctx, exc.wait_reason, f"replica pod refused: {exc}", now)
            return _failed(
                ctx,
                "InvalidSpec",
                f"the apiserver would not create its pods: {exc} (fix spec.template and create "
                "the DLJob again)",
                now,
            )
        with self._lock:
            if len(self._dry_run_ok) > 4096:
                self._dry_run_ok.clear()
                self._dry_run_gates.clear()  # at worst one more dry run for a key in use
            self._dry_run_ok[key] = started
        return None


def _failed(ctx: JobCtx, reason: str, message: str, now: str) -> Verdict:
    return Verdict("failed", tr.failed(ctx.status, reason, message, now), reason, message)


def _pending(ctx: JobCtx, reason: str, message: str, now: str) -> Verdict:
    return Verdict("pending", tr.pending(ctx.status, reason, message, now), reason, message)


def share_shortfall(job: DLJob, predicted: PredictedUsage) -> str | None:
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
