"""Horus as the real Kueue's AdmissionCheck on two real nodes: Kueue v0.19.2 and JobSet as
host processes (:class:`horus.devcluster.workload_controllers.WorkloadControllers`), the chart
on the dra path with two simulated GPUs per node (its operator answers the check,
``operator.kueueCheck``), the real kube-scheduler allocating the claims and containerd 2's CDI
handing each container its share:

* a 4-worker JobSet is admitted through Horus' check as one gang — ``Ready`` with one
  podSetUpdates entry of 4 slots on the 4 GPUs — and each worker's claim is allocated on the
  GPU of the slot it fills, with the slot's share, which its container sees in its own
  environment;
* with room for only 3 (a pod Kueue does not manage takes one GPU whole), a second 4-worker
  JobSet gets ``Retry`` ("does not fit as a gang") and none of its pods starts;
* a Deployment under Kueue's pod integration, scaled 1 → 4 → 1: each replica on the slot of
  its own Workload (its placeholder claim replaced by Horus'), each removed replica's claim
  gone.

The release is upgraded to the dra path at the start and put back as it was at the end, and
Kueue and JobSet are removed (``down``): the later tests of the package see the cluster as it
was.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from realnode_support import GPU_MEMORY_MIB, apply, running, share_line, wait_for

from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RELEASE, RealCluster, install
from horus.devcluster.workload_controllers import WorkloadControllers
from horus.devcluster.workload_specs import KUEUE
from horus.operator.kueue.slots import Slot, decode_slots, slot_key

NS = "kueue-gang"
CHECK = "horus-gpu-real"
QUEUE = "horus-gang"
FLAVOR = "horus-gang-gpus"
KUEUE_API = f"{c.KUEUE_GROUP}/{c.KUEUE_VERSION}"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
POD_SET = "workers"
GPUS_PER_NODE = 2
CORE, MEMORY_UNITS = 40, 64  # each worker: 40 % of a GPU and 64 x 256 MiB


def _values(rc: RealCluster) -> dict[str, Any]:
    out = rc.kube.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml").stdout
    values: dict[str, Any] = yaml.safe_load(out) or {}
    return values


def _horus_slices(rc: RealCluster) -> list[dict[str, Any]]:
    return [
        s
        for s in rc.kube.json("get", "resourceslices")["items"]
        if s["spec"].get("driver") == c.DRA_DRIVER_NAME
    ]


def _delete_slices(rc: RealCluster) -> None:
    for item in _horus_slices(rc):
        rc.kube.kubectl("delete", "resourceslice", item["metadata"]["name"], check=False)


def _items(rc: RealCluster, kind: str, *args: str) -> list[dict[str, Any]]:
    got = rc.kube.kubectl("get", kind, "-n", NS, *args, "-o", "json", check=False)
    if got.returncode != 0:
        return []
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    return items


def _diagnose(rc: RealCluster, controllers: WorkloadControllers) -> Callable[[], str]:
    def run() -> str:
        k = rc.kube.kubectl
        parts = [
            k("get", "pods", "-A", "-o", "wide", check=False).stdout,
            k("get", "jobsets,jobs,resourceclaims", "-n", NS, "-o", "wide", check=False).stdout,
            k("get", "workloads", "-n", NS, "-o", "yaml", check=False).stdout[-4000:],
            k("get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False).stdout[-3000:],
            k("logs", "-n", NAMESPACE, "deploy/horus-operator", "--tail=30", check=False).stdout,
        ]
        for name, info in controllers.status()["controllers"].items():
            try:
                with open(info["log"], errors="replace") as f:
                    parts.append(f"--- {name}\n" + "".join(f.readlines()[-20:]))
            except OSError:
                pass
        return "\n".join(parts)

    return run


def _profile() -> str:
    from horus.devcluster.binaries import repo_root

    return (repo_root() / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()


def _container(core: int) -> dict[str, Any]:
    from horus.devcluster.images import IMAGES, reference

    return {
        "name": "trainer",
        "image": reference(IMAGES["workload"].repository),
        "imagePullPolicy": "Never",
        "args": ["--steps", "0", "--report-seconds", "1"],
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: str(MEMORY_UNITS)},
        },
    }


def _jobset(name: str, workers: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": POD_SET,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {
                                    "annotations": {c.ANNOTATION_GRAPH_PROFILE: _profile()}
                                },
                                "spec": {
                                    "restartPolicy": "Never",
                                    "terminationGracePeriodSeconds": 2,
                                    "containers": [_container(CORE)],
                                },
                            },
                        }
                    },
                }
            ]
        },
    }


def _kueue_template() -> dict[str, Any]:
    """The template Kueue counts a Deployment's pods by, as examples/kueue ships it."""
    from horus.devcluster.binaries import repo_root

    docs = yaml.safe_load_all((repo_root() / "examples" / "kueue" / "queues.yaml").read_text())
    (template,) = [d for d in docs if d and d["kind"] == "ResourceClaimTemplate"]
    template["metadata"]["namespace"] = NS
    return dict(template)


