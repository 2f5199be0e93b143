"""Pair speeds on simulated GPUs: the true speed vs the agent's progress reading vs its
utilisation reading (issue 26, item 3).

The chain measured is the real one minus Kubernetes: the example workload (``examples/workload/
train.py``, real processes) reports progress into its own progress directory (made by
``horus.progress.mount.progress_mount``, as the device plugin makes it); the node agent
(``horus.agent.agent.Agent``, simulated backend) hands each pod the speed its simulated GPU
gives it (the SIMULATION ONLY ``simulated-speed.json``), the workload's steps slow by it, and the
agent reads the progress back and turns it into a pair speed (``horus.agent.progress``) beside
its utilisation estimate (``horus.agent.feedback.PairSpeeds``). The apiserver is an in-memory
stand-in serving the pods; ``tests/e2e/realnodes/test_1e_progress_pairs.py`` runs the same chain
on real kubelet nodes through the cluster (status.observed, placement).

Per pair: job A runs alone on its GPU for ``--solo`` seconds, then B joins for ``--shared``
seconds. The truth is the speed the simulation gives A beside B (the contention bound
``min(1, 100 / (u_A + u_B))`` from their predicted solo utilisations; no pair model, so it is
known exactly). Printed per signal: bias, MAE, p95 |error| of the final reading, seconds from
B's arrival to the first reading, the error the agent publishes with it, and how often the true
speed lies within 2 × that error.

Caveat, stated in the output too: on a simulated GPU the utilisation reading is *generated*
from the same true speed (utilisation alone × speed × noise), so its error here is only the
simulation's noise — it says nothing of the proxy on a real GPU (``docs/agent.md``,
``benchmarks/pair_signal.py``). The progress reading's error here is what the chain adds: step
timing on a shared CPU, window edges, the agent's window rules.

    .venv/bin/python benchmarks/progress_signal.py [--repeats 2] [--interval 2] [--solo 20]
        [--shared 40] [--reading-wait 0] [--out benchmarks/results/progress-signal.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from horus.agent.agent import Agent
from horus.agent.settings import AgentSettings
from horus.api.assignment import GpuAssignment, PredictedUsage, encode_assignment, encode_predicted
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.progress.mount import progress_mount

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "workload" / "train.py"
PROFILES = sorted((ROOT / "examples" / "profiles").glob("*.yaml"))
#: Solo utilisations (percent) of A and B per pair: true speeds from 1.0 down to 0.5.
PAIRS = [(50, 40), (60, 60), (70, 50), (80, 70), (65, 75), (95, 60), (90, 90), (100, 100)]
NODE = "bench-node"


class FakeKube:
    """The apiserver as the agent reads it: one node, the pods the benchmark runs."""

    def __init__(self, gpus: int) -> None:
        self._node = node_manifest(NODE, NodeSpec(count=1, gpus_per_node=gpus))
        self._node["metadata"]["annotations"][c.KWOK_NODE_ANNOTATION] = c.KWOK_NODE_ANNOTATION_VALUE
        self.pods: list[dict[str, Any]] = []

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return json.loads(json.dumps(self.pods))  # type: ignore[no-any-return]

    def node(self, name: str) -> dict[str, Any]:
        return self._node

    def node_names(self, selector: str) -> list[str]:
        return [NODE]

    def dljob(self, namespace: str, name: str) -> None:
        return None

    def configmap(self, namespace: str, name: str) -> None:
        return None

    def patch_observed(self, namespace: str, job: str, observed: dict[str, Any]) -> None:
        return None

    def evict(self, pod: Any, message: str) -> bool:
        return True

    def event(self, pod: Any, reason: str, message: str) -> None:
        return None


def pod(name: str, uid: str, gpu: int, util: float, profile: Path) -> dict[str, Any]:
    text = encode_assignment(GpuAssignment(NODE, f"GPU-{gpu}", gpu, 50, 4096))
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": uid,
            "annotations": {
                c.ANNOTATION_GPU_ASSIGNMENT: text,
                c.ANNOTATION_PREDICTED: encode_predicted(
                    PredictedUsage(util, util, 1000.0, 1000.0, "bench")
                ),
                c.ANNOTATION_GRAPH_PROFILE: profile.read_text(),
            },
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def start_workload(directory: str, step_sleep: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HORUS_PROGRESS_DIR": directory}
    return subprocess.Popen(
        [sys.executable, str(TRAIN), "--steps", "0", "--step-sleep", str(step_sleep),
         "--report-seconds", "100000", "--batch-size", "16", "--features", "8"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def run_once(args: argparse.Namespace, repeat: int, root: Path) -> list[dict[str, Any]]:
    kube = FakeKube(len(PAIRS))
    settings = AgentSettings(
        node_name=NODE,
        backend="simulated",
        metrics_port=0,
        feedback_interval_seconds=3600,
        interval_seconds=args.interval,
        seed=repeat,
        noise=args.noise,
        progress_root=root,
    )
    agent = Agent(settings, kube, predictor=lambda: None)  # type: ignore[arg-type]
    uid = "00000000-0000-4000-8000-{:04d}{:08d}"
    pairs = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (ua, ub) in enumerate(PAIRS):
            a, b = uid.format(repeat, 2 * i), uid.format(repeat, 2 * i + 1)
            pa = progress_mount(root, a).host_path
            pb = progress_mount(root, b).host_path
            pairs.append(
                {"gpu": i, "util_a": ua, "util_b": ub, "uid_a": a, "uid_b": b,
                 "dir_b": pb, "profile_b": PROFILES[(i + 1) % len(PROFILES)]}
            )  # fmt: skip
            kube.pods.append(pod(f"a{i}", a, i, ua, PROFILES[i % len(PROFILES)]))
            procs.append(start_workload(pa, args.step_sleep))
        t0 = time.monotonic()
        joined: float | None = None
        first: dict[tuple[int, str], float] = {}
        while time.monotonic() - t0 < args.solo + args.shared or (
            # --reading-wait: a loaded machine starts B's processes late; wait for every
            # pair's first progress reading rather than end the pair without one
            time.monotonic() - t0 < args.solo + args.shared + args.reading_wait
            and any(not agent.feedback.progress.speeds(p["uid_a"]) for p in pairs)
        ):
            started = time.monotonic()
            if joined is None and started - t0 >= args.solo:
                for p in pairs:
                    kube.pods.append(
                        pod(f"b{p['gpu']}", p["uid_b"], p["gpu"], p["util_b"], p["profile_b"])
                    )
                    procs.append(start_workload(p["dir_b"], args.step_sleep))
                joined = time.monotonic()
            agent.cycle()
            if joined is not None:
                for p in pairs:
                    for source, got in (
                        ("progress", agent.feedback.progress.speeds(p["uid_a"])),
                        ("utilisation", agent.feedback.pairs.readings(p["uid_a"])),
                    ):
                        if got and (p["gpu"], source) not in first:
                            first[(p["gpu"], source)] = time.monotonic() - joined
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
        rows = []
        for p in pairs:
            truth = agent.simulated.speeds.get(p["uid_a"])
            row: dict[str, Any] = {
                "repeat": repeat,
                "util_a": p["util_a"],
                "util_b": p["util_b"],
                "true_speed": None if truth is None else round(truth, 4),
            }
            for source, got in (
                ("progress", agent.feedback.progress.speeds(p["uid_a"])),
                ("utilisation", agent.feedback.pairs.readings(p["uid_a"])),
            ):
                reading = next(iter(got.values()), None)
                row[source] = (
                    None
                    if reading is None
                    else {
                        "speed": round(reading.speed, 4),
                        "samples": reading.samples,
                        "error": round(reading.error, 4),
                        "seconds_to_first": round(first.get((p["gpu"], source), math.nan), 1),
                    }
                )
            rows.append(row)
        return rows
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def p95(values: list[float]) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, math.ceil(0.95 * len(v)) - 1)]


def summary(rows: list[dict[str, Any]], source: str) -> dict[str, Any]:
    got = [r for r in rows if r[source] is not None and r["true_speed"] is not None]
    err = [r[source]["speed"] - r["true_speed"] for r in got]
    firsts = [r[source]["seconds_to_first"] for r in got]
    if not err:
        return {"pairs": 0, "of": len(rows)}
    return {
        "pairs": len(got),
        "of": len(rows),
        "bias": round(statistics.fmean(err), 4),
        "sd": round(statistics.stdev(err), 4) if len(err) > 1 else 0.0,
        "mae": round(statistics.fmean(abs(e) for e in err), 4),
        "p95_abs_error": round(p95([abs(e) for e in err]), 4),
        "seconds_to_first_median": round(statistics.median(firsts), 1),
        "seconds_to_first_max": round(max(firsts), 1),
        "published_error_median": round(statistics.median(r[source]["error"] for r in got), 4),
        "true_within_2_errors": round(
            sum(abs(e) <= 2 * r[source]["error"] for e, r in zip(err, got, strict=True)) / len(got),
            3,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--interval", type=float, default=2.0, help="agent cycle, seconds")
    ap.add_argument("--solo", type=float, default=20.0, help="seconds A runs alone")
    ap.add_argument("--shared", type=float, default=40.0, help="seconds A and B share")
    ap.add_argument(
        "--reading-wait",
        type=float,
        default=0.0,
        help="seconds past --shared to wait for a pair still without a progress reading",
    )
    ap.add_argument("--step-sleep", type=float, default=0.05, help="workload step, seconds")
    ap.add_argument("--noise", type=float, default=0.05, help="simulated utilisation noise")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "progress-signal.json"
    )
    args = ap.parse_args()
    if not 0 <= args.reading_wait <= 600:
        ap.error(f"--reading-wait must be 0..600 seconds, got {args.reading_wait}")
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="horus-progress-bench-") as tmp:
            rows += run_once(args, repeat, Path(tmp) / "progress")
    result = {
        "what": "true simulated pair speed vs the agent's progress and utilisation readings "
        "(examples/workload processes, horus Agent with the simulated backend, in-memory "
        "apiserver)",
        "caveat": "on a simulated GPU the utilisation reading is generated from the true speed "
        "(x noise): its error here is the simulation's noise, not the proxy's on a real GPU",
        "settings": {
            **{k: v for k, v in vars(args).items() if k != "out"},
            "pairs_per_repeat": len(PAIRS),
        },
        "machine": f"{platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (shared with other work)",
        "wall_seconds": round(time.monotonic() - started, 1),
        "progress": summary(rows, "progress"),
        "utilisation": summary(rows, "utilisation"),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()
