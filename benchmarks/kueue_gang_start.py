"""From ``kubectl apply`` of a 4-worker JobSet to all four workers started, through Kueue +
Horus vs Kueue alone (the kube-scheduler allocating DRA claims first-fit), same nodes, same run.

    .venv/bin/python benchmarks/kueue_gang_start.py              # 5 rounds
    .venv/bin/python benchmarks/kueue_gang_start.py --rounds 3   # a quicker run

Set up once: a local control plane (``LocalCluster``), JobSet and Kueue as host processes
(``WorkloadControllers``), two kwok nodes with two simulated GPUs each published by in-process
Horus DRA drivers (``run_driver`` with a node-bound token, a kubelet-side peer registered with
each), the DeviceClass, the node RBAC, the DLJob CRD, and Horus' reconcile pass in a thread
(``Reconciler(placement_path="dra", kueue=...)``, every 0.3 s as the operator runs it), as the
``horus`` fixture of tests/integration/kueue/test_horus_check.py does — with the same helpers
(``HorusOnKwok`` of tests/integration/kueue/horus_support.py, ``kueue_support``), whose folders
are put on ``sys.path``.

Two namespaces, each with its own ClusterQueue on the same nodes:

- **horus**: the ClusterQueue names the AdmissionCheck of ``horus.io/gpu-placement``; each
  worker asks ``horus.io/gpu-core: 40`` and ``horus.io/gpu-memory: 64`` with a profile
  annotation, which the admission policy (examples/dra/extended-resources-policy.yaml, bound
  to this namespace only) turns into a claim Horus makes, pinned to the GPU of its slot.
- **plain**: no check; each worker uses a ResourceClaimTemplate of the DeviceClass
  ``gpu.horus.io`` asking 40 cores and 16384Mi, which the kube-scheduler allocates first-fit.
  Kueue counts the claims through ``resources.deviceClassMappings`` against the queue's quota of
  the mapped resource.

Each round runs both modes one after the other (which goes first alternates): a JobSet with one
replicated Job of 4 pods (parallelism 4, completions 4). A sample is the wall time from just
before ``kubectl apply`` to the moment all 4 pods have **started**: kwok completes a Job's pods
right after marking them Running, so started means each pod has ``status.startTime`` or is
Running or Succeeded (polled every 0.1 s through the API). Alongside, the GPUs the pods'
claims were allocated on (``status.allocation.devices.results[0]``, from a watch on each
namespace's ResourceClaims: a finished Job's claims are released within moments; in the horus
mode Horus' ``GPUChosen`` Events fill in one the watch missed), and in the horus mode the GPUs
of the slots Horus' check gave the Workload. Slots and pods can differ: a worker created after
another has already finished may take that worker's slot (kwok finishes pods at once), which
is reuse one after the other, not two workers on one GPU at a time. The JobSet is then deleted
and its pods, claims, Workload and JobSet waited for before the next run.

Prints and writes ``benchmarks/results/kueue-gang-start.json``: every sample, median and p90
per mode, the GPUs used per run, the ratio horus median / plain median (the baseline, Kueue
alone, measured in the same run), the machine and its load averages at start and end. The
cluster is torn down and its folder removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in ("src", "benchmarks", "tests", "tests/integration/dra", "tests/integration/kueue"):
    sys.path.insert(0, str(ROOT / extra))

import yaml  # noqa: E402
from horus_support import HorusOnKwok  # noqa: E402
from kueue_support import JOBSET_API, KUEUE_API, QUEUE_NAME_LABEL, wait_for  # noqa: E402
from latency_stats import percentile, write_results  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.devcluster.cluster import LocalCluster  # noqa: E402
from horus.devcluster.workload_controllers import WorkloadControllers  # noqa: E402
from horus.kube.rest import RestClient  # noqa: E402
from horus.operator.kueue.slots import decode_slots  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "kueue-gang-start.json"
VERSIONS = {"kueue": "v0.19.2", "jobset": "v0.12.0"}
MODES = ("horus", "plain")
WORKERS = 4
CHECK = "horus-gpu"
#: the logical resource Kueue counts the plain mode's claims as
LOGICAL = f"kueue-bench.{c.API_GROUP}/gpu"
KUEUE_OVERRIDES = {
    "resources": {
        "deviceClassMappings": [{"name": LOGICAL, "deviceClassNames": [c.DRA_DEVICE_CLASS]}]
    }
}
PROFILE = (ROOT / "examples" / "profiles" / "mobilenetv2-cifar-bs128.yaml").read_text()
IMAGE = "registry.invalid/horus-bench:1"
POLL_S = 0.1


class Cluster:
    """kubectl and an API client on the benchmark's control plane (what the test helpers use)."""

    def __init__(self, local: LocalCluster, state: Any) -> None:
        self.local, self.state = local, state
        self.bin_dir = Path(state.bin_dir)
        self._rest: RestClient | None = None

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": self.state.kubeconfig}
        proc = subprocess.run([str(self.bin_dir / "kubectl"), *args], env=env, input=input,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:4])} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, *objs: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))

    def api_client(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=self.state.kubeconfig)

    def get_json(self, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """GET ``path`` from the apiserver (no kubectl process: cheap enough to poll)."""
        if self._rest is None:
            self._rest = RestClient(self.api_client())
        out: dict[str, Any] = self._rest.request("GET", path, query=query) or {}
        return out


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def namespace(cl: Cluster, name: str) -> None:
    cl.kubectl("create", "namespace", name)
    wait_for(lambda: cl.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
             60, f"default ServiceAccount in {name}")  # fmt: skip


def cluster_queue(name: str, check: bool, gpu_quota: dict[str, str]) -> list[dict[str, Any]]:
    quota = {"cpu": "64", "memory": "256Gi", **gpu_quota}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {
                        "name": f"flavor-{name}",
                        "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()],
                    }
                ],
            }
        ],
    }
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
    return [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f"flavor-{name}"}},
        {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": name},
            "spec": {"clusterQueue": name},
        },
    ]


