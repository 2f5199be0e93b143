"""A kubelet restart on a real node: the DaemonSet's device plugin registers again, the node's
Horus capacity returns, and the running replica keeps its container and its share (the
restarted kubelet still counts it: a second signed 60 % pod on that GPU is refused)."""

from __future__ import annotations

import time

from realnode_support import (
    GPU_MEMORY_MIB,
    JOB,
    apply,
    diagnose,
    pods_of,
    running,
    share_line,
    wait_for,
)

from deviceplugin_peer import assignment_annotations, pod_manifest
from horus.api.assignment import decode_assignment
from horus.api.resources import memory_units
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.devcluster.images import IMAGES, reference


def _registrations(rc: RealCluster, node: str) -> int:
    """How often the node's device plugin logged a registration with its kubelet (0 while
    the kubelet, which serves the logs, is down)."""
    pods = rc.kube.json(
        "get",
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        "app.kubernetes.io/component=node",
        "--field-selector",
        f"spec.nodeName={node}",
    )["items"]
    logs = rc.kube.kubectl(
        "logs", "-n", NAMESPACE, pods[0]["metadata"]["name"], "-c", "device-plugin", check=False
    )
    return logs.stdout.count("with the kubelet") if logs.returncode == 0 else 0


def test_kubelet_restart_keeps_running_shares(rc: RealCluster, assignment_key: KeyRing) -> None:
    before = {p["metadata"]["name"]: p for p in pods_of(rc, JOB)}
    assert len(before) == 2 and all(map(running, before.values())), diagnose(rc)()
    victim = before[f"{JOB}-0"]
    node = victim["spec"]["nodeName"]
    registered = _registrations(rc, node)
    started = time.monotonic()
    rc.real.restart_kubelet(node)

    def capacity_back() -> bool:
        obj = rc.kube.json("get", "node", node)
        ready = {x["type"]: x["status"] for x in obj["status"]["conditions"]}["Ready"]
        return ready == "True" and obj["status"]["allocatable"].get(c.RESOURCE_GPU_CORE) == "100"

    wait_for(
        "the plugin registered again",
        lambda: _registrations(rc, node) > registered,
        60,
        diagnose(rc, NAMESPACE),
    )
    wait_for(f"{node} Ready with its Horus capacity", capacity_back, 60, diagnose(rc))
    print(f"kubelet restart on {node}: capacity back after {time.monotonic() - started:.1f}s")

    after = {p["metadata"]["name"]: p for p in pods_of(rc, JOB)}
    for name, old in before.items():
        new = after[name]
        assert new["metadata"]["uid"] == old["metadata"]["uid"]
        assert running(new), name
        old_c, new_c = old["status"]["containerStatuses"][0], new["status"]["containerStatuses"][0]
        assert new_c["containerID"] == old_c["containerID"] and new_c["restartCount"] == 0
        assert new["metadata"]["annotations"] == old["metadata"]["annotations"]
    share = share_line(rc, victim["metadata"]["name"])
    assert share is not None and share["env"][c.ENV_GPU_CORE_PERCENT] == "60"

    # The restarted kubelet still holds the running replica's devices: a correctly signed pod
    # asking 60 % of the same GPU and more memory than the replica left free is refused by the
    # kubelet's own device accounting (whichever resource it checks first), before any
    # Allocate reaches the plugin.
    a = decode_assignment(victim["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
    name = "second-on-busy-gpu"
    unit = c.DEFAULT_GPU_MEMORY_UNIT_MIB
    want_mib = 80000
    ann = assignment_annotations(
        assignment_key, "default", name, node, a.gpu_uuid, a.gpu_index, 60, want_mib
    )
    manifest = pod_manifest("default", name, node, 60, memory_units(want_mib, unit), ann)
    manifest["spec"]["restartPolicy"] = "Never"
    manifest["spec"]["containers"][0].update(
        image=reference(IMAGES["workload"].repository), imagePullPolicy="Never"
    )
    free_core = 100 - a.core_percent
    free_units = GPU_MEMORY_MIB // unit - memory_units(a.memory_mib, unit)
    expected = (
        f"{c.RESOURCE_GPU_CORE}. Requested: 60, Available: {free_core}",
        f"{c.RESOURCE_GPU_MEMORY}. Requested: {memory_units(want_mib, unit)}, "
        f"Available: {free_units}",
    )
    apply(rc, manifest)
    try:
        pod = wait_for(
            f"{name} refused",
            lambda: (
                (p := rc.kube.json("get", "pod", name))["status"].get("phase") == "Failed" and p
            ),
            60,
            diagnose(rc),
        )
        assert pod["status"]["reason"] == "UnexpectedAdmissionError", pod["status"]
        message = pod["status"]["message"]
        assert "requested number of devices unavailable for" in message, message
        assert any(e in message for e in expected), message
    finally:
        rc.kube.kubectl("delete", "pod", name, "--wait=false", check=False)
