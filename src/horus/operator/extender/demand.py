"""What a plain pod asks of Horus: not ours, a request to place, or why it never can be.

One reader of the pod's GPU request (``horus.api.resources.pod_effective_request``, the
kubelet's rule, as the device plugin reads it) and its ``horus.io/graph-profile``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from horus.api.profile import InlineProfile, parse_profile_document
from horus.api.resources import containers_asking, pod_effective_request
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.operator.extender.settings import REASON_PREFIX
from horus.operator.residents import pod_job_name
from horus.predictor.schema import graph_profile
from horus.scheduler import JobRequest

# Parsing a profile document (YAML) is slow next to a look-up, and every filter sees every
# resident pod's profile again, so parsed profiles are kept by their exact annotation text
# (bounded).
_PROFILE_CACHE_SIZE = 4096
_profile_cache: dict[str, InlineProfile | ValidationError] = {}
_profile_lock = threading.Lock()


def cached_profile(text: str) -> InlineProfile:
    """:func:`parse_profile_document` of an annotation value, memoised by its text."""
    with _profile_lock:
        hit = _profile_cache.get(text)
    if hit is None:
        try:
            hit = parse_profile_document(text, f"annotation {c.ANNOTATION_GRAPH_PROFILE}")
        except ValidationError as exc:
            hit = exc
        with _profile_lock:
            if len(_profile_cache) >= _PROFILE_CACHE_SIZE:
                _profile_cache.clear()
            _profile_cache[text] = hit
    if isinstance(hit, ValidationError):
        raise ValidationError(str(hit))
    return hit


def _pod_amount(spec: Mapping[str, Any], resource: str) -> int | None:
    """Effective pod request: max(sum over containers, any init container), None if absent."""
    return pod_effective_request(spec, resource).total


@dataclass(frozen=True)
class PodDemand:
    """What Horus makes of a pod: not ours, a request to place, or why it can never be placed."""

    interested: bool
    request: JobRequest | None = None
    #: Set when the pod asks for Horus GPUs but cannot be placed anywhere (bad profile, …).
    problem: str | None = None


def _asking(spec: Mapping[str, Any], group: str) -> list[str]:
    """Names of the ``group`` containers that ask for a Horus resource."""
    return containers_asking(spec, group, (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY))


def _shape_problem(spec: Mapping[str, Any], where: str) -> str | None:
    """Why the pod's containers cannot hold one GPU share (None when they can)."""
    init = _asking(spec, "initContainers")
    if init:
        # The device plugin hands a pod's share out once, to the container the kubelet
        # admits first; the app container asking after an init container would be refused
        # at admission, so such a pod could never start. Say so now, not at the kubelet.
        return (
            f"{REASON_PREFIX}{where}: init container(s) {', '.join(init)} request Horus GPU "
            "resources; a pod's GPU share goes to the one app container that uses the GPU, "
            f"so request {c.RESOURCE_GPU_CORE}/{c.RESOURCE_GPU_MEMORY} there (never in "
            "initContainers)"
        )
    asking = _asking(spec, "containers")
    if len(asking) > 1:
        return (
            f"{REASON_PREFIX}{where}: containers {', '.join(asking)} all request Horus GPU "
            "resources, but a pod's GPU share goes to one container; request "
            f"{c.RESOURCE_GPU_CORE}/{c.RESOURCE_GPU_MEMORY} in one container only"
        )
    return None


def _amount_problem(core: int | None, memory: int | None, where: str) -> str | None:
    """Why the requested amounts are not one GPU share (None when they are)."""
    if core is not None and not 1 <= core <= c.GPU_CORE_UNITS_PER_GPU:
        return (
            f"{REASON_PREFIX}{where} requests {c.RESOURCE_GPU_CORE}={core}; a plain pod gets "
            f"one GPU share, so it must be 1..{c.GPU_CORE_UNITS_PER_GPU} (use a DLJob with "
            "gpusPerReplica for several GPUs)"
        )
    if memory is not None and not 1 <= memory <= c.MAX_GPU_MEMORY_MIB:
        return (
            f"{REASON_PREFIX}{where} requests {c.RESOURCE_GPU_MEMORY}={memory} MiB; it must "
            f"be 1..{c.MAX_GPU_MEMORY_MIB}"
        )
    return None


def pod_demand(pod: Mapping[str, Any]) -> PodDemand:
    """Read the pod's Horus resources and graph profile into a :class:`JobRequest`.

    A resource that is requested is explicit; one that is left out is sized by Horus from the
    prediction (auto). A plain pod gets one GPU share, so ``horus.io/gpu-core`` is 1..100.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    try:
        core = _pod_amount(spec, c.RESOURCE_GPU_CORE)
        memory = _pod_amount(spec, c.RESOURCE_GPU_MEMORY)
    except ValidationError as exc:
        return PodDemand(True, problem=f"{REASON_PREFIX}pod {ns}/{name}: {exc}")
    if core is None and memory is None:
        return PodDemand(False)
    where = f"pod {ns}/{name}"
    problem = _shape_problem(spec, where) or _amount_problem(core, memory, where)
    if problem is not None:
        return PodDemand(True, problem=problem)
    text = (meta.get("annotations") or {}).get(c.ANNOTATION_GRAPH_PROFILE)
    if not text:
        return PodDemand(
            True,
            problem=(
                f"{REASON_PREFIX}{where} requests Horus GPU resources but has no "
                f"{c.ANNOTATION_GRAPH_PROFILE} annotation; add the profile `horus profile` "
                "writes (YAML or JSON) so Horus can predict its use"
            ),
        )
    try:
        profile = cached_profile(text)
        request = JobRequest(
            name=pod_job_name(ns, name),
            profile=graph_profile(profile),
            core_percent=core,
            memory_mib=memory,
            priority=int(spec.get("priority") or 0),
        )
    except (ValidationError, TypeError, ValueError) as exc:
        return PodDemand(True, problem=f"{REASON_PREFIX}{where}: {exc}")
    return PodDemand(True, request=request)
