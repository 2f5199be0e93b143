"""From ``kubectl apply`` to containers running, on real kubelet nodes: a DLJob placed by the
in-cluster Horus operator vs a plain pod placed by the stock kube-scheduler, same nodes, same
run.

    .venv/bin/python benchmarks/realnodes_latency.py             # 50 of each (root)
    .venv/bin/python benchmarks/realnodes_latency.py --jobs 10   # a quicker run

Starts its own local cluster with two real nodes and the chart
(``horus.devcluster.chart.start``: control plane, kubelets with containerd, images built from
this checkout, ``helm install`` with the operator Deployment and node DaemonSet), then, one at a
time and alternating so both see the same machine:

* **dljob** — ``kubectl apply`` of a one-replica DLJob (explicit 10 % / 1 GiB share) running
  the example workload image: the operator admits, predicts, places, creates and binds the
  pod, the kubelet asks the device plugin to Allocate it (signature check, annotation patch),
  and containerd starts the container;
* **pod** — ``kubectl apply`` of a plain pod with the same image and command, no GPU,
  scheduled by kube-scheduler onto the same nodes.

Each sample is the wall time from just before ``kubectl apply`` starts to the moment a pod
watch sees the container running; the object is then deleted and the next one applied.
Prints p50/p90/p99 and writes ``benchmarks/results/realnodes-latency.json``. Everything shares
the machine's cores (control plane, two kubelets, two containerds, the operator), so absolute
figures vary with load; the ratio between the two columns is the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_stats import percentile, print_table, summary, write_results  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.devcluster.chart import RealCluster, start  # noqa: E402
from horus.devcluster.images import IMAGES, reference  # noqa: E402

NAMESPACE = "bench"
WORKLOAD = reference(IMAGES["workload"].repository)
ARGS = ["--steps", "0", "--report-seconds", "30"]


class RunningWatch:
    """When each pod of the namespace was first seen with every container running."""

    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config, watch

        api = config.new_client_from_config(config_file=kubeconfig)
        self.core: Any = client.CoreV1Api(api)
        self.seen: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stop = False
        self._watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                for ev in self._watch.stream(
                    self.core.list_namespaced_pod, NAMESPACE, timeout_seconds=60
                ):
                    now = time.time()
                    pod = ev["object"]
                    statuses = pod.status.container_statuses or []
                    if statuses and all(s.state and s.state.running for s in statuses):
                        with self.cond:
                            self.seen.setdefault(pod.metadata.name, now)
                            self.cond.notify_all()
                    if self.stop:
                        return
            except Exception:  # a dropped watch is re-opened
                time.sleep(0.2)

    def wait(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self.cond:
            while name not in self.seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{name} not running within {timeout:.0f}s")
                self.cond.wait(left)
            return self.seen[name]


def dljob(name: str) -> dict[str, Any]:
    import yaml

    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / "mobilenet-explicit-share.yaml").read_text()
    )
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"].update(replicas=1, gpu={"mode": "explicit", "corePercent": 10, "memoryMiB": 1024})
    doc["spec"]["template"] = {"spec": {"restartPolicy": "Never", "containers": [container()]}}
    return doc


def container() -> dict[str, Any]:
    return {"name": "trainer", "image": WORKLOAD, "imagePullPolicy": "Never", "args": ARGS}


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {c.LABEL_DEV_NODE: c.DEV_NODE_REAL},
            "terminationGracePeriodSeconds": 1,
            "containers": [container()],
        },
    }


def measure(rc: RealCluster, watch: RunningWatch, kind: str, i: int) -> float:
    name = f"{kind}-{i:03d}"
    doc = dljob(name) if kind == "dljob" else plain_pod(name)
    pod = f"{name}-0" if kind == "dljob" else name
    t0 = time.time()
    rc.kube.kubectl("apply", "-f", "-", input=json.dumps(doc))
    seen = watch.wait(pod, timeout=180)
    resource = "dljob" if kind == "dljob" else "pod"
    rc.kube.kubectl("delete", resource, name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    if kind == "dljob":  # the job's pod goes with it (owner reference); wait for it too
        rc.kube.kubectl(
            "wait", "--for=delete", f"pod/{pod}", "-n", NAMESPACE, "--timeout=120s", check=False
        )
    return seen - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50, help="DLJobs (and as many plain pods)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "realnodes-latency.json"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("real nodes need root", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="horus-bench-real-")) / "c"
    setup: list[str] = []
    t_setup = time.monotonic()
    rc = start(folder, args.nodes, 2, log=setup.append)
    try:
        print("setup: " + "; ".join(setup), flush=True)
        setup_s = time.monotonic() - t_setup
        rc.kube.kubectl("create", "namespace", NAMESPACE)
        watch = RunningWatch(rc.state.kubeconfig)
        results: dict[str, list[float]] = {"dljob": [], "pod": []}
        for i in range(args.jobs):
            for kind in ("dljob", "pod") if i % 2 == 0 else ("pod", "dljob"):
                results[kind].append(measure(rc, watch, kind, i))
            if (i + 1) % 10 == 0:
                print(
                    f"  {i + 1}/{args.jobs}: dljob p50 {percentile(results['dljob'], 50):.2f}s, "
                    f"pod p50 {percentile(results['pod'], 50):.2f}s",
                    flush=True,
                )
        watch.stop = True
        out = {
            "what": "kubectl apply -> containers running on real kubelet nodes",
            "nodes": args.nodes,
            "setup_s": round(setup_s, 1),
            "load_average": os.getloadavg(),
            "dljob_horus_operator": summary(results["dljob"], "s", 3),
            "plain_pod_kube_scheduler": summary(results["pod"], "s", 3),
        }
        ratio = out["dljob_horus_operator"]["p50_s"] / out["plain_pod_kube_scheduler"]["p50_s"]
        out["p50_ratio_dljob_over_pod"] = round(ratio, 2)
        labels = [
            ("DLJob (Horus operator)", "dljob_horus_operator"),
            ("plain pod (kube-scheduler)", "plain_pod_kube_scheduler"),
        ]
        print_table(out, labels)
        print(f"p50 ratio DLJob / plain pod: {ratio:.2f}")
        write_results(args.out, out)
    finally:
        rc.local.down()
        shutil.rmtree(folder.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
