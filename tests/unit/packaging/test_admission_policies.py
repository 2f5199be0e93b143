"""The admission policies that hold the trust model (issue 24), checked without a cluster:
the chart and the kustomize manifests ship the same policies, and the names the policies spell
out in CEL (protected annotations, identities, status fields) are the ones the code uses.

Why here: a policy is CEL in YAML, so a renamed annotation or a new DLJob status field would
leave it silently incomplete — a field the node agent may then overwrite. What the policies do
is tested on a real apiserver (tests/integration/operator/test_trust_admission.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.common import constants as c

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = [ROOT / "manifests" / "rbac" / f for f in ("operator.yaml", "node.yaml", "users.yaml")]
CHART_RBAC = ROOT / "charts" / "horus" / "templates" / "rbac.yaml"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _manifest_policies() -> dict[str, dict[str, Any]]:
    out = {}
    for path in MANIFESTS:
        for d in _docs(path.read_text()):
            if d["kind"] in POLICY_KINDS:
                out[f"{d['kind']}/{d['metadata']['name']}"] = d
    return out


def _device_plugin_rbac() -> str:
    """The chart's rbac.yaml as on the device-plugin path (gpuSharing.path, the path of the
    manifests): each dra-path branch left out, each else branch kept
    (tests/unit/packaging/test_chart_path.py renders both paths with helm)."""
    text = CHART_RBAC.read_text()
    block = re.compile(
        r"\n\s*\{\{- if eq \(include \"horus.placementPath\" \.\) \"dra\" \}\}.*?"
        r"(?:\{\{- else \}\}(.*?))?\n\s*\{\{- end \}\}",
        re.S,
    )
    return block.sub(lambda m: m.group(1) or "", text)


def _chart_policies() -> dict[str, dict[str, Any]]:
    """The chart's rbac.yaml with its two template expressions put as the default install has
    them (the chart refuses any namespace but horus-system)."""
    text = _device_plugin_rbac()
    text = text.replace("{{ .Release.Namespace }}", c.HORUS_NAMESPACE)
    text = re.sub(r"\n\s*\{\{- include \"horus.labels\" \. \| nindent 4 \}\}", "", text)
    text = re.sub(r"\{\{-? include \"horus.checkNamespace\" \. \}\}", "", text)
    assert "{{" not in text.split("kind: ValidatingAdmissionPolicy", 1)[1], "unrendered template"
    out = {}
    for d in _docs(text):
        if d["kind"] in POLICY_KINDS:
            out[f"{d['kind']}/{d['metadata']['name']}"] = d
    return out


def _policy(name: str) -> dict[str, Any]:
    return _manifest_policies()[f"ValidatingAdmissionPolicy/{name}"]


def _cel(policy: dict[str, Any]) -> str:
    spec = policy["spec"]
    parts = [m["expression"] for m in spec.get("matchConditions", [])]
    parts += [v["expression"] for v in spec.get("variables", [])]
    parts += [v["expression"] for v in spec["validations"]]
    return "\n".join(parts)


def _string_lists(cel: str) -> list[list[str]]:
    """Every CEL list literal of strings in ``cel``."""
    return [re.findall(r"'([^']*)'", m) for m in re.findall(r"\[([^\[\]]*'[^\[\]]*)\]", cel)]


def test_chart_and_manifests_ship_the_same_policies() -> None:
    kust, chart = _manifest_policies(), _chart_policies()
    assert sorted(kust) == sorted(chart)
    for name, doc in kust.items():
        assert doc["spec"] == chart[name]["spec"], name
        assert (
            doc["metadata"]["labels"]["app.kubernetes.io/component"]
            == (chart[name]["metadata"]["labels"]["app.kubernetes.io/component"])
        ), name


def test_every_policy_is_bound_to_deny_and_fails_closed() -> None:
    docs = _manifest_policies()
    policies = [d for d in docs.values() if d["kind"] == POLICY_KINDS[0]]
    assert len(policies) >= 7
    for p in policies:
        name = p["metadata"]["name"]
        assert p["spec"]["failurePolicy"] == "Fail", name
        binding = docs[f"ValidatingAdmissionPolicyBinding/{name}"]
        expected: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
        if "paramKind" in p["spec"]:  # the GPU identity registry: the one param there is
            assert p["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}, name
            expected["paramRef"] = {
                "name": c.GPU_IDENTITIES_CONFIGMAP,
                "namespace": c.HORUS_NAMESPACE,
                "parameterNotFoundAction": "Allow",
            }
        assert binding["spec"] == expected, name
        for v in p["spec"]["validations"]:
            assert v["reason"] == "Forbidden" and (v.get("message") or v.get("messageExpression"))


@pytest.mark.parametrize(
    "name", ["horus-pod-annotations", "horus-binding-annotations", "horus-template-annotations"]
)
def test_the_protected_annotations_are_the_ones_horus_owns(name: str) -> None:
    lists = [
        sorted(lst)
        for lst in _string_lists(_cel(_policy(name)))
        if any(k.startswith(c.API_GROUP) for k in lst)
    ]
    assert lists == [sorted(c.HORUS_OWNED_POD_ANNOTATIONS)], lists
    assert c.ANNOTATION_GRAPH_PROFILE not in c.HORUS_OWNED_POD_ANNOTATIONS  # the tenant's


def test_the_node_writes_only_its_annotations() -> None:
    pods = _cel(_policy("horus-node-own-pods"))
    assert f"k == '{c.ANNOTATION_GPU_ALLOCATED}'" in pods
    node = _cel(_policy("horus-node-own-node"))
    [allowed] = [lst for lst in _string_lists(node) if any(k.startswith(c.API_GROUP) for k in lst)]
    assert sorted(allowed) == sorted(c.NODE_WRITABLE_NODE_ANNOTATIONS)


def test_every_node_policy_refuses_a_token_without_the_node_claim_first() -> None:
    """With the same sentence, whichever policy the apiserver reports first."""
    sentence = _policy("horus-node-bound-to-node")["spec"]["validations"][0]["message"]
    assert "names no node" in sentence
    for name in (
        "horus-node-own-pods",
        "horus-node-own-node",
        "horus-node-status-observed-only",
        "horus-node-own-events",
    ):
        first = _policy(name)["spec"]["validations"][0]
        assert first["expression"] == "variables.node != ''", name
        assert first["message"] == sentence, name


def test_node_policies_read_the_token_node_claim_and_name_the_node_identity() -> None:
    node_sa = f"system:serviceaccount:{c.HORUS_NAMESPACE}:{c.NODE_SERVICE_ACCOUNT}"
    for name in (
        "horus-node-bound-to-node",
        "horus-node-own-pods",
        "horus-node-own-node",
        "horus-node-status-observed-only",
        "horus-node-own-events",
    ):
        cel = _cel(_policy(name))
        assert f"'{node_sa}'" in cel, name
        assert f"[?'{c.TOKEN_EXTRA_NODE_NAME}']" in cel, name


def test_horus_identities_are_exempt_only_where_they_write() -> None:
    sa = lambda n: f"'system:serviceaccount:{c.HORUS_NAMESPACE}:{n}'"  # noqa: E731
    pods = _policy("horus-pod-annotations")["spec"]["matchConditions"][0]["expression"]
    for n in (c.OPERATOR_SERVICE_ACCOUNT, c.KUBE_SCHEDULER_NAME, c.NODE_SERVICE_ACCOUNT):
        assert sa(n) in pods  # the node has its own, narrower policy
    binding = _policy("horus-binding-annotations")["spec"]["matchConditions"][0]["expression"]
    assert sa(c.NODE_SERVICE_ACCOUNT) not in binding and "'system:kube-scheduler'" in binding
    # the dev cluster's kwok agent is never a Horus identity of the shipped policies
    for p in _manifest_policies().values():
        assert c.KWOK_AGENT_SERVICE_ACCOUNT not in yaml.safe_dump(p)
    assert c.KWOK_AGENT_SERVICE_ACCOUNT not in CHART_RBAC.read_text()


def test_the_node_agent_keeps_every_status_field_but_observed() -> None:
    """A status field the CRD gains (placementEpoch, priority, ...) must be listed, or the node
    identity could write it."""
    crd = yaml.safe_load((ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml").read_text())
    [cel] = [
        v["expression"]
        for v in _policy("horus-node-status-observed-only")["spec"]["validations"]
        if "status.?phase" in v["expression"]
    ]
    kept = set(re.findall(r"object\.\?status\.\?(\w+) == oldObject\.\?status\.\?(\w+)", cel))
    assert all(a == b for a, b in kept)
    for version in crd["spec"]["versions"]:
        fields = set(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])
        missing = fields - {"observed"} - {a for a, _ in kept}
        assert not missing, (version["name"], missing)
    assert c.STATUS_PLACEMENT_EPOCH in {a for a, _ in kept}


def test_chart_and_manifests_grant_the_node_and_people_the_same() -> None:
    text = _device_plugin_rbac().replace("{{ .Release.Namespace }}", c.HORUS_NAMESPACE)
    text = re.sub(r"\{\{-? include [^}]*\}\}", "", text)
    chart = {d["metadata"]["name"]: d for d in _docs(text) if d["kind"] == "ClusterRole"}
    for f in ("node.yaml", "users.yaml"):
        for d in _docs((ROOT / "manifests" / "rbac" / f).read_text()):
            if d["kind"] == "ClusterRole":
                assert d["rules"] == chart[d["metadata"]["name"]]["rules"], d["metadata"]["name"]


def test_the_node_role_has_no_eviction_and_no_pod_creation() -> None:
    [role] = [
        d
        for d in _docs((ROOT / "manifests" / "rbac" / "node.yaml").read_text())
        if d["kind"] == "ClusterRole"
    ]
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert not {r for r, _ in granted} & {"pods/eviction", "pods/binding", "bindings", "secrets"}
    assert [rule["apiGroups"] for rule in role["rules"] if "events" in rule["resources"]] == [[""]]
    assert ("pods", "create") not in granted and ("nodes", "list") not in granted
    assert {("pods", "delete"), ("pods", "patch"), ("nodes", "patch")} <= granted
