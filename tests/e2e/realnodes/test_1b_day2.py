"""Day 2 of the chart on real nodes (issue 21): the optional Horus scheduler Deployment runs as
a real pod from the project-built kube-scheduler image and places a plain pod through the
extender on its loopback; a new signing key is published to the device plugins before the
operator and the extender sign with it, without a restart, and what they sign afterwards runs on
the real kubelets; the operator's PodDisruptionBudget stops a drain from taking the last
replica.

Runs before test_2 on purpose: the rotation leaves the new key in the Secret (its public key
published beside the old one), which the later tests read as the cluster's key."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from realnode_support import (
    apply,
    diagnose,
    plain_pod,
    pods_of,
    running,
    share_line,
    wait_for,
    workload_job,
)

from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing, SigningKey
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.images import LOCAL_REGISTRY, kubernetes_version

SCHEDULER = "horus-kube-scheduler"  # the chart's scheduler.schedulerName
KEYS_PATH = "/var/run/horus/verify-keys/keys.pem"  # the chart's mount of the public keys
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"


def _component(rc: RealCluster, component: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _ready(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def _run_plain_pod(rc: RealCluster, name: str, core: int, memory_mib: int) -> dict[str, Any]:
    """Apply a plain pod for the Horus scheduler; return it once its container printed the
    share it received (so the device plugin's Allocate accepted its signature)."""
    apply(rc, plain_pod(name, core, memory_mib, SCHEDULER))
    pod: dict[str, Any] = wait_for(
        f"{name} bound by the Horus scheduler and running",
        lambda: (p := rc.kube.json("get", "pod", name)) and running(p) and p,
        120,
        diagnose(rc),
    )
    share = wait_for(f"{name} printed its share", lambda: share_line(rc, name), 30, diagnose(rc))
    assert share["env"][c.ENV_GPU_CORE_PERCENT] == str(core)
    assert share["env"][c.ENV_POD_NAME] == name
    return pod


def _signed_with(pod: dict[str, Any], key: SigningKey) -> bool:
    """Signed for this very pod (its UID) by ``key``."""
    return read_pod_assignment(pod, KeyRing(key.public)).trusted


def _secret_key(rc: RealCluster) -> SigningKey:
    secret = rc.kube.json("get", "secret", c.SIGNING_KEY_SECRET, "-n", NAMESPACE)
    pem = base64.b64decode(secret["data"][c.SIGNING_KEY_SECRET_ENTRY])
    return SigningKey.from_pem(pem, "the signing Secret")


def _delete_pod(rc: RealCluster, name: str) -> None:
    rc.kube.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False)


def test_horus_scheduler_pod_places_a_plain_pod_through_its_loopback_extender(
    rc: RealCluster,
) -> None:
    (sched,) = wait_for(
        "the Horus scheduler pod Ready",
        lambda: (p := _component(rc, "scheduler")) and all(map(_ready, p)) and p,
        60,
        diagnose(rc, NAMESPACE),
    )
    containers = {s["name"]: s for s in sched["status"]["containerStatuses"]}
    tag = kubernetes_version(rc.kube.bin_dir)
    assert containers["kube-scheduler"]["image"] == f"{LOCAL_REGISTRY}/kube-scheduler:{tag}"
    assert all(s["restartCount"] == 0 for s in containers.values()), containers
    assert sched["spec"]["nodeName"] in rc.nodes

    name = "via-horus-scheduler"
    try:
        pod = _run_plain_pod(rc, name, 20, 2048)
        assert pod["spec"]["nodeName"] in rc.nodes
        a = json.loads(pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
        assert (a["node"], a["corePercent"]) == (pod["spec"]["nodeName"], 20)
        assert _signed_with(pod, _secret_key(rc))
        # the extender bound it (kube-scheduler's own binder would not write an assignment),
        # and the scheduler pod holds its own leader Lease
        lease = rc.kube.json("get", "lease", SCHEDULER, "-n", NAMESPACE)
        assert lease["spec"]["holderIdentity"].startswith(sched["metadata"]["name"])
    finally:
        _delete_pod(rc, name)


def _put_key(rc: RealCluster, key: SigningKey) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": c.SIGNING_KEY_SECRET, "namespace": NAMESPACE},
        "stringData": {c.SIGNING_KEY_SECRET_ENTRY: key.to_pem().decode()},
    }
    rc.kube.kubectl("apply", "-f", "-", input=json.dumps(secret))


def _restarts(rc: RealCluster) -> dict[str, dict[str, int]]:
    return {
        p["metadata"]["uid"]: {
            s["name"]: s["restartCount"] for s in p["status"].get("containerStatuses") or []
        }
        for p in rc.kube.json("get", "pods", "-n", NAMESPACE)["items"]
    }


