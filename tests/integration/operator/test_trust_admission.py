"""Issue 24 as an attacker: the node identity is kept to its own node, and nobody but Horus
writes Horus' pod annotations — on the real apiserver, with the RBAC and the admission policies
as shipped (manifests/rbac/*.yaml; the chart ships the same, tests/unit/packaging checks that).

The node identity's token is what the kubelet mounts in the node DaemonSet's pod: a
TokenRequest bound to a pod (``kubectl create token --bound-object-kind Pod``) that is bound to
a node, so the apiserver puts the node into the token (KEP-4193) and every request made with
it carries ``authentication.kubernetes.io/node-name``. Two kwok nodes, A (the attacker's) and
B (another); the attacker holds a token bound to a pod on A. Tenants hold a namespace's
``edit``; a third-party scheduler may create Bindings. Every attempt is refused with the
policy's own sentence, and a good request of the same identity still works afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_support import ROOT

from horus.common import constants as c
from horus.devcluster.cluster import write_kubeconfig
from horus.devcluster.nodes import NodeSpec, node_manifest

RBAC = [ROOT / "manifests" / "rbac" / f for f in ("operator.yaml", "node.yaml", "users.yaml")]
POLICIES = [
    "horus-node-bound-to-node",
    "horus-node-own-pods",
    "horus-node-own-node",
    "horus-node-status-observed-only",
    "horus-node-own-events",
    "horus-pod-annotations",
    "horus-binding-annotations",
    "horus-template-annotations",
]
#: Each node policy refuses a token without the node claim first, with one sentence.
NODE_POLICIES = tuple(POLICIES[:5])
NODE_SA = c.NODE_SERVICE_ACCOUNT
NS = c.HORUS_NAMESPACE
#: What a placed pod carries (the values do not matter to admission: who writes them does).
HORUS_ANNOTATIONS = {
    c.ANNOTATION_GPU_ASSIGNMENT: '{"node":"x","gpuUUID":"GPU-0","gpuIndex":0,'
    '"corePercent":40,"memoryMiB":2048}',
    c.ANNOTATION_ASSIGNMENT_SIGNATURE: "v2:1:" + "A" * 86,
    c.ANNOTATION_PREDICTED: '{"util":35}',
}


def _pod(name: str, node: str | None, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}],
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


class World:
    """The cluster, the two nodes, the team namespace and every identity's token."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        tag = uuid.uuid4().hex[:5]
        self.node_a, self.node_b = f"trust-a-{tag}", f"trust-b-{tag}"
        self.team = f"trust-{tag}"
        self.tokens: dict[str, str] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="horus-trust-"))

    def kubeconfig_of(self, who: str) -> Path:
        """A kubeconfig with ``who``'s token and the cluster's server and CA: what the node
        DaemonSet's processes load (``horus.kube.client.api_client``)."""
        from kubernetes import config

        admin = config.new_client_from_config(config_file=self.cluster.kubeconfig).configuration
        path = self.folder / f"{who}.kubeconfig"
        write_kubeconfig(path, admin.host, Path(admin.ssl_ca_cert), self.tokens[who], who)
        return path

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        out: subprocess.CompletedProcess[str] = self.cluster.kubectl(*args, input=input)
        return out

    def as_(
        self, who: str, *args: str, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl`` with ``who``'s token (no admin fallback: a refusal is a real one)."""
        out: subprocess.CompletedProcess[str] = self.cluster.kubectl(
            f"--token={self.tokens[who]}", *args, check=False, input=input
        )
        return out

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        scope = ["-n", namespace] if namespace else []
        out: dict[str, Any] = json.loads(
            self.kubectl("get", kind, name, *scope, "-o", "json").stdout
        )
        return out

    def token(self, sa: str, namespace: str, pod: str | None = None) -> str:
        """A TokenRequest for ``sa``; bound to ``pod`` (and so to its node) when given."""
        bound: list[str] = []
        if pod:
            uid = self.get("pod", pod, namespace)["metadata"]["uid"]
            bound = [
                "--bound-object-kind=Pod",
                f"--bound-object-name={pod}",
                f"--bound-object-uid={uid}",
            ]
        args = ("create", "token", sa, "-n", namespace, "--duration=1h", *bound)
        return self.kubectl(*args).stdout.strip()

    def review(self, token: str) -> dict[str, Any]:
        """What the apiserver makes of ``token`` (TokenReview, as admin)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        out = self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(body)).stdout
        status: dict[str, Any] = json.loads(out)["status"]
        return status


def _refused(
    proc: subprocess.CompletedProcess[str], policy: str | tuple[str, ...], sentence: str
) -> None:
    """Refused by admission policy ``policy`` (or one of several that all refuse it with the
    same sentence, the apiserver reporting one) with its ``sentence``: not by RBAC, not by
    luck."""
    names = (policy,) if isinstance(policy, str) else policy
    assert proc.returncode != 0, f"expected a refusal by {names}, got: {proc.stdout}"
    assert any(f"ValidatingAdmissionPolicy '{p}'" in proc.stderr for p in names), proc.stderr
    assert sentence in proc.stderr, proc.stderr


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr


def _merge(annotations: dict[str, str | None]) -> str:
    return json.dumps({"metadata": {"annotations": annotations}})


def _wait_refused(
    what: str,
    attempt: Callable[[], subprocess.CompletedProcess[str]],
    policy: str | tuple[str, ...],
) -> None:
    """The apiserver loads new policies a moment after they are created: wait until a
    server-side dry run of a request ``policy`` must refuse is refused by it."""
    deadline = time.monotonic() + 30
    while True:
        proc = attempt()
        names = (policy,) if isinstance(policy, str) else policy
        if proc.returncode != 0 and any(f"'{p}'" in proc.stderr for p in names):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"policy {policy} not in force ({what}): {proc.stderr}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def world(cluster: Any, dljob_crd: None) -> Iterator[World]:
    w = World(cluster)
    if cluster.kubectl("get", "namespace", NS, check=False).returncode:
        cluster.kubectl("create", "namespace", NS)
    for f in RBAC:
        cluster.kubectl("apply", "-f", str(f))
    for name in (w.node_a, w.node_b):  # kwok nodes: pods bound to them run
        node = node_manifest(name, NodeSpec(count=1, gpus_per_node=1))
        del node["metadata"]["labels"][c.LABEL_GPU_NODE]  # no placer counts on them
        w.kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        _setup(w)
        yield w
    finally:
        cluster.kubectl("delete", "namespace", w.team, "--wait=false", check=False)
        for ns in (w.team, NS):
            cluster.kubectl(
                "delete",
                "pods",
                "-n",
                ns,
                "-l",
                "trust-test=1",
                "--grace-period=0",
                "--force",
                check=False,
            )
        cluster.kubectl("delete", "node", w.node_a, w.node_b, "--wait=false", check=False)
        shutil.rmtree(w.folder, ignore_errors=True)
        for kind in ("clusterrolebinding", "clusterrole"):
            cluster.kubectl("delete", kind, f"{w.team}-binder", "--ignore-not-found", check=False)


def _setup(w: World) -> None:
    team = w.team
    w.kubectl("create", "namespace", team)
    w.kubectl("create", "serviceaccount", "alice", "-n", team)
    w.kubectl(
        "create",
        "rolebinding",
        "alice",
        "--clusterrole=edit",
        f"--serviceaccount={team}:alice",
        "-n",
        team,
    )
    # a scheduler of someone else's: it may bind pods, it is not Horus
    w.kubectl("create", "serviceaccount", "binder", "-n", team)
    w.kubectl(
        "create",
        "clusterrole",
        f"{team}-binder",
        "--verb=create",
        "--resource=pods/binding,bindings",
    )
    w.kubectl(
        "create",
        "clusterrolebinding",
        f"{team}-binder",
        f"--clusterrole={team}-binder",
        f"--serviceaccount={team}:binder",
    )
    # the node DaemonSet's pod on node A, whose token the attacker (root on A) holds
    agent = _pod("horus-node-agent", w.node_a, {}, serviceAccountName=NODE_SA)
    agent["metadata"]["labels"] = {"trust-test": "1"}
    w.create(NS, agent)
    # the tenant's placed pods (the operator would have made them; here the admin does)
    for name, node in (
        ("on-a", w.node_a),
        ("on-b", w.node_b),
        ("spare-a", w.node_a),
        ("spare-b", w.node_b),
    ):
        w.create(team, _pod(name, node, HORUS_ANNOTATIONS))
    w.create(team, _pod("pending", None, {}, schedulerName="trust-test-nobody"))
    w.tokens = {
        "node": w.token(NODE_SA, NS, pod="horus-node-agent"),
        "node-unbound": w.token(NODE_SA, NS),
        "tenant": w.token("alice", team),
        "binder": w.token("binder", team),
        "operator": w.token(c.OPERATOR_SERVICE_ACCOUNT, NS),
    }
    # two DLJobs, placed on A and on B (a status as the operator writes it, by the admin)
    for job, node in (("job-a", w.node_a), ("job-b", w.node_b)):
        w.create(team, _dljob(job))
        status = {"status": {"phase": "Running", "placements": [_placement(node)]}}
        w.kubectl(
            "patch",
            "dljob",
            job,
            "-n",
            team,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(status),
        )
    _wait_for_policies(w)


def _dljob(name: str) -> dict[str, Any]:
    from operator_support import dljob_body

    body: dict[str, Any] = dljob_body(name)
    return body


def _placement(node: str) -> dict[str, Any]:
    return {
        "replica": 0,
        "node": node,
        "gpuUUID": "GPU-0",
        "gpuIndex": 0,
        "corePercent": 40,
        "memoryMiB": 2048,
    }


def _wait_for_policies(w: World) -> None:
    dry = "--dry-run=server"
    team = w.team
    alloc = _merge({c.ANNOTATION_GPU_ALLOCATED: "{}"})
    event = json.dumps(_event(team, "probe", w.node_a))
    as_b = json.dumps(_event(team, "probe-b", w.node_b))
    probes: list[
        tuple[str, Callable[[], subprocess.CompletedProcess[str]], str | tuple[str, ...]]
    ] = [
        (
            "unbound node token",
            lambda: w.as_("node-unbound", "create", "-n", team, "-f", "-", dry, input=event),
            (POLICIES[0], POLICIES[4]),
        ),
        (
            "node posts as another node",
            lambda: w.as_("node", "create", "-n", team, "-f", "-", dry, input=as_b),
            POLICIES[4],
        ),
        (
            "node patches a pod elsewhere",
            lambda: w.as_("node", "patch", "pod", "on-b", "-n", team, "-p", alloc, dry),
            POLICIES[1],
        ),
        (
            "node patches another node",
            lambda: w.as_("node", "label", "node", w.node_b, "x=y", dry),
            POLICIES[2],
        ),
        (
            "node writes a phase",
            lambda: w.as_(
                "node",
                "patch",
                "dljob",
                "job-a",
                "-n",
                team,
                "--subresource=status",
                "--type=merge",
                "-p",
                '{"status":{"phase":"Failed"}}',
                dry,
            ),
            POLICIES[3],
        ),
        (
            "tenant copies annotations",
            lambda: w.as_(
                "tenant",
                "create",
                "-n",
                team,
                "-f",
                "-",
                dry,
                input=json.dumps(_pod("probe", None, HORUS_ANNOTATIONS)),
            ),
            POLICIES[5],
        ),
        (
            "binding with annotations",
            lambda: w.as_(
                "binder",
                "create",
                "-n",
                team,
                "-f",
                "-",
                dry,
                "--validate=false",  # kubectl's own check would list CRDs, which it may not
                input=json.dumps(_binding("pending", w.node_a, HORUS_ANNOTATIONS)),
            ),
            POLICIES[6],
        ),
        (
            "template with annotations",
            lambda: w.as_(
                "tenant",
                "create",
                "-n",
                team,
                "-f",
                "-",
                dry,
                input=json.dumps(_deployment("probe", HORUS_ANNOTATIONS)),
            ),
            POLICIES[7],
        ),
    ]
    for what, attempt, policy in probes:
        _wait_refused(what, attempt, policy)


def _event(namespace: str, name: str, host: str) -> dict[str, Any]:
    """An Event as the device plugin and the agent post it: ``source.host`` is their node."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "on-a", "namespace": namespace},
        "reason": "Forged",
        "message": "nothing happened",
        "type": "Normal",
        "source": {"component": c.EVENT_COMPONENT_AGENT, "host": host},
    }


