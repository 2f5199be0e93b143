"""The chart's DRA driver (``gpuSharing.path: dra``) on real nodes (issue 25): the driver as
a container of the node DaemonSet, with the node identity's own pod-bound token — so the
shipped RBAC and admission policies (``horus-node-own-resourceslices``) are what let it
publish — registers with each real kubelet, publishes its node's ResourceSlice, and a pod
with a claim starts with exactly its claim's share, through containerd 2's CDI.

The release is upgraded to the dra path and put back as it was at the end (the later tests
of the package see the chart as installed). Runs after test_2d_dra, whose host-process drivers
are stopped by then (one driver per node: both would serve the same registration socket).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from realnode_support import apply, share_line, wait_for

from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RELEASE, RealCluster, install
from horus.devcluster.images import IMAGES, reference

POD = "dra-chart-probe"


def _values(rc: RealCluster) -> dict[str, Any]:
    out = rc.kube.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml").stdout
    values: dict[str, Any] = yaml.safe_load(out) or {}
    return values


def _driver_logs(rc: RealCluster, node: str | None = None) -> str:
    """The dra-driver container's log on ``node`` (each node's own pod; ds/ picks one)."""
    pods = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=node",
        f"--field-selector=spec.nodeName={node or rc.nodes[1]}",
    )["items"]  # fmt: skip
    out = []
    for pod in pods:
        logs = rc.kube.kubectl(
            "logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "dra-driver", "--tail=30",
            check=False,
        )  # fmt: skip
        out.append(logs.stdout + logs.stderr)
    return "\n".join(out)


def _delete_slices(rc: RealCluster) -> None:
    for item in rc.kube.json("get", "resourceslices")["items"]:
        if item["spec"].get("driver") == c.DRA_DRIVER_NAME:
            rc.kube.kubectl("delete", "resourceslice", item["metadata"]["name"], check=False)


def test_the_charts_dra_driver_prepares_claims_with_the_node_identity(rc: RealCluster) -> None:
    installed = _values(rc)
    on = copy.deepcopy(installed)
    on["gpuSharing"] = {"path": "dra"}  # the driver's simulated GPUs: the package's values
    _delete_slices(rc)  # start from none: every slice below is the DaemonSet's
    install(rc.kube, on)
    node = rc.nodes[1]
    try:

        def published() -> bool:
            nodes = {
                s["spec"].get("nodeName")
                for s in rc.kube.json("get", "resourceslices")["items"]
                if s["spec"].get("driver") == c.DRA_DRIVER_NAME
            }
            return nodes >= set(rc.nodes)

        wait_for("the DaemonSet's ResourceSlices", published, 90, lambda: _driver_logs(rc))
        container = {
            "name": "main",
            "image": reference(IMAGES["workload"].repository),
            "imagePullPolicy": "Never",
            "args": ["--steps", "0", "--step-sleep", "0.5"],
            "resources": {"claims": [{"name": "gpu"}]},
        }
        request = {
            "name": "gpu",
            "exactly": {
                "deviceClassName": c.DRA_DEVICE_CLASS,
                "capacity": {"requests": {"cores": "25", "memory": "4096Mi"}},
            },
        }
        apply(
            rc,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": POD, "namespace": "default"},
                "spec": {"devices": {"requests": [request]}},
            },
        )
        apply(
            rc,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": POD, "namespace": "default"},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [container],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": POD}],
                },
            },
        )
        line = wait_for(
            "the claimed pod's share line",
            lambda: share_line(rc, POD),
            240,
            lambda: (
                _driver_logs(rc)
                + rc.kube.kubectl("describe", "pod", POD, check=False).stdout[-3000:]
            ),
        )
        claim = rc.kube.json("get", "resourceclaim", POD)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == (node, "gpu-0")
        env = line["env"]
        assert env[c.ENV_GPU_CORE_PERCENT] == str(
            parse_quantity(result["consumedCapacity"]["cores"], "cores")
        )
        assert env[c.ENV_GPU_CORE_PERCENT] == "25"
        assert env[c.ENV_GPU_MEMORY_MIB] == "4096"
        assert env[c.ENV_CLAIM_UID] == claim["metadata"]["uid"]
        assert f"prepared claim default/{POD}" in _driver_logs(rc, node)
    finally:
        rc.kube.kubectl("delete", "pod", POD, "--grace-period=0", "--force", check=False)
        rc.kube.kubectl("delete", "resourceclaim", POD, check=False)
        install(rc.kube, installed)  # the chart as it was: the device plugin comes back
        _delete_slices(rc)  # a stopped driver leaves its slices (as Go drivers do)
