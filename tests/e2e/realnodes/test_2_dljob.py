"""A DLJob placed by the in-cluster operator runs as real containers on two real nodes, and
each container received exactly its signed assignment (read from the container's own output);
a forged or unsigned assignment is refused by the real kubelet's admission with the device
plugin's reason, and an Event says so. The agent exports the job's per-pod metrics."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from realnode_support import (
    JOB,
    apply,
    diagnose,
    pods_of,
    query,
    running,
    share_line,
    wait_for,
    workload_job,
)

from deviceplugin_peer import assignment_annotations, pod_manifest
from horus.api.assignment import decode_assignment
from horus.api.podassignment import read_pod_assignment
from horus.api.resources import memory_units
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.images import IMAGES, reference


def test_replicas_on_two_real_nodes_get_exactly_their_signed_assignment(
    rc: RealCluster, assignment_key: KeyRing, prometheus: str
) -> None:
    # 60 % each: two replicas cannot share one GPU, and each node has one.
    apply(rc, workload_job(JOB, 2, 60, 8192, ["--steps", "0", "--report-seconds", "1"]))
    pods = wait_for(
        f"{JOB}'s two containers running",
        lambda: (p := pods_of(rc, JOB)) and len(p) == 2 and all(map(running, p)) and p,
        120,
        diagnose(rc),
    )
    assert {p["spec"]["nodeName"] for p in pods} == set(rc.nodes)
    config = rc.kube.json("get", "configmap", "horus-config", "-n", NAMESPACE)
    pipe = yaml.safe_load(config["data"]["config.yaml"])["deviceplugin"]["mps_pipe_dir"]
    for pod in pods:
        meta = pod["metadata"]
        text = meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
        # signed for this pod's UID and its DLJob's (the operator's Binding carried it)
        assert read_pod_assignment(pod, assignment_key).trusted
        a = decode_assignment(text)
        assert a.node == pod["spec"]["nodeName"]
        out: dict[str, Any] = wait_for(
            f"{meta['name']} printed its share",
            lambda name=meta["name"]: share_line(rc, name),
            30,
            diagnose(rc),
        )
        env = out["env"]
        assert env == {
            # the chart's default gpuAccess=volume-mounts: the GPU is a mount, not a variable
            "NVIDIA_VISIBLE_DEVICES": c.NVIDIA_DEVICE_MOUNT_ROOT,
            "CUDA_VISIBLE_DEVICES": a.gpu_uuid,
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(a.core_percent),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={a.memory_mib}M",
            "CUDA_MPS_PIPE_DIRECTORY": pipe,
            c.ENV_GPU_UUID: a.gpu_uuid,
            c.ENV_GPU_INDEX: str(a.gpu_index),
            c.ENV_GPU_CORE_PERCENT: str(a.core_percent),
            c.ENV_GPU_MEMORY_MIB: str(a.memory_mib),
            c.ENV_POD_NAMESPACE: meta["namespace"],
            c.ENV_POD_NAME: meta["name"],
            c.ENV_POD_UID: meta["uid"],
            c.ENV_NODE_NAME: a.node,
            c.ENV_ENFORCEMENT: "mps",
            # its own progress directory (issue 26), where it reports steps and samples
            "HORUS_PROGRESS_DIR": "/var/run/horus/progress",
        }
        assert (a.core_percent, a.memory_mib) == (60, 8192)
        # the MPS pipe directory is a mount of the container, as Allocate asked
        assert out["mps_pipe_directory"] == pipe and out["mps_pipe_mounted"] is True
        # exactly its own GPU is mounted in the toolkit's device-list folder
        assert out["device_mounts"] == [a.gpu_uuid]
    # the agent in its pod reports each replica, scraped by pod IP
    series = wait_for(
        "per-pod core share of both replicas in Prometheus",
        lambda: (
            (r := query(prometheus, f'{c.METRIC_POD_GPU_CORE_SHARE}{{namespace="default"}}'))
            and {x["metric"]["pod"] for x in r} >= {f"{JOB}-0", f"{JOB}-1"}
            and r
        ),
        60,
        diagnose(rc),
    )
    for r in series:
        if r["metric"]["pod"].startswith(JOB):
            assert float(r["value"][1]) == pytest.approx(0.6)


def _refused_by_the_kubelet(
    rc: RealCluster, name: str, node: str, core: int, memory_mib: int, ann: dict[str, str]
) -> dict[str, Any]:
    """Apply, as an admin, a pod bound to ``node`` with these requests and annotations, and
    wait until the kubelet refused it at admission (Allocate) with no container started."""
    manifest = pod_manifest(
        "default", name, node, core, memory_units(memory_mib, c.DEFAULT_GPU_MEMORY_UNIT_MIB), ann
    )
    container = manifest["spec"]["containers"][0]
    container["image"] = reference(IMAGES["workload"].repository)
    container["imagePullPolicy"] = "Never"
    manifest["spec"]["restartPolicy"] = "Never"
    apply(rc, manifest)
    pod: dict[str, Any] = wait_for(
        f"the kubelet refused {name}",
        lambda: (p := rc.kube.json("get", "pod", name))["status"].get("phase") == "Failed" and p,
        60,
        diagnose(rc),
    )
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert not pod["status"].get("containerStatuses")  # no container ever started
    return pod


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("forged", "invalid horus.io/gpu-assignment-signature"),
        ("unsigned", "has no horus.io/gpu-assignment-signature"),
    ],
)
def test_forged_or_unsigned_assignment_refused_by_the_kubelet(
    rc: RealCluster, assignment_key: KeyRing, case: str, expect: str
) -> None:
    node = rc.nodes[0]
    inventory = rc.kube.json("get", "node", node)["metadata"]["annotations"]
    from horus.api.inventory import decode_inventory

    gpu = decode_inventory(inventory[c.ANNOTATION_GPU_INVENTORY])[0]
    name = f"by-hand-{case}"
    key = KeyRing.generate() if case == "forged" else None  # a pair Horus never published
    ann = assignment_annotations(key, "default", name, node, gpu.uuid, gpu.index, 10, 1024)
    try:
        pod = _refused_by_the_kubelet(rc, name, node, 10, 1024, ann)
        assert expect in pod["status"]["message"]
        events = wait_for(
            f"{c.EVENT_REASON_ALLOCATE_REFUSED} Event on {name}",
            lambda: [
                e
                for e in rc.kube.json(
                    "get", "events", "--field-selector", f"involvedObject.name={name}"
                )["items"]
                if e["reason"] == c.EVENT_REASON_ALLOCATE_REFUSED
            ],
            30,
            diagnose(rc),
        )
        assert events[0]["type"] == "Warning" and expect in events[0]["message"]
        assert c.ANNOTATION_GPU_ALLOCATED not in (pod["metadata"].get("annotations") or {})
    finally:
        rc.kube.kubectl("delete", "pod", name, "--wait=false", check=False)


def test_a_replayed_pod_of_a_deleted_job_is_refused_by_the_kubelet(rc: RealCluster) -> None:
    """The same name, node, requests and signed annotations as a replica that ran — made again
    after its DLJob was deleted (by a cluster admin, whom the annotation policy exempts): the
    signature names the old pod's UID, so the kubelet's Allocate refuses the copy and no
    container starts (issue 24: signatures bind the pod's identity)."""
    job, node = "replay-source", rc.nodes[0]
    doc = workload_job(job, 1, 10, 1024, ["--steps", "0", "--step-sleep", "0.1"])
    doc["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    apply(rc, doc)
    try:
        original = wait_for(
            f"{job} running",
            lambda: (p := pods_of(rc, job)) and running(p[0]) and p[0],
            120,
            diagnose(rc),
        )
    finally:
        rc.kube.kubectl("delete", "dljob", job, "--wait=false", check=False)
    meta = original["metadata"]
    name = meta["name"]
    wait_for(f"{name} gone", lambda: not pods_of(rc, job), 60, diagnose(rc))
    ann = {
        k: v
        for k, v in meta["annotations"].items()
        if k in (c.ANNOTATION_GPU_ASSIGNMENT, c.ANNOTATION_ASSIGNMENT_SIGNATURE)
    }
    a = decode_assignment(ann[c.ANNOTATION_GPU_ASSIGNMENT])
    try:
        pod = _refused_by_the_kubelet(rc, name, node, a.core_percent, a.memory_mib, ann)
        assert pod["metadata"]["uid"] != meta["uid"]
        assert c.ANNOTATION_ASSIGNMENT_SIGNATURE in pod["status"]["message"]
    finally:
        rc.kube.kubectl("delete", "pod", name, "--wait=false", check=False)


@pytest.mark.parametrize(
    "memories", [(1024, 1024), (2048, 1024)], ids=["same-share", "equal-core-other-memory"]
)
def test_twins_on_one_node_each_get_their_own_assignment(
    rc: RealCluster, memories: tuple[int, int]
) -> None:
    """Two pods on one node at once with the same core % — and the same memory, or not (issue
    25, "Twins": the kubelet's gpu-core Allocate could pick either) — two one-replica jobs
    applied together: the kubelet names no pod in Allocate and calls it per resource, so the
    operator binds the second only after the first was allocated (horus.operator.allocate_order);
    each container must print its own pod and exactly its own share."""
    names = ["twin-a", "twin-b"]
    docs = []
    for name, memory in zip(names, memories, strict=True):
        doc = workload_job(name, 1, 15, memory, ["--steps", "0", "--step-sleep", "0.1"])
        doc["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": rc.nodes[0]}
        docs.append(doc)
    apply(rc, {"apiVersion": "v1", "kind": "List", "items": docs})
    try:
        pods = wait_for(
            "both twins running",
            lambda: (
                (p := [x for n in names for x in pods_of(rc, n)])
                and len(p) == 2
                and all(map(running, p))
                and p
            ),
            120,
            diagnose(rc),
        )
        for pod in pods:
            meta = pod["metadata"]
            a = decode_assignment(meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
            out = wait_for(
                f"{meta['name']} printed its share",
                lambda n=meta["name"]: share_line(rc, n),
                30,
                diagnose(rc),
            )
            assert out["env"][c.ENV_POD_NAME] == meta["name"]
            assert out["env"][c.ENV_POD_UID] == meta["uid"]
            assert out["env"][c.ENV_GPU_UUID] == a.gpu_uuid
            # its own job's share, in every variable that carries it
            job = meta["labels"][c.LABEL_DLJOB_NAME]
            memory = memories[names.index(job)]
            assert (a.core_percent, a.memory_mib) == (15, memory)
            assert out["env"][c.ENV_GPU_CORE_PERCENT] == "15"
            assert out["env"][c.ENV_GPU_MEMORY_MIB] == str(memory)
            assert out["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "15"
            assert out["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M"
            assert pod["spec"]["nodeName"] == rc.nodes[0]
    finally:
        for name in names:
            rc.kube.kubectl("delete", "dljob", name, "--wait=false", check=False)
        wait_for("twins gone", lambda: not any(pods_of(rc, n) for n in names), 60, diagnose(rc))
