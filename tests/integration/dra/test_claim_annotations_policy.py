"""The horus.io/* annotations of a ResourceClaim, as an attacker, on the real apiserver: the
chart's ``horus-claim-annotations`` policy (rendered with the pinned helm on the dra path, its
Binding narrowed to this test's namespace) lets only the operator set, change or remove them.

The operator signs each replica claim it makes (share + the record epoch it was made in,
``horus.operator.claimcommit``); a tenant who strips that lowers the rollback floor, one who
edits it or copies it onto a claim of its own forges what restore reads. A tenant holds the
namespace's ``edit`` (which lets it create and patch claims: RBAC cannot narrow that to some
annotations); the operator's ServiceAccount gets the very same ``edit`` here, so admission is
the only difference between the two. Every refused write leaves the claim as it was; what the
tenant may do with its own claims (other annotations, labels, claims without Horus'
annotations) still works.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chart_policy import rendered_policy
from horus.common import constants as c

POLICY = "horus-claim-annotations"
SIGNED = {
    c.ANNOTATION_GPU_ASSIGNMENT: 'claim:{"node":"n","gpuUUID":"GPU-0","gpuIndex":0,'
    '"corePercent":40,"memoryMiB":2048}',
    c.ANNOTATION_ASSIGNMENT_SIGNATURE: "v2:1:" + "A" * 86,
}
REFUSAL = "only the Horus operator sets, changes or removes the ResourceClaim annotations"


def _claim(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.horus.io"}}]
            }
        },
    }


class Team:
    """The test namespace, the tenant's and the operator's tokens, kubectl as each."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.namespace = f"claimguard-{uuid.uuid4().hex[:5]}"
        self.tokens: dict[str, str] = {}

    def admin(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out: subprocess.CompletedProcess[str] = self.cluster.kubectl(
            *args, input=input, check=check
        )
        return out

    def as_(
        self, who: str, *args: str, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl`` with ``who``'s token only (a refusal is a real one)."""
        out: subprocess.CompletedProcess[str] = self.cluster.kubectl(
            f"--token={self.tokens[who]}", "-n", self.namespace, *args, check=False, input=input
        )
        return out

    def annotations(self, name: str) -> dict[str, str]:
        out = self.admin("get", "resourceclaim", name, "-n", self.namespace, "-o", "json")
        ann: dict[str, str] = json.loads(out.stdout)["metadata"].get("annotations") or {}
        return ann

    def patch(self, who: str, name: str, annotations: dict[str, str | None]) -> Any:
        body = json.dumps({"metadata": {"annotations": annotations}})
        return self.as_(who, "patch", "resourceclaim", name, "--type=merge", "-p", body)


@pytest.fixture(scope="module")
def team(cluster: Any) -> Iterator[Team]:
    t = Team(cluster)
    ns = t.namespace
    t.admin("create", "namespace", ns)
    if t.admin("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "namespace", c.HORUS_NAMESPACE)
    op = c.OPERATOR_SERVICE_ACCOUNT
    if t.admin("get", "sa", op, "-n", c.HORUS_NAMESPACE, check=False).returncode:
        t.admin("create", "sa", op, "-n", c.HORUS_NAMESPACE)
    t.admin("create", "sa", "tenant", "-n", ns)
    t.admin(
        "create", "rolebinding", "edit", "-n", ns, "--clusterrole=edit",
        f"--serviceaccount={ns}:tenant", f"--serviceaccount={c.HORUS_NAMESPACE}:{op}",
    )  # fmt: skip
    t.tokens["tenant"] = t.admin("create", "token", "tenant", "-n", ns).stdout.strip()
    t.tokens["operator"] = t.admin("create", "token", op, "-n", c.HORUS_NAMESPACE).stdout.strip()
    docs = rendered_policy("dra-claim-annotations.yaml", [ns])
    t.admin(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )
    try:
        yield t
    finally:
        t.admin("delete", "validatingadmissionpolicybinding", POLICY, check=False)
        t.admin("delete", "validatingadmissionpolicy", POLICY, check=False)
        t.admin("delete", "namespace", ns, "--wait=false", check=False)


def _wait_enforced(team: Team) -> None:
    """A policy takes effect a moment after it is created (the apiserver's informers)."""
    probe = json.dumps(_claim(f"probe-{uuid.uuid4().hex[:4]}", SIGNED))
    deadline = time.monotonic() + 60
    while True:
        out = team.as_("tenant", "create", "-f", "-", input=probe)
        if out.returncode and REFUSAL in out.stderr:
            return
        if out.returncode == 0:
            team.admin("delete", "-n", team.namespace, "-f", "-", input=probe)
        assert time.monotonic() < deadline, f"the policy is not enforced: {out.stderr}"
        time.sleep(0.5)


def test_rbac_lets_the_tenant_write_claims_so_only_admission_refuses(team: Team) -> None:
    # the fixture's RoleBinding takes effect a moment after it is created (the authorizer's
    # informers; seconds on a loaded machine), as the policy does (_wait_enforced)
    deadline = time.monotonic() + 60
    for verb in ("create", "patch", "update"):
        while True:
            out = team.as_("tenant", "auth", "can-i", verb, "resourceclaims.resource.k8s.io")
            if out.stdout.strip() == "yes" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert out.stdout.strip() == "yes", (verb, out.stdout, out.stderr)


def test_only_the_operator_sets_changes_or_removes_a_claims_horus_annotations(
    team: Team,
) -> None:
    _wait_enforced(team)
    # a tenant's claim carrying Horus' signed annotations (a copy of another claim's): refused
    forged = team.as_("tenant", "create", "-f", "-", input=json.dumps(_claim("forged", SIGNED)))
    assert forged.returncode != 0 and REFUSAL in forged.stderr, forged.stderr
    assert "created a claim carrying them" in forged.stderr
    assert team.admin(
        "get", "resourceclaim", "forged", "-n", team.namespace, check=False
    ).returncode, "the forged claim exists"
    # the operator makes a replica claim as it does (claimcommit.signed)
    made = team.as_("operator", "create", "-f", "-", input=json.dumps(_claim("replica", SIGNED)))
    assert made.returncode == 0, made.stderr
    assert team.annotations("replica") == SIGNED
    attempts: list[tuple[str, Any]] = [
        ("change", team.patch("tenant", "replica", {c.ANNOTATION_GPU_ASSIGNMENT: "claim:{}"})),
        ("strip", team.patch("tenant", "replica", {c.ANNOTATION_ASSIGNMENT_SIGNATURE: None})),
        ("strip both", team.patch("tenant", "replica", dict.fromkeys(SIGNED))),
        ("add", team.patch("tenant", "replica", {f"{c.API_GROUP}/anything": "x"})),
        ("mark converted", team.patch("tenant", "replica", {c.ANNOTATION_CONVERTED_FOR: "uid"})),
        (
            "kubectl annotate -",
            team.as_(
                "tenant", "annotate", "resourceclaim", "replica", f"{c.ANNOTATION_GPU_ASSIGNMENT}-"
            ),
        ),
    ]
    for what, out in attempts:
        assert out.returncode != 0, f"tenant could {what}: {out.stdout}"
        assert REFUSAL in out.stderr and "changed them" in out.stderr, (what, out.stderr)
        assert team.annotations("replica") == SIGNED, what
    # what stays the tenant's: its own annotations and labels on the claim, plain claims
    other = team.patch("tenant", "replica", {"team.example/owner": "alice"})
    assert other.returncode == 0, other.stderr
    labelled = team.as_("tenant", "label", "resourceclaim", "replica", "app=train")
    assert labelled.returncode == 0, labelled.stderr
    assert team.annotations("replica") == {**SIGNED, "team.example/owner": "alice"}
    plain = team.as_("tenant", "create", "-f", "-", input=json.dumps(_claim("plain", {})))
    assert plain.returncode == 0, plain.stderr
    # the operator may change and remove them; so may a cluster admin (system:masters)
    moved = team.patch("operator", "replica", {c.ANNOTATION_GPU_ASSIGNMENT: "claim:{}"})
    assert moved.returncode == 0, moved.stderr
    removed = team.patch("operator", "replica", dict.fromkeys(SIGNED))
    assert removed.returncode == 0, removed.stderr
    assert team.annotations("replica") == {"team.example/owner": "alice"}
    team.admin(
        "annotate", "resourceclaim", "replica", "-n", team.namespace,
        f"{c.ANNOTATION_GPU_ASSIGNMENT}=claim:admin",
    )  # fmt: skip
    assert team.annotations("replica")[c.ANNOTATION_GPU_ASSIGNMENT] == "claim:admin"