def _binding(pod: str, node: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "annotations": dict(annotations)},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def _deployment(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    template = _pod(name, None, annotations)
    template["metadata"] = {"labels": {"app": name}, "annotations": dict(annotations)}
    del template["apiVersion"], template["kind"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


# --- the node claim itself -------------------------------------------------------------------


def test_a_token_bound_to_a_pod_names_that_pods_node(world: World) -> None:
    """KEP-4193 on this apiserver (1.34): the token of a pod on node A carries node A; a token
    made for the same ServiceAccount without a pod carries no node."""
    bound = world.review(world.tokens["node"])
    assert bound["authenticated"] is True
    user = bound["user"]
    assert user["username"] == f"system:serviceaccount:{NS}:{NODE_SA}"
    assert user["extra"][c.TOKEN_EXTRA_NODE_NAME] == [world.node_a]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["horus-node-agent"]
    unbound = world.review(world.tokens["node-unbound"])["user"]
    assert c.TOKEN_EXTRA_NODE_NAME not in (unbound.get("extra") or {})


# --- the node identity --------------------------------------------------------------------------


def test_the_node_cannot_change_a_pods_image_or_assignment(world: World) -> None:
    team = world.team
    image = '{"spec":{"containers":[{"name":"c","image":"evil.example/steal-its-token"}]}}'
    # a pod on another node: refused before anything else is looked at
    _refused(
        world.as_("node", "patch", "pod", "on-b", "-n", team, "-p", image),
        "horus-node-own-pods",
        f"the node identity of node {world.node_a} may change or delete only pods bound to that "
        f"node; pod {team}/on-b is on {world.node_b}",
    )
    # a pod on its own node: the image, the assignment, a label — all refused
    only_allocated = "may change only the horus.io/gpu-allocated annotation of a pod on its node"
    for patch in (
        image,
        _merge({c.ANNOTATION_GPU_ASSIGNMENT: '{"memoryMiB": 81920}'}),
        _merge({c.ANNOTATION_ASSIGNMENT_SIGNATURE: None}),
        '{"metadata":{"labels":{"app":"other"}}}',
    ):
        proc = world.as_("node", "patch", "pod", "on-a", "-n", team, "-p", patch)
        _refused(proc, "horus-node-own-pods", only_allocated)
    # the gpu-allocated mark on another node's pod
    mark = _merge({c.ANNOTATION_GPU_ALLOCATED: '{"horus.io/gpu-core":"2026-11-25T00:00:00Z"}'})
    _refused(
        world.as_("node", "patch", "pod", "on-b", "-n", team, "-p", mark),
        "horus-node-own-pods",
        "may change or delete only pods bound to that node",
    )
    # the good request: Allocate's mark on its own node's pod
    _ok(world.as_("node", "patch", "pod", "on-a", "-n", team, "-p", mark))
    pod = world.get("pod", "on-a", team)
    assert c.ANNOTATION_GPU_ALLOCATED in pod["metadata"]["annotations"]
    assert pod["spec"]["containers"][0]["image"] == "busybox"
    assert (
        pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
        == (HORUS_ANNOTATIONS[c.ANNOTATION_GPU_ASSIGNMENT])
    )


def test_the_node_cannot_touch_another_node_or_its_own_labels_and_taints(world: World) -> None:
    a, b = world.node_a, world.node_b
    inventory = _merge({c.ANNOTATION_GPU_INVENTORY: "[]"})
    other = f"the node identity of node {a} may change only its own Node, not {b}"
    _refused(world.as_("node", "label", "node", b, "attract=me"), "horus-node-own-node", other)
    _refused(world.as_("node", "patch", "node", b, "-p", inventory), "horus-node-own-node", other)
    _refused(world.as_("node", "taint", "node", b, "x=y:NoSchedule"), "horus-node-own-node", other)
    own = "may change only the horus.io/gpu-inventory and horus.io/gpu-memory-unit-mib annotations"
    for attempt in (
        ("label", "node", a, "node-role.kubernetes.io/control-plane="),
        ("taint", "node", a, "x=y:NoSchedule"),
        ("patch", "node", a, "-p", '{"spec":{"unschedulable":true}}'),
        ("annotate", "node", a, "kwok.x-k8s.io/node=real", "--overwrite"),
    ):
        _refused(world.as_("node", *attempt), "horus-node-own-node", own)
    # the good request: the device plugin publishing its own node's inventory
    before = world.get("node", a)["metadata"]["annotations"][c.ANNOTATION_GPU_INVENTORY]
    published = _merge({c.ANNOTATION_GPU_INVENTORY: before, c.ANNOTATION_GPU_MEMORY_UNIT: "256"})
    _ok(world.as_("node", "patch", "node", a, "-p", published))
    node = world.get("node", a)
    assert node["metadata"]["annotations"][c.ANNOTATION_GPU_MEMORY_UNIT] == "256"
    assert "node-role.kubernetes.io/control-plane" not in node["metadata"]["labels"]
    assert not node["spec"].get("taints") and not node["spec"].get("unschedulable")
    assert not world.get("node", b)["metadata"]["labels"].get("attract")


def test_the_node_cannot_delete_or_evict_a_pod_elsewhere(world: World) -> None:
    team = world.team
    _refused(
        world.as_("node", "delete", "pod", "spare-b", "-n", team, "--wait=false"),
        "horus-node-own-pods",
        f"pod {team}/spare-b is on {world.node_b}",
    )
    # no Eviction at all any more (RBAC): an Eviction names no node, no policy could scope it
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "spare-b", "namespace": team},
    }
    for pod in ("spare-b", "spare-a"):
        eviction["metadata"]["name"] = pod
        proc = world.as_(
            "node",
            "create",
            "--raw",
            f"/api/v1/namespaces/{team}/pods/{pod}/eviction",
            "-f",
            "-",
            input=json.dumps(eviction),
        )
        assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
        assert "pods/eviction" in proc.stderr or "eviction" in proc.stderr, proc.stderr
    assert not world.get("pod", "spare-b", team)["metadata"].get("deletionTimestamp")
    # the good request: the watchdog deleting a pod on its own node
    _ok(world.as_("node", "delete", "pod", "spare-a", "-n", team, "--wait=false"))
    gone = world.cluster.kubectl("get", "pod", "spare-a", "-n", team, check=False)
    assert gone.returncode != 0 or json.loads(
        world.kubectl("get", "pod", "spare-a", "-n", team, "-o", "json").stdout
    )["metadata"].get("deletionTimestamp")


