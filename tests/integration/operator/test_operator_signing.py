"""Signatures bound to identity and time, and a lost or rotated key (issue 24, WP1), on the real
control plane: the apiserver, kwok nodes, the operator as a subprocess.

What each test proves is its docstring. They change the cluster-wide key pair (Secret
horus-system/horus-signing-key, ConfigMap horus-system/horus-verify-keys); :func:`keys` puts
both back as they were, so later tests sign with the session's key.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_support import ROOT, Kube, dljob_body

from horus.api.inventory import decode_inventory
from horus.api.podassignment import AssignmentProblem, read_pod_assignment
from horus.api.signing import KeyRing, SigningKey, parse_public_keys
from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.devcluster.nodes import NodeSpec, add_nodes
from horus.deviceplugin.allocator import AllocationRefused, Allocator, AssignmentKey
from horus.deviceplugin.kube import KubeApi
from horus.operator.jobapi import KubeJobApi
from horus.operator.livestate import build_live_state

#: The operator re-reads the key every 0.5 s (30 s in a cluster) and a new key signs 3 s after
#: it is published (60 s in a cluster): the same logic, at test speed.
KEY_ARGS = ["--key-refresh-seconds", "0.5", "--key-publish-delay", "3"]


@pytest.fixture
def keys(cluster: Any) -> Iterator[Any]:
    """The CoreV1Api; afterwards the signing Secret and the published ConfigMap are restored."""
    from kubernetes import client

    core: Any = client.CoreV1Api(cluster.api_client())
    if cluster.kubectl("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        cluster.kubectl("create", "namespace", c.HORUS_NAMESPACE)
    saved_secret = _read(core.read_namespaced_secret, c.SIGNING_KEY_SECRET)
    saved_cm = _read(core.read_namespaced_config_map, c.VERIFY_KEYS_CONFIGMAP)
    try:
        yield core
    finally:
        if saved_secret is not None:
            _delete_secret(core)
            core.create_namespaced_secret(
                c.HORUS_NAMESPACE,
                {"metadata": {"name": c.SIGNING_KEY_SECRET}, "data": saved_secret.data},
            )
        if saved_cm is not None:
            body = {
                "metadata": {
                    "name": c.VERIFY_KEYS_CONFIGMAP,
                    "annotations": saved_cm.metadata.annotations or {},
                },
                "data": saved_cm.data,
            }
            core.replace_namespaced_config_map(c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE, body)


def _read(call: Any, name: str) -> Any:
    try:
        return call(name, c.HORUS_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _delete_secret(core: Any) -> None:
    try:
        core.delete_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def published(core: Any) -> KeyRing:
    """The public keys as a node reads them (verify only)."""
    cm = core.read_namespaced_config_map(c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE)
    return KeyRing(parse_public_keys(cm.data[c.VERIFY_KEYS_CONFIGMAP_ENTRY], "ConfigMap"))


def pinned(name: str, node: str, core: int = 30, memory: int = 8192) -> dict[str, Any]:
    """A DLJob whose pod may run only on ``node``."""
    body = dljob_body(name, core=core, memory=memory)
    body["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


def pod_of(kube: Kube, name: str) -> dict[str, Any]:
    return next(p for p in kube.pods(kube.namespace) if p["metadata"]["name"] == name)


def condition(job: dict[str, Any], type_: str) -> str | None:
    conds = (job.get("status") or {}).get("conditions") or []
    return next((cd.get("status") for cd in conds if cd.get("type") == type_), None)


@pytest.fixture(scope="module")
def own_node(cluster: Any, dljob_crd: None) -> str:
    """A GPU node of this module's own: the pods on it are only its tests' (Allocate picks
    among the pods of one node)."""
    (name,) = add_nodes(
        cluster.kubeconfig, NodeSpec(count=1, gpus_per_node=2, prefix=f"sig{uuid.uuid4().hex[:5]}")
    )
    return name


def test_a_bindings_annotations_land_on_the_pod_only_for_its_uid(
    cluster: Any, kube: Kube, own_node: str
) -> None:
    """The mechanism the operator's signature relies on (k8s pkg/registry/core/pod/storage/
    storage.go, BindingREST.setPodNodeAndMetadata): the apiserver copies a Binding's
    metadata.annotations onto the pod in the write that sets spec.nodeName, and only when the
    Binding's metadata.uid (a precondition) is the pod's."""
    pod = {
        "metadata": {"name": "target"},
        "spec": {
            "schedulerName": "nobody-schedules-this",
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    made = kube.core.create_namespaced_pod(kube.namespace, pod)
    api = KubeJobApi(kube.api)
    note = {c.ANNOTATION_ASSIGNMENT_SIGNATURE: "v2:1:signature"}
    assert not api.bind(kube.namespace, "target", own_node, "not-its-uid", note)  # 409
    read = kube.core.read_namespaced_pod("target", kube.namespace)
    assert not read.spec.node_name and c.ANNOTATION_ASSIGNMENT_SIGNATURE not in (
        read.metadata.annotations or {}
    )
    assert api.bind(kube.namespace, "target", own_node, made.metadata.uid, note)
    read = kube.core.read_namespaced_pod("target", kube.namespace)
    assert read.spec.node_name == own_node
    assert read.metadata.annotations[c.ANNOTATION_ASSIGNMENT_SIGNATURE] == "v2:1:signature"


def test_a_replayed_pod_is_refused_by_allocate_and_not_counted(
    cluster: Any, kube: Kube, operator_factory: Any, own_node: str, keys: Any
) -> None:
    """A job's pod, signed by the operator (in its Binding), is allocated by the device
    plugin. After the job is gone, a pod re-created under the same name with the copied
    assignment and signature and a nodeName (what an admin, or a tenant before the admission
    policy, can write) does not verify — its UID and job differ —, so Allocate refuses it and
    the placers' live state does not count it."""
    operator_factory(extra_args=KEY_ARGS)
    kube.create_jobs([pinned("orig", own_node)])
    kube.wait("orig bound", lambda: kube.all_bound(["orig"]), 60)
    original = pod_of(kube, "orig-0")
    ring = published(keys)
    read = read_pod_assignment(original, ring)
    assert read.trusted and read.epoch is not None and read.epoch >= 1, read.detail
    assert not ring.can_sign
    node = kube.core.read_node(own_node)
    inventory = decode_inventory(node.metadata.annotations[c.ANNOTATION_GPU_INVENTORY])
    unit = int((node.metadata.annotations or {}).get(c.ANNOTATION_GPU_MEMORY_UNIT) or 1)
    api = KubeApi(cluster.kubeconfig)
    allocator = Allocator(api, own_node, AssignmentKey(api, None), lambda: inventory, unit)
    core_amount = read.assignment.core_percent if read.assignment else 0
    assert allocator.allocate(c.RESOURCE_GPU_CORE, core_amount).pod == "orig-0"
    kube.custom.delete_namespaced_custom_object(
        c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL, "orig"
    )
    kube.wait("orig's pod gone", lambda: not kube.pods(kube.namespace), 60)
    ann = original["metadata"]["annotations"]
    copied = {k: ann[k] for k in (c.ANNOTATION_GPU_ASSIGNMENT, c.ANNOTATION_ASSIGNMENT_SIGNATURE)}
    ctr = original["spec"]["containers"][0]
    replay = {
        "metadata": {"name": "orig-0", "annotations": copied},
        "spec": {
            "nodeName": own_node,
            "restartPolicy": "Never",
            "containers": [{k: ctr[k] for k in ("name", "image", "resources")}],
        },
    }
    kube.core.create_namespaced_pod(kube.namespace, replay)
    again = pod_of(kube, "orig-0")
    assert again["metadata"]["uid"] != original["metadata"]["uid"]
    read = read_pod_assignment(again, published(keys))
    assert read.problem is AssignmentProblem.FORGED, read.detail
    with pytest.raises(AllocationRefused, match=r"invalid horus\.io/gpu-assignment-signature"):
        allocator.allocate(c.RESOURCE_GPU_CORE, core_amount)
    live = build_live_state(kube.nodes(), kube.pods(), kube.jobs(), keys=published(keys))
    counted = [p for r in live.residents.values() for p in r.pods]
    assert f"{kube.namespace}/orig-0" not in counted
    assert any("orig-0" in p and "not counted" in p for p in live.problems), live.problems


