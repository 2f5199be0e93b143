"""The chart's guard of a ResourceClaim's horus.io/* annotations (``horus-claim-annotations``,
templates/dra-claim-annotations.yaml), checked without a cluster: shipped exactly where the
operator makes claims (the dra path), fails closed, denies, exempts only the operator's
ServiceAccount (and cluster admins), and covers the annotations the operator signs claims
with. What it does is tested on a real apiserver as a tenant and as the operator
(tests/integration/dra/test_claim_annotations_policy.py)."""

from __future__ import annotations

import re

from test_chart_path import render

from horus.common import constants as c

POLICY = "horus-claim-annotations"


def test_shipped_on_the_dra_path_only() -> None:
    dra = render("--set", "gpuSharing.path=dra")
    assert ("ValidatingAdmissionPolicy", POLICY) in dra
    assert dra[("ValidatingAdmissionPolicyBinding", POLICY)]["spec"] == {
        "policyName": POLICY,
        "validationActions": ["Deny"],
    }
    plugin = render("--set", "gpuSharing.path=devicePlugin")
    assert ("ValidatingAdmissionPolicy", POLICY) not in plugin
    assert ("ValidatingAdmissionPolicyBinding", POLICY) not in plugin


def test_only_the_operator_is_exempt_and_every_horus_annotation_is_covered() -> None:
    spec = render("--set", "gpuSharing.path=dra")[("ValidatingAdmissionPolicy", POLICY)]["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    assert set(rule["resources"]) == {"resourceclaims", "resourceclaims/status"}
    (condition,) = spec["matchConditions"]
    users = re.findall(r"system:serviceaccount:[a-z0-9-]+:[a-z0-9-]+", condition["expression"])
    assert users == [f"system:serviceaccount:{c.HORUS_NAMESPACE}:{c.OPERATOR_SERVICE_ACCOUNT}"]
    assert "'system:masters' in request.userInfo" in condition["expression"]
    touched = {v["name"]: v["expression"] for v in spec["variables"]}["touched"]
    prefixes = set(re.findall(r"startsWith\('([^']+)'\)", touched))
    assert prefixes == {f"{c.API_GROUP}/"}
    # what the operator signs a replica claim with (claimcommit.ClaimPath.signed)
    for key in (c.ANNOTATION_GPU_ASSIGNMENT, c.ANNOTATION_ASSIGNMENT_SIGNATURE):
        assert key.startswith(f"{c.API_GROUP}/")
    # set (new or changed) and removed (in the old object only) both count
    assert "variables.oldAnnotations.filter" in touched
    assert "variables.newAnnotations.filter" in touched