def test_the_agents_writes_work_only_on_its_node(world: World) -> None:
    """The agent's own calls with the node's token: ``AgentApi.delete_pod`` (what
    ``--watchdog evict`` does) — a pod elsewhere is refused (False: retried next cycle, never
    deleted), a pod re-created under the measured pod's name since is left alone (UID
    precondition), the measured pod on its node is deleted; ``patch_observed`` — only of the
    job placed on its node."""
    from horus.agent.kube import AgentApi
    from horus.agent.pods import PodInfo
    from horus.api.assignment import GpuAssignment
    from horus.kube.errors import ApiError

    team = world.team
    api = AgentApi.connect(world.kubeconfig_of("node"))

    def info(name: str, node: str) -> PodInfo:
        uid = world.get("pod", name, team)["metadata"]["uid"]
        return PodInfo(team, name, uid, node, GpuAssignment(node, "GPU-0", 0, 40, 2048))

    for name, node in (("hog-a", world.node_a), ("hog-b", world.node_b)):
        world.create(team, _pod(name, node, HORUS_ANNOTATIONS))
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    me = api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
    assert me["status"]["userInfo"]["extra"][c.TOKEN_EXTRA_NODE_NAME] == [world.node_a]
    assert api.delete_pod(info("hog-b", world.node_b)) is False
    assert not world.get("pod", "hog-b", team)["metadata"].get("deletionTimestamp")
    measured = info("hog-a", world.node_a)
    world.kubectl("delete", "pod", "hog-a", "-n", team, "--grace-period=0", "--force")
    world.create(team, _pod("hog-a", world.node_a, HORUS_ANNOTATIONS))
    assert api.delete_pod(measured) is True  # 409: the measured pod is gone
    again = world.get("pod", "hog-a", team)["metadata"]
    assert again["uid"] != measured.uid and not again.get("deletionTimestamp")
    assert api.delete_pod(info("hog-a", world.node_a)) is True
    gone = world.cluster.kubectl("get", "pod", "hog-a", "-n", team, "-o", "json", check=False)
    assert gone.returncode != 0 or json.loads(gone.stdout)["metadata"].get("deletionTimestamp")
    # its other write, status.observed: of the job placed on its node only
    api.patch_observed(team, "job-a", {"util": 21})
    assert world.get("dljob", "job-a", team)["status"]["observed"]["util"] == 21
    with pytest.raises(ApiError) as refused:
        api.patch_observed(team, "job-b", {"util": 21})
    assert refused.value.status == 403 and "horus-node-status-observed-only" in str(refused.value)


