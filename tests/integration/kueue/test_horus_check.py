"""Horus as Kueue's AdmissionCheck on the real control plane: the real Kueue, the real
kube-scheduler allocating the claims, the Horus DRA driver publishing two kwok nodes' GPUs,
and Horus' reconcile pass (in-process, scoped to the test's namespace and nodes) answering the
check.

A 4-pod Job asking 40 % of a GPU each is admitted through Horus' check: with room for three
only, none starts and the Workload says why; when the room comes, all four run, each on the GPU
of its slot (kwok completes a Job's pods as soon as they run, so what is checked is where each
ran and which claim it had). Kueue preempting a lower-priority Workload frees its GPUs for the
higher one (long Jobs whose pods kwok completes one after another: each replacement pod takes
the slot its predecessor left)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from horus_support import HorusOnKwok
from kueue_support import KUEUE_API, QUEUE_NAME_LABEL, KueueEnv, condition, wait_for

from horus.common import constants as c
from horus.operator.kueue.slots import decode_slots

ROOT = Path(__file__).resolve().parents[3]
CHECK = "horus-gpu"
PROFILE = (ROOT / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()


@pytest.fixture(scope="module")
def horus(kueue: KueueEnv) -> Iterator[dict[str, Any]]:
    cluster = kueue.cluster
    if cluster.kubectl("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        cluster.kubectl("create", "namespace", c.HORUS_NAMESPACE)
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "rbac" / "node.yaml"))
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "dra" / "deviceclass.yaml"))
    cluster.apply_crds(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml", c.DLJOB_CRD_NAME)
    ns = kueue.namespace("hq")
    sfx = uuid.uuid4().hex[:6]
    # the admission policy that turns horus.io/gpu-* requests into a claim reference, bound to
    # this namespace only
    policy, binding = list(
        yaml.safe_load_all(
            (ROOT / "examples" / "dra" / "extended-resources-policy.yaml").read_text()
        )
    )
    binding["metadata"]["name"] = f"{binding['metadata']['name']}-{sfx}"
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    }
    kueue.apply(policy, binding)
    # the apiserver takes a new policy binding in from its informer, a moment after the write:
    # until then a pod keeps its horus.io/gpu-* resources (and, on kwok nodes that advertise
    # them, would run without any claim Horus counts)
    probe = group_pods("probe", ns, None, 1, 10)[0]
    wait_for(
        lambda: json.loads(
            kueue.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe)
            ).stdout
        )["spec"].get("resourceClaims"),
        60,
        "the admission policy to convert a pod's horus.io/gpu-* requests",
    )
    kueue.admission_check(CHECK)
    env = HorusOnKwok(cluster, [f"hq-{sfx}-a", f"hq-{sfx}-b"], ns)
    try:
        yield {"ns": ns, "nodes": env.nodes, "op": env.op, "sfx": sfx}
    finally:
        env.op.stop.set()
        env.op.thread.join(10)
        kueue.kubectl("delete", "jobs,deployments", "--all", "-n", ns, "--wait=false", check=False)
        kueue.kubectl(
            "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False
        )
        kueue.kubectl(
            "delete", "validatingadmissionpolicybinding", binding["metadata"]["name"], check=False
        )
        env.stop()
        assert not env.op.errors, env.op.errors


def gpu_queue(
    kueue: KueueEnv, ns: str, name: str, gpu_core: str = "800", preempt: bool = False
) -> str:
    """A ClusterQueue naming Horus' check, with quota for Horus' resources, and a LocalQueue."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
        "resourceGroups": [
            {
                "coveredResources": [
                    "cpu",
                    "memory",
                    c.RESOURCE_GPU_CORE,
                    c.RESOURCE_GPU_MEMORY,
                    c.KUEUE_SHARES_RESOURCE,
                ],
                "flavors": [
                    {
                        "name": f"gpus-{name}",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "memory", "nominalQuota": "256Gi"},
                            {"name": c.RESOURCE_GPU_CORE, "nominalQuota": gpu_core},
                            {"name": c.RESOURCE_GPU_MEMORY, "nominalQuota": "100000"},
                            {"name": c.KUEUE_SHARES_RESOURCE, "nominalQuota": "16"},
                        ],
                    }
                ],
            }
        ],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    kueue.apply(
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f"gpus-{name}"}},
        {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": name},
        },
    )
    return name