def claim_template(ns: str) -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": c.DRA_DEVICE_CLASS,
            "capacity": {"requests": {"cores": "40", "memory": "16384Mi"}},
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "share-40", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def jobset(name: str, mode: str) -> dict[str, Any]:
    """A JobSet of one replicated Job of :data:`WORKERS` pods in ``mode``'s queue."""
    main: dict[str, Any] = {"name": "main", "image": IMAGE,
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}  # fmt: skip
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"operator": "Exists"}],
        "containers": [main],
    }
    meta: dict[str, Any] = {}
    if mode == "horus":
        main["resources"]["limits"] = {c.RESOURCE_GPU_CORE: "40", c.RESOURCE_GPU_MEMORY: "64"}
        meta = {"annotations": {c.ANNOTATION_GRAPH_PROFILE: PROFILE}}
    else:
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "share-40"}]
        main["resources"]["claims"] = [{"name": "gpu"}]
    job = {"parallelism": WORKERS, "completions": WORKERS, "backoffLimit": 0,
           "template": {"metadata": meta, "spec": pod}}  # fmt: skip
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": mode, "labels": {QUEUE_NAME_LABEL: mode}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}]},
    }


def started(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("startTime")) or status.get("phase") in ("Running", "Succeeded")


def allocated_on(claim: dict[str, Any]) -> tuple[str, str] | None:
    """(owner pod, ``pool/device``) of an allocated claim, else None."""
    owners = [o["name"] for o in claim["metadata"].get("ownerReferences") or []]
    alloc = (claim.get("status") or {}).get("allocation")
    if not owners or not alloc:
        return None
    result = alloc["devices"]["results"][0]
    return owners[0], f"{result['pool']}/{result['device']}"


class ClaimWatch:
    """Watches one namespace's ResourceClaims and keeps, per owner pod, the device its claim
    was allocated on: a Job's claims are released right after kwok completes its pods, faster
    than a poll may see them."""

    def __init__(self, cl: Cluster, ns: str) -> None:
        from kubernetes import client, watch

        self.api = client.CustomObjectsApi(cl.api_client())
        self.ns, self.watch = ns, watch.Watch()
        self.seen: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"claims-{ns}")
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for ev in self.watch.stream(
                    self.api.list_namespaced_custom_object, "resource.k8s.io", "v1", self.ns,
                    "resourceclaims", timeout_seconds=30,
                ):  # fmt: skip
                    got = allocated_on(ev["object"])
                    if got:
                        self.seen.setdefault(*got)
                    if self.stop.is_set():
                        return
            except Exception:  # a dropped watch: list and watch again
                time.sleep(0.5)

    def close(self) -> None:
        self.stop.set()
        self.watch.stop()
        self.thread.join(35)