def test_the_device_plugins_writes_work_only_on_its_node(world: World) -> None:
    """The device plugin's own calls (``horus.deviceplugin.kube.KubeApi``) with the node's
    token: publishing and withdrawing its node's inventory and Allocate's mark work; the same
    calls aimed at node B or its pods, or at another annotation, are refused by the policies."""
    from kubernetes.client.exceptions import ApiException

    from horus.deviceplugin.kube import KubeApi

    team, a, b = world.team, world.node_a, world.node_b
    api = KubeApi(world.kubeconfig_of("node"))
    inventory = world.get("node", a)["metadata"]["annotations"][c.ANNOTATION_GPU_INVENTORY]
    api.patch_node_annotations(
        a, {c.ANNOTATION_GPU_INVENTORY: None, c.ANNOTATION_GPU_MEMORY_UNIT: None}
    )
    assert c.ANNOTATION_GPU_INVENTORY not in world.get("node", a)["metadata"]["annotations"]
    api.patch_node_annotations(
        a, {c.ANNOTATION_GPU_INVENTORY: inventory, c.ANNOTATION_GPU_MEMORY_UNIT: "256"}
    )
    assert world.get("node", a)["metadata"]["annotations"][c.ANNOTATION_GPU_INVENTORY] == inventory
    assert api.read_node(b) is not None  # reads stay cluster-wide
    with pytest.raises(ApiException) as refused:
        api.patch_node_annotations(b, {c.ANNOTATION_GPU_INVENTORY: "[]"})
    assert refused.value.status == 403 and "horus-node-own-node" in str(refused.value.body)
    mark = {c.ANNOTATION_GPU_ALLOCATED: '{"horus.io/gpu-memory":"2026-11-25T02:00:00Z"}'}
    api.patch_pod_annotations(team, "on-a", mark, "")
    got = world.get("pod", "on-a", team)["metadata"]["annotations"][c.ANNOTATION_GPU_ALLOCATED]
    assert got == mark[c.ANNOTATION_GPU_ALLOCATED]
    for name, wanted in (
        ("on-b", mark),
        ("on-a", {c.ANNOTATION_GPU_ASSIGNMENT: '{"memoryMiB":81920}'}),
    ):
        with pytest.raises(ApiException) as refused:
            api.patch_pod_annotations(team, name, wanted, "")
        assert refused.value.status == 403 and "horus-node-own-pods" in str(refused.value.body)