def test_a_rolled_back_record_is_not_trusted(
    cluster: Any, kube: Kube, operator_factory: Any, gpu_nodes: list[str], keys: Any
) -> None:
    """Whoever may write dljobs/status replays the job's own earlier record, validly signed:
    "Queued, no placements", from before it was placed. Trusted, it would make the operator
    stop the running pod and place the job again. Its epoch is below the one the running pod
    was bound in, so it is restored from the pod instead — also by a freshly started operator
    that never signed for this job — and the pod is never deleted."""
    label = f"wp1-rollback-{uuid.uuid4().hex[:6]}"
    body = dljob_body("rb", core=20, memory=4096)
    body["spec"]["template"]["spec"]["nodeSelector"] = {label: "yes"}
    first = operator_factory(extra_args=KEY_ARGS)
    first.wait_leader()
    kube.create_jobs([body])
    kube.wait(
        "rb queued with no node",
        lambda: (kube.jobs_by_name()["rb"].get("status") or {}).get("phase") == "Queued",
        60,
    )
    queued = kube.jobs_by_name()["rb"]["status"]
    assert queued.get(c.STATUS_PLACEMENT_SIGNATURE) and not queued.get("placements")
    node = gpu_nodes[-1]
    cluster.kubectl("label", "node", node, f"{label}=yes")
    try:
        kube.wait("rb bound", lambda: kube.all_bound(["rb"]), 60)
        pod = pod_of(kube, "rb-0")
        bound_epoch = read_pod_assignment(pod, published(keys)).epoch
        assert bound_epoch is not None and bound_epoch > queued[c.STATUS_PLACEMENT_EPOCH]
        first.kill9()
        second = operator_factory(identity="second", extra_args=KEY_ARGS)
        second.wait_leader(90)
        obj = kube.custom.get_namespaced_custom_object(
            c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL, "rb"
        )
        obj["status"] = queued  # the old, validly signed record
        kube.custom.replace_namespaced_custom_object_status(
            c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL, "rb", obj
        )
        deadline = time.monotonic() + 60
        restored = False
        while time.monotonic() < deadline:
            now = pod_of(kube, "rb-0")
            assert now["metadata"]["uid"] == pod["metadata"]["uid"]
            assert not now["metadata"].get("deletionTimestamp"), "the running pod was deleted"
            status = kube.jobs_by_name()["rb"].get("status") or {}
            if status.get("placements") and any(
                e["reason"] == "StatusRestored" for e in kube.events()
            ):
                restored = True
                break
            time.sleep(0.2)
        assert restored, kube.jobs_by_name()["rb"].get("status")
        assert status[c.STATUS_PLACEMENT_EPOCH] > bound_epoch
        time.sleep(3)  # a few more passes: the pod stays
        assert pod_of(kube, "rb-0")["metadata"]["uid"] == pod["metadata"]["uid"]
    finally:
        cluster.kubectl("label", "node", node, f"{label}-", check=False)


