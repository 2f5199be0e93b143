"""A node offers only its own GPUs — as an attacker, on the real apiserver, with the RBAC and the
admission policies as shipped (manifests/rbac/*.yaml; the chart ships the same,
tests/unit/packaging checks that).

Root on node A holds A's ``horus-node`` token (bound to a pod on A, so it names A). Node B's
GPUs are registered to B in the GPU identity registry (ConfigMap horus-gpu-identities) by the
operator's own writer (``horus.operator.identities``, with the operator's token). A may not
publish a slice with another pool name, a device not named as the driver names them, or B's
UUIDs (neither in a ResourceSlice nor in its ``horus.io/gpu-inventory``); its own new GPU it
may. Nobody but the operator adds to the registry, and nobody changes or removes an entry — not
a tenant holding ``admin`` in the release namespace. A liar's slice written anyway (here by a
cluster admin, as an older release would have let it) leaves node B in Horus' view.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dra_cluster_support import ROOT, node_token

from horus.api.inventory import GpuDevice, encode_inventory
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.dra.slices import build_slice_spec
from horus.node.identities import parse_registry
from horus.operator.identities import IdentityRecorder, KubeIdentityApi
from horus.operator.livestate import build_live_state

RBAC = [ROOT / "manifests" / "rbac" / f for f in ("operator.yaml", "node.yaml", "users.yaml")]
NS = c.HORUS_NAMESPACE
CM = c.GPU_IDENTITIES_CONFIGMAP
SLICES = "horus-gpu-slices-own-gpus"
INVENTORY = "horus-gpu-inventory-own-gpus"
REGISTRY = "horus-gpu-identities-operator-only"


class World:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        tag = uuid.uuid4().hex[:5]
        self.tag = tag
        self.a, self.b = f"ident-a-{tag}", f"ident-b-{tag}"
        self.team = f"ident-{tag}"
        self.tokens: dict[str, str] = {}
        self.gpus_a = [GpuDevice(0, f"GPU-{tag}-a0", "H100", 81559)]
        self.gpus_b = [GpuDevice(i, f"GPU-{tag}-b{i}", "H100", 81559) for i in range(2)]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.cluster.kubectl(*args, input=input, check=check)

    def as_(self, who: str, *args: str, input: str | None = None) -> Any:
        return self.cluster.kubectl(f"--token={self.tokens[who]}", *args, check=False, input=input)

    def registry(self) -> dict[str, str]:
        out = json.loads(self.kubectl("get", "cm", CM, "-n", NS, "-o", "json").stdout)
        data: dict[str, str] = out.get("data") or {}
        return data

    def api(self, who: str) -> Any:
        from kubernetes import client

        admin = self.cluster.api_client().configuration
        conf = client.Configuration()
        conf.host, conf.ssl_ca_cert = admin.host, admin.ssl_ca_cert
        conf.api_key = {"authorization": self.tokens[who]}
        conf.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(conf)

    def slice_body(self, node: str, gpus: list[GpuDevice], **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{uuid.uuid4().hex[:4]}"},
            "spec": {**build_slice_spec(node, gpus, 1), **spec},
        }

    def slices(self) -> list[dict[str, Any]]:
        out = self.kubectl("get", "resourceslices", "-o", "json").stdout
        return [
            s
            for s in json.loads(out)["items"]
            if s["spec"].get("nodeName") in (self.a, self.b)
            and s["spec"].get("driver") == c.DRA_DRIVER_NAME
        ]


def _refused(proc: Any, policy: str, sentence: str) -> None:
    assert proc.returncode != 0, f"expected a refusal by {policy}, got: {proc.stdout}"
    assert f"ValidatingAdmissionPolicy '{policy}'" in proc.stderr, proc.stderr
    assert sentence in proc.stderr, proc.stderr


def _ok(proc: Any) -> None:
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def world(cluster: Any) -> Iterator[World]:
    w = World(cluster)
    if w.kubectl("get", "namespace", NS, check=False).returncode:
        w.kubectl("create", "namespace", NS)
    for f in RBAC:
        w.kubectl("apply", "-f", str(f))
    for name in (w.a, w.b):
        node = node_manifest(name, NodeSpec(count=1, gpus_per_node=1))
        del node["metadata"]["labels"][c.LABEL_GPU_NODE]  # no placer counts on them
        node["metadata"]["annotations"].pop(c.ANNOTATION_GPU_INVENTORY, None)
        w.kubectl("create", "-f", "-", input=json.dumps(node))
    w.kubectl("create", "namespace", w.team)
    w.kubectl("create", "serviceaccount", "mallory", "-n", w.team)
    # broad rights in the release namespace (configmaps included), but no cluster admin
    w.kubectl(
        "create", "rolebinding", f"mallory-{w.tag}", "--clusterrole=admin",
        f"--serviceaccount={w.team}:mallory", "-n", NS,
    )  # fmt: skip
    w.tokens = {
        "node-a": node_token(cluster, w.a),
        "node-b": node_token(cluster, w.b),
        "operator": w.kubectl("create", "token", c.OPERATOR_SERVICE_ACCOUNT, "-n", NS).stdout,
        "tenant": w.kubectl("create", "token", "mallory", "-n", w.team).stdout,
    }
    w.tokens = {k: v.strip() for k, v in w.tokens.items()}
    try:
        _wait_in_force(w)
        yield w
    finally:
        for s in w.slices():
            w.kubectl("delete", "resourceslice", s["metadata"]["name"], check=False)
        w.kubectl("delete", "namespace", w.team, "--wait=false", check=False)
        w.kubectl("delete", "rolebinding", f"mallory-{w.tag}", "-n", NS, check=False)
        w.kubectl("delete", "node", w.a, w.b, "--wait=false", check=False)
        for name in (w.a, w.b):
            pod = f"horus-node-{name}"[:63]
            w.kubectl("delete", "pod", pod, "-n", NS, "--force", "--grace-period=0", check=False)


def _wait_in_force(w: World) -> None:
    """Policies and role bindings take effect a moment after they are made."""
    probe = w.slice_body(w.a, w.gpus_a)
    probe["spec"]["pool"]["name"] = "elsewhere"
    deadline = time.monotonic() + 60
    while True:
        proc = w.as_("node-a", "create", "--dry-run=server", "-f", "-", input=json.dumps(probe))
        tenant = w.as_("tenant", "auth", "can-i", "patch", "configmaps", "-n", NS)
        if SLICES in proc.stderr and tenant.stdout.strip() == "yes":
            return
        assert time.monotonic() < deadline, (proc.stderr, tenant.stdout)
        time.sleep(0.5)


def _recorder(w: World) -> IdentityRecorder:
    """The operator's writer, with the operator's token, reading the live slices."""
    return IdentityRecorder(
        KubeIdentityApi(w.api("operator"), NS), lambda: ([], w.slices()), lambda: True, "test"
    )


def test_node_b_registers_its_gpus_and_the_operator_records_them(world: World) -> None:
    w = world
    _ok(w.as_("node-b", "create", "-f", "-", input=json.dumps(w.slice_body(w.b, w.gpus_b))))
    rec = _recorder(w)
    rec.tick()
    reg = w.registry()
    assert {g.uuid: reg.get(g.uuid) for g in w.gpus_b} == {g.uuid: w.b for g in w.gpus_b}


def test_node_a_cannot_publish_another_pool_a_foreign_device_or_bs_gpus(world: World) -> None:
    w = world
    b0 = w.gpus_b[0].uuid
    assert w.registry().get(b0) == w.b  # the test above
    attempts: list[tuple[str, dict[str, Any], str]] = []
    other_pool = w.slice_body(w.a, w.gpus_a)
    other_pool["spec"]["pool"]["name"] = w.b
    attempts.append(("another pool", other_pool, f"with pool {w.b}"))
    odd = w.slice_body(w.a, w.gpus_a)
    odd["spec"]["devices"][0]["name"] = "fake-0"
    attempts.append(("a device named otherwise", odd, "a device gpu-<index>"))
    qualified = w.slice_body(w.a, w.gpus_a)
    attrs = qualified["spec"]["devices"][0]["attributes"]
    attrs[f"{c.DRA_DRIVER_NAME}/uuid"] = attrs.pop("uuid")
    attempts.append(("the uuid under the qualified key", qualified, "a device gpu-<index>"))
    stolen = [w.gpus_a[0], GpuDevice(1, b0, "H100", 81559)]
    attempts.append(
        ("node B's GPU", w.slice_body(w.a, stolen), f"{b0} is registered to node {w.b}")
    )
    for what, body, sentence in attempts:
        proc = w.as_("node-a", "create", "-f", "-", input=json.dumps(body))
        _refused(proc, SLICES, sentence)
        assert what
    # its own new GPU: published, and recorded as its own
    _ok(w.as_("node-a", "create", "-f", "-", input=json.dumps(w.slice_body(w.a, w.gpus_a))))
    _recorder(w).tick()
    assert w.registry()[w.gpus_a[0].uuid] == w.a
    # and an update of its own slice that adds B's GPU: refused the same way
    (mine,) = [s for s in w.slices() if s["spec"]["nodeName"] == w.a]
    mine["spec"]["devices"] = build_slice_spec(w.a, stolen, 2)["devices"]
    proc = w.as_("node-a", "replace", "-f", "-", input=json.dumps(mine))
    _refused(proc, SLICES, f"{b0} is registered to node {w.b}")


def test_node_a_cannot_list_bs_gpus_in_its_inventory(world: World) -> None:
    """The device-plugin path: the same rule on the horus.io/gpu-inventory annotation."""
    w = world
    b0 = w.gpus_b[0].uuid
    stolen = encode_inventory([w.gpus_a[0], GpuDevice(1, b0, "H100", 81559)])
    escaped = stolen.replace(b0, b0.replace("-", "\\u002d"))
    for text, policy, sentence in (
        (stolen, INVENTORY, f"{b0} is registered to node {w.b}"),
        (escaped, INVENTORY, "no backslash"),
    ):
        patch = json.dumps({"metadata": {"annotations": {c.ANNOTATION_GPU_INVENTORY: text}}})
        _refused(w.as_("node-a", "patch", "node", w.a, "-p", patch), policy, sentence)
    own = json.dumps(
        {"metadata": {"annotations": {c.ANNOTATION_GPU_INVENTORY: encode_inventory(w.gpus_a)}}}
    )
    _ok(w.as_("node-a", "patch", "node", w.a, "-p", own))


def test_only_the_operator_adds_and_nobody_changes_or_removes_an_entry(world: World) -> None:
    w = world
    b0 = w.gpus_b[0].uuid
    new = f"GPU-{w.tag}-new"

    def patch(who: str, data: dict[str, str | None]) -> Any:
        return w.as_(who, "patch", "cm", CM, "-n", NS, "-p", json.dumps({"data": data}))

    # the tenant with admin in the release namespace: not an entry, not a change, not a delete
    _refused(patch("tenant", {new: w.a}), REGISTRY, "only the Horus operator adds entries")
    _refused(patch("tenant", {b0: w.a}), REGISTRY, "is never changed")
    _refused(patch("tenant", {b0: None}), REGISTRY, "only the Horus operator removes entries")
    _refused(w.as_("tenant", "delete", "cm", CM, "-n", NS), REGISTRY, "never deleted")
    # nor re-create it with entries of its own (after a delete it could not make anyway)
    forged = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CM}, "data": {b0: "x"}}
    proc = w.as_(
        "tenant", "create", "-n", NS, "--dry-run=server", "-f", "-", input=json.dumps(forged)
    )
    assert proc.returncode != 0 and ("AlreadyExists" in proc.stderr or REGISTRY in proc.stderr)
    # the operator re-assigns nothing either
    _refused(patch("operator", {b0: w.a}), REGISTRY, "a GPU is never re-assigned in place")
    assert w.registry()[b0] == w.b
    # what stays allowed: the operator adds, and removes (a deleted node's entries); the
    # tenant labels the ConfigMap (metadata only)
    _ok(patch("operator", {new: w.a}))
    assert w.registry()[new] == w.a
    _ok(patch("operator", {new: None}))
    assert new not in w.registry()
    _ok(w.as_("tenant", "label", "cm", CM, "-n", NS, f"seen-{w.tag}=yes"))


def test_node_b_stays_in_horus_view_when_a_liar_slice_exists(world: World) -> None:
    """A liar's slice that is already there (a cluster admin wrote it; an older release let a
    node write it) is ignored on the liar, named in a problem and an Event; B keeps its GPUs."""
    w = world
    b0 = w.gpus_b[0].uuid
    liar = w.slice_body(w.a, [GpuDevice(5, b0, "H100", 81559)])
    w.kubectl("create", "-f", "-", input=json.dumps(liar))
    rec = _recorder(w)
    rec.tick()
    nodes = [json.loads(w.kubectl("get", "node", n, "-o", "json").stdout) for n in (w.a, w.b)]
    for n in nodes:  # Ready (kwok's heartbeat may lag on a busy machine): what is read here
        n.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
    live = build_live_state(nodes, [], [], slices=w.slices(), identities=parse_registry(
        json.loads(w.kubectl("get", "cm", CM, "-n", NS, "-o", "json").stdout)
    ))  # fmt: skip
    st = live.state
    assert w.b in st.node_names, live.excluded_nodes
    assert str(st.gpu_uuid[st.gpu_id(w.b, 0)]) == b0
    on_a = [str(st.gpu_uuid[g]) for g in range(st.gpu_count) if st.node_of[g] == st.node_index(w.a)]
    assert on_a == [w.gpus_a[0].uuid]
    assert any(f"node {w.a} publishes GPU {b0}" in p for p in live.problems), live.problems
    events = json.loads(
        w.kubectl(
            "get", "events", "-n", "default", "-o", "json",
            f"--field-selector=involvedObject.name={w.a}",
        ).stdout
    )["items"]  # fmt: skip
    assert any(e["reason"] == c.EVENT_REASON_GPU_IDENTITY_CONFLICT for e in events), events