def test_the_node_writes_observed_only_of_jobs_on_its_node(world: World) -> None:
    team = world.team
    status = ("--subresource=status", "--type=merge", "-p")
    observed = '{"status":{"observed":{"util":12}}}'
    _refused(
        world.as_("node", "patch", "dljob", "job-b", "-n", team, *status, observed),
        "horus-node-status-observed-only",
        f"the node agent of node {world.node_a} may write status.observed only of a DLJob "
        "placed on that node; job-b is not",
    )
    forged = json.dumps(
        {"status": {"placements": [_placement(world.node_a) | {"memoryMiB": 81920}]}}
    )
    _refused(
        world.as_("node", "patch", "dljob", "job-a", "-n", team, *status, forged),
        "horus-node-status-observed-only",
        "the node agent may write only status.observed of a DLJob",
    )
    _ok(world.as_("node", "patch", "dljob", "job-a", "-n", team, *status, observed))
    job = world.get("dljob", "job-a", team)
    assert job["status"]["observed"]["util"] == 12
    assert job["status"]["placements"] == [_placement(world.node_a)]


def test_the_node_posts_events_only_in_its_own_name(world: World) -> None:
    """A node reporting as another (a GPUMemoryEvicted or an Allocate refusal from node B) is
    refused; its own reports go through."""
    team = world.team
    forged = _event(team, f"trust-{uuid.uuid4().hex[:6]}", world.node_b)
    proc = world.as_("node", "create", "-n", team, "-f", "-", input=json.dumps(forged))
    _refused(
        proc,
        "horus-node-own-events",
        f"the node identity of node {world.node_a} posts Events only as that node "
        f"(source.host), not as {world.node_b}",
    )
    del forged["source"]["host"]
    proc = world.as_("node", "create", "-n", team, "-f", "-", input=json.dumps(forged))
    _refused(proc, "horus-node-own-events", "not as no node")
    own = _event(team, f"trust-{uuid.uuid4().hex[:6]}", world.node_a)
    _ok(world.as_("node", "create", "-n", team, "-f", "-", input=json.dumps(own)))