def record_claims(cl: Cluster, ns: str, seen: dict[str, str]) -> None:
    """Owner pod -> ``pool/device`` of each allocated claim in ``ns`` now (kept once seen)."""
    for claim in cl.get_json(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims")["items"]:
        got = allocated_on(claim)
        if got:
            seen.setdefault(*got)


def chosen_from_events(cl: Cluster, ns: str, prefix: str, seen: dict[str, str]) -> None:
    """Horus' GPUChosen Events (``... on <node>/gpu-<i> (...``) for pods not yet in ``seen``."""
    for ev in cl.get_json(f"/api/v1/namespaces/{ns}/events")["items"]:
        pod = ev["involvedObject"].get("name", "")
        if ev.get("reason") != "GPUChosen" or not pod.startswith(prefix) or pod in seen:
            continue
        for word in ev.get("message", "").split():
            if "/gpu-" in word:
                seen[pod] = word.rstrip(",;:.(")
                break


def run_one(
    cl: Cluster, watch: ClaimWatch, mode: str, round_no: int, timeout: float
) -> dict[str, Any]:
    name = f"g{round_no}-{uuid.uuid4().hex[:4]}"
    selector = [("labelSelector", f"jobset.sigs.k8s.io/jobset-name={name}")]
    gpus = watch.seen
    text = json.dumps(jobset(name, mode))
    t0 = time.monotonic()
    cl.kubectl("apply", "-f", "-", input=text)
    elapsed = None
    while elapsed is None:
        pods = cl.get_json(f"/api/v1/namespaces/{mode}/pods", selector)["items"]
        if len(pods) == WORKERS and all(started(p) for p in pods):
            elapsed = time.monotonic() - t0
        elif time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{mode} round {round_no}: not all {WORKERS} workers started "
                               f"in {timeout:.0f}s: {[p['status'].get('phase') for p in pods]}")  # fmt: skip
        else:
            time.sleep(POLL_S)
    names = [p["metadata"]["name"] for p in pods]
    slots = horus_slots(cl, name) if mode == "horus" else []
    chosen: dict[str, str] = {}
    deadline = time.monotonic() + 5
    while any(n not in gpus for n in names) and time.monotonic() < deadline:
        record_claims(cl, mode, gpus)
        time.sleep(0.3)
    if mode == "horus":
        chosen_from_events(cl, mode, name, chosen)
    on = sorted(gpus.get(n) or chosen.get(n) or "?" for n in names)
    cl.kubectl("delete", "jobset", name, "-n", mode, "--wait=false")
    wait_for(lambda: gone(cl, mode), 180, f"{mode} round {round_no}'s pods, claims and Workload")
    return {
        "seconds": round(elapsed, 3),
        "gpus": on,
        "distinct_gpus": len({g for g in on if g != "?"}),
        **({"slots": slots, "gpu_chosen_events": sorted(chosen.values())} if slots else {}),
    }


def horus_slots(cl: Cluster, jobset_name: str) -> list[str]:
    """``node/gpu-<i>`` of each slot Horus' check gave the JobSet's Workload."""
    for wl in cl.get_json(f"/apis/{KUEUE_API}/namespaces/horus/workloads")["items"]:
        owners = wl["metadata"].get("ownerReferences") or []
        if not any(o.get("name") == jobset_name for o in owners):
            continue
        for check in (wl.get("status") or {}).get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                text = (update.get("annotations") or {}).get(c.ANNOTATION_GANG_SLOTS)
                if check["name"] == CHECK and text:
                    return sorted(
                        f"{s.node}/gpu-{s.gpu_index}" for s in decode_slots(text, update["name"])
                    )
    return []


def gone(cl: Cluster, ns: str) -> bool:
    return not any(
        cl.get_json(path)["items"]
        for path in (
            f"/api/v1/namespaces/{ns}/pods",
            f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
            f"/apis/{KUEUE_API}/namespaces/{ns}/workloads",
            f"/apis/{JOBSET_API}/namespaces/{ns}/jobsets",
        )
    )


def set_up(cl: Cluster) -> HorusOnKwok:
    cl.kubectl("create", "namespace", c.HORUS_NAMESPACE)
    cl.kubectl("apply", "-f", str(ROOT / "manifests" / "rbac" / "node.yaml"))
    cl.kubectl("apply", "-f", str(ROOT / "manifests" / "dra" / "deviceclass.yaml"))
    cl.kubectl("apply", "-f", str(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml"))
    for mode in MODES:
        namespace(cl, mode)
    policy, binding = yaml.safe_load_all(
        (ROOT / "examples" / "dra" / "extended-resources-policy.yaml").read_text()
    )
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "horus"}}
    }
    cl.apply(policy, binding)
    cl.apply({"apiVersion": KUEUE_API, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
              "spec": {"controllerName": c.KUEUE_ADMISSION_CHECK_CONTROLLER}})  # fmt: skip
    cl.apply(*cluster_queue("horus", True, {c.RESOURCE_GPU_CORE: "800",
                                            c.RESOURCE_GPU_MEMORY: "100000"}))  # fmt: skip
    cl.apply(*cluster_queue("plain", False, {LOGICAL: "8"}), claim_template("plain"))
    horus = HorusOnKwok(cl, ["kq-bench-a", "kq-bench-b"], "horus")

    def active(name: str) -> bool:
        cq = cl.get_json(f"/apis/{KUEUE_API}/clusterqueues/{name}")
        conds = (cq.get("status") or {}).get("conditions") or []
        return any(x["type"] == "Active" and x["status"] == "True" for x in conds)

    wait_for(lambda: all(active(m) for m in MODES), 90, "both ClusterQueues Active")
    return horus


