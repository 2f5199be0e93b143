"""Issue 24 point 5 on the real control plane: a tenant cannot choose its own priority.

A DLJob's priority is its ``spec.priorityClassName``'s value, resolved by the operator; the
replica pods carry the class, so the apiserver's ResourceQuota scopes apply to them through the
operator's server-side dry run before any share is committed. Written as the attacker: a
namespace editor (Kubernetes' ``edit`` with Horus' aggregated rules, as shipped) whose quota
allows only the low class names the high one, writes a number, or puts a class in the template;
each is refused or waits with a reason and holds no GPU, and a permitted class still runs.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from operator_support import ROOT, Kube, dljob_body


@pytest.fixture
def classes(cluster: Any) -> Iterator[dict[str, str]]:
    """Two PriorityClasses of this test's own (cluster-scoped, removed afterwards)."""
    tag = uuid.uuid4().hex[:5]
    made = {"low": f"low-{tag}", "high": f"high-{tag}"}
    for name, value in ((made["low"], 10), (made["high"], 1000)):
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    yield made
    for name in made.values():
        cluster.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)


@pytest.fixture
def tenant(cluster: Any, kube: Kube) -> str:
    """A namespace editor, as shipped (manifests/rbac/users.yaml aggregated into ``edit``)."""
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "rbac" / "users.yaml"))
    user = f"tenant-{uuid.uuid4().hex[:5]}"
    cluster.kubectl(
        "create", "rolebinding", user, "--clusterrole=edit", f"--user={user}", "-n", kube.namespace
    )
    kube.wait(
        "the editor may create DLJobs (aggregation)",
        lambda: cluster.kubectl(
            "auth", "can-i", "create", "dljobs.horus.io", "-n", kube.namespace, f"--as={user}",
            check=False,
        ).stdout.strip() == "yes",
        60,
    )  # fmt: skip
    return user


def _status(kube: Kube, name: str) -> dict[str, Any]:
    return (kube.jobs_by_name().get(name) or {}).get("status") or {}


def _create_as(cluster: Any, user: str, kube: Kube, body: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "create", f"--as={user}", "-n", kube.namespace, "-f", "-", input=json.dumps(body),
        check=False,
    )  # fmt: skip


def test_a_class_above_the_namespace_quota_waits_unplaced_and_a_permitted_class_runs(
    cluster: Any,
    gpu_nodes: list[str],
    kube: Kube,
    operator_factory: Any,
    classes: dict[str, str],
    tenant: str,
) -> None:
    kube.core.create_namespaced_resource_quota(
        kube.namespace,
        {
            "metadata": {"name": "no-high-class"},
            "spec": {
                "hard": {"pods": "0"},
                "scopeSelector": {
                    "matchExpressions": [
                        {
                            "scopeName": "PriorityClass",
                            "operator": "In",
                            "values": [classes["high"]],
                        }
                    ]
                },
            },
        },
    )
    op = operator_factory()
    # What the tenant may no longer do: choose a number, or put a class in the pod template.
    number = dljob_body("number")
    number["spec"]["priority"] = 1000
    proc = _create_as(cluster, tenant, kube, number)
    assert proc.returncode != 0 and "spec.priorityClassName" in proc.stderr, proc.stderr
    in_template = dljob_body("in-template")
    in_template["spec"]["template"]["spec"]["priorityClassName"] = classes["high"]
    proc = _create_as(cluster, tenant, kube, in_template)
    assert proc.returncode != 0 and "spec.template.spec.priorityClassName" in proc.stderr
    # Above its quota: Pending with the quota's reason, never placed.
    greedy = dljob_body("greedy")
    greedy["spec"]["priorityClassName"] = classes["high"]
    assert _create_as(cluster, tenant, kube, greedy).returncode == 0
    kube.wait(
        "greedy Pending for the quota",
        lambda: _status(kube, "greedy").get("reason") == "PodQuotaExceeded",
        60,
    )
    st = _status(kube, "greedy")
    assert st["phase"] == "Pending" and "exceeded quota" in st["message"], st
    # A permitted class runs, and its pod carries the class with the apiserver's value.
    modest = dljob_body("modest")
    modest["spec"]["priorityClassName"] = classes["low"]
    assert _create_as(cluster, tenant, kube, modest).returncode == 0
    kube.wait("modest bound", lambda: kube.all_bound(["modest"]), 90)
    assert _status(kube, "modest")["priority"] == 10
    (pod,) = [p for p in kube.pods(kube.namespace) if p["metadata"]["name"] == "modest-0"]
    assert pod["spec"]["priorityClassName"] == classes["low"] and pod["spec"]["priority"] == 10
    # Nor may the tenant write the resolved value: status is the operator's.
    proc = cluster.kubectl(
        "patch", "dljob", "greedy", f"--as={tenant}", "-n", kube.namespace,
        "--subresource=status", "--type=merge", "-p", '{"status": {"priority": 1000}}',
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
    time.sleep(6)  # three more passes (resync 2 s): greedy still holds nothing
    st = _status(kube, "greedy")
    assert st["phase"] == "Pending" and not st.get("placements"), st
    assert {p["metadata"]["name"] for p in kube.pods(kube.namespace)} == {"modest-0"}
    assert "Traceback" not in op.log.read_text(errors="replace")


def test_a_missing_class_waits_then_runs_once_an_admin_creates_it(
    cluster: Any, gpu_nodes: list[str], kube: Kube, operator_factory: Any
) -> None:
    """As the Priority admission plugin refuses a pod naming a missing class and its
    controller retries: the job waits (PriorityClassNotFound), holding nothing, and is admitted
    at the class's value once the class exists (the operator watches PriorityClasses)."""
    name = f"later-{uuid.uuid4().hex[:5]}"
    operator_factory()
    body = dljob_body("later")
    body["spec"]["priorityClassName"] = name
    kube.create_jobs([body])
    kube.wait(
        "Pending for the class",
        lambda: _status(kube, "later").get("reason") == "PriorityClassNotFound",
        60,
    )
    st = _status(kube, "later")
    assert st["phase"] == "Pending" and name in st["message"] and not kube.pods(kube.namespace)
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps({**pc, "value": 42}))
    try:
        kube.wait("bound once the class exists", lambda: kube.all_bound(["later"]), 90)
        assert _status(kube, "later")["priority"] == 42
    finally:
        cluster.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)