def test_a_node_token_without_a_node_claim_may_write_nothing(world: World) -> None:
    """``kubectl create token horus-node`` (or a leaked token bound to nothing): the same
    ServiceAccount, no node in the token — every write refused, even one the pod-bound token
    may make."""
    team = world.team
    sentence = "this token names no node (authentication.kubernetes.io/node-name)"
    mark = _merge({c.ANNOTATION_GPU_ALLOCATED: '{"horus.io/gpu-core":"2026-11-25T01:00:00Z"}'})
    observed = '{"status":{"observed":{"util":13}}}'
    event = _event(team, f"trust-{uuid.uuid4().hex[:6]}", world.node_a)
    attempts = [
        ("patch", "pod", "on-a", "-n", team, "-p", mark),
        (
            "patch",
            "dljob",
            "job-a",
            "-n",
            team,
            "--subresource=status",
            "--type=merge",
            "-p",
            observed,
        ),
        ("annotate", "node", world.node_a, f"{c.ANNOTATION_GPU_MEMORY_UNIT}=512", "--overwrite"),
        ("delete", "pod", "on-a", "-n", team, "--wait=false"),
    ]
    for args in attempts:
        _refused(world.as_("node-unbound", *args), NODE_POLICIES, sentence)
    proc = world.as_("node-unbound", "create", "-n", team, "-f", "-", input=json.dumps(event))
    _refused(proc, NODE_POLICIES, sentence)
    # the good request: the same writes with the pod-bound token
    _ok(world.as_("node", *attempts[0]))
    _ok(world.as_("node", *attempts[1]))
    event["metadata"]["name"] += "-ok"
    _ok(world.as_("node", "create", "-n", team, "-f", "-", input=json.dumps(event)))
    assert not world.get("pod", "on-a", team)["metadata"].get("deletionTimestamp")


# --- tenants ----------------------------------------------------------------------------------


