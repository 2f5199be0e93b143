"""Which nodes a pod template allows: nodeSelector, required node affinity, taint tolerations.

Why here: the operator binds DLJob pods itself, so no kube-scheduler filters nodes for them. A
pod bound where its ``nodeSelector`` or required ``nodeAffinity`` does not match is refused by
the kubelet (``NodeAffinity`` admission), and one bound where a ``NoExecute`` taint is not
tolerated is evicted; binding past a ``NoSchedule`` taint breaks what the node's owner asked
for. So the operator asks this module, once per distinct set of constraints, which GPU nodes
each job may use, and hands only those to the scheduling core.

The rules are kube-scheduler's (``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``
and the ``TaintToleration`` plugin): a ``nodeSelector`` entry must equal the node's label;
``nodeSelectorTerms`` are ORed, the expressions of one term ANDed, an empty term matches
nothing; operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` on labels
and ``In``/``NotIn`` on the field ``metadata.name``; every ``NoSchedule``/``NoExecute`` taint
needs a toleration (``PreferNoSchedule`` is a preference and is ignored). Preferred affinity,
pod (anti-)affinity and topology spread are not checked (documented in docs/operator.md).
Works on plain dicts (the apiserver's JSON), so it is tested without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["NodeConstraints", "constraints_of"]

_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class NodeConstraints:
    """The node constraints of one pod template (hashable: equal templates share a cache)."""

    selector: tuple[tuple[str, str], ...] = ()
    #: JSON of ``requiredDuringSchedulingIgnoredDuringExecution`` ("" when absent).
    affinity: str = ""
    #: JSON of ``tolerations`` ("" when absent).
    tolerations: str = ""

    @property
    def empty_selection(self) -> bool:
        """No nodeSelector and no required affinity (only taints can exclude a node)."""
        return not self.selector and not self.affinity

    @cached_property
    def _terms(self) -> list[dict[str, Any]]:
        required = _dict(json.loads(self.affinity)) if self.affinity else {}
        return [_dict(t) for t in _list(required.get("nodeSelectorTerms"))]

    @cached_property
    def _tolerations(self) -> list[dict[str, Any]]:
        return [_dict(t) for t in _list(json.loads(self.tolerations or "[]"))]

    def why_not(self, node: Mapping[str, Any]) -> str | None:
        """Why a pod with these constraints may not run on ``node`` (None: it may)."""
        meta = _dict(node.get("metadata"))
        labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
        name = str(meta.get("name", ""))
        for key, value in self.selector:
            if labels.get(key) != value:
                return f"nodeSelector {key}={value} does not match"
        if self.affinity and not any(_term_matches(t, labels, name) for t in self._terms):
            return "required nodeAffinity matches no term"
        tolerations = self._tolerations
        for taint in _list(_dict(node.get("spec")).get("taints")):
            taint = _dict(taint)
            if taint.get("effect") not in _HARD_EFFECTS:
                continue
            if not any(_tolerates(t, taint) for t in tolerations):
                key, value = taint.get("key", ""), taint.get("value", "")
                shown = f"{key}={value}" if value else str(key)
                return f"taint {shown}:{taint.get('effect')} is not tolerated"
        return None


def constraints_of(template: Mapping[str, Any]) -> NodeConstraints:
    """The node constraints of a pod template (``spec.nodeSelector``, ``affinity``, …)."""
    spec = _dict(template.get("spec"))
    selector = tuple(sorted((str(k), str(v)) for k, v in _dict(spec.get("nodeSelector")).items()))
    node_affinity = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    tolerations = spec.get("tolerations")
    return NodeConstraints(
        selector=selector,
        affinity=json.dumps(required, sort_keys=True) if isinstance(required, dict) else "",
        tolerations=json.dumps(tolerations, sort_keys=True) if tolerations else "",
    )


def _term_matches(term: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    exprs = [_dict(e) for e in _list(term.get("matchExpressions"))]
    fields = [_dict(e) for e in _list(term.get("matchFields"))]
    if not exprs and not fields:
        return False  # an empty term matches no node (as in Kubernetes)
    for e in exprs:
        key = str(e.get("key", ""))
        if not _label_matches(str(e.get("operator", "")), labels.get(key), e.get("values")):
            return False
    for f in fields:
        if f.get("key") != "metadata.name":
            return False
        values = [str(v) for v in _list(f.get("values"))]
        op = f.get("operator")
        if (op == "In" and name not in values) or (op == "NotIn" and name in values):
            return False
        if op not in ("In", "NotIn"):
            return False
    return True


def _label_matches(op: str, value: str | None, values_raw: object) -> bool:
    values = [str(v) for v in _list(values_raw)]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")
