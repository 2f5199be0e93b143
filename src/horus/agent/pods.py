"""What the agent needs to know about one pod, read from the pod object's annotations.

The agent reads only what the scheduler wrote (``horus.io/gpu-assignment`` and its signature,
``horus.io/predicted``): HAMi's users' top complaint is limits silently not enforced, so a pod
whose annotations cannot be read is never silently dropped — it is skipped with a log line that
names the pod, the annotation and the problem, once per distinct bad value (not every cycle).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from horus.agent.workload import workload_identity
from horus.api.assignment import GpuAssignment, PredictedUsage, decode_predicted
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError

log = logging.getLogger("horus.agent.pods")
T = TypeVar("T")


@dataclass(frozen=True)
class PodInfo:
    """A running pod with a (valid) Horus GPU assignment on a node the agent serves."""

    namespace: str
    name: str
    uid: str
    node: str
    assignment: GpuAssignment
    predicted: PredictedUsage | None = None
    job: str | None = None
    simulated_memory_mib: float | None = None  # test/demo-only override (simulated backend)
    graph_profile: str | None = None  # plain pods: horus.io/graph-profile document
    #: plain pods: horus.io/graph-profile-configmap, "<name>[/<key>]" in the pod's namespace
    profile_configmap: str | None = None
    #: what the pod is part of, for display only (:func:`horus.agent.workload.workload_identity`)
    workload: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def memory_limit_bytes(self) -> int:
        return self.assignment.memory_mib * c.MIB

    @property
    def core_share(self) -> float:
        return self.assignment.core_percent / c.GPU_CORE_UNITS_PER_GPU


class SkipLog:
    """Logs each distinct problem with a pod once, so a bad annotation does not flood the log."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def warn(self, uid: str, problem: str) -> None:
        digest = hashlib.sha1(f"{uid}\0{problem}".encode()).hexdigest()
        if digest in self._seen:
            return
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen.add(digest)
        log.warning("%s", problem)

    def __len__(self) -> int:
        return len(self._seen)


def _running(obj: Mapping[str, Any]) -> bool:
    """A Running pod, not being deleted, with an assignment annotation (else: not the
    agent's business, skipped silently)."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return False  # not a pod the apiserver would return; nothing of Horus's to read
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping) or c.ANNOTATION_GPU_ASSIGNMENT not in annotations:
        return False
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        return False
    return status.get("phase") == "Running" and not meta.get("deletionTimestamp")


def _assignment(
    obj: Mapping[str, Any],
    skips: SkipLog,
    key: KeyRing | None,
    verified: dict[str, GpuAssignment] | None = None,
) -> GpuAssignment | None:
    """The pod's signed assignment (:func:`horus.api.podassignment.read_pod_assignment`),
    for the node it runs on; None (logged once) otherwise.

    ``verified`` remembers, by pod UID, the last assignment that verified: a pod whose
    annotation stops verifying (edited after admission, or its key revoked) keeps being
    enforced and reported with the share it verified with — never with what it claims now,
    and never left unpoliced."""
    uid = str((obj.get("metadata") or {}).get("uid", ""))
    read = read_pod_assignment(obj, key)
    if read.trusted and read.assignment is not None and verified is not None and key is not None:
        verified[uid] = read.assignment
    elif verified is not None and uid in verified and read.problem is not None:
        skips.warn(
            uid,
            f"{read.detail}; enforcing the share it verified with before, not the one it "
            "claims now",
        )
        read = dataclasses.replace(read, assignment=verified[uid], problem=None)
    if read.assignment is None or not read.trusted:
        consequence = (
            "an assignment the scheduler did not write is never enforced or reported as the "
            "pod's share"
            if read.problem is not None and read.problem.signature
            else "pod not enforced or reported"
        )
        skips.warn(uid, f"skipping {read.detail} ({consequence})")
        return None
    node = str((obj.get("spec") or {}).get("nodeName") or "")
    if read.assignment.node != node:
        skips.warn(
            uid,
            f"skipping {read.who}: its assignment names node {read.assignment.node!r} but it "
            f"runs on {node!r}",
        )
        return None
    return read.assignment


def _simulated_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= c.MAX_GPU_MEMORY_MIB:  # also NaN
        raise ValidationError(f"must be a number of MiB between 0 and {c.MAX_GPU_MEMORY_MIB}")
    return value


def _optional(
    annotations: Mapping[str, Any],
    key: str,
    parse: Callable[[str], T],
    ignoring: str,
    uid: str,
    skips: SkipLog,
) -> T | None:
    """An annotation the pod can do without: parsed, or None (a bad value is logged once,
    the pod is kept: its share is enforceable without it)."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return parse(str(raw))
    except ValidationError as exc:
        skips.warn(uid, f"{ignoring}: {exc}")
        return None


def parse_pod(
    obj: Mapping[str, Any],
    skips: SkipLog,
    key: KeyRing | None = None,
    verified: dict[str, GpuAssignment] | None = None,
) -> PodInfo | None:
    """The :class:`PodInfo` of a pod object (as JSON), or None when the agent should skip it.

    Pods without an assignment are not Horus's and are skipped silently; pods that are not
    running, or are being deleted, are skipped silently too. Everything else that is wrong is
    logged (once) and skipped. With a ``key``, only assignments signed by Horus count (and,
    with ``verified``, the last one that verified: :func:`_assignment`).
    """
    if not _running(obj):
        return None
    assignment = _assignment(obj, skips, key, verified)
    if assignment is None:
        return None
    return pod_info(obj, assignment, skips)


def running_pod(obj: Mapping[str, Any]) -> bool:
    """A Running pod, not being deleted (whatever it asks for)."""
    meta = obj.get("metadata")
    status = obj.get("status")
    if not isinstance(meta, Mapping) or not isinstance(status, Mapping):
        return False
    return status.get("phase") == "Running" and not meta.get("deletionTimestamp")


def pod_info(obj: Mapping[str, Any], assignment: GpuAssignment, skips: SkipLog) -> PodInfo:
    """The :class:`PodInfo` of a running pod whose share is ``assignment`` (read from its
    signed annotation on the device-plugin path, from its ResourceClaim on the dra path);
    the optional annotations (prediction, simulated memory, profile or the ConfigMap holding
    it) and the pod's workload, a display label, are read here."""
    meta = obj["metadata"]
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        annotations = {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    uid = str(meta.get("uid", ""))
    where = f"pod {namespace}/{name}"
    labels = meta.get("labels") or {}
    job = assignment.job or labels.get(c.LABEL_DLJOB_NAME)
    profile = annotations.get(c.ANNOTATION_GRAPH_PROFILE)
    configmap = annotations.get(c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP)
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=uid,
        node=assignment.node,
        assignment=assignment,
        predicted=_optional(
            annotations,
            c.ANNOTATION_PREDICTED,
            lambda text: decode_predicted(text, f"{where} annotation {c.ANNOTATION_PREDICTED}"),
            f"{where}: ignoring its prediction",
            uid,
            skips,
        ),
        job=str(job) if job else None,
        simulated_memory_mib=_optional(
            annotations,
            c.ANNOTATION_SIMULATED_MEMORY,
            _simulated_mib,
            f"{where}: ignoring annotation {c.ANNOTATION_SIMULATED_MEMORY}="
            f"{annotations.get(c.ANNOTATION_SIMULATED_MEMORY)!r}",
            uid,
            skips,
        ),
        graph_profile=str(profile) if profile else None,
        profile_configmap=str(configmap) if configmap else None,
        workload=workload_identity(meta, str(job) if job else None),
    )
