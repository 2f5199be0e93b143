"""A pod set's GPU request, read from its pod template as a plain pod's is read.

The template asks as a pod does (``horus.io/gpu-core`` / ``horus.io/gpu-memory`` in its first
container's resources, memory in units of 256 MiB) and names its profile inline
(``horus.io/graph-profile``) or in a ConfigMap of the Workload's namespace
(``horus.io/graph-profile-configmap: <name>[/<key>]``). Every pod of the set gets the same
share; the pod set is one gang (``replicas`` = its count, one GPU per pod).

A pod set that asks for Horus resources but names no profile is not refused: Horus cannot
predict how it shares, so each pod gets a whole GPU, and the check's message says so.

A pod set of Kueue's pod integrations (a plain pod's, a pod group's: a Deployment's or a
StatefulSet's pods) carries only its pod's spec; its request and profile come from its pods
(:func:`from_pods`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from horus.common import constants as c
from horus.common.errors import HorusError
from horus.operator.extender.demand import pod_demand
from horus.operator.kueue.workload import PodSet, Workload
from horus.operator.placeholder_claims import uses_kueue_template
from horus.operator.plain_pod_claims import as_requested
from horus.predictor.interface import GraphProfile, ResourcePrediction
from horus.scheduler import JobRequest

__all__ = ["PodSetDemand", "from_pods", "pod_set_demand", "request_name", "unprofiled_request"]

#: How :func:`pod_demand` says a pod's amounts are fine but it names no profile.
_NO_PROFILE = f"has no {c.ANNOTATION_GRAPH_PROFILE} annotation"
#: MiB per unit of ``horus.io/gpu-memory`` (the device plugin's default unit).
MEMORY_UNIT_MIB = c.DEFAULT_GPU_MEMORY_UNIT_MIB


@dataclass(frozen=True)
class PodSetDemand:
    """What one pod set asks: a request, or nothing (no Horus resources), or a problem.
    ``lasting``: the problem is the template's own (refuse), not one that may pass (a
    ConfigMap not created yet). ``note``: said in the check's message when it is placed."""

    request: JobRequest | None = None
    problem: str | None = None
    lasting: bool = False
    note: str | None = None


def request_name(workload: Workload, pod_set: str) -> str:
    """The name a pod set's gang has in the scheduling core's state."""
    return f"kueue:{workload.namespace}/{workload.name}/{pod_set}"


def _profile_text(
    workload: Workload, ann: Mapping[str, Any], read_configmap: Callable[[str, str], dict[str, str]]
) -> str | None:
    """The template's profile: inline, or from the ConfigMap it names (``HorusError`` when it
    cannot be read)."""
    inline = ann.get(c.ANNOTATION_GRAPH_PROFILE)
    if inline:
        return str(inline)
    ref = ann.get(c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP)
    if not ref:
        return None
    name, _, key = str(ref).partition("/")
    key = key or c.PROFILE_CONFIGMAP_DEFAULT_KEY
    data = read_configmap(workload.namespace, name)
    if key not in data:
        raise HorusError(
            f"ConfigMap {workload.namespace}/{name} has no key {key!r} "
            f"({c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP}: {ref})"
        )
    return data[key]


#: What a pod of Kueue's pod integrations lends its pod set: its request and its profile.
_POD_ANNOTATIONS = (
    c.ANNOTATION_GPU_CORE_REQUEST,
    c.ANNOTATION_GPU_MEMORY_REQUEST,
    c.ANNOTATION_GRAPH_PROFILE,
    c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP,
)


def _first_container(spec: Mapping[str, Any]) -> tuple[str, str]:
    containers = spec.get("containers") or [{}]
    first = containers[0] if isinstance(containers[0], Mapping) else {}
    return str(first.get("name") or ""), str(first.get("image") or "")


def from_pods(workload: Workload, pods_by_uid: Mapping[str, Mapping[str, Any]]) -> Workload:
    """``workload`` with the pod sets of Kueue's pod integrations read from their pods.

    Kueue makes a plain pod's or a pod group's Workload from the pod's spec alone, after the
    admission policy moved the pod's ``horus.io/gpu-*`` amounts into its annotations; such a
    pod set's ``horus-gpu`` entry names Kueue's template. The first of the Workload's owner
    pods with the same first container (name and image) lends the pod set its request and
    profile annotations, and the amounts go back on the template's first container, as a
    job's template carries them."""
    owners = [
        pod
        for u in workload.owner_pods
        if (pod := pods_by_uid.get(u)) is not None
        and (pod.get("metadata") or {}).get("namespace") == workload.namespace
    ]
    if not owners:
        return workload
    pod_sets = []
    for ps in workload.pod_sets:
        spec = ps.template.get("spec") or {}
        pod = (
            next(
                (
                    p
                    for p in owners
                    if _first_container(p.get("spec") or {}) == _first_container(spec)
                ),
                None,
            )
            if uses_kueue_template(spec)
            else None
        )
        if pod is None:
            pod_sets.append(ps)
            continue
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        lent = {k: ann[k] for k in _POD_ANNOTATIONS if k in ann}
        template = as_requested({"metadata": {"annotations": lent}, "spec": spec})
        pod_sets.append(replace(ps, template=template))
    return replace(workload, pod_sets=tuple(pod_sets))


