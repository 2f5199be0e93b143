"""Helpers of the real-node e2e tests (conftest.py builds the cluster they share)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from horus.devcluster.chart import RealCluster

#: The two-replica job test_2 starts and the later tests restart, drain and lose nodes under.
JOB = "two-nodes"
#: Memory of each node's simulated GPU: what a real H100 80GB reports, not a multiple of the
#: 256 MiB gpu-memory unit, so the unit rounding is tested as on real hardware (issue 25).
GPU_MEMORY_MIB = 81559


def wait_for(
    what: str, check: Callable[[], Any], timeout: float, diagnose: Callable[[], str]
) -> Any:
    """``check()`` until it returns something truthy; on timeout the message says what was
    seen (pods, events)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n{diagnose()}")


def diagnose(rc: RealCluster, namespace: str = "default") -> Callable[[], str]:
    def run() -> str:
        parts = [
            rc.kube.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout,
            rc.kube.kubectl("get", "dljobs", "-A", "-o", "wide", check=False).stdout,
            rc.kube.kubectl(
                "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False
            ).stdout[-3000:],
        ]
        return "\n".join(parts)

    return run


def plain_pod(name: str, core: int, memory_mib: int, scheduler: str) -> dict[str, Any]:
    """A plain pod (no DLJob) of the example workload image asking ``core`` % of a GPU and
    ``memory_mib`` (in whole gpu-memory units), with a graph profile, for the kube-scheduler
    named ``scheduler`` (test_1b: the chart's Horus scheduler; test_1f: one configured with
    the extender's Service); it prints its share once and ends."""
    from horus.api.resources import memory_units
    from horus.common import constants as c
    from horus.devcluster.binaries import repo_root
    from horus.devcluster.images import IMAGES, reference

    profile = (repo_root() / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()
    units = str(memory_units(memory_mib, c.DEFAULT_GPU_MEMORY_UNIT_MIB))
    res = {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: units}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {c.ANNOTATION_GRAPH_PROFILE: profile},
        },
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": reference(IMAGES["workload"].repository),
                    "imagePullPolicy": "Never",
                    "args": ["--steps", "0", "--report-seconds", "1"],
                    "resources": {"requests": res, "limits": res},
                }
            ],
        },
    }


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
    return result


def workload_job(
    name: str, replicas: int, core: int, memory_mib: int, args: list[str]
) -> dict[str, Any]:
    """A DLJob running the example workload image (examples/workload) with an explicit
    share, and the profile of examples/mobilenet-explicit-share.yaml."""
    import yaml

    from horus.devcluster.binaries import repo_root
    from horus.devcluster.images import IMAGES, reference

    doc: dict[str, Any] = yaml.safe_load(
        (repo_root() / "examples" / "mobilenet-explicit-share.yaml").read_text()
    )
    doc["metadata"] = {"name": name, "namespace": "default"}
    doc["spec"]["replicas"] = replicas
    doc["spec"]["gpu"] = {"mode": "explicit", "corePercent": core, "memoryMiB": memory_mib}
    doc["spec"]["template"] = {
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "trainer",
                    "image": reference(IMAGES["workload"].repository),
                    "imagePullPolicy": "Never",
                    "args": args,
                }
            ],
        }
    }
    return doc


def apply(rc: RealCluster, doc: dict[str, Any]) -> None:
    rc.kube.kubectl("apply", "-f", "-", input=json.dumps(doc))


def share_line(rc: RealCluster, pod: str, namespace: str = "default") -> dict[str, Any] | None:
    """The workload's first log line (the share it received), once the container wrote it."""
    logs = rc.kube.kubectl("logs", pod, "-n", namespace, check=False)
    for line in logs.stdout.splitlines():
        if line.startswith("{"):
            event: dict[str, Any] = json.loads(line)
            if event.get("event") == "share":
                return event
    return None


def pods_of(rc: RealCluster, job: str, namespace: str = "default") -> list[dict[str, Any]]:
    from horus.common import constants as c

    items: list[dict[str, Any]] = rc.kube.json(
        "get", "pods", "-n", namespace, "-l", f"{c.LABEL_DLJOB_NAME}={job}"
    )["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)


def claim_and_pod(
    name: str,
    node: str,
    cores: str | None,
    memory: str | None,
    namespace: str = "default",
    steps: int = 0,
) -> list[dict[str, Any]]:
    """A ResourceClaim of the Horus DeviceClass asking ``cores``/``memory`` (None: leave the
    capacity out, which takes all of it) and a pod of the example workload on ``node`` using
    it, both named ``name``; the workload prints its share and (steps 0) stays up."""
    from horus.common import constants as c
    from horus.devcluster.images import IMAGES, reference

    requests = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    exactly: dict[str, Any] = {"deviceClassName": c.DRA_DEVICE_CLASS}
    if requests:
        exactly["capacity"] = {"requests": requests}
    container = {
        "name": "main",
        "image": reference(IMAGES["workload"].repository),
        "imagePullPolicy": "Never",
        "args": ["--steps", str(steps), "--step-sleep", "0.5"],
        "resources": {"claims": [{"name": "gpu"}]},
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 2,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [container],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            },
        },
    ]
