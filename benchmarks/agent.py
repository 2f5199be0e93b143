"""Agent overhead at 64 simulated pods: CPU (share of one core) and memory (RSS).

Targets (issue 6): < 2 % of one core, < 100 MiB RSS. The agent runs in this process against an
in-memory API stand-in that serves the pod list as JSON bytes (so decoding is measured, network
latency is not), with the simulated backend, watchdog (evict), feedback and one Prometheus
scrape (``generate_latest``) per cycle. CPU is process time per cycle divided by the sampling
interval (default 5 s); RSS is read from /proc/self/status after the run.

    .venv/bin/python benchmarks/agent.py [--pods 64] [--cycles 200] [--interval 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from horus.agent.agent import Agent
from horus.agent.settings import AgentSettings
from horus.api.assignment import GpuAssignment, PredictedUsage, encode_assignment, encode_predicted
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest

#: The placers' pair; the agent gets only its public key (as the DaemonSet mounts it).
KEY = KeyRing.generate()


class FakeKube:
    def __init__(self, node: str, pods: int, gpus: int) -> None:
        self._node = node_manifest(node, NodeSpec(count=1, gpus_per_node=gpus))
        self._node["metadata"]["annotations"][c.KWOK_NODE_ANNOTATION] = "fake"
        items = []
        for i in range(pods):
            name = f"job-{i}"
            text = encode_assignment(
                GpuAssignment(node, f"GPU-{i % gpus}", i % gpus, 100 // (pods // gpus), 4096)
            )
            ann = {
                c.ANNOTATION_GPU_ASSIGNMENT: text,
                c.ANNOTATION_ASSIGNMENT_SIGNATURE: KEY.sign_assignment(
                    "bench", name, f"00000000-0000-0000-0000-{i:012d}", "", 0, text
                ),
                c.ANNOTATION_PREDICTED: encode_predicted(
                    PredictedUsage(10.0, 14.0, 3000.0, 3500.0, "bench")
                ),
            }
            items.append(
                {
                    "metadata": {
                        "name": name,
                        "namespace": "bench",
                        "uid": f"00000000-0000-0000-0000-{i:012d}",
                        "annotations": ann,
                        "labels": {c.LABEL_DLJOB_NAME: f"job-{i}"},
                    },
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running"},
                }
            )
        self._pods = json.dumps({"items": items}).encode()

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return list(json.loads(self._pods)["items"])

    def node(self, name: str) -> dict[str, Any]:
        return self._node

    def node_names(self, selector: str) -> list[str]:
        return [self._node["metadata"]["name"]]

    def dljob(self, namespace: str, name: str) -> None:
        return None

    def configmap(self, namespace: str, name: str) -> None:
        return None

    def patch_observed(self, namespace: str, job: str, observed: dict[str, Any]) -> None:
        json.dumps(observed)

    def evict(self, pod: Any, message: str) -> bool:
        return True

    def event(self, pod: Any, reason: str, message: str) -> None:
        return None


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "agent.json")
    args = ap.parse_args()
    key_file = Path("/tmp/horus-bench-agent-keys.pem")
    key_file.write_text(KEY.verify.to_pem())
    settings = AgentSettings(
        node_name="bench-node",
        backend="simulated",
        watchdog="evict",
        interval_seconds=args.interval,
        feedback_interval_seconds=60.0,
        assignment_key_file=key_file,
    )
    agent = Agent(settings, FakeKube("bench-node", args.pods, args.gpus))  # type: ignore[arg-type]
    for _ in range(5):  # warm-up: first-time imports and caches
        agent.cycle()
        generate_latest(agent.registry)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(args.cycles):
        snap = agent.cycle()
        text = generate_latest(agent.registry)
        if i % 12 == 0:  # feedback every 60 s at a 5 s interval
            agent.publish_observed()
    cpu = (time.process_time() - cpu0) / args.cycles
    wall = (time.perf_counter() - wall0) / args.cycles
    assert len(snap.pods) == args.pods
    result = {
        "benchmark": "agent-overhead",
        "pods": args.pods,
        "gpus": args.gpus,
        "backend": "simulated",
        "cycles": args.cycles,
        "interval_seconds": args.interval,
        "cpu_seconds_per_cycle": round(cpu, 6),
        "wall_seconds_per_cycle": round(wall, 6),
        "cpu_share_of_one_core": round(cpu / args.interval, 5),
        "rss_mib": round(rss_mib(), 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "metrics_bytes_per_scrape": len(text),
        "targets": {"cpu_share_of_one_core": 0.02, "rss_mib": 100},
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    result["meets_targets"] = result["cpu_share_of_one_core"] < 0.02 and result["rss_mib"] < 100
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
