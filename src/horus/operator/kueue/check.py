"""The check's part of a reconcile pass: Ready Workloads' slots counted, pending ones decided.

Two steps of :meth:`horus.operator.reconcile.Reconciler.run_pass` (DRA path):

- :meth:`KueueCheck.count` (right after the live state is built, before anything is placed):
  every slot of a Workload whose Horus check is ``Ready`` — quota reserved, not finished, not
  evicted — that no live pod's claim fills yet goes into the pass's state as a resident. So
  DLJobs, plain pods and other Workloads never take a GPU share a Workload was promised.
- :meth:`KueueCheck.decide` (after the DLJob queue): each Workload with quota reserved and
  Horus' check ``Pending`` is decided on that state, highest priority first — every pod set
  that asks for Horus resources a gang, all pod sets together or none — and answered:
  ``Ready`` with one ``podSetUpdates`` entry per such pod set (its slots and the Workload's
  pointer as annotations, and a nodeSelector when all its pods share a node), ``Retry``
  (quota released, Kueue asks again after :data:`~horus.common.constants.KUEUE_RETRY_SECONDS`)
  when the cluster has no room now or a profile ConfigMap is missing, ``Rejected`` when the
  template can never be placed (a bad amount, a share above every GPU).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from horus.common import constants as c
from horus.common.errors import HorusError, ValidationError
from horus.kube.errors import Conflict
from horus.operator.claimcount import made_for_pod
from horus.operator.kueue.api import KueueApi, KueueMissing
from horus.operator.kueue.demand import (
    PodSetDemand,
    from_pods,
    pod_set_demand,
    request_name,
    unprofiled_request,
)
from horus.operator.kueue.slots import Slot, encode_slots, filled_slots, slot_key, slots_of
from horus.operator.kueue.workload import (
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    CheckState,
    Workload,
    horus_check_names,
    inactive_checks,
    parse_workload,
)
from horus.operator.pass_state import PassReport
from horus.operator.residents import TERMINAL_POD_PHASES, LiveState
from horus.scheduler import JobRequest, Scheduler
from horus.scheduler.types import Placement, Refusal

__all__ = ["KueueCheck", "KueueView"]

log = logging.getLogger(__name__)

#: Without Kueue's CRDs, how long until the check looks for them again (seconds).
KUEUE_LOOK_AGAIN_SECONDS = 30.0
#: How long a profile ConfigMap read is used before it is read again (seconds).
CONFIGMAP_TTL_SECONDS = 30.0
#: At most this many ConfigMaps kept (the oldest read goes first).
CONFIGMAP_CACHE_MAX = 1024
#: Node label the kube-scheduler matches a pod set's nodeSelector on.
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass
class KueueView:
    """What one pass read of Kueue: the Workloads, the names of Horus' checks, and each
    admitted Workload's slots by pod set (Ready checks only)."""

    workloads: list[Workload] = field(default_factory=list)
    checks: frozenset[str] = frozenset()
    slots: dict[str, dict[str, list[Slot]]] = field(default_factory=dict)  # workload key → …
    problems: list[str] = field(default_factory=list)
    #: Horus' AdmissionChecks Kueue does not see as active yet (marked by the leader's pass).
    inactive: list[str] = field(default_factory=list)
    #: Slot key → the claim of a live pod that fills it (set by :meth:`KueueCheck.count`).
    filled: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def by_key(self) -> dict[str, Workload]:
        return {w.key: w for w in self.workloads}


def _active(w: Workload) -> bool:
    return w.quota_reserved and not w.finished and not w.evicted