def test_a_tenant_cannot_edit_or_strip_its_pods_assignment(world: World) -> None:
    team = world.team
    attempts = {
        "raise its share": _merge({c.ANNOTATION_GPU_ASSIGNMENT: '{"memoryMiB":81920}'}),
        "strip the signature": _merge({c.ANNOTATION_ASSIGNMENT_SIGNATURE: None}),
        "strip the assignment": _merge({c.ANNOTATION_GPU_ASSIGNMENT: None}),
        "change its prediction": _merge({c.ANNOTATION_PREDICTED: '{"util":1}'}),
        "mark it allocated": _merge({c.ANNOTATION_GPU_ALLOCATED: "{}"}),
    }
    for what, patch in attempts.items():
        key = next(iter(json.loads(patch)["metadata"]["annotations"]))
        proc = world.as_("tenant", "patch", "pod", "on-b", "-n", team, "-p", patch)
        _refused(
            proc,
            "horus-pod-annotations",
            f"only Horus sets, changes or removes the pod annotations {key} "
            f"(system:serviceaccount:{team}:alice changed them)",
        )
        assert what
    # the whole object (kubectl apply/replace) with one annotation gone: refused the same way
    pod = world.get("pod", "on-b", team)
    del pod["metadata"]["annotations"][c.ANNOTATION_ASSIGNMENT_SIGNATURE]
    proc = world.as_("tenant", "replace", "-n", team, "-f", "-", input=json.dumps(pod))
    _refused(proc, "horus-pod-annotations", c.ANNOTATION_ASSIGNMENT_SIGNATURE)
    # the good request: its own label and its model profile annotation stay the tenant's
    profile = _merge({c.ANNOTATION_GRAPH_PROFILE: "{}"})
    _ok(world.as_("tenant", "patch", "pod", "on-b", "-n", team, "-p", profile))
    _ok(world.as_("tenant", "label", "pod", "on-b", "-n", team, "team=blue"))
    after = world.get("pod", "on-b", team)["metadata"]["annotations"]
    assert {k: after[k] for k in HORUS_ANNOTATIONS} == HORUS_ANNOTATIONS


@pytest.mark.parametrize("key", c.HORUS_OWNED_POD_ANNOTATIONS)
def test_a_tenant_cannot_set_change_or_remove_any_horus_annotation(world: World, key: str) -> None:
    """Each Horus pod annotation, each way a tenant with edit can write one: set on a pod
    without it, changed, removed (merge patch to null, ``kubectl annotate key-``, JSON patch
    remove). The policy is the same on both placement paths (chart rbac.yaml, outside the
    path's conditions; tests/unit/packaging)."""
    team = world.team
    bare, placed = f"bare-{key.split('/')[1]}"[:63], f"placed-{key.split('/')[1]}"[:63]
    world.create(team, _pod(bare, world.node_b, {}))
    world.create(team, _pod(placed, world.node_b, {**HORUS_ANNOTATIONS, key: "{}"}))
    sentence = f"only Horus sets, changes or removes the pod annotations {key} "
    escaped = key.replace("/", "~1")
    attempts = [
        ("set", bare, ["patch", "pod", bare, "-p", _merge({key: "{}"})]),
        ("set by annotate", bare, ["annotate", "pod", bare, f"{key}={{}}"]),
        ("change", placed, ["patch", "pod", placed, "-p", _merge({key: '{"x":1}'})]),
        ("remove", placed, ["patch", "pod", placed, "-p", _merge({key: None})]),
        ("remove by annotate", placed, ["annotate", "pod", placed, f"{key}-"]),
        (
            "remove by JSON patch",
            placed,
            ["patch", "pod", placed, "--type=json", "-p",
             json.dumps([{"op": "remove", "path": f"/metadata/annotations/{escaped}"}])],
        ),
    ]  # fmt: skip
    for what, name, args in attempts:
        before = world.get("pod", name, team)["metadata"].get("annotations") or {}
        proc = world.as_("tenant", "-n", team, *args)
        _refused(proc, "horus-pod-annotations", sentence)
        after = world.get("pod", name, team)["metadata"].get("annotations") or {}
        assert after.get(key) == before.get(key), what


def test_a_tenant_cannot_create_a_pod_with_copied_annotations(world: World) -> None:
    team = world.team
    copied = world.get("pod", "on-a", team)["metadata"]["annotations"]
    stolen = {k: v for k, v in copied.items() if k in c.HORUS_OWNED_POD_ANNOTATIONS}
    assert set(stolen) >= set(HORUS_ANNOTATIONS)
    pod = _pod("replay", world.node_a, stolen)  # straight onto the node, past any scheduler
    proc = world.as_("tenant", "create", "-n", team, "-f", "-", input=json.dumps(pod))
    _refused(proc, "horus-pod-annotations", "created a pod carrying them")
    for key in stolen:
        assert key in proc.stderr
    # one annotation is enough
    one = _pod(
        "replay-one",
        None,
        {c.ANNOTATION_ASSIGNMENT_SIGNATURE: stolen[c.ANNOTATION_ASSIGNMENT_SIGNATURE]},
    )
    proc = world.as_("tenant", "create", "-n", team, "-f", "-", input=json.dumps(one))
    _refused(proc, "horus-pod-annotations", c.ANNOTATION_ASSIGNMENT_SIGNATURE)
    # through a Deployment: refused when the tenant applies it
    dep = _deployment("replay-dep", stolen)
    proc = world.as_("tenant", "create", "-n", team, "-f", "-", input=json.dumps(dep))
    _refused(proc, "horus-template-annotations", "a pod template may not carry them")
    # the good request: the same pod without Horus' annotations (a plain pod may carry its
    # model's profile), and the same Deployment
    plain = _pod(
        "plain", None, {c.ANNOTATION_GRAPH_PROFILE: "{}"}, schedulerName="trust-test-nobody"
    )
    _ok(world.as_("tenant", "create", "-n", team, "-f", "-", input=json.dumps(plain)))
    clean = _deployment("clean-dep", {})
    _ok(world.as_("tenant", "create", "-n", team, "-f", "-", input=json.dumps(clean)))