def unprofiled_request(name: str, core_percent: int, memory_mib: int) -> JobRequest:
    """A request Horus cannot predict: counted as using its GPU fully (utilisation 100 %)."""
    return JobRequest(
        name=name,
        profile=GraphProfile(c.UNPROFILED_MODEL, 1),
        core_percent=core_percent,
        memory_mib=memory_mib,
        prediction=ResourcePrediction(100.0, 100.0, float(memory_mib), float(memory_mib)),
    )


def _claim_problem(
    workload: Workload,
    pod_set: PodSet,
    read_template: Callable[[str, str], Mapping[str, Any] | None],
) -> PodSetDemand | None:
    """A pod set whose own claims Horus cannot honour: a ResourceClaimTemplate that is not in
    the Workload's namespace (a pod can use only its own namespace's), or one of Horus' GPU
    class, which the kube-scheduler would allocate without Horus' choice."""
    where = f"pod set {pod_set.name} of Workload {workload.key}"
    for entry in (pod_set.template.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("resourceClaimTemplateName")
        if not name or name in (c.CONVERTED_CLAIM_TEMPLATE, c.KUEUE_CLAIM_TEMPLATE):
            continue
        template = read_template(workload.namespace, str(name))
        if template is None:
            return PodSetDemand(
                problem=(
                    f"{where}: ResourceClaimTemplate {name} does not exist in namespace "
                    f"{workload.namespace} (a pod can use only its own namespace's templates)"
                )
            )
        requests = (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get(
            "requests"
        ) or []
        for req in requests:
            exactly = (req or {}).get("exactly") or req or {}
            if exactly.get("deviceClassName") == c.DRA_DEVICE_CLASS:
                return PodSetDemand(
                    problem=(
                        f"{where}: ResourceClaimTemplate {name} asks for class "
                        f"{c.DRA_DEVICE_CLASS} itself, which the kube-scheduler would allocate "
                        "without Horus' choice; ask with horus.io/gpu-core and "
                        "horus.io/gpu-memory instead"
                    ),
                    lasting=True,
                )
    return None


def pod_set_demand(
    workload: Workload,
    pod_set: PodSet,
    read_configmap: Callable[[str, str], dict[str, str]],
    whole_gpu_mib: int,
    read_template: Callable[[str, str], Mapping[str, Any] | None] = lambda ns, name: None,
) -> PodSetDemand:
    """``pod_set``'s gang request. ``whole_gpu_mib``: the memory an unprofiled pod set's
    pods get when they name none (the largest GPU's); ``read_template`` reads a
    ResourceClaimTemplate the pod set names (None: there is none)."""
    claim_problem = _claim_problem(workload, pod_set, read_template)
    if claim_problem is not None:
        return claim_problem
    template = pod_set.template
    meta = dict(template.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    where = f"pod set {pod_set.name} of Workload {workload.key}"
    try:
        text = _profile_text(workload, ann, read_configmap)
    except HorusError as exc:
        return PodSetDemand(problem=f"{where}: profile unavailable: {exc}")
    if text is not None:
        ann[c.ANNOTATION_GRAPH_PROFILE] = text
    pod = {
        "metadata": {"namespace": workload.namespace, "name": pod_set.name, "annotations": ann},
        "spec": template.get("spec") or {},
    }
    demand = pod_demand(pod)
    if not demand.interested and uses_kueue_template(pod["spec"]):
        return PodSetDemand(
            problem=(
                f"{where}: none of its pods is seen yet with its request "
                f"({c.ANNOTATION_GPU_CORE_REQUEST}, which the admission policy writes)"
            )
        )
    if not demand.interested:
        return PodSetDemand()
    name = request_name(workload, pod_set.name)
    request = demand.request
    if request is None and text is None and _NO_PROFILE in (demand.problem or ""):
        # amounts fine, no profile at all: a whole GPU each, said in the message
        memory = None
        spec_containers = (template.get("spec") or {}).get("containers") or []
        if spec_containers:
            limits = (spec_containers[0].get("resources") or {}).get("limits") or {}
            raw = limits.get(c.RESOURCE_GPU_MEMORY)
            memory = int(str(raw)) * MEMORY_UNIT_MIB if str(raw or "").isdigit() else None
        note = (
            f"{where} names no profile ({c.ANNOTATION_GRAPH_PROFILE} or "
            f"{c.ANNOTATION_GRAPH_PROFILE_CONFIGMAP}): Horus cannot predict how it shares, so "
            "each of its pods gets a whole GPU"
        )
        return PodSetDemand(
            request=replace(
                unprofiled_request(name, 100, memory or whole_gpu_mib), replicas=pod_set.count
            ),
            note=note,
        )
    if request is None:
        return PodSetDemand(problem=f"{where}: {demand.problem}", lasting=True)
    memory = request.memory_mib * MEMORY_UNIT_MIB if request.memory_mib is not None else None
    return PodSetDemand(
        request=replace(
            request,
            name=name,
            replicas=max(pod_set.count, 1),
            memory_mib=memory,
            priority=workload.priority,
        )
    )
