"""Who may write what (docs/operator.md): each role checked with ``kubectl auth can-i`` and
with a real forged write, on the real apiserver with the RBAC and admission policy as shipped.

The roles: the operator's and the node DaemonSet's ServiceAccounts (manifests/rbac), and
people, through Kubernetes' edit and view roles that Horus' aggregated ClusterRoles extend
(manifests/rbac/users.yaml). Done when no role but the operator's can cause a signed
assignment to exist: a forged record is refused by RBAC or the admission policy, or — for an
identity allowed to write status, like a cluster admin — never made into signed pods.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_support import ROOT, Kube, dljob_body

from horus.api.assignment import GpuAssignment, encode_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.operator.object_reads import pod_assignment_trusted

RBAC = [ROOT / "manifests" / "rbac" / f for f in ("operator.yaml", "node.yaml", "users.yaml")]


@pytest.fixture(scope="module")
def roles(cluster: Any, dljob_crd: None) -> Iterator[dict[str, Any]]:
    """Tokens of the operator, the node agent, a namespace editor and a viewer."""
    if cluster.kubectl("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        cluster.kubectl("create", "namespace", c.HORUS_NAMESPACE)
    for f in RBAC:
        cluster.kubectl("apply", "-f", str(f))
    # kube-controller-manager folds the aggregated rules into edit/view asynchronously
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rules = cluster.kubectl("get", "clusterrole", "edit", "-o", "json").stdout
        if "horus.io" in rules:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the horus-dljob-edit rules were not aggregated into 'edit'")
    team = f"team-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", team)
    for sa, role in (("alice", "edit"), ("viewer", "view")):
        cluster.kubectl("create", "serviceaccount", sa, "-n", team)
        cluster.kubectl(
            "create", "rolebinding", sa, f"--clusterrole={role}", f"--serviceaccount={team}:{sa}",
            "-n", team,
        )  # fmt: skip
    tokens = {
        "operator": ("horus-operator", c.HORUS_NAMESPACE),
        "node": ("horus-node", c.HORUS_NAMESPACE),
        "editor": ("alice", team),
        "viewer": ("viewer", team),
    }
    out = {
        name: cluster.kubectl("create", "token", sa, "-n", ns).stdout.strip()
        for name, (sa, ns) in tokens.items()
    }
    try:
        yield {"tokens": out, "team": team}
    finally:  # its hand-made pods must not disturb later tests' cluster-wide checks
        cluster.kubectl("delete", "namespace", team, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pods", "--all", "-n", team, "--grace-period=0", "--force", check=False
        )


def _as(cluster: Any, token: str, *args: str, input: str | None = None) -> Any:
    return cluster.kubectl(f"--token={token}", *args, check=False, input=input)


def _node_token(cluster: Any, node: str) -> str:
    """The node DaemonSet's token on ``node``: a pod of ``horus-node`` bound to that node and
    a token bound to the pod, so it names the node as the kubelet-mounted one does (the
    policies refuse the node identity any write without it; test_trust_admission.py)."""
    name = f"horus-node-{node}"[:63]
    if cluster.kubectl("get", "pod", name, "-n", c.HORUS_NAMESPACE, check=False).returncode:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "serviceAccountName": "horus-node",
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        cluster.kubectl("create", "-n", c.HORUS_NAMESPACE, "-f", "-", input=json.dumps(pod))
    uid = cluster.kubectl(
        "get", "pod", name, "-n", c.HORUS_NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    bound = ("--bound-object-kind=Pod", f"--bound-object-name={name}", f"--bound-object-uid={uid}")
    token: str = cluster.kubectl(
        "create", "token", "horus-node", "-n", c.HORUS_NAMESPACE, *bound
    ).stdout
    return token.strip()


# (role, verb, resource, namespace-or-"", allowed)
MATRIX = [
    ("operator", "patch", "dljobs/status", "team", True),
    ("operator", "create", "pods/binding", "team", True),
    ("operator", "get", f"secrets/{c.SIGNING_KEY_SECRET}", c.HORUS_NAMESPACE, True),
    ("operator", "list", "secrets", c.HORUS_NAMESPACE, False),
    ("operator", "delete", "nodes", "", False),
    ("node", "patch", "dljobs/status", "team", True),  # RBAC allows; the policy narrows it
    ("node", "create", "pods", "team", False),
    ("node", "create", "pods/eviction", "team", False),  # the watchdog deletes (issue 24)
    ("node", "delete", "pods", "team", True),  # RBAC allows; horus-node-own-pods narrows it
    ("node", "create", "pods/binding", "team", False),
    ("node", "get", f"secrets/{c.SIGNING_KEY_SECRET}", c.HORUS_NAMESPACE, False),
    ("node", "delete", "dljobs", "team", False),
    ("editor", "create", "dljobs", "team", True),
    ("editor", "delete", "dljobs", "team", True),
    ("editor", "patch", "dljobs/status", "team", False),
    ("editor", "create", "pods/binding", "team", False),
    ("editor", "get", f"secrets/{c.SIGNING_KEY_SECRET}", c.HORUS_NAMESPACE, False),
    ("editor", "create", "dljobs", c.HORUS_NAMESPACE, False),
    ("viewer", "get", "dljobs", "team", True),
    ("viewer", "create", "dljobs", "team", False),
    ("viewer", "patch", "dljobs/status", "team", False),
    # a DLJob's priority is a PriorityClass's value (issue 24): the operator reads the classes,
    # a tenant can neither make one nor write the resolved status.priority
    ("operator", "watch", "priorityclasses", "", True),
    ("operator", "create", "priorityclasses", "", False),
    ("editor", "create", "priorityclasses", "", False),
]


@pytest.mark.parametrize(("role", "verb", "resource", "ns", "allowed"), MATRIX)
def test_can_i(cluster: Any, roles: dict[str, Any], role: str, verb: str, resource: str, ns: str, allowed: bool) -> None:  # fmt: skip
    namespace = roles["team"] if ns == "team" else ns
    scope = ["-n", namespace] if namespace else []
    res, _, sub = resource.partition("/")
    what = [f"{res}/{sub}"] if res == "secrets" and sub else [res]
    if sub and res != "secrets":
        what.append(f"--subresource={sub}")
    proc = _as(cluster, roles["tokens"][role], "auth", "can-i", verb, *what, *scope)
    assert (proc.stdout.strip() == "yes") is allowed, (role, verb, resource, proc.stdout)


def test_forged_writes_by_each_role_never_yield_a_signed_assignment(
    cluster: Any, roles: dict[str, Any], operator_factory: Any, gpu_nodes: list[str], tmp_path: Path
) -> None:
    ring = KeyRing.generate()  # the operator's own pair for this test (a private PEM file)
    assert ring.signer is not None
    key_file = tmp_path / "private.pem"
    key_file.write_bytes(ring.signer.to_pem())
    # it publishes its public key beside the session's; no wait before it signs (a test)
    operator_factory(
        extra_args=["--assignment-key-file", str(key_file), "--key-publish-delay", "0"]
    )
    team, tokens = roles["team"], roles["tokens"]
    kube = Kube(cluster.api_client(), team)
    kube.create_jobs([dljob_body("legit")])
    kube.wait("legit bound", lambda: kube.all_bound(["legit"]), 60)
    victim = dljob_body("victim")
    victim["spec"]["template"]["spec"]["nodeSelector"] = {"horus-test/none": "x"}  # stays queued
    kube.create_jobs([victim])
    kube.wait(
        "victim queued",
        lambda: (kube.jobs_by_name()["victim"].get("status") or {}).get("phase") == "Queued",
        60,
    )
    forged = {
        "status": {
            "phase": "Scheduled",
            "placements": [
                {
                    "replica": 0,
                    "node": gpu_nodes[0],
                    "gpuUUID": "GPU-forged",
                    "gpuIndex": 0,
                    "corePercent": 100,
                    "memoryMiB": 1024,
                }
            ],
        }
    }
    patch = ["patch", "dljob", "victim", "-n", team, "--subresource=status", "--type=merge"]
    # the node agent's token (as mounted on the node legit runs on): RBAC lets it write status,
    # the admission policy refuses this
    legit_node = kube.jobs_by_name()["legit"]["status"]["placements"][0]["node"]
    node_token = _node_token(cluster, legit_node)
    node = _as(cluster, node_token, *patch, "-p", json.dumps(forged))
    assert node.returncode != 0 and "may write only status.observed" in node.stderr, node.stderr
    observed = '{"status": {"observed": {"util": 12}}}'
    ok = _as(cluster, node_token, *patch[:2], "legit", *patch[3:], "-p", observed)
    assert ok.returncode == 0, ok.stderr
    # a namespace editor and a viewer may not write status at all
    for role in ("editor", "viewer"):
        proc = _as(cluster, tokens[role], *patch, "-p", json.dumps(forged))
        assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), (role, proc.stderr)
    # an editor may create pods, but not with Horus' annotations (issue 24: the policy
    # horus-pod-annotations; before, the device plugin refused the pod any GPU)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "sneaky",
            "annotations": {
                c.ANNOTATION_GPU_ASSIGNMENT: encode_assignment(
                    GpuAssignment(gpu_nodes[0], "GPU-x", 0, 100, 1024)
                ),
                c.ANNOTATION_ASSIGNMENT_SIGNATURE: "v1:" + "0" * 64,
            },
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    made = _as(cluster, tokens["editor"], "create", "-n", team, "-f", "-", input=json.dumps(pod))
    assert made.returncode != 0 and "'horus-pod-annotations'" in made.stderr, made.stderr
    # a cluster admin may write status: the operator resets the unsigned record instead of
    # making pods from it
    cluster.kubectl(*patch, "-p", json.dumps(forged))
    kube.wait(
        "victim reset",
        lambda: (
            any(e["reason"] == "StatusRestored" for e in kube.events())
            and not (kube.jobs_by_name()["victim"].get("status") or {}).get("placements")
        ),
        60,
    )
    ring = ring.verify_only()
    signed = sorted(
        p["metadata"]["name"] for p in kube.pods(team) if pod_assignment_trusted(p, ring)
    )
    assert signed == ["legit-0"], signed
