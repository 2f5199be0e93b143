"""Issue 25, "Memory units", on a real kubelet: each node's GPU has 81,559 MiB (a real H100's,
not a multiple of the 256 MiB gpu-memory unit) and the device plugin offers its 318 whole
units. A whole-GPU job runs on it — its pod asks exactly 318 units, where rounding up asked
319 and the kubelet refused it on a one-GPU node — and, after it, two half jobs together
(40,779 and 40,780 MiB: 159 units each, where rounding up asked 320 in all). Each container
gets its share's MiB, not its units. Runs before test_2 starts the job the later tests keep."""

from __future__ import annotations

from typing import Any

from realnode_support import (
    GPU_MEMORY_MIB,
    apply,
    diagnose,
    pods_of,
    running,
    share_line,
    wait_for,
    workload_job,
)

from horus.api.assignment import decode_assignment
from horus.common import constants as c
from horus.devcluster.chart import RealCluster


def _run(rc: RealCluster, jobs: dict[str, tuple[int, int]], node: str) -> None:
    """Apply one one-replica job per entry (core %, MiB) on ``node``, wait until every
    container runs, and check each received its own share in MiB; delete them after."""
    docs = []
    for name, (core, memory) in jobs.items():
        doc = workload_job(name, 1, core, memory, ["--steps", "0", "--step-sleep", "0.1"])
        doc["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        docs.append(doc)
    apply(rc, {"apiVersion": "v1", "kind": "List", "items": docs})
    try:
        pods: list[dict[str, Any]] = wait_for(
            f"{', '.join(jobs)} running on {node}",
            lambda: (
                (p := [x for n in jobs for x in pods_of(rc, n)])
                and len(p) == len(jobs)
                and all(map(running, p))
                and p
            ),
            180,
            diagnose(rc),
        )
        for pod in pods:
            meta = pod["metadata"]
            core, memory = jobs[meta["labels"][c.LABEL_DLJOB_NAME]]
            a = decode_assignment(meta["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
            assert (a.node, a.core_percent, a.memory_mib) == (node, core, memory)
            res = pod["spec"]["containers"][0]["resources"]["requests"]
            assert int(res[c.RESOURCE_GPU_MEMORY]) == memory // c.DEFAULT_GPU_MEMORY_UNIT_MIB
            out = wait_for(
                f"{meta['name']} printed its share",
                lambda n=meta["name"]: share_line(rc, n),
                30,
                diagnose(rc),
            )
            assert out["env"][c.ENV_POD_NAME] == meta["name"]
            assert out["env"][c.ENV_GPU_MEMORY_MIB] == str(memory)
            assert out["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M"
    finally:
        for name in jobs:
            rc.kube.kubectl("delete", "dljob", name, "--wait=false", check=False)
        wait_for(
            f"{', '.join(jobs)} gone",
            lambda: not any(pods_of(rc, n) for n in jobs),
            90,
            diagnose(rc),
        )


def test_an_81559_mib_gpu_takes_a_whole_gpu_job_then_two_half_jobs(rc: RealCluster) -> None:
    node = rc.nodes[0]
    wait_for(  # the earlier tests' pods have left the GPU
        f"no pod left on {node}",
        lambda: (
            not rc.kube.json(
                "get", "pods", "-n", "default", "--field-selector", f"spec.nodeName={node}"
            )["items"]
        ),
        90,
        diagnose(rc),
    )
    alloc = rc.kube.json("get", "node", node)["status"]["allocatable"]
    assert int(alloc[c.RESOURCE_GPU_MEMORY]) == GPU_MEMORY_MIB // c.DEFAULT_GPU_MEMORY_UNIT_MIB
    _run(rc, {"whole-gpu": (100, GPU_MEMORY_MIB)}, node)
    half = GPU_MEMORY_MIB // 2
    _run(rc, {"half-a": (50, half), "half-b": (50, GPU_MEMORY_MIB - half)}, node)
