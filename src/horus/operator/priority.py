"""A DLJob's priority: the value of the PriorityClass its ``spec.priorityClassName`` names.

Why a class and not a number in the spec: whoever may create a DLJob could choose
its own number, jump every other tenant's jobs and preempt their checkpointing ones. A
PriorityClass (``scheduling.k8s.io/v1``) is cluster-scoped and written by the cluster's
admins; which classes a namespace may use is limited by ResourceQuota scopes
(``scopeSelector`` on ``PriorityClass``), which the apiserver applies to the replica pods —
they carry the class, and the operator dry-runs the first one before any share is committed.

The value is resolved once, when the job is admitted, and recorded in ``status.priority``
(written by the operator only), as the apiserver's Priority admission resolves a pod's
``spec.priority`` once at creation: deleting or re-creating a class later changes no admitted
job. A class that does not exist keeps the job ``Pending`` (``PriorityClassNotFound``) and is
looked up again every pass, as a controller's pods are refused and retried until it exists.
Without a class the job gets the cluster's ``globalDefault`` class (the lowest value if
several claim it), else 0 — what a pod without one gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REASON_CLASSES_UNREADABLE", "REASON_CLASS_NOT_FOUND", "PriorityClasses"]

#: The condition reason of a job whose class does not exist (yet).
REASON_CLASS_NOT_FOUND = "PriorityClassNotFound"
#: The condition reason of a new job while the classes cannot be listed (RBAC, an outage).
REASON_CLASSES_UNREADABLE = "PriorityClassesUnreadable"


@dataclass(frozen=True)
class PriorityClasses:
    """The cluster's PriorityClasses: name → value, and the default class."""

    values: Mapping[str, int] = field(default_factory=dict)
    #: (name, value) of the globalDefault class; None: no class is the default (value 0).
    default: tuple[str, int] | None = None
    #: Why the classes could not be listed; then no job is admitted (none is given a
    #: priority it may not have).
    error: str | None = None
    #: Classes whose ``preemptionPolicy`` is ``Never``: their jobs keep their place in the
    #: queue but never preempt a running job (as kube-scheduler treats such pods).
    never_preempt: frozenset[str] = frozenset()

    @classmethod
    def from_objects(cls, items: Iterable[Mapping[str, Any]]) -> PriorityClasses:
        """From listed ``PriorityClass`` objects (the apiserver's JSON)."""
        values: dict[str, int] = {}
        default: tuple[str, int] | None = None
        never: set[str] = set()
        for item in items:
            name = (item.get("metadata") or {}).get("name")
            value = item.get("value")
            if not isinstance(name, str) or not isinstance(value, int) or isinstance(value, bool):
                continue
            values[name] = value
            if item.get("preemptionPolicy") == "Never":
                never.add(name)
            if item.get("globalDefault") is True and (default is None or value < default[1]):
                default = (name, value)
        return cls(values, default, never_preempt=frozenset(never))

    def resolve(self, name: str | None) -> int | None:
        """The value for a job naming class ``name`` (None: the default); None when that
        class does not exist."""
        if name is None:
            return self.default[1] if self.default is not None else 0
        return self.values.get(name)

    def may_preempt(self, name: str | None) -> bool:
        """Whether a job of class ``name`` (None: the default class) may preempt others."""
        klass = name if name is not None else (self.default[0] if self.default else None)
        return self.error is None and klass not in self.never_preempt

    @staticmethod
    def not_found(name: str) -> str:
        """Why a job naming a missing class waits (its condition message)."""
        return (
            f"spec.priorityClassName {name!r}: no PriorityClass of that name exists (the "
            "apiserver would refuse the job's pods); the job waits, holding no GPU, until a "
            "cluster admin creates it (kubectl get priorityclasses lists those that exist)"
        )