def container(core: int) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "registry.invalid/horus-test:1",
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: "64"},
        },
    }


def pod_spec(core: int) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [container(core)],
    }


def group_pods(
    group: str, ns: str, queue: str | None, pods: int, core: int, priority_class: str | None = None
) -> list[dict[str, Any]]:
    """``pods`` plain pods of one Kueue pod group (or, with ``queue`` None, one pod Kueue
    does not manage)."""
    labels: dict[str, str] = {}
    annotations = {c.ANNOTATION_GRAPH_PROFILE: PROFILE}
    if queue is not None:
        labels = {QUEUE_NAME_LABEL: queue, "kueue.x-k8s.io/pod-group-name": group}
        annotations["kueue.x-k8s.io/pod-group-total-count"] = str(pods)
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{group}-{i}",
                "namespace": ns,
                "labels": dict(labels),
                "annotations": dict(annotations),
            },
            "spec": pod_spec(core),
        }
        for i in range(pods)
    ]


def gpu_job(
    name: str,
    ns: str,
    queue: str,
    pods: int,
    core: int,
    completions: int | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    labels = {QUEUE_NAME_LABEL: queue}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": completions or pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {c.ANNOTATION_GRAPH_PROFILE: PROFILE}},
                "spec": pod_spec(core),
            },
        },
    }


def workload_named(kueue: KueueEnv, ns: str, owner: str) -> dict[str, Any] | None:
    """The Workload of a Job ``owner``, or of the pod group ``owner`` (owned by its pods)."""
    for wl in kueue.workloads(ns):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("name") == owner or o.get("name", "").startswith(f"{owner}-") for o in owners):
            return wl
    return None


def answered(
    kueue: KueueEnv, ns: str, owner: str, state: str, timeout: float, what: str
) -> dict[str, Any]:
    """The Workload of ``owner`` (:func:`workload_named`) once Horus' check on it is ``state``."""
    found: dict[str, Any] = wait_for(
        lambda: (w := workload_named(kueue, ns, owner)) and check_of(w).get("state") == state and w,
        timeout,
        what,
        lambda: kueue.diagnose(ns),
    )
    return found


def check_of(wl: dict[str, Any] | None) -> dict[str, Any]:
    for ch in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if ch["name"] == CHECK:
            return dict(ch)
    return {}


def pods_of(kueue: KueueEnv, ns: str, prefix: str, phase: str = "Running") -> list[dict[str, Any]]:
    return [
        p
        for p in kueue.list("pods", ns)
        if p["metadata"]["name"].startswith(f"{prefix}-")
        and p["status"].get("phase") == phase
        and p["spec"].get("nodeName")
    ]


def slots_of(wl: dict[str, Any]) -> list[Any]:
    (update,) = check_of(wl)["podSetUpdates"]
    return decode_slots(update["annotations"][c.ANNOTATION_GANG_SLOTS], update["name"])


