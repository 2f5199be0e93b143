"""From ``kubectl apply`` to containers running on real kubelet nodes, on both GPU-sharing
paths (issue 25): a DLJob on the dra path vs a DLJob on the device-plugin path vs a plain pod,
same nodes, same run.

    .venv/bin/python benchmarks/apply_to_running.py             # 50 of each (root)
    .venv/bin/python benchmarks/apply_to_running.py --jobs 10   # a quicker run

Starts its own local cluster with two real nodes and the chart (``horus.devcluster.chart.start``:
control plane, kubelet 1.37 with containerd 2, images built from this checkout), then two
phases on the same nodes:

1. ``gpuSharing.path: devicePlugin`` — alternating, one at a time:
   **dljob-deviceplugin**: a one-replica DLJob (explicit 10 % / 1 GiB share) of the example
   workload: the operator admits, predicts, places, creates and binds the pod, the kubelet
   asks the device plugin to Allocate it, containerd starts it; **pod**: a plain pod, same
   image and command, no GPU, placed by the kube-scheduler.
2. ``helm upgrade`` to ``gpuSharing.path: dra`` — alternating: **dljob-dra**: the same DLJob,
   which the operator now expresses as a ResourceClaim the kube-scheduler allocates and binds,
   and the kubelet has the Horus DRA driver prepare (CDI); **claim-pod**: a plain pod with its
   own claim of 10 cores / 1024Mi (no operator: the kube-scheduler and the DRA driver only);
   **pod** again.

Each sample is the wall time from just before ``kubectl apply`` starts to the moment a pod
watch sees the container running; the object is then deleted (and its pod waited for) before
the next. Prints p50/p90/p99 and the ratios to the plain pod of the same phase, and writes
``benchmarks/results/apply-to-running.json``. Everything shares the machine's cores (control
plane, two kubelets, two containerds, the operator), so absolute figures vary with load: the
ratios to the plain pod measured beside them are the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency_stats import percentile, print_table, summary, write_results  # noqa: E402
from realnodes_latency import NAMESPACE, RunningWatch, dljob, plain_pod  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.devcluster.chart import NAMESPACE as HORUS_NS  # noqa: E402
from horus.devcluster.chart import RELEASE, RealCluster, install, start  # noqa: E402

GPU_MEMORY_MIB = 81559  # a real H100's memory, as the real-node tests use


def claim_pod(name: str) -> list[dict[str, Any]]:
    """A plain pod with its own claim of the Horus DeviceClass (10 cores, 1024Mi)."""
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": c.DRA_DEVICE_CLASS,
            "capacity": {"requests": {"cores": "10", "memory": "1024Mi"}},
        },
    }
    pod = plain_pod(name)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}},
    }
    return [claim, pod]


def measure(rc: RealCluster, watch: RunningWatch, kind: str, i: int, phase_no: int) -> float:
    """One sample of ``kind``: apply, wait for the container running, delete and wait. Names
    are unique over the run (the watch keeps the first time it saw each name running)."""
    name = f"{kind}-p{phase_no}-{i:03d}"
    if kind.startswith("dljob"):
        docs, pod, delete = [dljob(name)], f"{name}-0", [("dljob", name)]
    elif kind == "claim-pod":
        docs, pod = claim_pod(name), name
        delete = [("pod", name), ("resourceclaim", name)]
    else:
        docs, pod, delete = [plain_pod(name)], name, [("pod", name)]
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    t0 = time.time()
    rc.kube.kubectl("apply", "-f", "-", input=body)
    seen = watch.wait(pod, timeout=180)
    for resource, obj in delete:
        rc.kube.kubectl("delete", resource, obj, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    rc.kube.kubectl(
        "wait", "--for=delete", f"pod/{pod}", "-n", NAMESPACE, "--timeout=120s", check=False
    )
    return seen - t0


def phase(
    rc: RealCluster,
    watch: RunningWatch,
    phase_no: int,
    kinds: tuple[str, ...],
    jobs: int,
    results: dict[str, list[float]],
    say: Callable[[str], None],
) -> None:
    """``jobs`` samples of each kind, the order rotated every round (each sees the machine
    as the others do), after one unrecorded sample of each (a new operator leader, cold
    caches)."""
    for kind in kinds:
        say(f"  warm-up {kind}: {measure(rc, watch, kind, 999, phase_no):.2f}s (not recorded)")
    for i in range(jobs):
        shift = i % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            results.setdefault(kind, []).append(measure(rc, watch, kind, i, phase_no))
        if (i + 1) % 10 == 0:
            say(
                f"  {i + 1}/{jobs}: "
                + ", ".join(f"{k} p50 {percentile(results[k], 50):.2f}s" for k in kinds)
            )


def switch_path(rc: RealCluster, path: str) -> None:
    """``helm upgrade`` of the release to ``gpuSharing.path`` (waits for its pods and for each
    node's GPUs on that path)."""
    import yaml

    out = rc.kube.helm("get", "values", RELEASE, "-n", HORUS_NS, "-o", "yaml").stdout
    values: dict[str, Any] = yaml.safe_load(out) or {}
    values["gpuSharing"] = {"path": path}
    install(rc.kube, values)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50, help="samples of each kind")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "apply-to-running.json"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("real nodes need root", file=sys.stderr)
        return 2

    def say(text: str) -> None:
        print(text, flush=True)

    folder = Path(tempfile.mkdtemp(prefix="horus-bench-a2r-")) / "c"
    setup: list[str] = []
    t_setup = time.monotonic()
    sim = ["--sim-gpu-count", "1", "--sim-gpu-memory-mib", str(GPU_MEMORY_MIB)]
    values = {
        "gpuSharing": {"path": "devicePlugin"},
        "node": {"devicePlugin": {"extraArgs": sim}, "draDriver": {"extraArgs": sim}},
    }
    rc = start(folder, args.nodes, 1, values=values, log=setup.append)
    try:
        say("setup: " + "; ".join(setup))
        setup_s = time.monotonic() - t_setup
        rc.kube.kubectl("create", "namespace", NAMESPACE)
        watch = RunningWatch(rc.state.kubeconfig)
        dp: dict[str, list[float]] = {}
        say("phase 1: gpuSharing.path=devicePlugin")
        phase(rc, watch, 1, ("dljob-deviceplugin", "pod"), args.jobs, dp, say)
        t = time.monotonic()
        switch_path(rc, "dra")
        switch_s = time.monotonic() - t
        say(f"phase 2: gpuSharing.path=dra (helm upgrade {switch_s:.0f}s)")
        dra: dict[str, list[float]] = {}
        phase(rc, watch, 2, ("dljob-dra", "claim-pod", "pod"), args.jobs, dra, say)
        watch.stop = True
        rows = {
            "dljob_deviceplugin": summary(dp["dljob-deviceplugin"], "s", 3),
            "plain_pod_phase1": summary(dp["pod"], "s", 3),
            "dljob_dra": summary(dra["dljob-dra"], "s", 3),
            "claim_pod_dra": summary(dra["claim-pod"], "s", 3),
            "plain_pod_phase2": summary(dra["pod"], "s", 3),
            "plain_pod_all": summary(dp["pod"] + dra["pod"], "s", 3),
        }
        ratios = {
            "dljob_deviceplugin_over_pod_p50": rows["dljob_deviceplugin"]["p50_s"]
            / rows["plain_pod_phase1"]["p50_s"],
            "dljob_dra_over_pod_p50": rows["dljob_dra"]["p50_s"]
            / rows["plain_pod_phase2"]["p50_s"],
            "claim_pod_dra_over_pod_p50": rows["claim_pod_dra"]["p50_s"]
            / rows["plain_pod_phase2"]["p50_s"],
            "dljob_dra_over_dljob_deviceplugin_p50": rows["dljob_dra"]["p50_s"]
            / rows["dljob_deviceplugin"]["p50_s"],
            "dljob_dra_over_dljob_deviceplugin_p99": rows["dljob_dra"]["p99_s"]
            / rows["dljob_deviceplugin"]["p99_s"],
        }
        out = {
            "what": "kubectl apply -> containers running on real kubelet nodes, both GPU paths",
            "command": f"benchmarks/apply_to_running.py --jobs {args.jobs} --nodes {args.nodes}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}",
            "nodes": args.nodes,
            "gpus_per_node": 1,
            "gpu_memory_mib": GPU_MEMORY_MIB,
            "setup_s": round(setup_s, 1),
            "switch_to_dra_s": round(switch_s, 1),
            "load_average": os.getloadavg(),
            **rows,
            "ratios": {k: round(v, 2) for k, v in ratios.items()},
            "samples_s": {
                "phase1_devicePlugin": {k: [round(x, 3) for x in v] for k, v in dp.items()},
                "phase2_dra": {k: [round(x, 3) for x in v] for k, v in dra.items()},
            },
        }
        labels = [
            ("DLJob, device-plugin path", "dljob_deviceplugin"),
            ("plain pod (phase 1)", "plain_pod_phase1"),
            ("DLJob, dra path", "dljob_dra"),
            ("pod with its own claim, dra path", "claim_pod_dra"),
            ("plain pod (phase 2)", "plain_pod_phase2"),
        ]
        print_table(rows, labels, say, width=34)
        for key, value in out["ratios"].items():
            say(f"{key}: {value:.2f}")
        write_results(args.out, out, say)
    finally:
        rc.local.down()
        shutil.rmtree(folder.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