def test_the_node_identity_holds_no_key_that_signs(
    cluster: Any, kube: Kube, operator_factory: Any, keys: Any
) -> None:
    """With the RBAC as shipped, the node DaemonSet's ServiceAccount may not read the signing
    Secret; what it reads (the published ConfigMap) holds public keys only, which verify the
    operator's signatures and cannot make one."""
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "rbac" / "node.yaml"))
    operator_factory(extra_args=KEY_ARGS)
    kube.wait(
        "the key pair",
        lambda: _read(keys.read_namespaced_config_map, c.VERIFY_KEYS_CONFIGMAP) is not None,
        60,
    )
    token = cluster.kubectl("create", "token", "horus-node", "-n", c.HORUS_NAMESPACE).stdout.strip()

    def as_node(*args: str) -> Any:
        return cluster.kubectl(f"--token={token}", *args, check=False)

    for verb, what in (("get", f"secrets/{c.SIGNING_KEY_SECRET}"), ("list", "secrets")):
        can = as_node("auth", "can-i", verb, what, "-n", c.HORUS_NAMESPACE)
        assert can.stdout.strip() == "no", (verb, what, can.stdout)
    got = as_node("get", "secret", c.SIGNING_KEY_SECRET, "-n", c.HORUS_NAMESPACE)
    assert got.returncode != 0 and "forbidden" in got.stderr.lower(), got.stderr
    text = as_node(
        "get", "configmap", c.VERIFY_KEYS_CONFIGMAP, "-n", c.HORUS_NAMESPACE,
        "-o", "jsonpath={.data.keys\\.pem}",
    ).stdout  # fmt: skip
    node_keys = KeyRing(parse_public_keys(text, "as the node"))
    assert node_keys.verify.raw and not node_keys.can_sign
    assert "PRIVATE" not in text
    with pytest.raises(ConfigError, match="not a PEM private key"):
        SigningKey.from_pem(text.encode(), "the node's keys.pem")
    # what the operator signs verifies with them
    kube.create_jobs([dljob_body("n", core=10, memory=1024)])
    kube.wait("n bound", lambda: kube.all_bound(["n"]), 60)
    assert read_pod_assignment(pod_of(kube, "n-0"), node_keys).trusted