def events(kueue: KueueEnv, ns: str, reason: str, prefix: str) -> list[dict[str, Any]]:
    items = json.loads(kueue.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    return [
        e
        for e in items
        if e.get("reason") == reason and e["involvedObject"]["name"].startswith(prefix)
    ]


def test_a_four_pod_job_is_admitted_through_horus_as_a_gang_on_its_slots(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    queue = gpu_queue(kueue, ns, f"gang-{horus['sfx']}")
    # one GPU taken whole by a pod Kueue does not manage: room for three 40 % workers only
    (whole,) = group_pods("whole", ns, None, 1, 100)
    kueue.create(whole)
    wait_for(lambda: len(pods_of(kueue, ns, "whole")) == 1, 120, "the whole-GPU pod", diag)
    whole_claim = kueue.get("resourceclaim", f"{c.CONVERTED_CLAIM_PREFIX}whole-0", ns)
    assert whole_claim["status"]["allocation"]  # Horus' claim: it counts in Horus' state
    kueue.create(gpu_job("train", ns, queue, 4, 40))
    wl = answered(
        kueue, ns, "train", "Retry", 90, "Horus' check to answer Retry for the 4-pod gang"
    )
    message = check_of(wl)["message"]
    assert "does not fit as a gang" in message, message
    time.sleep(3)
    assert kueue.get("job", "train", ns)["spec"]["suspend"] is True
    assert not kueue.list("pods", ns, "job-name=train")  # none starts
    # the room comes: all four run, each on its slot's GPU
    kueue.kubectl("delete", "pod", "whole-0", "-n", ns, "--wait=true")
    wl = answered(
        kueue, ns, "train", "Ready", 120, "Horus' check Ready once the whole-GPU pod is gone"
    )
    slots = {s.index: s for s in slots_of(wl)}
    assert len({s.gpu_uuid for s in slots.values()}) == 4  # one GPU each
    done = wait_for(
        lambda: (p := pods_of(kueue, ns, "train", "Succeeded")) and len(p) == 4 and p,
        150,
        "all four workers to run (kwok then completes them)",
        diag,
    )
    chosen = {
        e["involvedObject"]["name"]: e["message"] for e in events(kueue, ns, "GPUChosen", "train-")
    }
    used = set()
    for pod in done:
        assert pod["metadata"]["annotations"][c.ANNOTATION_KUEUE_WORKLOAD].endswith(
            wl["metadata"]["uid"]
        )
        message = chosen[pod["metadata"]["name"]]
        index = int(message.split("slot ", 1)[1].split(" ", 1)[0])
        slot = slots[index]
        assert pod["spec"]["nodeName"] == slot.node, (pod["metadata"]["name"], message)
        assert f"{slot.node}/gpu-{slot.gpu_index} (40% core" in message
        used.add(index)
    assert used == {0, 1, 2, 3}


def test_kueue_preemption_frees_the_lower_workloads_gpus_for_the_higher(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    sfx = horus["sfx"]
    for name, value in ((f"low-{sfx}", 10), (f"high-{sfx}", 1000)):
        kueue.apply({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": name}, "value": value})  # fmt: skip
    queue = gpu_queue(kueue, ns, f"pre-{sfx}", gpu_core="400", preempt=True)
    kueue.create(gpu_job("low", ns, queue, 4, 60, 100000, f"low-{sfx}"))
    low = answered(kueue, ns, "low", "Ready", 120, "the low Job admitted through Horus")
    wait_for(lambda: len(pods_of(kueue, ns, "low", "Succeeded")) >= 8, 120,
             "the low Job's pods running one after another on its slots", diag)  # fmt: skip
    kueue.create(gpu_job("high", ns, queue, 4, 60, 100000, f"high-{sfx}"))
    high = answered(
        kueue,
        ns,
        "high",
        "Ready",
        240,
        "the high Job admitted through Horus once Kueue preempted the low one",
    )
    low = kueue.get("workload", low["metadata"]["name"], ns)
    evicted = condition(low, "Evicted")
    assert evicted is not None and evicted["status"] == "True", low["status"]
    assert kueue.get("job", "low", ns)["spec"]["suspend"] is True
    # all four GPUs are the high Job's: 60 % + 60 % does not fit one GPU, so none of the low
    # Job's slots can still be held
    assert len({s.gpu_uuid for s in slots_of(high)}) == 4
    assert check_of(low).get("state") != "Ready"
    wait_for(
        lambda: len(pods_of(kueue, ns, "high", "Succeeded")) >= 4, 120, "the high Job's pods", diag
    )
    kueue.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false")
    assert horus["op"].errors == []


def deployment(name: str, ns: str, replicas: int, core: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {c.ANNOTATION_GRAPH_PROFILE: PROFILE},
                },
                "spec": {**pod_spec(core), "restartPolicy": "Always"},
            },
        },
    }


def scale_to_one_and_delete(kueue: KueueEnv, ns: str, name: str, diag: Callable[[], str]) -> None:
    """Scale Deployment ``name`` down to one replica: the removed replicas' shares are freed
    (their claims go with their pods); then delete it."""
    kueue.kubectl("scale", "deployment", name, "-n", ns, "--replicas=1")
    wait_for(
        lambda: len(consumed_cores(kueue, ns, f"{name}-")) == 1,
        180,
        "the removed replicas' shares freed",
        diag,
    )
    kueue.kubectl("delete", "deployment", name, "-n", ns, "--wait=false")


def consumed_cores(kueue: KueueEnv, ns: str, prefix: str) -> dict[str, int]:
    """Claim name → cores the kube-scheduler allocated, for allocated claims of ``prefix``
    pods (a claim named by the pod's UID: found through the pods)."""
    out = {}
    for claim in kueue.list("resourceclaims", ns):
        owners = claim["metadata"].get("ownerReferences") or []
        if not any(o.get("name", "").startswith(prefix) for o in owners):
            continue
        alloc = (claim.get("status") or {}).get("allocation")
        if alloc and not claim["metadata"].get("deletionTimestamp"):
            (result,) = alloc["devices"]["results"]
            out[claim["metadata"]["name"]] = int(result["consumedCapacity"]["cores"])
    return out


def test_a_deployment_scaled_1_4_1_keeps_each_replica_on_a_share_and_frees_them(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """Without Kueue: each replica's claim, pinned by Horus, allocated; scaling down frees
    each share (the claim goes with its pod)."""
    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    kueue.create(deployment("web", ns, 1, 30))
    wait_for(lambda: len(consumed_cores(kueue, ns, "web-")) == 1, 120, "one replica's share", diag)
    kueue.kubectl("scale", "deployment", "web", "-n", ns, "--replicas=4")
    shares = wait_for(
        lambda: (s := consumed_cores(kueue, ns, "web-")) and len(s) == 4 and s,
        180,
        "four replicas, each with an allocated 30 % share",
        diag,
    )
    assert set(shares.values()) == {30}
    wait_for(lambda: len(pods_of(kueue, ns, "web")) == 4, 120, "four replicas Running", diag)
    scale_to_one_and_delete(kueue, ns, "web", diag)


def test_bad_neighbours_land_on_different_gpus_when_a_better_one_exists(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """The DLJob tests' case for two Kueue Jobs: 30 % each, every GPU empty. A first fit in
    device order would stack the second on the first's GPU; Horus keeps them apart. The first
    Job runs on (kwok completes each pod and the Job makes the next, so its slot stays held)."""
    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    queue = gpu_queue(kueue, ns, f"nb-{horus['sfx']}")
    kueue.create(gpu_job("first", ns, queue, 1, 30, 100000))
    first = answered(kueue, ns, "first", "Ready", 120, "the first Job admitted through Horus")
    wait_for(lambda: pods_of(kueue, ns, "first", "Succeeded"), 120, "the first Job running", diag)
    kueue.create(gpu_job("second", ns, queue, 1, 30))
    second = answered(kueue, ns, "second", "Ready", 120, "the second Job admitted through Horus")
    (a,), (b,) = slots_of(first), slots_of(second)
    assert a.gpu_uuid != b.gpu_uuid, (a, b)
    assert "predicted speed" in check_of(second)["message"]
    kueue.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false")


def test_a_trainjob_is_admitted_through_horus_and_its_nodes_run_on_their_slots(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """A Kubeflow TrainJob (torch-distributed runtime, 2 nodes asking 40 % each, its profile
    in a runtime patch of the node pods' template): Kueue admits it through Horus' check, and
    Trainer's JobSet runs each node pod on the GPU of its slot."""
    from kueue_support import TRAINER_API

    from horus.devcluster import workload_manifests as wm
    from horus.devcluster.workload_specs import manifests_dir

    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    queue = gpu_queue(kueue, ns, f"tj-{horus['sfx']}")
    runtimes = manifests_dir(kueue.cluster.bin_dir) / "trainer" / "runtimes"
    [runtime] = wm.load_documents(runtimes / "torch_distributed.yaml")
    kueue.apply(runtime)
    profile = {"metadata": {"annotations": {c.ANNOTATION_GRAPH_PROFILE: PROFILE}}}
    train = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {"name": "torch", "namespace": ns, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "runtimeRef": {"name": runtime["metadata"]["name"]},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "limits": {c.RESOURCE_GPU_CORE: "40", c.RESOURCE_GPU_MEMORY: "64"},
                },
            },
            "runtimePatches": [
                {
                    "manager": "horus.io/test",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": "node", "template": {"spec": {"template": profile}}}
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    kueue.create(train)
    wl = answered(
        kueue, ns, "torch", "Ready", 120, "the TrainJob's Workload Ready through Horus' check"
    )
    assert "names no profile" not in check_of(wl)["message"], check_of(wl)["message"]
    (update,) = [
        u for u in check_of(wl)["podSetUpdates"] if c.ANNOTATION_GANG_SLOTS in u["annotations"]
    ]
    slots = decode_slots(update["annotations"][c.ANNOTATION_GANG_SLOTS], update["name"])
    assert len(slots) == 2 and len({s.gpu_uuid for s in slots}) == 2
    assert {s.core_percent for s in slots} == {40}
    done = wait_for(
        lambda: (p := pods_of(kueue, ns, "torch", "Succeeded")) and len(p) == 2 and p,
        120,
        "the TrainJob's two node pods to run",
        diag,
    )
    assert sorted(p["spec"]["nodeName"] for p in done) == sorted(s.node for s in slots)
    kueue.kubectl("delete", "trainjob", "torch", "-n", ns, "--wait=false", check=False)
    kueue.kubectl("delete", "clustertrainingruntime", runtime["metadata"]["name"], check=False)


def test_a_gang_without_kueue_gets_all_its_gpus_at_once_or_none(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """No Kueue: four pods labelled as one gang (``horus.io/gang-name``, ``gang-size: 4``,
    a Deployment here, whose pods kwok keeps Running). With one GPU taken whole, none of the
    four gets a claim; once it frees, all four do, one GPU each."""
    ns = horus["ns"]
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    (whole,) = group_pods("block", ns, None, 1, 100)
    kueue.create(whole)
    wait_for(lambda: len(pods_of(kueue, ns, "block")) == 1, 120, "the whole-GPU pod", diag)
    gang = deployment("gang", ns, 4, 40)
    template = gang["spec"]["template"]["metadata"]
    template["labels"][c.LABEL_GANG_NAME] = "gang"
    template["annotations"][c.ANNOTATION_GANG_SIZE] = "4"
    kueue.create(gang)

    def told() -> set[str]:
        items = json.loads(kueue.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
        return {
            e["involvedObject"]["name"]
            for e in items
            if "does not fit as a whole" in (e.get("message") or "")
        }

    wait_for(lambda: len(told()) == 4, 120, "each pod of the gang told it does not fit", diag)
    assert consumed_cores(kueue, ns, "gang-") == {}
    assert not [
        cl
        for cl in kueue.list("resourceclaims", ns)
        if any(
            o.get("name", "").startswith("gang-")
            for o in cl["metadata"].get("ownerReferences") or []
        )
    ]
    kueue.kubectl("delete", "pod", "block-0", "-n", ns, "--wait=true")
    shares = wait_for(
        lambda: (s := consumed_cores(kueue, ns, "gang-")) and len(s) == 4 and s,
        180,
        "all four pods of the gang with an allocated share",
        diag,
    )
    assert set(shares.values()) == {40}
    devices = set()
    for claim in kueue.list("resourceclaims", ns):
        if claim["metadata"]["name"] in shares:
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            devices.add((result["pool"], result["device"]))
    assert len(devices) == 4  # one GPU each
    kueue.kubectl("delete", "deployment", "gang", "-n", ns, "--wait=false")


def kueue_template(ns: str) -> dict[str, Any]:
    """The namespace's template for Kueue's pod integrations, as examples/kueue ships it."""
    docs = yaml.safe_load_all((ROOT / "examples" / "kueue" / "queues.yaml").read_text())
    (template,) = [d for d in docs if d and d["kind"] == "ResourceClaimTemplate"]
    template["metadata"]["namespace"] = ns
    return dict(template)


def claims_by_pod(kueue: KueueEnv, ns: str, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Pod name → the claims it controls, for pods named ``prefix``…"""
    out: dict[str, list[dict[str, Any]]] = {}
    for claim in kueue.list("resourceclaims", ns):
        for o in claim["metadata"].get("ownerReferences") or []:
            if o.get("kind") == "Pod" and o.get("name", "").startswith(prefix):
                out.setdefault(o["name"], []).append(claim)
    return out


def on_their_slots(kueue: KueueEnv, ns: str, prefix: str) -> dict[str, tuple[str, str]]:
    """Running pod → (node, GPU UUID) of its allocated claim, each checked against the slot
    its Workload's check recorded; placeholders of running pods must be gone."""
    workloads = {w["metadata"]["uid"]: w for w in kueue.workloads(ns)}
    out = {}
    for pod in pods_of(kueue, ns, prefix):
        name = pod["metadata"]["name"]
        statuses = pod["status"].get("resourceClaimStatuses") or []
        assert len(statuses) == 1, f"{name} runs with claim statuses {statuses}"
        claim = kueue.get("resourceclaim", statuses[0]["resourceClaimName"], ns)
        assert claim["metadata"]["name"] == f"{c.CONVERTED_CLAIM_PREFIX}{pod['metadata']['uid']}"
        slot_key = claim["metadata"]["annotations"][c.ANNOTATION_GANG_SLOT]
        wl_uid, _, index = slot_key.split("/")
        slot = next(s for s in slots_of(workloads[wl_uid]) if s.index == int(index))
        assert pod["spec"]["nodeName"] == slot.node, (name, slot)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert int(result["consumedCapacity"]["cores"]) == slot.core_percent
        out[name] = (slot.node, slot.gpu_uuid)
        others = [
            cl["metadata"]["name"]
            for cl in claims_by_pod(kueue, ns, name).get(name, [])
            if cl["metadata"]["name"] != claim["metadata"]["name"]
        ]
        assert others == [], f"{name} keeps claims {others} beside Horus' own"
    return out


def with_claims(kueue: KueueEnv, ns: str) -> str:
    """``diagnose`` and, for a pod integration's wait, each claim and each pod's claim status."""
    claims = [
        f"{cl['metadata']['name']}: {cl['spec']['devices']['requests']} "
        f"allocated={bool((cl.get('status') or {}).get('allocation'))}"
        for cl in kueue.list("resourceclaims", ns)
    ]
    pods = [
        f"{p['metadata']['name']}: {p['status'].get('resourceClaimStatuses')} "
        f"gates={p['spec'].get('schedulingGates')} nodeSelector={p['spec'].get('nodeSelector')} "
        f"claims={p['spec'].get('resourceClaims')} labels={p['metadata'].get('labels')} "
        f"phase={p['status'].get('phase')} node={p['spec'].get('nodeName')}"
        for p in kueue.list("pods", ns)
    ]
    return "\n".join([kueue.diagnose(ns), *claims, *pods])


def test_a_deployment_through_kueues_pod_integration_scales_1_4_1_on_horus_shares(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """Kueue's Deployment integration: each replica is its own Workload, admitted through
    Horus' check; its placeholder claim (counted by Kueue as one horus.io/gpu-shares) is
    replaced by Horus' claim on the slot's GPU. Scaled 1 → 4 → 1: every replica on its slot,
    each removed replica's share freed and its Workload finished."""
    ns = horus["ns"]
    diag = lambda: with_claims(kueue, ns)  # noqa: E731
    queue = gpu_queue(kueue, ns, f"kdep-{horus['sfx']}")
    kueue.apply(kueue_template(ns))
    dep = deployment("kdep", ns, 1, 30)
    dep["spec"]["template"]["metadata"]["labels"][QUEUE_NAME_LABEL] = queue
    kueue.create(dep)
    wait_for(lambda: len(on_their_slots(kueue, ns, "kdep")) == 1, 180, "one replica", diag)
    wl = workload_named(kueue, ns, "kdep")
    assert wl is not None and check_of(wl)["state"] == "Ready"
    usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    assert usage[c.KUEUE_SHARES_RESOURCE] == "1", usage
    kueue.kubectl("scale", "deployment", "kdep", "-n", ns, "--replicas=4")
    wait_for(
        lambda: (s := on_their_slots(kueue, ns, "kdep")) and len(s) == 4 and s,
        240,
        "four replicas, each on its Workload's slot",
        diag,
    )
    assert set(consumed_cores(kueue, ns, "kdep-").values()) == {30}
    scale_to_one_and_delete(kueue, ns, "kdep", diag)
    assert horus["op"].errors == []


def test_a_statefulset_through_kueue_is_one_gang_all_or_none(
    kueue: KueueEnv, horus: dict[str, Any]
) -> None:
    """Kueue's StatefulSet integration makes its pods one pod group, one Workload: Horus
    places all three replicas at 60 % or none. With one GPU taken whole only three GPUs are
    left — room for all three, one each; with two taken, the check says Retry and no replica
    gets a claim."""
    ns = horus["ns"]
    diag = lambda: with_claims(kueue, ns)  # noqa: E731
    queue = gpu_queue(kueue, ns, f"ksts-{horus['sfx']}")
    kueue.apply(kueue_template(ns))
    blockers = group_pods("wall", ns, None, 2, 100)
    for pod in blockers:
        kueue.create(pod)
    wait_for(lambda: len(pods_of(kueue, ns, "wall")) == 2, 120, "two whole-GPU pods", diag)
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ksts", "namespace": ns, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "serviceName": "ksts",
            "selector": {"matchLabels": {"app": "ksts"}},
            "template": deployment("ksts", ns, 3, 60)["spec"]["template"],
        },
    }
    kueue.create(sts)
    wl = answered(kueue, ns, "ksts", "Retry", 180, "Horus' check to say Retry")
    assert "does not fit as a gang" in check_of(wl)["message"], check_of(wl)
    assert all(
        all(cl["metadata"]["name"].startswith("ksts-") for cl in claims)
        for claims in claims_by_pod(kueue, ns, "ksts-").values()
    )  # placeholders only: no claim of Horus for any replica
    kueue.kubectl("delete", "pod", "wall-0", "-n", ns, "--wait=true")
    placed = wait_for(
        lambda: (s := on_their_slots(kueue, ns, "ksts")) and len(s) == 3 and s,
        240,
        "all three replicas on their slots",
        diag,
    )
    assert len(set(placed.values())) == 3, placed
    kueue.kubectl("delete", "statefulset", "ksts", "-n", ns, "--wait=false")
    kueue.kubectl("delete", "pod", "wall-1", "-n", ns, "--wait=false")
    assert horus["op"].errors == []