def test_a_controller_cannot_create_pods_with_copied_annotations(world: World) -> None:
    """A workload the policy never saw (created by a cluster admin, who is exempt): its
    controller, not Horus, creates the pods, and each is refused — the ReplicaSet says why."""
    team = world.team
    rs = _deployment("admin-rs", HORUS_ANNOTATIONS)
    rs["kind"] = "ReplicaSet"
    world.create(team, rs)
    deadline = time.monotonic() + 60
    message = ""
    while time.monotonic() < deadline:
        events = json.loads(
            world.kubectl(
                "get",
                "events",
                "-n",
                team,
                "--field-selector",
                "involvedObject.name=admin-rs",
                "-o",
                "json",
            ).stdout
        )["items"]
        failed = [e for e in events if e["reason"] == "FailedCreate"]
        if failed:
            message = failed[0]["message"]
            break
        time.sleep(0.5)
    assert "ValidatingAdmissionPolicy 'horus-pod-annotations'" in message, message
    assert (
        "system:serviceaccount:kube-system:replicaset-controller created a pod carrying them"
        in message
    )
    pods = json.loads(
        world.kubectl("get", "pods", "-n", team, "-l", "app=admin-rs", "-o", "json").stdout
    )
    assert pods["items"] == []
    world.kubectl("delete", "replicaset", "admin-rs", "-n", team, "--wait=false")


def test_only_horus_and_schedulers_put_horus_annotations_into_a_binding(world: World) -> None:
    """The apiserver copies a Binding's annotations onto the pod inside the Binding request (no
    pod UPDATE for the pod policy to see): a scheduler that is not Horus may bind, but not
    carry them; a tenant may not bind at all; the operator may (that is how its signature
    reaches the pod together with the node)."""
    team = world.team
    body = _binding("pending", world.node_a, HORUS_ANNOTATIONS)
    proc = world.as_(
        "binder", "create", "-n", team, "-f", "-", "--validate=false", input=json.dumps(body)
    )
    _refused(
        proc,
        "horus-binding-annotations",
        f"only Horus puts the annotations {', '.join(HORUS_ANNOTATIONS)} into a Binding",
    )
    tenant = world.as_(
        "tenant", "create", "-n", team, "-f", "-", "--validate=false", input=json.dumps(body)
    )
    assert tenant.returncode != 0 and "forbidden" in tenant.stderr.lower(), tenant.stderr
    assert not world.get("pod", "pending", team)["spec"].get("nodeName")
    # the good requests: the same scheduler binding without them; the operator with them
    world.create(team, _pod("pending-2", None, {}, schedulerName="trust-test-nobody"))
    plain = _binding("pending", world.node_a, {})
    _ok(
        world.as_(
            "binder", "create", "-n", team, "-f", "-", "--validate=false", input=json.dumps(plain)
        )
    )
    assert world.get("pod", "pending", team)["spec"]["nodeName"] == world.node_a
    signed = _binding("pending-2", world.node_a, HORUS_ANNOTATIONS)
    _ok(
        world.as_(
            "operator",
            "create",
            "-n",
            team,
            "-f",
            "-",
            "--validate=false",
            input=json.dumps(signed),
        )
    )
    pod = world.get("pod", "pending-2", team)
    assert pod["spec"]["nodeName"] == world.node_a
    assert {k: pod["metadata"]["annotations"][k] for k in HORUS_ANNOTATIONS} == HORUS_ANNOTATIONS


def test_horus_itself_still_writes_its_annotations(world: World) -> None:
    """The operator (and the extender in its pod) annotates plain pods and creates replica pods
    with their assignment: not refused."""
    team = world.team
    patch = _merge({c.ANNOTATION_PREDICTED: '{"util":36}'})
    _ok(world.as_("operator", "patch", "pod", "on-b", "-n", team, "-p", patch))
    assert world.get("pod", "on-b", team)["metadata"]["annotations"][c.ANNOTATION_PREDICTED] == (
        '{"util":36}'
    )
    restore = _merge({c.ANNOTATION_PREDICTED: HORUS_ANNOTATIONS[c.ANNOTATION_PREDICTED]})
    _ok(world.as_("operator", "patch", "pod", "on-b", "-n", team, "-p", restore))
    # and creates a replica pod carrying its assignment (the signature follows in its Binding)
    replica = _pod("by-horus", None, HORUS_ANNOTATIONS, schedulerName="trust-test-nobody")
    _ok(world.as_("operator", "create", "-n", team, "-f", "-", input=json.dumps(replica)))
