"""Who may ask for the DeviceClass gpu.horus.io, as a tenant, on the real apiserver: the chart's
``horus-claim-device-class`` policy (rendered with the pinned helm on the dra path, one
namespace listed in ``gpuSharing.directClaimNamespaces``, its Binding narrowed to this test's
namespaces: the session cluster is shared with other tests).

A tenant with ``edit`` may create ResourceClaims (RBAC cannot narrow that to a DeviceClass): its
direct claim of gpu.horus.io is refused by default and allowed in the listed namespace; a claim
of another class stays its own business; the operator's ServiceAccount (the same ``edit``) makes
claims of the class; a pod's ResourceClaimTemplate entry — the documented way a plain pod asks
for a share — still gets its claim from the kube-controller-manager's claim controller.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chart_policy import rendered_policy
from horus.common import constants as c

POLICY = "horus-claim-device-class"
REFUSAL = "may not make one directly in namespace"


def _claim(name: str, device_class: str = c.DRA_DEVICE_CLASS, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **meta},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
        },
    }


class Team:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        tag = uuid.uuid4().hex[:5]
        self.closed, self.open = f"classguard-{tag}", f"classguard-open-{tag}"
        self.tokens: dict[str, str] = {}

    def admin(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.cluster.kubectl(*args, input=input, check=check)

    def as_(self, who: str, ns: str, *args: str, input: str | None = None) -> Any:
        return self.cluster.kubectl(
            f"--token={self.tokens[who]}", "-n", ns, *args, check=False, input=input
        )

    def create(self, who: str, ns: str, body: dict[str, Any]) -> Any:
        return self.as_(who, ns, "create", "-f", "-", input=json.dumps(body))


@pytest.fixture(scope="module")
def team(cluster: Any) -> Iterator[Team]:
    t = Team(cluster)
    if t.admin("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "namespace", c.HORUS_NAMESPACE)
    op = c.OPERATOR_SERVICE_ACCOUNT
    if t.admin("get", "sa", op, "-n", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "sa", op, "-n", c.HORUS_NAMESPACE)
    for ns in (t.closed, t.open):
        t.admin("create", "namespace", ns)
        t.admin("create", "sa", "tenant", "-n", ns)
        t.admin(
            "create", "rolebinding", "edit", "-n", ns, "--clusterrole=edit",
            f"--serviceaccount={ns}:tenant", f"--serviceaccount={c.HORUS_NAMESPACE}:{op}",
        )  # fmt: skip
    t.tokens["tenant"] = t.admin("create", "token", "tenant", "-n", t.closed).stdout.strip()
    t.tokens["tenant-open"] = t.admin("create", "token", "tenant", "-n", t.open).stdout.strip()
    t.tokens["operator"] = t.admin("create", "token", op, "-n", c.HORUS_NAMESPACE).stdout.strip()
    docs = rendered_policy(
        "dra-claim-class.yaml",
        [t.closed, t.open],
        f"gpuSharing.directClaimNamespaces={{{t.open}}}",
    )
    t.admin(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
    try:
        _wait_enforced(t)
        yield t
    finally:
        t.admin("delete", "validatingadmissionpolicybinding", POLICY, check=False)
        t.admin("delete", "validatingadmissionpolicy", POLICY, check=False)
        for ns in (t.closed, t.open):
            t.admin("delete", "namespace", ns, "--wait=false", check=False)


def _wait_enforced(t: Team) -> None:
    deadline = time.monotonic() + 60
    while True:
        probe = _claim(f"probe-{uuid.uuid4().hex[:4]}")
        out = t.as_("tenant", t.closed, "create", "--dry-run=server", "-f", "-",
                    input=json.dumps(probe))  # fmt: skip
        if out.returncode and REFUSAL in out.stderr:
            return
        assert time.monotonic() < deadline, f"the policy is not enforced: {out.stderr}"
        time.sleep(0.5)


def test_a_tenants_direct_claim_of_the_class_is_refused_by_default(team: Team) -> None:
    out = team.create("tenant", team.closed, _claim("direct"))
    assert out.returncode != 0, out.stdout
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in out.stderr and REFUSAL in out.stderr
    assert "gpuSharing.directClaimNamespaces" in out.stderr
    # also when gpu.horus.io is only one alternative of the request
    alt = _claim("direct-alt")
    alt["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "other", "deviceClassName": "other.example.com"},
                {"name": "horus", "deviceClassName": c.DRA_DEVICE_CLASS},
            ],
        }
    ]
    out = team.create("tenant", team.closed, alt)
    assert out.returncode != 0 and REFUSAL in out.stderr, out.stderr
    for name in ("direct", "direct-alt"):
        gone = team.admin("get", "resourceclaim", name, "-n", team.closed, check=False)
        assert gone.returncode != 0


def test_a_listed_namespace_and_horus_may_make_them(team: Team) -> None:
    ok = team.create("tenant-open", team.open, _claim("listed"))
    assert ok.returncode == 0, ok.stderr
    made = team.create("operator", team.closed, _claim("made-by-horus"))
    assert made.returncode == 0, made.stderr
    other = team.create("tenant", team.closed, _claim("other", "other.example.com"))
    assert other.returncode == 0, other.stderr


def test_a_template_entry_still_gets_its_claim_from_the_claim_controller(team: Team) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "share"},
        "spec": {"spec": _claim("x")["spec"]},
    }
    out = team.create("tenant", team.closed, template)
    assert out.returncode == 0, out.stderr
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "templated"},
        "spec": {
            "schedulerName": "nobody-schedules-this",  # the claim is made before scheduling
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share"}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }
    out = team.create("tenant", team.closed, pod)
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 60
    while True:
        got = json.loads(
            team.admin("get", "pod", "templated", "-n", team.closed, "-o", "json").stdout
        )
        names = [s.get("resourceClaimName") for s in got["status"].get("resourceClaimStatuses", [])]
        if names and names[0]:
            break
        assert time.monotonic() < deadline, got["status"]
        time.sleep(0.5)
    claim = json.loads(
        team.admin("get", "resourceclaim", names[0], "-n", team.closed, "-o", "json").stdout
    )
    request = claim["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == c.DRA_DEVICE_CLASS
    # a template may not carry Horus' claim annotations (its claims would be refused)
    marked = {**template, "metadata": {"name": "marked"}}
    marked["spec"] = {
        "metadata": {"annotations": {c.ANNOTATION_CONVERTED_FOR: "uid"}},
        "spec": template["spec"]["spec"],
    }
    out = team.create("tenant", team.closed, marked)
    assert out.returncode != 0 and c.ANNOTATION_CONVERTED_FOR in out.stderr, out.stderr
