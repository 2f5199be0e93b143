"""The chart's guard of Horus' Kueue decision (``horus-kueue-decision-annotations``,
templates/kueue-policies.yaml), checked without a cluster: shipped where the Kueue check runs
(the dra path), fails closed, denies, protects exactly the two annotations the check's
podSetUpdates carry on pods and in every kind of pod template, and exempts the operator,
cluster admins and the identities listed in ``kueue.trustedControllers`` — nobody else. What
it does is tested on a real apiserver with Kueue, JobSet and Trainer installed, as a tenant
and as those controllers (tests/integration/kueue/test_kueue_trust.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart_path import CHART, _helm, render

from horus.common import constants as c

POLICY = "horus-kueue-decision-annotations"
OPERATOR = f"system:serviceaccount:{c.HORUS_NAMESPACE}:{c.OPERATOR_SERVICE_ACCOUNT}"


def _spec(*args: str) -> dict[str, Any]:
    objs = render("--set", "gpuSharing.path=dra", *args)
    spec: dict[str, Any] = objs[("ValidatingAdmissionPolicy", POLICY)]["spec"]
    return spec


def _exempt(spec: dict[str, Any]) -> list[str]:
    """The usernames the policy's match condition leaves out, in order."""
    (condition,) = spec["matchConditions"]
    expression = condition["expression"]
    assert "'system:masters' in request.userInfo.?groups" in expression
    listed = expression.split("request.userInfo.username in", 1)[1].split(") &&", 1)[0]
    return re.findall(r"""['"]([^'"]+)['"]""", listed)


def _defaults() -> list[str]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    trusted: list[str] = values["kueue"]["trustedControllers"]
    return trusted


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
    # the manifests are the device-plugin path (manifests/operator/config.yaml): not there either
    manifests = Path(__file__).resolve().parents[3] / "manifests"
    assert not [p for p in manifests.rglob("*.yaml") if POLICY in p.read_text()]


def test_the_trusted_identities_come_from_values() -> None:
    assert _exempt(_spec()) == [OPERATOR, *_defaults()]
    lws = "system:serviceaccount:lws-system:lws-controller-manager"
    assert _exempt(_spec("--set", f"kueue.trustedControllers={{{lws}}}")) == [OPERATOR, lws]
    assert _exempt(_spec("--set-json", "kueue.trustedControllers=[]")) == [OPERATOR]


def test_the_defaults_are_kueue_its_job_controllers_and_the_pod_making_controllers() -> None:
    """Kueue's, JobSet's and Trainer's ServiceAccounts as their own kustomizations name them
    (namespace + namePrefix + name), and the kube-controller-manager with and without
    --use-service-account-credentials (the dev cluster runs with it)."""
    defaults = _defaults()
    assert defaults[:3] == [
        "system:serviceaccount:kueue-system:kueue-controller-manager",
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    ]
    assert set(defaults[3:]) == {
        "system:kube-controller-manager",
        *(
            f"system:serviceaccount:kube-system:{name}"
            for name in (
                "job-controller",
                "replicaset-controller",
                "deployment-controller",
                "statefulset-controller",
            )
        ),
    }
    assert OPERATOR not in defaults and not any("horus" in d for d in defaults)
    controllers = pytest.importorskip("horus.devcluster.workload_specs").CONTROLLERS
    for ctl in controllers.values():  # the identities the dev cluster runs them with
        account = f"{ctl.prefix}{ctl.service_account}"
        assert f"system:serviceaccount:{ctl.namespace}:{account}" in defaults, ctl.name


def test_it_guards_the_two_decision_annotations_on_every_pod_and_template() -> None:
    spec = _spec()
    assert spec["failurePolicy"] == "Fail"
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    protected = re.findall(r"'([^']+)'", variables["protected"])
    assert protected == [c.ANNOTATION_KUEUE_WORKLOAD, c.ANNOTATION_GANG_SLOTS]
    assert c.KUEUE_PODSET_LABEL not in yaml.safe_dump(spec)  # Kueue's (docs/trust-model.md)
    for key in (c.LABEL_GANG_NAME, c.ANNOTATION_GANG_SIZE):  # plain-pod gangs: the tenant's
        assert key not in protected
    rules = {
        (group, resource)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for rule in spec["matchConstraints"]["resourceRules"]:
        assert set(rule["operations"]) == {"CREATE", "UPDATE"}, rule
    assert {
        ("", "pods"),
        ("", "pods/binding"),
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("jobset.x-k8s.io", "jobsets"),
        ("trainer.kubeflow.org", "trainjobs"),
    } <= rules
    # where each kind keeps its pod templates: JobSet's replicated Jobs, TrainJob's runtime
    # patches (where Kueue writes podSetUpdates), a workload's spec.template
    for name in ("newTemplates", "oldTemplates"):
        cel = variables[name]
        assert "replicatedJobs.orValue([]).map(r, r.?template.?spec.?template.?metadata" in cel
        assert "runtimePatches.orValue([]).map(p," in cel and ".flatten()" in cel
        assert "spec.?template.?metadata.?annotations" in cel
    assert variables["oldTemplates"].startswith("request.operation != 'UPDATE' ? [] :")
    # set, changed, removed and copied all count: a value's count differs between old and new
    touched = variables["touched"]
    assert "variables.newTemplates + variables.oldTemplates" in touched
    assert touched.count(".size()") == 2
    (validation,) = spec["validations"]
    assert validation["reason"] == "Forbidden"
    assert "request.userInfo.username" in validation["messageExpression"]


@pytest.mark.parametrize(
    "value",
    [
        "system:serviceaccount:kueue-system:kueue-controller-manager",  # a string, not a list
        "{a'b}",  # a quote would end the CEL string it is put in
        "{kueue controller}",  # not a username
    ],
)
def test_the_schema_refuses_what_is_not_a_list_of_usernames(value: str) -> None:
    out = subprocess.run(
        [_helm(), "template", "horus", str(CHART), "-n", c.HORUS_NAMESPACE,
         "--set", "images.registry=registry.example.com/horus", "--set", "gpuSharing.path=dra",
         "--set", f"kueue.trustedControllers={value}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode != 0, out.stdout[:200]
    assert "kueue" in out.stderr and "trustedControllers" in out.stderr, out.stderr


def test_the_admission_check_is_created_only_when_asked_and_only_on_the_dra_path() -> None:
    asked = render("--set", "gpuSharing.path=dra", "--set", "kueue.admissionCheck.create=true")
    check = asked[("AdmissionCheck", "horus-gpu")]
    assert check["apiVersion"] == f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"
    assert check["spec"] == {"controllerName": c.KUEUE_ADMISSION_CHECK_CONTROLLER}
    renamed = render(
        "--set", "gpuSharing.path=dra", "--set", "kueue.admissionCheck.create=true",
        "--set", "kueue.admissionCheck.name=team-gpus",
    )  # fmt: skip
    assert ("AdmissionCheck", "team-gpus") in renamed
    assert not [k for k in render("--set", "gpuSharing.path=dra") if k[0] == "AdmissionCheck"]
    plugin = render(
        "--set", "gpuSharing.path=devicePlugin", "--set", "kueue.admissionCheck.create=true"
    )  # fmt: skip
    assert not [k for k in plugin if k[0] == "AdmissionCheck"]
