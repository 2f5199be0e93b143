"""A Kueue Workload as Horus reads it: pod sets, whether quota is reserved, and Horus' check.

Everything here comes from the Workload object alone (``kueue.x-k8s.io/v1beta2``). Its
``status`` — quota reservation, admission, admission-check states and their
``podSetUpdates`` — is written only by Kueue's controllers and the check controllers
(tenants' ``edit`` role gets Workloads read-only in Kueue's own RBAC), so what Horus reads
from it as its own decision no tenant wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from horus.common import constants as c
from horus.common.errors import ValidationError

__all__ = [
    "CHECK_PENDING",
    "CHECK_READY",
    "CHECK_REJECTED",
    "CHECK_RETRY",
    "CheckState",
    "PodSet",
    "Workload",
    "horus_check_names",
    "inactive_checks",
    "parse_workload",
]

CHECK_PENDING = "Pending"
CHECK_READY = "Ready"
CHECK_RETRY = "Retry"
CHECK_REJECTED = "Rejected"


@dataclass(frozen=True)
class PodSet:
    """One pod set: ``count`` pods made from ``template`` (a pod template: metadata, spec)."""

    name: str
    count: int
    template: Mapping[str, Any]


@dataclass(frozen=True)
class CheckState:
    """One entry of ``status.admissionChecks`` and its position in that list."""

    name: str
    state: str
    message: str
    pod_set_updates: tuple[Mapping[str, Any], ...]
    index: int


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    uid: str
    created: str
    priority: int
    pod_sets: tuple[PodSet, ...]
    quota_reserved: bool
    finished: bool
    evicted: bool
    checks: tuple[CheckState, ...]
    #: UIDs of the pods that own it: a Workload of Kueue's pod integrations (a plain pod's,
    #: a pod group's) is owned by its pods, and its pod sets carry only their spec
    owner_pods: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pointer(self) -> str:
        """The value of ``horus.io/kueue-workload`` on this Workload's pods."""
        return f"{self.name}/{self.uid}"

    def check(self, names: Iterable[str]) -> CheckState | None:
        """The first of this Workload's admission checks that is one of ``names``."""
        wanted = set(names)
        return next((ch for ch in self.checks if ch.name in wanted), None)

    def pod_set(self, name: str) -> PodSet | None:
        return next((p for p in self.pod_sets if p.name == name), None)


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return str(cond.get("status")) == "True"
    return False


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    """Read a Workload; :class:`ValidationError` names what is malformed."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise ValidationError("Workload: metadata and spec must be objects")
    ns, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
    if not (ns and name and uid):
        raise ValidationError("Workload: metadata.namespace, name and uid are required")
    where = f"Workload {ns}/{name}"
    pod_sets = []
    for i, raw in enumerate(spec.get("podSets") or []):
        if not isinstance(raw, Mapping):
            raise ValidationError(f"{where}: spec.podSets[{i}] must be an object")
        count = raw.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValidationError(f"{where}: spec.podSets[{i}].count must be a whole number")
        template = raw.get("template") or {}
        if not isinstance(template, Mapping):
            raise ValidationError(f"{where}: spec.podSets[{i}].template must be an object")
        pod_sets.append(PodSet(str(raw.get("name") or ""), count, template))
    checks = []
    for i, raw in enumerate(status.get("admissionChecks") or []):
        if not isinstance(raw, Mapping):
            continue
        updates = tuple(u for u in raw.get("podSetUpdates") or [] if isinstance(u, Mapping))
        checks.append(
            CheckState(
                str(raw.get("name") or ""),
                str(raw.get("state") or CHECK_PENDING),
                str(raw.get("message") or ""),
                updates,
                i,
            )
        )
    priority = spec.get("priority")
    return Workload(
        namespace=ns,
        name=name,
        uid=uid,
        created=str(meta.get("creationTimestamp") or ""),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        pod_sets=tuple(pod_sets),
        quota_reserved=_condition(status, "QuotaReserved"),
        finished=_condition(status, "Finished"),
        evicted=_condition(status, "Evicted"),
        checks=tuple(checks),
        owner_pods=tuple(
            str(r.get("uid"))
            for r in meta.get("ownerReferences") or []
            if isinstance(r, Mapping) and r.get("kind") == "Pod" and r.get("uid")
        ),
    )


def inactive_checks(admission_checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Horus' AdmissionChecks whose ``Active`` condition is not ``True`` yet."""
    ours = horus_check_names(admission_checks)
    out = []
    for obj in admission_checks:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if name in ours and not _condition(obj.get("status") or {}, "Active"):
            out.append(name)
    return out


def horus_check_names(admission_checks: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The AdmissionChecks (cluster-scoped; created by cluster admins) whose controller is
    Horus'."""
    out = set()
    for obj in admission_checks:
        spec = obj.get("spec") or {}
        if isinstance(spec, Mapping) and spec.get("controllerName") == (
            c.KUEUE_ADMISSION_CHECK_CONTROLLER
        ):
            out.add(str((obj.get("metadata") or {}).get("name") or ""))
    out.discard("")
    return frozenset(out)
