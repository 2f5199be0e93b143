"""The scheduler extender's memory on a large cluster, over time (issue 27).

    .venv/bin/python benchmarks/extender_memory.py --kubeconfig KUBECONFIG --seconds 1800

The extender runs in a pod of its own (chart ``scheduler.extender.resources``: 2Gi limit) and
keeps its own watch-fed copy of nodes, pods and DLJobs plus the live state it answers from, so
its memory grows with the cluster, not with its requests. This builds the extender exactly as
``horus operator extender`` does (:func:`horus.operator.extender.main.build_extender`: the
same view, signing-key source and predictor, after capping glibc's malloc arenas as
:func:`~horus.operator.extender.main.run_extender` does first) in this process, against a
running cluster —
typically the one ``benchmarks/operator_scale.py`` keeps busy (its kubeconfig is under
``/tmp/horus-bench-scale-*/c/kubeconfig``) — and every ``--every`` seconds asks it filter and
prioritize for one pod on kube-scheduler's default number of candidate nodes, then samples
this process's resident memory (``VmRSS``) and its peak (``VmHWM``). No TLS server: the verbs
are called in process, as the server's handler calls them. Writes
``benchmarks/results/extender-memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from extender_filter import PROFILES, feasible_to_find, pod  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.common import heap  # noqa: E402
from horus.common.settings import load_settings  # noqa: E402
from horus.kube.client import api_client  # noqa: E402
from horus.operator.extender.main import build_extender, close_extender  # noqa: E402
from horus.operator.extender.settings import ExtenderSettings  # noqa: E402
from horus.operator.extender.wire import parse_extender_args  # noqa: E402
from horus.scheduler import SchedulerSettings  # noqa: E402


def memory_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=1800.0, help="how long to sample")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/extender-memory.json")
    args = ap.parse_args()
    if not 1.0 <= args.every <= 600.0 or not 1.0 <= args.seconds <= 86400.0:
        ap.error("--every must be 1..600 and --seconds 1..86400")
    heap.limit_arenas(c.MALLOC_ARENAS)  # before any thread, as run_extender does
    rng = random.Random(args.seed)
    started = time.monotonic()
    before = memory_mib()
    settings = load_settings(ExtenderSettings, "extender", cli={"kubeconfig": args.kubeconfig})
    ext = build_extender(settings, SchedulerSettings(), api_client(settings.kubeconfig))
    built = memory_mib()
    print(f"extender built in {time.monotonic() - started:.1f} s: RSS {built[0]} MiB", flush=True)
    samples: list[dict[str, Any]] = []
    try:
        while time.monotonic() - started < args.seconds:
            view = ext.source.view  # type: ignore[attr-defined]
            names = [n["metadata"]["name"] for n in view.nodes.items()]
            counts = {"nodes": len(names), "pods": len(view.active_pods())}
            counts["dljobs"] = len(view.dljobs.items())
            answer_ms = None
            if names:
                cand = rng.sample(names, min(len(names), feasible_to_find(len(names))))
                probe = pod(f"probe-{len(samples)}", 25, 16000, rng.choice(PROFILES))
                body = {"Pod": probe, "NodeNames": cand}
                t0 = time.perf_counter()
                ext.filter(parse_extender_args(body))
                ext.prioritize(parse_extender_args(body))
                answer_ms = round((time.perf_counter() - t0) * 1000, 1)
            rss, peak = memory_mib()
            delta = ext._delta  # how the live state was brought up to date so far
            samples.append(
                {"t": round(time.monotonic() - started, 1), "rss_mib": rss, "peak_mib": peak}
                | counts
                | {"filter_prioritize_ms": answer_ms}
                | {"full_builds": delta.full_builds, "incremental_updates": delta.updates}
                | {"last_full_build_reason": delta.full_reason}
            )
            print(json.dumps(samples[-1]), flush=True)
            time.sleep(args.every)
    finally:
        close_extender(ext)
    doc = {
        "benchmark": "extender-memory",
        "command": "benchmarks/extender_memory.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "rss_mib_before_extender": before[0],
        "rss_mib_after_build": built[0],
        "rss_mib_max": max(s["rss_mib"] for s in samples),
        "peak_mib": max(s["peak_mib"] for s in samples),
        "chart_limit_mib": 2048,
        "samples": samples,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}: RSS max {doc['rss_mib_max']} MiB, peak {doc['peak_mib']} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