def _workload(rc: RealCluster, jobset: str) -> dict[str, Any] | None:
    for wl in _items(rc, "workloads"):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in owners):
            return wl
    return None


def _check(wl: dict[str, Any] | None) -> dict[str, Any]:
    for ch in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if ch["name"] == CHECK:
            return dict(ch)
    return {}


def _check_in(rc: RealCluster, jobset: str, state: str) -> dict[str, Any] | None:
    wl = _workload(rc, jobset)
    return wl if _check(wl).get("state") == state else None


def _pods(rc: RealCluster, jobset: str) -> list[dict[str, Any]]:
    return _items(rc, "pods", "-l", f"{JOBSET_LABEL}={jobset}")


def _delete_jobset(rc: RealCluster, name: str, diagnose: Callable[[], str]) -> None:
    rc.kube.kubectl("delete", "jobset", name, "-n", NS, "--wait=false", check=False)
    wait_for(
        f"{name}'s pods and claims gone",
        lambda: (
            not _pods(rc, name)
            and not [
                cl
                for cl in _items(rc, "resourceclaims")
                if cl["metadata"]["name"].startswith(c.CONVERTED_CLAIM_PREFIX)
                and cl["metadata"]["name"] != c.CONVERTED_CLAIM_PREFIX + "whole"
            ]
        ),
        120,
        diagnose,
    )