def test_a_rotated_key_reaches_every_component_without_a_restart(rc: RealCluster) -> None:
    """docs/operations.md, "Rotate the signing key", in its one step: a new private key in the Secret.
    The operator publishes its public key beside the old one; it reaches every node's mounted
    ConfigMap, and only then (key_publish_delay, 60 s) do the operator and the extender sign
    with it. Every component reloads; none restarts."""
    before = _restarts(rc)
    old = _secret_key(rc)
    new = SigningKey.generate()
    _put_key(rc, new)
    step1 = time.monotonic()
    pem = new.public.to_pem().strip()
    # the operator re-reads the Secret at most every 30 s and publishes; the kubelet refreshes
    # the mounted ConfigMap on its pod sync (syncFrequency 10 s on these nodes; 1 min default)
    for pod in _component(rc, "node"):
        name = pod["metadata"]["name"]
        for container in ("device-plugin", "agent"):
            wait_for(
                f"the new public key mounted in {name}'s {container}",
                lambda n=name, ctr=container: pem in rc.kube.kubectl(
                    "exec", "-n", NAMESPACE, n, "-c", ctr, "--", "python", "-c",
                    f"print(open({KEYS_PATH!r}).read())",
                    check=False,
                ).stdout,
                120,
                diagnose(rc, NAMESPACE),
            )  # fmt: skip
    mounted = time.monotonic() - step1
    cm = rc.kube.json("get", "configmap", c.VERIFY_KEYS_CONFIGMAP, "-n", NAMESPACE)
    not_before = cm["metadata"]["annotations"][c.ANNOTATION_KEY_PUBLISHED_PREFIX + new.id]
    assert old.public.to_pem().strip() in cm["data"][c.VERIFY_KEYS_CONFIGMAP_ENTRY]
    # signing starts at not_before; the extender re-reads at most 30 s after that
    time.sleep(max(0.0, 60 - (time.monotonic() - step1)) + 31)
    print(f"key rotation: the new public key mounted on every node {mounted:.1f}s after the change")

    job, plain = "after-rotation", "plain-after-rotation"
    try:
        apply(rc, workload_job(job, 1, 15, 1024, ["--steps", "0", "--report-seconds", "1"]))
        placed = _run_plain_pod(rc, plain, 15, 1024)
        (replica,) = wait_for(
            f"{job}'s container running",
            lambda: (p := pods_of(rc, job)) and all(map(running, p)) and p,
            120,
            diagnose(rc),
        )
        wait_for(
            f"{replica['metadata']['name']} printed its share",
            lambda: share_line(rc, replica["metadata"]["name"]),
            30,
            diagnose(rc),
        )
        # signed with the new key by the operator (the DLJob) and the extender (the plain
        # pod), and accepted by the device plugins' Allocate: both containers run
        for pod in (replica, placed):
            assert _signed_with(pod, new), pod["metadata"]["name"]
            assert not _signed_with(pod, old), pod["metadata"]["name"]
        scheduled = rc.kube.json("get", "dljob", job)["status"]["scheduledTime"]
        assert scheduled >= not_before, (scheduled, not_before)  # published before it signed
        events = rc.kube.json(
            "get", "events", "-n", "default", "--field-selector",
            f"reason={c.EVENT_REASON_ALLOCATE_REFUSED}",
        )["items"]  # fmt: skip
        assert events == [], [e["message"] for e in events]
    finally:
        rc.kube.kubectl("delete", "dljob", job, "--wait=false", check=False)
        _delete_pod(rc, plain)
    assert _restarts(rc) == before  # nothing restarted (or was replaced) to get there
    wait_for("the rotation's pods gone", lambda: not pods_of(rc, job), 60, diagnose(rc))


def test_pdb_stops_a_drain_from_taking_the_last_operator_replica(rc: RealCluster) -> None:
    """Both nodes cordoned (nowhere for a replacement to go); draining the node of one replica
    evicts it, draining the other's is refused by the PodDisruptionBudget. Only the operator
    pods are drained (``--pod-selector``), so the DLJobs of the later tests are untouched."""
    replicas = wait_for(
        "two operator replicas Ready",
        lambda: (p := _component(rc, "operator")) and len(p) == 2 and all(map(_ready, p)) and p,
        60,
        diagnose(rc, NAMESPACE),
    )
    wait_for(
        "the disruption controller to allow one eviction",
        lambda: (
            rc.kube.json("get", "pdb", "horus-operator", "-n", NAMESPACE)["status"].get(
                "disruptionsAllowed"
            )
            == 1
        ),
        60,
        diagnose(rc, NAMESPACE),
    )
    holder = rc.kube.json("get", "lease", "horus-operator", "-n", NAMESPACE)["spec"][
        "holderIdentity"
    ]
    # the follower first, so the leader keeps placing
    replicas.sort(key=lambda p: holder.startswith(p["metadata"]["name"]))
    follower, leader = replicas
    drain = ("drain", "--pod-selector", OPERATOR_SELECTOR, "--ignore-daemonsets")
    drain += ("--delete-emptydir-data", "--timeout=15s")
    try:
        for node in rc.nodes:
            rc.kube.kubectl("cordon", node)
        first = rc.kube.kubectl(*drain, follower["spec"]["nodeName"], check=False, timeout=60)
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"pod/{follower['metadata']['name']} evicted" in first.stdout, first.stdout
        second = rc.kube.kubectl(*drain, leader["spec"]["nodeName"], check=False, timeout=60)
        text = second.stdout + second.stderr
        assert second.returncode != 0, text
        assert "Cannot evict pod as it would violate the pod's disruption budget" in text, text
        # the last replica still runs, and nothing took its place
        live = [p for p in _component(rc, "operator") if running(p)]
        assert [p["metadata"]["uid"] for p in live] == [leader["metadata"]["uid"]]
    finally:
        for node in rc.nodes:
            rc.kube.kubectl("uncordon", node, check=False)
    wait_for(
        "two operator replicas Ready again",
        lambda: (p := _component(rc, "operator")) and len(p) == 2 and all(map(_ready, p)),
        120,
        diagnose(rc, NAMESPACE),
    )
