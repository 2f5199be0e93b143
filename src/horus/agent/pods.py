"""What the agent needs to know about one pod, read from the pod object's annotations.

The agent reads only what the scheduler wrote (``horus.io/gpu-assignment`` and its signature,
``horus.io/predicted``): HAMi's users' top complaint is limits silently not enforced, so a pod
whose annotations cannot be read is never silently dropped — it is skipped with a log line that
names the pod, the annotation and the problem, once per distinct bad value (not every cycle).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from horus.api.assignment import GpuAssignment, PredictedUsage, decode_assignment, decode_predicted
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.errors import ValidationError

log = logging.getLogger("horus.agent.pods")


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


def parse_pod(
    obj: Mapping[str, Any], skips: SkipLog, key: KeyRing | bytes | None = None
) -> PodInfo | None:
    """The :class:`PodInfo` of a pod object (as JSON), or None when the agent should skip it.

    Pods without an assignment are not Horus's and are skipped silently; pods that are not
    running, or are being deleted, are skipped silently too. Everything else that is wrong is
    logged (once) and skipped.
    """
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {} if isinstance(meta, Mapping) else {}
    if not isinstance(annotations, Mapping):
        return None  # not a pod the apiserver would return; nothing of Horus's to read
    text = annotations.get(c.ANNOTATION_GPU_ASSIGNMENT)
    if text is None:
        return None
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        return None
    if status.get("phase") != "Running" or meta.get("deletionTimestamp"):
        return None
    namespace = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", ""))
    node = str((obj.get("spec") or {}).get("nodeName") or "")
    where = f"pod {namespace}/{name}"
    try:
        assignment = decode_assignment(
            str(text), f"{where} annotation {c.ANNOTATION_GPU_ASSIGNMENT}"
        )
    except ValidationError as exc:
        skips.warn(uid, f"skipping {exc} (pod not enforced or reported)")
        return None
    if assignment.node != node:
        skips.warn(
            uid,
            f"skipping {where}: its assignment names node {assignment.node!r} but it runs on "
            f"{node!r}",
        )
        return None
    if key is not None:
        ring = KeyRing(key) if isinstance(key, bytes) else key
        signature = annotations.get(c.ANNOTATION_ASSIGNMENT_SIGNATURE)
        if not ring.verify_assignment(namespace, name, str(text), signature):
            skips.warn(
                uid,
                f"skipping {where}: annotation {c.ANNOTATION_ASSIGNMENT_SIGNATURE} is missing or "
                "does not verify (an assignment the scheduler did not write is never enforced "
                "or reported as the pod's share)",
            )
            return None
    predicted: PredictedUsage | None = None
    raw_pred = annotations.get(c.ANNOTATION_PREDICTED)
    if raw_pred is not None:
        try:
            predicted = decode_predicted(
                str(raw_pred), f"{where} annotation {c.ANNOTATION_PREDICTED}"
            )
        except ValidationError as exc:
            # The share is still enforceable without a prediction: keep the pod, say why.
            skips.warn(uid, f"{where}: ignoring its prediction: {exc}")
    sim_mem: float | None = None
    raw_sim = annotations.get(c.ANNOTATION_SIMULATED_MEMORY)
    if raw_sim is not None:
        try:
            sim_mem = float(raw_sim)
            if not 0 <= sim_mem <= c.MAX_GPU_MEMORY_MIB:
                raise ValueError
        except ValueError:
            skips.warn(
                uid,
                f"{where}: ignoring annotation {c.ANNOTATION_SIMULATED_MEMORY}={raw_sim!r}: must "
                f"be a number of MiB between 0 and {c.MAX_GPU_MEMORY_MIB}",
            )
            sim_mem = None
    labels = meta.get("labels") or {}
    job = assignment.job or labels.get(c.LABEL_DLJOB_NAME)
    profile = annotations.get(c.ANNOTATION_GRAPH_PROFILE)
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=uid,
        node=node,
        assignment=assignment,
        predicted=predicted,
        job=str(job) if job else None,
        simulated_memory_mib=sim_mem,
        graph_profile=str(profile) if profile else None,
    )
