"""JobSet and Kubeflow Trainer as installed by ``WorkloadControllers``, through Kueue: a JobSet
of one replicated Job × 4 pods is suspended, admitted and runs its 4 pods; a TrainJob on the
shipped ``torch-distributed`` ClusterTrainingRuntime is admitted and Trainer makes its JobSet,
whose pods run (kwok runs pods and completes a Job's)."""

from __future__ import annotations

import json
from typing import Any

from kueue_support import TRAINER_API, KueueEnv, condition, jobset, wait_for

from horus.devcluster import workload_manifests as wm
from horus.devcluster.workload_specs import manifests_dir


def _admitted_workload(env: KueueEnv, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    for wl in env.workloads(ns):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == kind and o.get("name") == name for o in owners):
            cond = condition(wl, "Admitted")
            if cond and cond["status"] == "True":
                return wl
    return None


def _ran(env: KueueEnv, ns: str, selector: str) -> list[dict[str, Any]]:
    """The pods that run or ran (kwok completes a Job's pods once they run)."""
    return [
        p
        for p in env.list("pods", ns, selector)
        if p["status"].get("phase") in ("Running", "Succeeded")
    ]


def test_jobset_through_kueue_runs_four_pods(kueue: KueueEnv) -> None:
    ns = kueue.namespace("kjs")
    lq = kueue.queues(ns)
    created = json.loads(
        kueue.kubectl(
            "create", "-o", "json", "-f", "-", input=json.dumps(jobset("gang", ns, lq, pods=4))
        ).stdout
    )
    assert created["spec"].get("suspend") is True, "Kueue's JobSet webhook suspends it"
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    wl = wait_for(
        lambda: _admitted_workload(kueue, ns, "JobSet", "gang"), 90, "JobSet admitted", diag
    )
    assert [a["count"] for a in wl["status"]["admission"]["podSetAssignments"]] == [4]
    pods = wait_for(
        lambda: (
            (ps := _ran(kueue, ns, "jobset.sigs.k8s.io/jobset-name=gang")) and len(ps) == 4 and ps
        ),
        90,
        "the JobSet's 4 pods to run",
        diag,
    )
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for p in pods} == {"workers"}


def test_trainjob_makes_a_jobset_through_kueue(kueue: KueueEnv) -> None:
    ns = kueue.namespace("ktj")
    lq = kueue.queues(ns)
    runtimes = manifests_dir(kueue.cluster.bin_dir) / "trainer" / "runtimes"
    [runtime] = wm.load_documents(runtimes / "torch_distributed.yaml")
    kueue.apply(runtime)
    train = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {
            "name": "torch",
            "namespace": ns,
            "labels": {"kueue.x-k8s.io/queue-name": lq},
        },
        "spec": {
            "runtimeRef": {"name": runtime["metadata"]["name"]},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
        },
    }
    created = json.loads(
        kueue.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(train)).stdout
    )
    assert created["spec"].get("suspend") is True, "Kueue's TrainJob webhook suspends it"
    diag = lambda: kueue.diagnose(ns)  # noqa: E731
    wait_for(
        lambda: _admitted_workload(kueue, ns, "TrainJob", "torch"), 90, "TrainJob admitted", diag
    )
    js = wait_for(
        lambda: (
            (
                got := kueue.kubectl("get", "jobset", "torch", "-n", ns, "-o", "json", check=False)
            ).returncode
            == 0
            and json.loads(got.stdout)
        ),
        60,
        "Trainer to create the TrainJob's JobSet",
        diag,
    )
    assert [o["kind"] for o in js["metadata"]["ownerReferences"]] == ["TrainJob"]
    wait_for(
        lambda: (ps := _ran(kueue, ns, "jobset.sigs.k8s.io/jobset-name=torch")) and len(ps) == 2,
        90,
        "the TrainJob's 2 pods to run",
        diag,
    )
    runtime_name = runtime["metadata"]["name"]
    kueue.kubectl("delete", "trainjob", "torch", "-n", ns, "--wait=false", check=False)
    kueue.kubectl("delete", "clustertrainingruntime", runtime_name, check=False)
