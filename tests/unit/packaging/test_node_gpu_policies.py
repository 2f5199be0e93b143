"""The policies of issue-40's trust rules as shipped: the same pod-annotation policies on both
placement paths, the GPU identity registry as the param of the node GPU policies, and who may
ask for the DeviceClass gpu.horus.io (chart templates read as text: no helm needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "horus"
DRA_BLOCK = re.compile(
    r"\n\s*\{\{- if eq \(include \"horus.placementPath\" \.\) \"dra\" \}\}(.*?)"
    r"(?:\{\{- else \}\}(.*?))?\n\s*\{\{- end \}\}",
    re.S,
)


def _render(text: str, dra: bool) -> dict[str, dict[str, Any]]:
    """Template text as one path renders it (the path's branch of each block kept)."""
    text = DRA_BLOCK.sub(lambda m: (m.group(1) if dra else m.group(2)) or "", "\n" + text)
    text = text.replace("{{ .Release.Namespace }}", c.HORUS_NAMESPACE)
    text = re.sub(r"\n\s*\{\{- include \"horus.labels\" \. \| nindent 4 \}\}", "", text)
    text = re.sub(r"\{\{-? include \"horus.checkNamespace\" \. \}\}", "", text)
    text = re.sub(r"\{\{ \.Values\.gpuSharing\.directClaimNamespaces[^}]*\}\}", '"[]"', text)
    assert "{{" not in text, "unrendered template"
    docs = [d for d in yaml.safe_load_all(text) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def test_the_pod_annotation_policies_are_the_same_on_both_paths() -> None:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    dra, plugin = _render(text, True), _render(text, False)
    for name in (
        "horus-pod-annotations",
        "horus-binding-annotations",
        "horus-template-annotations",
    ):
        key = f"ValidatingAdmissionPolicy/{name}"
        assert dra[key]["spec"] == plugin[key]["spec"], name


def test_the_node_gpu_policies_read_the_registry_and_it_is_operator_only() -> None:
    docs = _render((CHART / "templates" / "rbac.yaml").read_text(), True)
    cm = docs[f"ConfigMap/{c.GPU_IDENTITIES_CONFIGMAP}"]
    assert cm["metadata"]["namespace"] == c.HORUS_NAMESPACE and "data" not in cm
    for name in ("horus-gpu-slices-own-gpus", "horus-gpu-inventory-own-gpus"):
        spec = docs[f"ValidatingAdmissionPolicy/{name}"]["spec"]
        assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
        cel = "\n".join(v["expression"] for v in spec["variables"] + spec["validations"])
        assert "params.?data" in cel and "variables.foreign.size() == 0" in cel
        conditions = " ".join(m["expression"] for m in spec["matchConditions"])
        assert "horus-node" not in conditions  # every identity, the kubelet included
    guard = docs["ValidatingAdmissionPolicy/horus-gpu-identities-operator-only"]["spec"]
    operator = f"system:serviceaccount:{c.HORUS_NAMESPACE}:{c.OPERATOR_SERVICE_ACCOUNT}"
    assert operator in guard["variables"][0]["expression"]
    assert guard["matchConstraints"]["resourceRules"][0]["operations"] == [
        "CREATE",
        "UPDATE",
        "DELETE",
    ]


def test_who_may_ask_for_the_device_class() -> None:
    text = (CHART / "templates" / "dra-claim-class.yaml").read_text()
    assert _render(text, False) == {}  # dra path only
    docs = _render(text, True)
    spec = docs["ValidatingAdmissionPolicy/horus-claim-device-class"]["spec"]
    exempt = spec["matchConditions"][0]["expression"]
    for who in (
        f"system:serviceaccount:{c.HORUS_NAMESPACE}:{c.OPERATOR_SERVICE_ACCOUNT}",
        "system:serviceaccount:kube-system:resource-claim-controller",
        "system:kube-controller-manager",
    ):
        assert f"'{who}'" in exempt
    assert "horus-node" not in exempt and "horus-kube-scheduler" not in exempt
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["gpuSharing"]["directClaimNamespaces"] == []
