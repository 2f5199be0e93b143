"""The kube-scheduler extender: plain Pods that ask for ``horus.io/gpu-core`` /
``horus.io/gpu-memory`` are placed by the stock kube-scheduler, with Horus deciding the GPU.

Why an extender as well as the operator: not every GPU workload is a DLJob. A Deployment, a
Job or a notebook pod only has to request the Horus resources and carry its graph profile in
the annotation ``horus.io/graph-profile``; the kube-scheduler (configured with
``manifests/scheduler/horus-extender-config.yaml``) then calls this server for three verbs,
with the JSON shapes of ``k8s.io/kube-scheduler/extender/v1``:

``filter``  ``ExtenderArgs{Pod, Nodes|NodeNames}`` → ``ExtenderFilterResult{NodeNames|Nodes,
            FailedNodes, FailedAndUnresolvableNodes, Error}``. A node passes when one of its
            GPUs takes the pod under the Horus policy; every other node gets the placement
            core's sentence ("no GPU with 40.0 GiB free; best candidate …"), which the
            scheduler puts into the pod's ``PodScheduled`` condition — no silent Pending.
``prioritize`` the same args → ``[{Host, Score}]``, 0..10 (``MaxExtenderPriority``): the
            predicted rise in summed normalised speed on the node's best GPU, × 10.
``bind``    ``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}`` →
            ``ExtenderBindingResult{Error}``: choose the GPU on that node, write the signed
            ``horus.io/gpu-assignment`` and ``horus.io/predicted`` on the pod, *then* create
            the ``Binding`` — so a crash between the two leaves a record, never an
            unaccounted pod on a GPU.

Every decision starts from the live cluster (:mod:`horus.operator.livestate`: node
inventories, DLJob placements and pods' assignments), the same rules the operator schedules
with, so the two placers see one truth. Binds are serialised in-process and re-checked after
the assignment is written (another placer may have raced us); a lost race rolls the
annotation back and reports an error, and the scheduler retries.

Request bodies are validated: a malformed one gets HTTP 400 with ``{"Error": …}`` naming the
field; nothing a client sends can stop the server. Go's ``encoding/json`` matches field
names case-insensitively and ignores unknown ones, and so does this server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from horus.api.assignment import (
    GpuAssignment,
    PredictedUsage,
    encode_assignment,
    encode_predicted,
)
from horus.api.dljob import InlineProfile, parse_profile_document
from horus.api.raw import discard, read_items, read_object
from horus.api.resources import (
    container_amount,
    node_memory_unit_mib,
    parse_quantity,
    pod_effective_request,
)
from horus.api.signing import KeyRing, sign_assignment
from horus.common import constants as c
from horus.common.documents import DEFAULT_MAX_DEPTH, load_json
from horus.common.errors import ConfigError, HorusError, ValidationError
from horus.common.settings import check_range, check_seconds
from horus.operator.livestate import (
    LiveObjects,
    LiveState,
    build_live_state,
    graph_profile,
    pod_job_name,
)
from horus.predictor.interface import GraphProfile, Predictor, pair_extrapolated
from horus.scheduler import (
    POLICY_NAMES,
    ClusterState,
    JobRequest,
    Placement,
    Refusal,
    Scheduler,
    SchedulerSettings,
)

log = logging.getLogger(__name__)

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "BindingArgs",
    "ClusterSource",
    "Extender",
    "ExtenderArgs",
    "ExtenderServer",
    "ExtenderSettings",
    "KubeClusterSource",
    "NodeVerdict",
    "PodDemand",
    "RequestError",
    "parse_binding_args",
    "parse_extender_args",
    "parse_quantity",
    "pod_demand",
]

#: k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority.
MAX_EXTENDER_PRIORITY = 10
#: Reasons start with this, so a person reading a Pending pod knows who refused it.
REASON_PREFIX = "horus: "
VERBS = ("filter", "prioritize", "bind")
#: The most ``max_body_bytes`` may allow: a Pod is rarely over 100 KiB, and the apiserver
#: itself refuses requests over 3 MiB; a NodeList of 5,000 nodes stays under this.
MAX_REQUEST_BYTES = 64 << 20
#: Candidate nodes one request may name (Kubernetes supports clusters of 5,000 nodes).
MAX_CANDIDATE_NODES = 50_000
#: A Kubernetes object name (DNS subdomain) is at most 253 characters; a UID 36 (we allow 128).
MAX_NAME_LENGTH = 253
MAX_UID_LENGTH = 128
#: Containers of one pod (init containers and containers each); the apiserver has no limit,
#: but a pod with more is not one Horus can place anyway.
MAX_CONTAINERS = 256
#: Seconds a client may take to send a request once connected; a stalled one is dropped so
#: it cannot hold a server thread (and its socket) forever.
REQUEST_TIMEOUT_S = 60.0
_CONTENT_LENGTH = re.compile(r"^[0-9]{1,15}$")


# --- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtenderSettings:
    """Settings of ``horus operator extender`` (section ``extender``; CLI > env > file).

    Environment variables are ``HORUS_EXTENDER_<FIELD>`` (e.g. ``HORUS_EXTENDER_PORT``).
    """

    #: Address to listen on (``0.0.0.0`` in a pod; ``127.0.0.1`` for a local scheduler).
    host: str = "0.0.0.0"
    #: TCP port; the kube-scheduler's ``urlPrefix`` points here (the Service uses 8888).
    port: int = 8888
    #: Placement policy of :mod:`horus.scheduler` (``horus`` is interference-aware).
    policy: str = "horus"
    #: kubeconfig to reach the apiserver; unset: ``$KUBECONFIG``, else in-cluster config.
    kubeconfig: Path | None = None
    #: Assignment key file (mounted Secret); unset: ``$HORUS_ASSIGNMENT_KEY_FILE``, else the
    #: Secret ``horus-system/horus-assignment-key`` (created when absent).
    key_file: Path | None = None
    #: Predictor artifact (``horus predictor train -o``); unset: the shipped one.
    predictor: Path | None = None
    #: Seconds between checks of the ``predictor`` file for a new model (as the operator's
    #: ``predictor_reload_seconds``); 0: read once at start.
    predictor_reload_seconds: float = 30.0
    #: How long filter results are reused by the prioritize call of the same pod (seconds).
    cache_seconds: float = 2.0
    #: Largest request body accepted (bytes); a Pod is rarely over 100 KiB.
    max_body_bytes: int = 8 * 1024 * 1024
    #: After writing an assignment, re-read the cluster and back off if another placer raced.
    verify_binds: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"extender port must be 0..65535, got {self.port}")
        if self.policy not in POLICY_NAMES:
            raise ConfigError(
                f"extender policy must be one of {', '.join(POLICY_NAMES)}, got {self.policy!r}"
            )
        if self.cache_seconds < 0:
            raise ConfigError(f"extender cache_seconds must be >= 0, got {self.cache_seconds}")
        if not self.predictor_reload_seconds >= 0:
            raise ConfigError(
                "extender predictor_reload_seconds must be >= 0 (0: never reload), got "
                f"{self.predictor_reload_seconds}"
            )
        check_seconds("cache_seconds", self.cache_seconds, positive=False)
        check_seconds("predictor_reload_seconds", self.predictor_reload_seconds, positive=False)
        check_range("max_body_bytes", self.max_body_bytes, 1024, MAX_REQUEST_BYTES, unit=" bytes")


# --- request shapes (k8s.io/kube-scheduler/extender/v1) ---------------------------------------


class RequestError(ValidationError):
    """A request body the extender cannot use; answered with HTTP 400 and this message."""


@dataclass(frozen=True)
class ExtenderArgs:
    """``ExtenderArgs``: the pod and its candidate nodes (names, or full Node objects)."""

    pod: dict[str, Any]
    node_names: tuple[str, ...]
    #: The Node objects when the scheduler sent ``Nodes`` (not node-cache capable), else None.
    nodes: tuple[dict[str, Any], ...] | None = None

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


@dataclass(frozen=True)
class BindingArgs:
    """``ExtenderBindingArgs``."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _field(body: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """Go-style lookup: exact name first, then case-insensitive."""
    if name in body:
        return True, body[name]
    low = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == low:
            return True, value
    return False, None


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _require_object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(f"{where}: must be a JSON object, got {_type_name(value)}")
    return value


def _short(value: object) -> str:
    """``value`` for an error message, cut short (a hostile value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name_field(value: object, where: str, max_length: int = MAX_NAME_LENGTH) -> str:
    if not isinstance(value, str) or not value:
        raise RequestError(f"{where}: must be a non-empty string, got {_short(value)}")
    if len(value) > max_length:
        raise RequestError(f"{where}: must be at most {max_length} characters, got {len(value)}")
    return value


def _node_name_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise RequestError(f"{where}: must be a list of node names, got {_type_name(value)}")
    if len(value) > MAX_CANDIDATE_NODES:
        raise RequestError(
            f"{where}: {len(value)} nodes is more than the {MAX_CANDIDATE_NODES} one request may name"
        )
    return tuple(_name_field(item, f"{where}[{i}]") for i, item in enumerate(value))


def _check_pod(value: object) -> dict[str, Any]:
    pod = _require_object(value, "Pod")
    meta = _require_object(pod.get("metadata"), "Pod.metadata")
    _name_field(meta.get("name"), "Pod.metadata.name")
    ns = meta.get("namespace", "default")
    if not isinstance(ns, str) or len(ns) > MAX_NAME_LENGTH:
        raise RequestError(
            f"Pod.metadata.namespace: must be a string of at most {MAX_NAME_LENGTH} characters, "
            f"got {_short(ns)}"
        )
    for key in ("uid", "resourceVersion"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise RequestError(f"Pod.metadata.{key}: must be a string, got {_type_name(meta[key])}")
    ann = meta.get("annotations")
    if ann is not None:
        ann = _require_object(ann, "Pod.metadata.annotations")
        for key, val in ann.items():
            if not isinstance(val, str):
                raise RequestError(
                    f"Pod.metadata.annotations[{key!r}]: must be a string, got {_type_name(val)}"
                )
    spec = _require_object(pod.get("spec"), "Pod.spec")
    for group in ("containers", "initContainers"):
        items = spec.get(group)
        if items is None:
            if group == "containers":
                raise RequestError("Pod.spec.containers: required")
            continue
        if not isinstance(items, list):
            raise RequestError(f"Pod.spec.{group}: must be a list, got {_type_name(items)}")
        if len(items) > MAX_CONTAINERS:
            raise RequestError(
                f"Pod.spec.{group}: {len(items)} entries is more than the {MAX_CONTAINERS} "
                "a pod Horus places may have"
            )
        for i, ctr in enumerate(items):
            cpath = f"Pod.spec.{group}[{i}]"
            ctr = _require_object(ctr, cpath)
            res = ctr.get("resources")
            if res is None:
                continue
            res = _require_object(res, f"{cpath}.resources")
            for kind in ("requests", "limits"):
                if res.get(kind) is not None:
                    _require_object(res[kind], f"{cpath}.resources.{kind}")
    return pod


def parse_extender_args(body: object) -> ExtenderArgs:
    """Validate an ``ExtenderArgs`` body (filter and prioritize)."""
    obj = _require_object(body, "request body")
    has_pod, pod = _field(obj, "Pod")
    if not has_pod or pod is None:
        raise RequestError("Pod: required (the pod being scheduled)")
    pod = _check_pod(pod)
    has_names, names = _field(obj, "NodeNames")
    has_nodes, nodes = _field(obj, "Nodes")
    if has_names and names is not None:
        return ExtenderArgs(pod, _node_name_list(names, "NodeNames"))
    if has_nodes and nodes is not None:
        node_list = _require_object(nodes, "Nodes")
        items = node_list.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise RequestError(f"Nodes.items: must be a list, got {_type_name(items)}")
        if len(items) > MAX_CANDIDATE_NODES:
            raise RequestError(
                f"Nodes.items: {len(items)} nodes is more than the {MAX_CANDIDATE_NODES} one "
                "request may name"
            )
        full: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            n = _require_object(item, f"Nodes.items[{i}]")
            meta = _require_object(n.get("metadata"), f"Nodes.items[{i}].metadata")
            _name_field(meta.get("name"), f"Nodes.items[{i}].metadata.name")
            full.append(n)
        return ExtenderArgs(pod, tuple(n["metadata"]["name"] for n in full), tuple(full))
    raise RequestError("NodeNames or Nodes: one is required (the candidate nodes)")


def parse_binding_args(body: object) -> BindingArgs:
    """Validate an ``ExtenderBindingArgs`` body."""
    obj = _require_object(body, "request body")
    values: dict[str, str] = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        present, value = _field(obj, name)
        if name == "PodUID" and (not present or value in (None, "")):
            values[name] = ""
            continue
        if not present or value is None:
            raise RequestError(f"{name}: required")
        values[name] = _name_field(
            value, name, MAX_UID_LENGTH if name == "PodUID" else MAX_NAME_LENGTH
        )
    return BindingArgs(values["PodName"], values["PodNamespace"], values["PodUID"], values["Node"])


# --- what a pod asks for -----------------------------------------------------------------------

# Parsing a profile document (YAML) costs ~25 ms; every filter sees every resident pod's
# profile again, so parsed profiles are kept by their exact annotation text (bounded).
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
    asking = [  # quantities already parsed above, so container_amount cannot raise here
        str(ctr.get("name") or f"#{i}")
        for i, ctr in enumerate(spec.get("containers") or [])
        if any(
            container_amount(ctr, r, f"spec.containers[{i}]") is not None
            for r in (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
        )
    ]
    init = [  # quantities already parsed above, so container_amount cannot raise here
        str(ctr.get("name") or f"#{i}")
        for i, ctr in enumerate(spec.get("initContainers") or [])
        if any(
            container_amount(ctr, r, f"spec.initContainers[{i}]") is not None
            for r in (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
        )
    ]
    if init:
        # The device plugin hands a pod's share out once, to the container the kubelet
        # admits first; the app container asking after an init container would be refused
        # at admission, so such a pod could never start. Say so now, not at the kubelet.
        return PodDemand(
            True,
            problem=(
                f"{REASON_PREFIX}{where}: init container(s) {', '.join(init)} request Horus GPU "
                "resources; a pod's GPU share goes to the one app container that uses the GPU, "
                f"so request {c.RESOURCE_GPU_CORE}/{c.RESOURCE_GPU_MEMORY} there (never in "
                "initContainers)"
            ),
        )
    if len(asking) > 1:
        return PodDemand(
            True,
            problem=(
                f"{REASON_PREFIX}{where}: containers {', '.join(asking)} all request Horus GPU "
                "resources, but a pod's GPU share goes to one container; request "
                f"{c.RESOURCE_GPU_CORE}/{c.RESOURCE_GPU_MEMORY} in one container only"
            ),
        )
    if core is not None and not 1 <= core <= c.GPU_CORE_UNITS_PER_GPU:
        return PodDemand(
            True,
            problem=(
                f"{REASON_PREFIX}{where} requests {c.RESOURCE_GPU_CORE}={core}; a plain pod gets "
                f"one GPU share, so it must be 1..{c.GPU_CORE_UNITS_PER_GPU} (use a DLJob with "
                "gpusPerReplica for several GPUs)"
            ),
        )
    if memory is not None and not 1 <= memory <= c.MAX_GPU_MEMORY_MIB:
        return PodDemand(
            True,
            problem=(
                f"{REASON_PREFIX}{where} requests {c.RESOURCE_GPU_MEMORY}={memory} MiB; it must "
                f"be 1..{c.MAX_GPU_MEMORY_MIB}"
            ),
        )
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


# --- the cluster, behind a small interface (a fake one in unit tests) ---------------------------


class ClusterSource(Protocol):
    """What the extender reads from and writes to the apiserver."""

    def list_objects(self) -> LiveObjects: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge ``annotations`` (None deletes); 409 → :class:`ConflictError`."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class ConflictError(HorusError):
    """The object changed under us (HTTP 409); the caller retries later."""


class KubeClusterSource:
    """:class:`ClusterSource` over the official Kubernetes client (raw JSON, no models)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        # Any: raw JSON calls (_preload_content=False) return urllib3 responses, not models.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)

    def _list(self, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return read_items(call(*args, _preload_content=False, **kwargs))

    def list_objects(self) -> LiveObjects:
        from kubernetes.client.exceptions import ApiException

        selector = "status.phase!=Succeeded,status.phase!=Failed"
        nodes = self._list(self.core.list_node)
        pods = self._list(self.core.list_pod_for_all_namespaces, field_selector=selector)
        try:
            dljobs = self._list(
                self.custom.list_cluster_custom_object, c.API_GROUP, c.API_VERSION, c.DLJOB_PLURAL
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            dljobs = []  # the DLJob CRD is not installed: plain pods only
        return LiveObjects(nodes, pods, dljobs)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version  # optimistic concurrency: 409 if stale
        try:
            resp = self.core.patch_namespaced_pod(
                name, namespace, {"metadata": meta}, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:
                raise ConflictError(f"pod {namespace}/{name} changed meanwhile") from None
            raise
        return read_object(resp)

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # _preload_content=False: the client cannot deserialise the Binding it gets back.
        discard(
            self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
        )


# --- the decisions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeVerdict:
    """One candidate node for one pod: placeable (with its best placement) or why not."""

    node: str
    placement: Placement | None = None
    reason: str | None = None
    #: True when waiting or preempting cannot help (the pod can never fit this node).
    unresolvable: bool = False

    @property
    def score(self) -> int:
        """0..10: the predicted rise in summed normalised speed on the node's best GPU × 10."""
        if self.placement is None:
            return 0
        gain = self.placement.predicted_gain
        if not math.isfinite(gain):
            return 0
        return max(0, min(MAX_EXTENDER_PRIORITY, round(gain * MAX_EXTENDER_PRIORITY)))


_NO_INVENTORY = (
    f"{REASON_PREFIX}node has no Horus GPUs (no {c.ANNOTATION_GPU_INVENTORY} annotation; "
    "is the Horus device plugin running there?)"
)


class Extender:
    """The three verbs over a :class:`ClusterSource`, independent of HTTP."""

    def __init__(
        self,
        source: ClusterSource,
        predictor: Predictor,
        key: bytes | KeyRing | Callable[[], KeyRing | bytes],
        policy: str = "horus",
        scheduler_settings: SchedulerSettings | None = None,
        cache_seconds: float = 2.0,
        verify_binds: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.predictor = predictor
        self._key = key
        self.policy = policy
        self.scheduler_settings = scheduler_settings or SchedulerSettings()
        self.cache_seconds = cache_seconds
        self.verify_binds = verify_binds
        self._clock = clock
        self._bind_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cache: dict[tuple[str, ...], tuple[float, dict[str, NodeVerdict]]] = {}

    def set_predictor(self, predictor: Predictor) -> None:
        """Place with ``predictor`` from the next request on (a reloaded artifact); filter
        results computed with the old one are not reused."""
        with self._cache_lock:
            self.predictor = predictor
            self._cache.clear()

    # --- helpers ----------------------------------------------------------------------------
    def keys(self) -> KeyRing:
        """The key ring now: signs with its current key, verifies with all of them (a
        callable, e.g. :class:`~horus.operator.assignment_key.AssignmentKeySource`, is asked
        every time, so a rotated key is used without a restart)."""
        k = self._key() if callable(self._key) else self._key
        return KeyRing(k) if isinstance(k, bytes) else k

    def key(self) -> bytes:
        """The signing key (the ring's current one)."""
        return self.keys().current

    def _scheduler(self, live: LiveState) -> Scheduler:
        sched = Scheduler(self.policy, self.predictor, self.scheduler_settings)
        for request in live.profiles().values():
            sched.remember(request)  # residents' profiles, for pair speeds
        for kind, other, model, speed in live.observed_pairs:
            # measured beats predicted, as in the operator (Reconciler._observe_pairs)
            sched.observe_pair(kind, other, model, speed)
        return sched

    def _live(self, exclude: str) -> tuple[LiveState, dict[str, int]]:
        """The live state without ``exclude``'s own share, and each node's MiB per memory unit."""
        objs = self.source.list_objects()
        live = self._build(objs)
        if exclude in live.residents:  # the pod's own earlier assignment (a retried bind)
            live.state.release(exclude)
            del live.residents[exclude]
        units: dict[str, int] = {}
        for n in objs.nodes:
            meta = n.get("metadata") or {}
            name = str(meta.get("name") or "")
            try:
                units[name] = node_memory_unit_mib(meta.get("annotations"), f"node {name}")
            except ValidationError as exc:
                live.excluded_nodes.setdefault(name, str(exc))
        return live, units

    def _build(self, objs: LiveObjects) -> LiveState:
        """:func:`build_live_state`, with the pods' profiles parsed through the cache."""
        profiles: dict[str, GraphProfile] = {}
        for pod in objs.pods:
            meta = pod.get("metadata") or {}
            ann = meta.get("annotations") or {}
            text = ann.get(c.ANNOTATION_GRAPH_PROFILE)
            if not text or c.ANNOTATION_GPU_ASSIGNMENT not in ann:
                continue
            try:
                profile = graph_profile(cached_profile(text))
            except ValidationError:
                continue
            ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
            profiles[pod_job_name(ns, name)] = profile
        # Only signed records count: a forged pod assignment or DLJob record holds nothing.
        return build_live_state(
            objs.nodes, objs.pods, objs.dljobs, self.predictor, profiles=profiles, keys=self.keys()
        )

    @staticmethod
    def _in_mib(job: JobRequest, unit_mib: int) -> JobRequest:
        """``job`` with its ``horus.io/gpu-memory`` quantity read in the node's units (MiB)."""
        if job.memory_mib is None or unit_mib == 1:
            return job
        return replace(job, memory_mib=job.memory_mib * unit_mib)

    @staticmethod
    def _on_node(
        sched: Scheduler, st: ClusterState, job: JobRequest, node: int
    ) -> Placement | Refusal:
        """Place ``job`` on node number ``node`` only; the state is left as it was."""
        saved = st.healthy.copy()
        try:
            st.healthy &= st.node_of == node
            result = sched.place(st, job)
            if isinstance(result, Placement):
                st.release(job.name)
            return result
        finally:
            st.healthy = saved

    def evaluate(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, NodeVerdict]:
        """A verdict for every candidate node (cached briefly for the prioritize call)."""
        meta = pod.get("metadata") or {}
        cache_key = (
            str(meta.get("uid") or ""),
            str(meta.get("namespace") or "default"),
            str(meta.get("name") or ""),
            str(meta.get("resourceVersion") or ""),
            *node_names,
        )
        now = self._clock()
        if self.cache_seconds > 0 and cache_key[0]:
            with self._cache_lock:
                hit = self._cache.get(cache_key)
                if hit is not None and now - hit[0] <= self.cache_seconds:
                    return hit[1]
        verdicts = self._evaluate(pod, node_names)
        if self.cache_seconds > 0 and cache_key[0]:
            with self._cache_lock:
                self._cache = {
                    k: v for k, v in self._cache.items() if now - v[0] <= self.cache_seconds
                }
                self._cache[cache_key] = (now, verdicts)
        return verdicts

    def _evaluate(
        self, pod: Mapping[str, Any], node_names: Sequence[str]
    ) -> dict[str, NodeVerdict]:
        demand = pod_demand(pod)
        if not demand.interested:
            return {n: NodeVerdict(n) for n in node_names}
        if demand.request is None:
            reason = demand.problem or f"{REASON_PREFIX}pod cannot be placed"
            return {n: NodeVerdict(n, reason=reason, unresolvable=True) for n in node_names}
        job = demand.request
        live, units = self._live(job.name)
        st = live.state
        sched = self._scheduler(live)
        index = {name: i for i, name in enumerate(st.node_names)}
        out: dict[str, NodeVerdict] = {}
        for name in node_names:
            i = index.get(name)
            if i is None or name in live.excluded_nodes:
                why = live.excluded_nodes.get(name)
                out[name] = (
                    NodeVerdict(name, reason=f"{REASON_PREFIX}{why}")
                    if why
                    else NodeVerdict(name, reason=_NO_INVENTORY, unresolvable=True)
                )
                continue
            try:
                result = self._on_node(sched, st, self._in_mib(job, units.get(name, 1)), i)
            except HorusError as exc:  # e.g. the predictor rejects the profile
                out[name] = NodeVerdict(name, reason=f"{REASON_PREFIX}{exc}", unresolvable=True)
                continue
            if isinstance(result, Placement):
                out[name] = NodeVerdict(name, placement=result)
            else:
                out[name] = NodeVerdict(
                    name,
                    reason=f"{REASON_PREFIX}{result.reason}",
                    unresolvable=result.code == "impossible",
                )
        return out

    # --- verbs ------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """``ExtenderFilterResult`` for ``args``."""
        try:
            verdicts = self.evaluate(args.pod, args.node_names)
        except Exception as exc:  # the cluster could not be read: tell the scheduler
            log.warning("filter %s/%s failed: %s", args.namespace, args.name, exc)
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": f"horus extender: {exc}",
            }
        passed = [n for n in args.node_names if verdicts[n].reason is None]
        failed = {
            n: v.reason for n, v in verdicts.items() if v.reason is not None and not v.unresolvable
        }
        unresolvable = {
            n: v.reason for n, v in verdicts.items() if v.reason is not None and v.unresolvable
        }
        result: dict[str, Any] = {
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if args.nodes is None:
            result["Nodes"] = None
            result["NodeNames"] = passed
        else:
            keep = set(passed)
            items = [n for n in args.nodes if n["metadata"]["name"] in keep]
            result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": items}
            result["NodeNames"] = None
        log.debug(
            "filter %s/%s: %d of %d nodes pass",
            args.namespace,
            args.name,
            len(passed),
            len(args.node_names),
        )
        return result

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """``HostPriorityList`` for ``args`` (0 for nodes that cannot take the pod)."""
        try:
            verdicts = self.evaluate(args.pod, args.node_names)
        except Exception as exc:
            log.warning("prioritize %s/%s failed: %s", args.namespace, args.name, exc)
            return [{"Host": n, "Score": 0} for n in args.node_names]
        return [{"Host": n, "Score": verdicts[n].score} for n in args.node_names]

    def bind(self, args: BindingArgs) -> dict[str, str]:
        """``ExtenderBindingResult``: assignment first, then the Binding."""
        where = f"pod {args.pod_namespace}/{args.pod_name}"
        try:
            with self._bind_lock:
                self._bind(args, where)
        except Exception as exc:
            log.warning("bind %s to %s failed: %s", where, args.node, exc)
            return {"Error": f"horus extender: bind {where} to {args.node}: {exc}"}
        return {"Error": ""}

    def _bind(self, args: BindingArgs, where: str) -> None:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        pod = self.source.get_pod(ns, name)
        if pod is None:
            raise ValidationError(f"{where} no longer exists")
        meta = pod.get("metadata") or {}
        if args.pod_uid and meta.get("uid") and meta["uid"] != args.pod_uid:
            raise ValidationError(f"{where} was replaced (uid {meta['uid']}, not {args.pod_uid})")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound == node:
                return  # already bound there: a retried call after a lost response
            raise ValidationError(f"{where} is already bound to node {bound}")
        demand = pod_demand(pod)
        if not demand.interested:
            self.source.bind_pod(ns, name, args.pod_uid, node)
            return
        if demand.request is None:
            raise ValidationError(demand.problem or "the pod cannot be placed")
        live, units = self._live(demand.request.name)
        job = self._in_mib(demand.request, units.get(node, 1))
        st = live.state
        if node not in st.node_names or node in live.excluded_nodes:
            why = live.excluded_nodes.get(node) or _NO_INVENTORY
            raise ValidationError(f"node {node} cannot take it: {why}")
        result = self._on_node(self._scheduler(live), st, job, st.node_names.index(node))
        if isinstance(result, Refusal):
            raise ValidationError(f"node {node} cannot take it any more: {result.reason}")
        share = result.replicas[0].gpus[0]
        assignment = GpuAssignment(
            node=node,
            gpu_uuid=share.gpu_uuid,
            gpu_index=share.gpu_index,
            core_percent=share.core_percent,
            memory_mib=share.memory_mib,
        )
        text = encode_assignment(assignment)
        pred = result.prediction
        predicted = PredictedUsage(
            util_mean=min(100.0, max(0.0, pred.util_mean)),
            util_upper=min(100.0, max(0.0, pred.util_mean, pred.util_upper)),
            memory_mib_mean=max(0.0, pred.memory_mib_mean),
            memory_mib_upper=max(0.0, pred.memory_mib_mean, pred.memory_mib_upper),
            model_version=pred.model_version or "unknown",
            low_confidence=pred.low_confidence,
            quantile=pred.quantile if 0.0 < pred.quantile < 1.0 else None,
            pair_low_confidence=pair_extrapolated(
                self.predictor, st.gpu_model[st.gpu_id(share.node, share.gpu_index)]
            ),
        )
        annotations = {
            c.ANNOTATION_GPU_ASSIGNMENT: text,
            c.ANNOTATION_ASSIGNMENT_SIGNATURE: sign_assignment(self.key(), ns, name, text),
            c.ANNOTATION_PREDICTED: encode_predicted(predicted),
        }
        try:
            self.source.patch_pod_annotations(ns, name, annotations, meta.get("resourceVersion"))
        except ConflictError:
            raise ValidationError(f"{where} changed while binding; the scheduler retries") from None
        # Written. Another placer (the operator, a second extender) may have chosen the same
        # GPU at the same moment: re-read and make sure our share is the one counted.
        if self.verify_binds:
            check = self._build(self.source.list_objects())
            if job.name not in check.residents:
                self._rollback(ns, name)
                raise ValidationError(
                    f"GPU {node}/gpu-{share.gpu_index} was taken by another placement at the "
                    "same time; the scheduler retries"
                )
        try:
            self.source.bind_pod(ns, name, args.pod_uid, node)
        except Exception:
            self._rollback(ns, name)
            raise
        log.info(
            "bound %s to %s GPU %d (%d%% core, %d MiB, predicted gain %.2f)",
            where,
            node,
            share.gpu_index,
            share.core_percent,
            share.memory_mib,
            result.predicted_gain,
        )

    def _rollback(self, namespace: str, name: str) -> None:
        """Remove an assignment that did not lead to a binding (best effort)."""
        try:
            self.source.patch_pod_annotations(
                namespace,
                name,
                {
                    c.ANNOTATION_GPU_ASSIGNMENT: None,
                    c.ANNOTATION_ASSIGNMENT_SIGNATURE: None,
                    c.ANNOTATION_PREDICTED: None,
                },
            )
        except Exception as exc:  # the record stays; the next bind of this pod replaces it
            log.warning("could not roll back the assignment of %s/%s: %s", namespace, name, exc)


# --- HTTP ------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the scheduler reuses connections
    timeout = REQUEST_TIMEOUT_S  # socket timeout: a stalled client frees its thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, {"Error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/healthz", "/readyz", "/livez"):
            self._reply(HTTPStatus.OK, {"status": "ok"})
        else:
            self._error(
                HTTPStatus.NOT_FOUND, f"no such path {self.path}; POST to {', '.join(VERBS)}"
            )

    def do_POST(self) -> None:
        try:
            self._post()
        except Exception as exc:  # a bug: answer 500, log, keep serving
            log.exception("extender request %s failed", self.path)
            with contextlib.suppress(OSError):
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {exc}")

    def _read_body(self) -> tuple[bool, object]:
        """(True, decoded JSON) or (False, None) after an error reply was sent.

        The body is bounded before a byte of it is read: ``Content-Length`` is required (the
        kube-scheduler's Go client always sends it for these JSON bodies), must be one plain
        number within ``max_body_bytes``, and a chunked body is refused; then the JSON is
        depth-checked before it is parsed (:func:`horus.common.documents.load_json`).
        """
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            self._error(
                HTTPStatus.LENGTH_REQUIRED,
                "Transfer-Encoding is not accepted; send the body with a Content-Length",
            )
            return False, None
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length: required")
            return False, None
        if len(lengths) > 1 or not _CONTENT_LENGTH.match(lengths[0].strip()):
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"Content-Length: must be one whole number of bytes, got {_short(lengths)}",
            )
            return False, None
        length = int(lengths[0])
        limit = self.server.max_body_bytes
        if length > limit:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body: {length} bytes is over the limit of {limit}",
            )
            return False, None
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request body: not received within {REQUEST_TIMEOUT_S:g} s",
            )
            return False, None
        if len(raw) != length:
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"request body: got {len(raw)} of the {length} bytes Content-Length announced",
            )
            return False, None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"request body: not valid JSON (not UTF-8: byte {exc.start} is "
                f"0x{raw[exc.start]:02x})",
            )
            return False, None
        try:
            return True, load_json(
                text, "request body", max_bytes=limit, max_depth=DEFAULT_MAX_DEPTH
            )
        except ValidationError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return False, None

    def _post(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if verb not in VERBS:
            self._error(
                HTTPStatus.NOT_FOUND, f"no such verb {verb!r}; use one of {', '.join(VERBS)}"
            )
            return
        ok, body = self._read_body()
        if not ok:
            return
        try:
            if verb == "bind":
                binding = parse_binding_args(body)
                self._reply(HTTPStatus.OK, self.server.extender.bind(binding))
                return
            args = parse_extender_args(body)
        except ValidationError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"{verb}: {exc}")
            return
        if verb == "filter":
            self._reply(HTTPStatus.OK, self.server.extender.filter(args))
        else:
            self._reply(HTTPStatus.OK, self.server.extender.prioritize(args))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], extender: Extender, max_body_bytes: int) -> None:
        self.extender = extender
        self.max_body_bytes = max_body_bytes
        super().__init__(address, _Handler)


class ExtenderServer:
    """The HTTP server around an :class:`Extender`; ``port=0`` picks a free port."""

    def __init__(
        self,
        extender: Extender,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.extender = extender
        try:
            self._server = _Server((host, port), extender, max_body_bytes)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{self.port}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.5)

    def start(self) -> ExtenderServer:
        """Serve in a background thread (tests, or next to the operator)."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="horus-extender", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()