def test_a_deleted_signing_key_deletes_nothing_and_placement_resumes(
    cluster: Any, kube: Kube, operator_factory: Any, gpu_nodes: list[str], keys: Any
) -> None:
    """Issue 24, point 6: deleting the signing key Secret while jobs run used to make the
    operator create a new key, distrust every record and pod, and delete every running DLJob
    pod. Now: no new key is made, no pod is deleted, every share is still counted (the
    published public keys still verify), a new job waits with condition SigningKey=False and
    a Warning Event, and once the Secret is back the job is placed."""
    operator_factory(extra_args=KEY_ARGS)
    names = [f"run{i}" for i in range(6)]
    kube.create_jobs([dljob_body(n, core=20, memory=4096) for n in names])
    kube.wait("the jobs bound", lambda: kube.all_bound(names), 90)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods(kube.namespace)}
    saved = keys.read_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
    _delete_secret(keys)
    # The operator notices within --key-refresh-seconds (a pass that read the key just before
    # the deletion may still sign with it): the new job arrives once the running ones are told.
    kube.wait(
        "running jobs told the key is missing",
        lambda: all(condition(kube.jobs_by_name()[n], "SigningKey") == "False" for n in names),
        60,
    )
    kube.create_jobs([pinned("late", gpu_nodes[0], core=10, memory=1024)])
    kube.wait(
        "late told too",
        lambda: condition(kube.jobs_by_name()["late"], "SigningKey") == "False",
        60,
    )
    warned = [e for e in kube.events() if e["reason"] == "SigningKeyUnavailable"]
    assert warned and "does not exist" in warned[0]["message"], warned[:1]
    time.sleep(3)  # several passes without a key
    assert _read(keys.read_namespaced_secret, c.SIGNING_KEY_SECRET) is None, "a new key was made"
    pods = {p["metadata"]["name"]: p for p in kube.pods(kube.namespace)}
    assert {n: p["metadata"]["uid"] for n, p in pods.items()} == uids
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
    assert not (kube.jobs_by_name()["late"].get("status") or {}).get("placements")
    live = build_live_state(kube.nodes(), kube.pods(), kube.jobs(), keys=published(keys))
    counted = {r.name for r in live.residents.values()}
    assert {f"{kube.namespace}/{n}" for n in names} <= counted
    keys.create_namespaced_secret(
        c.HORUS_NAMESPACE, {"metadata": {"name": c.SIGNING_KEY_SECRET}, "data": saved.data}
    )
    kube.wait("late placed once the key is back", lambda: kube.all_bound(["late"]), 60)
    kube.wait(
        "the jobs told it is back",
        lambda: condition(kube.jobs_by_name()["run0"], "SigningKey") == "True",
        60,
    )
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods(kube.namespace)}
    assert {n: u for n, u in pods.items() if n != "late-0"} == uids


def test_a_new_key_is_published_before_it_signs(
    cluster: Any, kube: Kube, operator_factory: Any, gpu_nodes: list[str], keys: Any
) -> None:
    """Rotation: a new private key in the Secret. The operator first adds its public key to
    the ConfigMap (keeping the old one) and signs with it only after the publish delay, so a
    node never sees a signature it has no key for; what the old key signed stays valid."""
    operator_factory(extra_args=KEY_ARGS)
    kube.create_jobs([dljob_body("before", core=10, memory=1024)])
    kube.wait("before bound", lambda: kube.all_bound(["before"]), 60)
    old_keys = published(keys)
    new = SigningKey.generate()
    secret = keys.read_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
    secret.data = {c.SIGNING_KEY_SECRET_ENTRY: base64.b64encode(new.to_pem()).decode()}
    keys.replace_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE, secret)
    kube.wait("the new public key published", lambda: new.public_raw in published(keys).verify, 30)
    cm = keys.read_namespaced_config_map(c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE)
    not_before = cm.metadata.annotations[c.ANNOTATION_KEY_PUBLISHED_PREFIX + new.id]
    assert set(old_keys.verify.raw) < set(published(keys).verify.raw)  # the old key stays
    kube.create_jobs([dljob_body("after", core=10, memory=1024)])
    kube.wait("after bound", lambda: kube.all_bound(["after"]), 60)
    status = kube.jobs_by_name()["after"]["status"]
    assert status["scheduledTime"] >= not_before, (status["scheduledTime"], not_before)
    after = pod_of(kube, "after-0")
    assert read_pod_assignment(after, KeyRing(new.public)).trusted
    assert not read_pod_assignment(after, old_keys).trusted
    before = pod_of(kube, "before-0")
    assert read_pod_assignment(before, published(keys)).trusted
    assert json.dumps(sorted(kube.phases().items()))