def stats(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "median_s": round(statistics.median(samples), 3),
        "p90_s": round(percentile(samples, 90), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run to start")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not 1 <= args.rounds <= 200:
        ap.error("--rounds must be 1..200")
    began = time.time()
    load_start = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="horus-kueue-bench-"))
    local = LocalCluster(folder / "c")
    controllers = horus = None
    watches: dict[str, ClaimWatch] = {}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    try:
        say("control plane up")
        state = local.up(timeout=180)
        cl = Cluster(local, state)
        say("JobSet and Kueue up")
        controllers = WorkloadControllers(state, kueue_overrides=KUEUE_OVERRIDES)
        controllers.up(["jobset", "kueue"], timeout=240)
        server = json.loads(cl.kubectl("version", "-o", "json").stdout)["serverVersion"]
        say("Horus: two nodes x 2 GPUs, drivers, reconcile pass")
        horus = set_up(cl)
        watches = {m: ClaimWatch(cl, m) for m in MODES}
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                got = run_one(cl, watches[mode], mode, r, args.timeout)
                got["round"], got["first"] = r, mode == order[0]
                runs[mode].append(got)
                say(f"round {r} {mode:5s} {got['seconds']:6.2f} s on {got['distinct_gpus']} GPUs "
                    f"{got['gpus']}")  # fmt: skip
    finally:
        for w in watches.values():
            w.close()
        if horus is not None:
            horus.stop()
        if controllers is not None:
            controllers.down()
        local.down()
        shutil.rmtree(folder, ignore_errors=True)
    samples = {m: [x["seconds"] for x in runs[m]] for m in MODES}
    summary = {m: stats(samples[m]) for m in MODES}
    ratio = summary["horus"]["median_s"] / summary["plain"]["median_s"]
    out = {
        "what": "seconds from kubectl apply of a 4-worker JobSet to all 4 pods started",
        "started": "every pod has status.startTime or phase Running/Succeeded (kwok completes "
        "a Job's pods right after Running)",
        "modes": {
            "horus": "Kueue ClusterQueue with AdmissionCheck horus.io/gpu-placement; pods ask "
            "horus.io/gpu-core 40, gpu-memory 64 + profile; Horus places the gang",
            "plain": "Kueue ClusterQueue without the check; pods use a ResourceClaimTemplate "
            "of gpu.horus.io (cores 40, memory 16384Mi), kube-scheduler allocates first-fit",
        },
        "nodes": "2 kwok nodes x 2 simulated GPUs (81559 MiB), in-process Horus DRA drivers",
        "rounds": args.rounds,
        "order": "alternating: horus first in even rounds, plain first in odd",
        "summary": summary,
        "ratio_horus_median_to_plain_median": round(ratio, 3),
        "distinct_gpus_per_run": {m: [x["distinct_gpus"] for x in runs[m]] for m in MODES},
        "horus_distinct_slot_gpus_per_run": [len(set(x.get("slots", []))) for x in runs["horus"]],
        "runs": runs,
        "operator_errors": horus.op.errors if horus else [],
        "machine": {"nproc": os.cpu_count(), "arch": platform.machine()},
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "versions": {**VERSIONS, "kubernetes": server.get("gitVersion")},
        "started_at_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(began)),
        "wall_seconds": round(time.time() - began, 1),
    }
    for m in MODES:
        s = summary[m]
        print(f"{m:6s} median {s['median_s']:6.2f} s  p90 {s['p90_s']:6.2f} s  "
              f"GPUs per run {out['distinct_gpus_per_run'][m]}")  # fmt: skip
    print(f"horus slots' GPUs per run {out['horus_distinct_slot_gpus_per_run']}")
    print(f"horus / plain median: {ratio:.3f}")
    print(f"load {out['load_average_start']} -> {out['load_average_end']}, "
          f"{out['wall_seconds']} s")  # fmt: skip
    write_results(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
