"""Device-plugin benchmark: Allocate latency with 100 pods on one node, on a real API server.

    .venv/bin/python benchmarks/deviceplugin.py                 # starts its own local cluster
    .venv/bin/python benchmarks/deviceplugin.py --kubeconfig K  # or uses a running one

Starts a local control plane (``horus.devcluster``), one kwok node with 8 simulated GPUs, the
real device plugin (simulated backend) in-process and the kubelet-side test peer on unix
sockets. Each round creates 100 pods bound to the node, each with a signed assignment, then
calls ``Allocate`` as the kubelet does for every pod — ``horus.io/gpu-core`` then
``horus.io/gpu-memory`` — and times each call at the gRPC client. Every call lists the node's
pods from the API server, verifies the HMAC and patches the pod, so the figure includes two
API round trips. Writes ``benchmarks/results/deviceplugin-allocate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the kubelet-side peer lives with the tests

from latency_stats import summary  # noqa: E402

from deviceplugin_peer import (  # noqa: E402
    FakeKubelet,
    assignment_annotations,
    pod_manifest,
    sign_created_pod,
)
from horus.api.inventory import simulated_gpu_uuid  # noqa: E402
from horus.api.resources import memory_units  # noqa: E402
from horus.api.signing import KeyRing  # noqa: E402
from horus.common import constants as c  # noqa: E402
from horus.devcluster.nodes import NodeSpec, node_manifest  # noqa: E402
from horus.deviceplugin.app import run_plugin  # noqa: E402
from horus.deviceplugin.settings import DevicePluginSettings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GPUS = 8
# Pod i sits on GPU i % 8: at most 13 pods per GPU, so 7 % core (91 %) and 6 GiB (78 of 80 GiB)
# each; Allocate refuses a share that over-commits a GPU.
CORE_PER_POD = 7
MEM_PER_POD_MIB = 6144


def bench(kubeconfig: str, pods: int, rounds: int) -> dict[str, Any]:
    from kubernetes import client, config

    core: Any = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    suffix = uuid.uuid4().hex[:6]
    ns, node = f"dpbench-{suffix}", f"dpbench-node-{suffix}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_node(node_manifest(node, NodeSpec(count=1, gpus_per_node=GPUS)))
    # The placers' key pair; the plugin gets only the public key (a file, as the DaemonSet
    # mounts the ConfigMap horus-verify-keys), and each pod is signed for its UID after create.
    key = KeyRing.generate()
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(ns).items and time.monotonic() < deadline:
        time.sleep(0.2)

    folder = Path(tempfile.mkdtemp(prefix="hdpb-"))
    public = folder / "keys.pem"
    public.write_text(key.verify.to_pem())
    kubelet = FakeKubelet(folder).start()
    settings = DevicePluginSettings(
        node_name=node,
        plugin_dir=folder,
        backend="simulated",
        sim_gpu_count=GPUS,
        kubeconfig=Path(kubeconfig),
        assignment_key_file=public,
    )
    stop = threading.Event()
    thread = threading.Thread(target=run_plugin, args=(settings, stop), daemon=True)
    thread.start()
    units = memory_units(MEM_PER_POD_MIB, settings.memory_unit_mib)
    lat: dict[str, list[float]] = {c.RESOURCE_GPU_CORE: [], c.RESOURCE_GPU_MEMORY: []}
    try:
        assert kubelet.wait(lambda: len(kubelet.lists) == 2, 30), "plugin did not register"
        core_ids = list(kubelet.lists[c.RESOURCE_GPU_CORE])[:CORE_PER_POD]
        mem_ids = list(kubelet.lists[c.RESOURCE_GPU_MEMORY])[:units]
        for r in range(rounds):
            names = [f"r{r}-p{i:03d}" for i in range(pods)]
            for i, name in enumerate(names):
                gpu = i % GPUS
                ann = assignment_annotations(
                    None, ns, name, node, simulated_gpu_uuid(node, gpu), gpu,
                    CORE_PER_POD, MEM_PER_POD_MIB,
                )  # fmt: skip
                core.create_namespaced_pod(
                    ns, pod_manifest(ns, name, node, CORE_PER_POD, units, ann)
                )
                sign_created_pod(core, key, ns, name)
            for _ in names:
                for resource, ids in (
                    (c.RESOURCE_GPU_CORE, core_ids),
                    (c.RESOURCE_GPU_MEMORY, mem_ids),
                ):
                    t0 = time.perf_counter()
                    kubelet.allocate(resource, ids)
                    lat[resource].append((time.perf_counter() - t0) * 1000)
            for name in names:
                core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            while core.list_namespaced_pod(ns).items:
                time.sleep(0.2)
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(folder, ignore_errors=True)
        core.delete_namespace(ns)
        core.delete_node(node)
    both = lat[c.RESOURCE_GPU_CORE] + lat[c.RESOURCE_GPU_MEMORY]
    return {
        "benchmark": "deviceplugin-allocate",
        "pods_on_node": pods,
        "rounds": rounds,
        "gpus_on_node": GPUS,
        "allocate_all": summary(both, "ms", 2),
        "allocate_gpu_core": summary(lat[c.RESOURCE_GPU_CORE], "ms", 2),
        "allocate_gpu_memory": summary(lat[c.RESOURCE_GPU_MEMORY], "ms", 2),
        "what_is_timed": "one Allocate gRPC call over a unix socket, client side: list node "
        "pods (raw JSON) + Ed25519 check + annotation patch on the real kube-apiserver",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", default=None, help="use a running cluster")
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    local = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        from horus.devcluster.cluster import LocalCluster

        local = LocalCluster(Path(tempfile.mkdtemp(prefix="horus-bench-")) / "c")
        kubeconfig = local.up(timeout=180).kubeconfig
    try:
        result = bench(kubeconfig, args.pods, args.rounds)
    finally:
        if local is not None:
            local.down()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "deviceplugin-allocate.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name in ("allocate_all", "allocate_gpu_core", "allocate_gpu_memory"):
        s = result[name]
        print(f"{name:22s} n={s['n']:4d}  p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
