"""The extender's wire shapes (``k8s.io/kube-scheduler/extender/v1``), decoded and checked.

Decode only: a request body becomes :class:`ExtenderArgs` or :class:`BindingArgs`, or a
:class:`RequestError` naming the field (answered with HTTP 400). Go's ``encoding/json``
matches field names case-insensitively and ignores unknown ones, and so does this decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from horus.common.errors import ValidationError
from horus.operator.extender.settings import (
    MAX_CANDIDATE_NODES,
    MAX_CONTAINERS,
    MAX_NAME_LENGTH,
    MAX_UID_LENGTH,
)


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


def short(value: object) -> str:
    """``value`` for an error message, cut short (a hostile value may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _name_field(value: object, where: str, max_length: int = MAX_NAME_LENGTH) -> str:
    if not isinstance(value, str) or not value:
        raise RequestError(f"{where}: must be a non-empty string, got {short(value)}")
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
    # Every name checked in one pass first: the per-item check below formats a position for
    # each name (every candidate node, twice per pod); it runs only to name the first bad one.
    if all(type(item) is str and 0 < len(item) <= MAX_NAME_LENGTH for item in value):
        return tuple(value)
    return tuple(_name_field(item, f"{where}[{i}]") for i, item in enumerate(value))


def _check_pod(value: object) -> dict[str, Any]:
    pod = _require_object(value, "Pod")
    meta = _require_object(pod.get("metadata"), "Pod.metadata")
    _name_field(meta.get("name"), "Pod.metadata.name")
    ns = meta.get("namespace", "default")
    if not isinstance(ns, str) or len(ns) > MAX_NAME_LENGTH:
        raise RequestError(
            f"Pod.metadata.namespace: must be a string of at most {MAX_NAME_LENGTH} characters, "
            f"got {short(ns)}"
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
