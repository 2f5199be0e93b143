"""Node constraints of a pod template, with kube-scheduler's semantics."""

from __future__ import annotations

from typing import Any

import pytest

from horus.api.nodematch import constraints_of


def node(name: str, labels: dict[str, str] | None = None, taints: list[Any] | None = None) -> Any:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def tmpl(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "x"}], **spec}}


A100 = node("a", {"gpu": "a100", "zone": "z1", "rack": "7"})
H100 = node("h", {"gpu": "h100", "zone": "z2", "rack": "12"})
TAINTED = node(
    "t", {"gpu": "h100"}, [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
)


def test_no_constraints_allow_every_untainted_node() -> None:
    c = constraints_of(tmpl())
    assert c.empty_selection
    assert c.why_not(A100) is None and c.why_not(H100) is None
    assert c.why_not(TAINTED) == "taint dedicated=infer:NoSchedule is not tolerated"


def test_node_selector() -> None:
    c = constraints_of(tmpl(nodeSelector={"gpu": "a100"}))
    assert c.why_not(A100) is None
    assert c.why_not(H100) == "nodeSelector gpu=a100 does not match"


@pytest.mark.parametrize(
    ("expr", "allowed"),
    [
        ({"key": "gpu", "operator": "In", "values": ["h100", "b200"]}, {"h", "t"}),
        ({"key": "gpu", "operator": "NotIn", "values": ["h100"]}, {"a"}),
        ({"key": "zone", "operator": "Exists"}, {"a", "h"}),
        ({"key": "zone", "operator": "DoesNotExist"}, {"t"}),
        ({"key": "rack", "operator": "Gt", "values": ["10"]}, {"h"}),
        ({"key": "rack", "operator": "Lt", "values": ["10"]}, {"a"}),
        ({"key": "rack", "operator": "Gt", "values": ["ten"]}, set()),
        ({"key": "gpu", "operator": "Bogus", "values": ["h100"]}, set()),
    ],
)
def test_required_node_affinity_operators(expr: dict[str, Any], allowed: set[str]) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }
    c = constraints_of(
        tmpl(affinity=affinity, tolerations=[{"operator": "Exists"}])  # taints aside
    )
    got = {n["metadata"]["name"] for n in (A100, H100, TAINTED) if c.why_not(n) is None}
    assert got == allowed


def test_terms_are_ored_and_empty_term_matches_nothing() -> None:
    def with_terms(terms: list[Any]) -> Any:
        req = {"nodeSelectorTerms": terms}
        return constraints_of(
            tmpl(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": req}})
        )

    c = with_terms(
        [
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h"]}]},
        ]
    )
    assert c.why_not(A100) is None and c.why_not(H100) is None
    assert with_terms([{}]).why_not(A100) == "required nodeAffinity matches no term"
    assert with_terms([]).why_not(A100) is not None


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "infer"}, True),  # Equal is the default, any effect
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # tolerates everything
        ({"key": "dedicated", "value": "train"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations(toleration: dict[str, Any], ok: bool) -> None:
    c = constraints_of(tmpl(tolerations=[toleration]))
    assert (c.why_not(TAINTED) is None) is ok


def test_prefer_no_schedule_is_not_a_constraint() -> None:
    soft = node("s", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    assert constraints_of(tmpl()).why_not(soft) is None


def test_equal_templates_give_equal_constraints() -> None:
    a = constraints_of(tmpl(nodeSelector={"x": "1", "y": "2"}))
    b = constraints_of(tmpl(nodeSelector={"y": "2", "x": "1"}))
    assert a == b and hash(a) == hash(b)


def test_malformed_shapes_never_raise() -> None:
    c = constraints_of({"spec": {"nodeSelector": "gpu", "affinity": [], "tolerations": "x"}})
    assert c.why_not({"metadata": None, "spec": {"taints": "no"}}) is None