@pytest.fixture(scope="module")
def kueue_on_dra(rc: RealCluster) -> Iterator[Callable[[], str]]:
    """Kueue + JobSet up, the release on the dra path with two GPUs per node, Horus' check,
    its queues and the namespace; yields a diagnose function. Everything goes back after."""
    if not (Path(rc.state.bin_dir) / KUEUE.binary).exists():
        pytest.skip(f"{rc.state.bin_dir} has no Kueue: tools/controlplane/build.sh builds it")
    t0 = time.monotonic()
    installed = _values(rc)
    on = copy.deepcopy(installed)
    on["gpuSharing"] = {"path": "dra"}
    sim = ["--sim-gpu-count", str(GPUS_PER_NODE), "--sim-gpu-memory-mib", str(GPU_MEMORY_MIB)]
    on.setdefault("node", {}).setdefault("draDriver", {})["extraArgs"] = sim
    controllers = WorkloadControllers(rc.state)
    diagnose = _diagnose(rc, controllers)
    try:
        controllers.up(["jobset", "kueue"], timeout=180)
        print(f"kueue + jobset up in {time.monotonic() - t0:.0f}s")
        _delete_slices(rc)  # every slice below is the DaemonSet's
        install(rc.kube, on)
        wait_for(
            "two GPUs in each node's ResourceSlice",
            lambda: (
                sorted(
                    (s["spec"]["nodeName"], len(s["spec"].get("devices") or []))
                    for s in _horus_slices(rc)
                )
                == sorted((n, GPUS_PER_NODE) for n in rc.nodes)
            ),
            90,
            diagnose,
        )
        print(f"release on the dra path after {time.monotonic() - t0:.0f}s")
        rc.kube.kubectl("create", "namespace", NS)
        wait_for(
            f"default ServiceAccount in {NS}",
            lambda: rc.kube.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0,
            60,
            diagnose,
        )
        quota = {
            "cpu": "64",
            "memory": "256Gi",
            c.RESOURCE_GPU_CORE: "800",
            c.RESOURCE_GPU_MEMORY: "100000",
            c.KUEUE_SHARES_RESOURCE: "16",
        }
        for doc in (
            {"kind": "AdmissionCheck", "metadata": {"name": CHECK},
             "spec": {"controllerName": c.KUEUE_ADMISSION_CHECK_CONTROLLER}},
            {"kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
            {"kind": "ClusterQueue", "metadata": {"name": QUEUE}, "spec": {
                "namespaceSelector": {},
                "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
                "resourceGroups": [{
                    "coveredResources": list(quota),
                    "flavors": [{"name": FLAVOR, "resources": [
                        {"name": k, "nominalQuota": v} for k, v in quota.items()]}],
                }],
            }},
            {"kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
             "spec": {"clusterQueue": QUEUE}},
        ):  # fmt: skip
            apply(rc, {"apiVersion": KUEUE_API, **doc})
        apply(rc, _kueue_template())
        yield diagnose
    finally:
        t1 = time.monotonic()
        k = rc.kube.kubectl
        k("delete", "jobsets", "--all", "-n", NS, "--wait=false", check=False)
        k("delete", "pods", "--all", "-n", NS, "--grace-period=0", "--force", check=False)
        try:
            wait_for("the namespace's pods gone", lambda: not _items(rc, "pods"), 90, diagnose)
        finally:
            k("delete", "localqueue", QUEUE, "-n", NS, "--wait=false", check=False)
            k("delete", "clusterqueue", QUEUE, "--wait=false", check=False)
            k("delete", "resourceflavor", FLAVOR, "--wait=false", check=False)
            k("delete", "admissioncheck", CHECK, "--wait=false", check=False)
            controllers.down()
            k("delete", "namespace", NS, "--wait=false", check=False)
            install(rc.kube, installed)  # back on the device-plugin path, one GPU per node
            _delete_slices(rc)  # a stopped driver leaves its slices
            print(f"kueue module cleanup in {time.monotonic() - t1:.0f}s")


def _slots(wl: dict[str, Any], pod_set: str = POD_SET) -> dict[int, Slot]:
    (update,) = _check(wl)["podSetUpdates"]
    assert update["name"] == pod_set
    return {
        s.index: s for s in decode_slots(update["annotations"][c.ANNOTATION_GANG_SLOTS], pod_set)
    }


def _on_its_slot(
    rc: RealCluster, pod: dict[str, Any], diagnose: Callable[[], str]
) -> tuple[str, str, Slot]:
    """(Workload UID, pod set, slot) of a running pod's claim, after checking that the claim is
    allocated on the slot's GPU with its share, that the pod runs on the slot's node, and that
    its container sees that share in its environment."""
    meta = pod["metadata"]
    claim = rc.kube.json(
        "get", "resourceclaim", f"{c.CONVERTED_CLAIM_PREFIX}{meta['uid']}", "-n", NS
    )
    key = claim["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT]
    uid, pod_set, index = key.split("/")
    assert key == slot_key(uid, pod_set, int(index))
    (wl,) = [w for w in _items(rc, "workloads") if w["metadata"]["uid"] == uid]
    slot = _slots(wl, pod_set)[int(index)]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    consumed = result["consumedCapacity"]
    assert (result["pool"], result["device"]) == (slot.node, f"gpu-{slot.gpu_index}")
    assert parse_quantity(consumed["cores"], "cores") == CORE
    assert parse_quantity(consumed["memory"], "memory") // c.MIB == 16384
    assert pod["spec"]["nodeName"] == slot.node
    line = wait_for(
        f"{meta['name']}'s share line", lambda: share_line(rc, meta["name"], NS), 60, diagnose
    )
    env = line["env"]
    assert env[c.ENV_GPU_UUID] == slot.gpu_uuid
    assert env[c.ENV_GPU_INDEX] == str(slot.gpu_index)
    assert (env[c.ENV_GPU_CORE_PERCENT], env[c.ENV_GPU_MEMORY_MIB]) == ("40", "16384")
    assert (env[c.ENV_CLAIM_UID], env[c.ENV_POD_NAME]) == (claim["metadata"]["uid"], meta["name"])
    return uid, pod_set, slot


def test_a_four_worker_jobset_runs_on_the_slots_of_horus_check(
    rc: RealCluster, kueue_on_dra: Callable[[], str]
) -> None:
    diagnose = kueue_on_dra
    name = "gang"
    apply(rc, _jobset(name))
    try:
        wl = wait_for(
            "Horus' check Ready on the JobSet's Workload",
            lambda: _check_in(rc, name, "Ready"),
            180,
            diagnose,
        )
        slots = _slots(wl)
        assert sorted(slots) == [0, 1, 2, 3]
        assert len({s.gpu_uuid for s in slots.values()}) == 4  # a GPU each
        assert len({(s.node, s.gpu_index) for s in slots.values()}) == 4
        assert {s.node for s in slots.values()} == set(rc.nodes)
        assert {(s.core_percent, s.memory_mib) for s in slots.values()} == {(CORE, 16384)}
        pods = wait_for(
            f"{name}'s four workers running",
            lambda: (p := _pods(rc, name)) and len(p) == 4 and all(map(running, p)) and p,
            240,
            diagnose,
        )
        filled = set()
        for pod in pods:
            meta = pod["metadata"]
            assert meta["annotations"][c.ANNOTATION_KUEUE_WORKLOAD].endswith(wl["metadata"]["uid"])
            wl_uid, pod_set, slot = _on_its_slot(rc, pod, diagnose)
            assert (wl_uid, pod_set) == (wl["metadata"]["uid"], POD_SET)
            assert slots[slot.index] == slot
            filled.add(slot.index)
        assert filled == {0, 1, 2, 3}
    finally:
        _delete_jobset(rc, name, diagnose)


def test_with_room_for_three_a_four_worker_jobset_waits_with_retry(
    rc: RealCluster, kueue_on_dra: Callable[[], str]
) -> None:
    diagnose = kueue_on_dra
    whole = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "whole",
            "namespace": NS,
            "annotations": {c.ANNOTATION_GRAPH_PROFILE: _profile()},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [_container(100)],
        },
    }
    apply(rc, whole)  # not Kueue's: no queue name
    name = "gang-of-too-many"
    try:
        wait_for(
            "the whole-GPU pod running",
            lambda: running(rc.kube.json("get", "pod", "whole", "-n", NS)),
            180,
            diagnose,
        )
        apply(rc, _jobset(name))
        wl = wait_for(
            "Horus' check Retry on the JobSet's Workload",
            lambda: _check_in(rc, name, "Retry"),
            180,
            diagnose,
        )
        message = _check(wl)["message"]
        assert "does not fit as a gang" in message, message
        print(f"Retry: {message}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # and it stays that way a little
            assert rc.kube.json("get", "jobset", name, "-n", NS)["spec"]["suspend"] is True
            assert not _pods(rc, name)
            time.sleep(1)
        assert running(rc.kube.json("get", "pod", "whole", "-n", NS))
    finally:
        _delete_jobset(rc, name, diagnose)
        rc.kube.kubectl(
            "delete", "pod", "whole", "-n", NS, "--grace-period=0", "--force", check=False
        )


def test_a_deployment_through_kueue_scales_1_4_1_each_replica_on_its_slot(
    rc: RealCluster, kueue_on_dra: Callable[[], str]
) -> None:
    """Kueue's Deployment integration (the queue name on the Deployment only): each replica
    its own Workload, admitted through Horus' check; its placeholder claim replaced by Horus'
    claim on its slot's GPU, which its container sees; scaled 1 → 4 → 1, the removed
    replicas' claims go."""
    diagnose = kueue_on_dra
    name = "serve"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {c.ANNOTATION_GRAPH_PROFILE: _profile()},
                },
                "spec": {"terminationGracePeriodSeconds": 2, "containers": [_container(CORE)]},
            },
        },
    }

    def replicas() -> list[dict[str, Any]]:
        return _items(rc, "pods", "-l", f"app={name}")

    def placed(n: int) -> dict[str, Slot] | None:
        pods = replicas()
        if len(pods) != n or not all(map(running, pods)):
            return None
        return {p["metadata"]["name"]: _on_its_slot(rc, p, diagnose)[2] for p in pods}

    def horus_claims() -> list[str]:
        return [
            cl["metadata"]["name"]
            for cl in _items(rc, "resourceclaims")
            if any(
                o.get("name", "").startswith(f"{name}-")
                for o in cl["metadata"].get("ownerReferences") or []
            )
        ]

    apply(rc, deployment)
    try:
        wait_for("one replica on its slot", lambda: placed(1), 180, diagnose)
        rc.kube.kubectl("scale", "deployment", name, "-n", NS, "--replicas=4")
        wait_for("four replicas, each on its slot", lambda: placed(4), 240, diagnose)
        assert len(horus_claims()) == 4  # each placeholder gone
        rc.kube.kubectl("scale", "deployment", name, "-n", NS, "--replicas=1")
        wait_for(
            "three replicas and their claims gone",
            lambda: len(replicas()) == 1 and len(horus_claims()) == 1,
            120,
            diagnose,
        )
    finally:
        rc.kube.kubectl("delete", "deployment", name, "-n", NS, "--wait=false", check=False)
        wait_for("the Deployment's pods gone", lambda: not replicas(), 120, diagnose)