def filled_by_live_pods(
    claims: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """Slot key → the claim filling it, for claims Horus made for a pod that still runs or
    waits (a finished pod's slot is free for the pod that replaces it)."""
    live = {
        str((pod.get("metadata") or {}).get("uid") or "")
        for pod in pods
        if (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    }
    out = {}
    for key, claim in filled_slots(claims).items():
        uid = str(
            ((claim.get("metadata") or {}).get("annotations") or {})[c.ANNOTATION_CONVERTED_FOR]
        )
        if uid in live and made_for_pod(claim, uid):
            out[key] = claim
    return out


class KueueCheck:
    """Horus' AdmissionCheck controller, run as two steps of each reconcile pass."""

    def __init__(
        self,
        api: KueueApi,
        read_configmap: Callable[[str, str], dict[str, str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self._read_configmap = read_configmap
        self.clock = clock
        #: profile ConfigMaps read, for CONFIGMAP_TTL_SECONDS: every pass re-reads admitted
        #: Workloads' pod sets, and one GET per Workload per pass would load the apiserver
        self._configmaps: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        #: False once Kueue's CRDs were found missing (logged once; looked for again every
        #: KUEUE_LOOK_AGAIN_SECONDS, not every pass).
        self.kueue_seen: bool | None = None
        self._missing_since = 0.0

    def read_configmap(self, namespace: str, name: str) -> dict[str, str]:
        """A ConfigMap's data, read at most once per :data:`CONFIGMAP_TTL_SECONDS` (a missing
        one is asked again every time: it may be created any moment)."""
        now = self.clock()
        hit = self._configmaps.get((namespace, name))
        if hit is not None and now - hit[0] < CONFIGMAP_TTL_SECONDS:
            return hit[1]
        data = self._read_configmap(namespace, name)
        self._configmaps[(namespace, name)] = (now, data)
        if len(self._configmaps) > CONFIGMAP_CACHE_MAX:
            oldest = min(self._configmaps, key=lambda k: self._configmaps[k][0])
            del self._configmaps[oldest]
        return data

    # --- reading -------------------------------------------------------------------------
    def read(self, pods: Iterable[Mapping[str, Any]] = ()) -> KueueView:
        """This pass's Workloads, those of Kueue's pod integrations read with their ``pods``
        (:func:`~horus.operator.kueue.demand.from_pods`); an empty view without Kueue."""
        view = KueueView()
        now = self.clock()
        if self.kueue_seen is False and now - self._missing_since < KUEUE_LOOK_AGAIN_SECONDS:
            return view
        try:
            checks = self.api.list_admission_checks()
            view.checks = horus_check_names(checks)
            # no check of Horus' controller: no Workload is Horus' to read
            raw = self.api.list_workloads() if view.checks else []
        except KueueMissing as exc:
            if self.kueue_seen is not False:
                log.info("Kueue is not installed (%s); the Kueue check waits for it", exc)
            self.kueue_seen, self._missing_since = False, now
            return view
        self.kueue_seen = True
        view.inactive = inactive_checks(checks)
        ours: list[tuple[Workload, CheckState]] = []  # the Workloads a check of Horus names
        for obj in raw:
            try:
                w = parse_workload(obj)
            except ValidationError as exc:
                view.problems.append(str(exc))
                continue
            check = w.check(view.checks)
            if check is not None:
                ours.append((w, check))
        # the pods of Kueue's pod integrations' Workloads only: not every pod, every pass
        wanted = {uid for w, _ in ours for uid in w.owner_pods}
        by_uid = (
            {u: p for p in pods if (u := str((p.get("metadata") or {}).get("uid") or "")) in wanted}
            if wanted
            else {}
        )
        for w, check in ours:
            w = from_pods(w, by_uid)
            view.workloads.append(w)
            if check.state == CHECK_READY and _active(w):
                try:
                    view.slots[w.key] = slots_of(check, w.uid)
                except ValidationError as exc:
                    view.problems.append(f"Workload {w.key}: {exc}")
        return view

    def _activate(self, name: str) -> None:
        """Tell Kueue the check is served (a ClusterQueue naming it is inactive until then)."""
        now = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "the Horus operator chooses the GPUs of this check's Workloads",
            "lastTransitionTime": now,
        }
        try:
            self.api.activate_check(name, condition)
            log.info("AdmissionCheck %s: Active", name)
        except Exception as exc:  # told again next pass
            log.warning("cannot mark AdmissionCheck %s Active: %s", name, exc)

    # --- step 1: count what is promised ---------------------------------------------------
    def count(
        self,
        view: KueueView,
        live: LiveState,
        scheduler: Scheduler,
        claims: Iterable[Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]],
    ) -> int:
        """Put every unfilled slot of a Ready Workload into ``live.state``; how many."""
        view.filled = filled = filled_by_live_pods(claims, pods)
        wls = view.by_key()
        added = 0
        for key, by_set in view.slots.items():
            w = wls[key]
            for pod_set, slots in by_set.items():
                demand = self._demand(w, pod_set, live)
                for slot in slots:
                    if slot_key(w.uid, pod_set, slot.index) in filled:
                        continue
                    if self._hold(live, scheduler, w, slot, demand):
                        added += 1
        return added

    def _demand(self, w: Workload, pod_set: str, live: LiveState) -> PodSetDemand:
        ps = w.pod_set(pod_set)
        if ps is None:
            return PodSetDemand(problem=f"Workload {w.key} has no pod set {pod_set}")
        return pod_set_demand(w, ps, self.read_configmap, live.state.largest_gpu_mib)

    def _hold(
        self, live: LiveState, scheduler: Scheduler, w: Workload, slot: Slot, demand: PodSetDemand
    ) -> bool:
        """One slot as a resident of its GPU (its pod set's kind and prediction)."""
        from horus.scheduler.types import GpuShare

        base = demand.request
        name = f"{request_name(w, slot.pod_set)}#{slot.index}"
        share = GpuShare(
            slot.node, slot.gpu_index, slot.gpu_uuid, slot.core_percent, slot.memory_mib
        )
        if slot.node not in live.state.node_set:
            return False
        try:
            if base is None:
                # the template or its profile ConfigMap changed under an admitted Workload: the
                # slot still holds its share, counted as a job that uses its GPU fully
                request = unprofiled_request(name, slot.core_percent, slot.memory_mib)
            else:
                request = JobRequest(
                    name=name,
                    profile=base.profile,
                    kind=base.kind,
                    core_percent=slot.core_percent,
                    memory_mib=slot.memory_mib,
                    prediction=base.prediction,
                )
            model = live.state.view(live.state.gpu_id(slot.node, slot.gpu_index)).model
            prediction = request.prediction or scheduler.predict(request, model)
            scheduler.remember(request)
            live.state.add_job(request, [share], prediction)
        except (HorusError, ValueError) as exc:
            live.problems.append(f"Workload {w.key} slot {slot.pod_set}/{slot.index}: {exc}")
            return False
        return True

    # --- step 2: decide what waits --------------------------------------------------------
    def decide(
        self, view: KueueView, live: LiveState, scheduler: Scheduler, report: PassReport
    ) -> None:
        """Mark Horus' checks active, then decide every Workload waiting for one (the
        leader's pass only: these are writes)."""
        for name in view.inactive:
            self._activate(name)
        waiting = [
            w
            for w in view.workloads
            if _active(w) and (ch := w.check(view.checks)) is not None and ch.state == CHECK_PENDING
        ]
        waiting.sort(key=lambda w: (-w.priority, w.created, w.key))
        for w in waiting:
            try:
                self._decide_one(w, view, live, scheduler, report)
            except Exception:  # one bad Workload never stops the pass
                log.exception("Workload %s: the check's decision failed", w.key)

    def _decide_one(
        self,
        w: Workload,
        view: KueueView,
        live: LiveState,
        scheduler: Scheduler,
        report: PassReport,
    ) -> None:
        check = w.check(view.checks)
        assert check is not None
        demands = [
            (
                ps.name,
                pod_set_demand(
                    w,
                    ps,
                    self.read_configmap,
                    live.state.largest_gpu_mib,
                    self.api.read_claim_template,
                ),
            )
            for ps in w.pod_sets
        ]
        lasting = [d.problem for _, d in demands if d.problem and d.lasting]
        passing = [d.problem for _, d in demands if d.problem and not d.lasting]
        if lasting:
            self._answer(w, check.index, check.name, CHECK_REJECTED, "; ".join(lasting), [], report)
            return
        if passing:
            self._answer(w, check.index, check.name, CHECK_RETRY, "; ".join(passing), [], report)
            return
        asks = [(name, d) for name, d in demands if d.request is not None]
        if not asks:
            self._answer(
                w, check.index, check.name, CHECK_READY,
                "no pod set asks for Horus GPU resources; nothing to place", [], report,
            )  # fmt: skip
            return
        if not live.state.gpu_count:
            self._answer(
                w, check.index, check.name, CHECK_RETRY,
                "no Ready node offers Horus GPUs (a ResourceSlice of gpu.horus.io) yet", [], report,
            )  # fmt: skip
            return
        placed: list[tuple[str, JobRequest, Placement]] = []
        for name, d in asks:
            assert d.request is not None
            scheduler.remember(d.request)
            answer = scheduler.place(live.state, d.request)  # applied to the state
            if isinstance(answer, Refusal):
                for _, req, _ in placed:
                    live.state.release(req.name)
                verdict = CHECK_RETRY if answer.code.resolvable else CHECK_REJECTED
                message = (
                    f"pod set {name} ({d.request.replicas} pods) does not fit as a gang, so no "
                    f"pod of the Workload starts: {answer.reason}"
                )
                self._answer(w, check.index, check.name, verdict, message, [], report)
                return
            placed.append((name, d.request, answer))
        updates = [self._update(w, name, placement) for name, _, placement in placed]
        notes = [d.note for _, d in asks if d.note]
        speeds = ", ".join(f"{name} {p.predicted_speed:.2f}" for name, _, p in placed)
        message = f"GPUs chosen by Horus; predicted speed {speeds}" + "".join(
            f"; {n}" for n in notes
        )
        if not self._answer(w, check.index, check.name, CHECK_READY, message, updates, report):
            for _, req, _ in placed:
                live.state.release(req.name)

    @staticmethod
    def _update(w: Workload, pod_set: str, placement: Placement) -> dict[str, Any]:
        slots = [
            Slot(pod_set, i, s.node, s.gpu_index, s.gpu_uuid, s.core_percent, s.memory_mib)
            for i, s in enumerate(placement.shares)
        ]
        update: dict[str, Any] = {
            "name": pod_set,
            "annotations": {
                c.ANNOTATION_KUEUE_WORKLOAD: w.pointer,
                c.ANNOTATION_GANG_SLOTS: encode_slots(slots),
            },
        }
        nodes = {s.node for s in slots}
        if len(nodes) == 1:
            update["nodeSelector"] = {HOSTNAME_LABEL: next(iter(nodes))}
        return update

    def _answer(
        self,
        w: Workload,
        index: int,
        name: str,
        state: str,
        message: str,
        updates: Sequence[Mapping[str, Any]],
        report: PassReport,
    ) -> bool:
        now = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        entry: dict[str, Any] = {
            "name": name,
            "state": state,
            "lastTransitionTime": now,
            "message": message[: c.KUEUE_MESSAGE_MAX],
        }
        if updates:
            entry["podSetUpdates"] = list(updates)
        if state == CHECK_RETRY:
            entry["requeueAfterSeconds"] = c.KUEUE_RETRY_SECONDS
        try:
            self.api.answer_check(
                w.namespace, w.name, index, {"name": name, "state": CHECK_PENDING}, entry
            )
        except Conflict as exc:
            log.info("%s", exc)
            return False
        report.count(f"kueue_{state.lower()}")
        log.info("Workload %s: check %s %s: %s", w.key, name, state, message)
        return True
