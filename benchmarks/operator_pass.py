"""What one reconcile pass costs as the cluster grows: nodes, running jobs, queued jobs (issue 27).

    .venv/bin/python benchmarks/operator_pass.py            # the table in docs/operator.md
    .venv/bin/python benchmarks/operator_pass.py --quick    # small sizes only

The pass (``Reconciler.run_pass``) runs in-process on the unit tests' in-memory apiserver
(``tests/unit/operator/fakeapi.py``), its lists served as the watch-fed view serves them (an
unchanged object is the same dict as in the last listing): so what is measured is the pass's own work — contexts, trust checks, the live
state, admission, the decision, commits into memory — without the apiserver's. For each size:
nodes × 8 H100, ``running`` single-replica DLJobs already placed with their pods Running, then

* **steady** — a pass with nothing to do (what every resync and every unrelated nudge costs),
  with the live state kept from the last pass (``horus.operator.livedelta``), and the same
  pass with it built in full (what every pass did before; the baseline of the same run);
* **placing** — a pass that admits, places and commits ``queued`` new jobs.

Seconds (wall, one process) of each, and the peak of Python allocations during a steady pass
(``tracemalloc``, in a pass of its own: tracing slows it). Writes ``benchmarks/results/operator-pass.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "operator"))

from fakeapi import FakeJobApi  # type: ignore[import-not-found]  # noqa: E402
from opfixtures import (  # type: ignore[import-not-found]  # noqa: E402
    KEY,
    inline_profile,
    node,
)

from horus.common import constants as c  # noqa: E402
from horus.operator.reconcile import Reconciler  # noqa: E402
from horus.predictor import load_default_predictor  # noqa: E402


class ViewApi(FakeJobApi):  # type: ignore[misc]
    """The in-memory apiserver with lists served as the view serves them: an object is the
    same dict from listing to listing until its ``resourceVersion`` moves (every write this
    benchmark makes moves it), then a new dict; nodes without a copy."""

    def _as_view(self, kind: str, stored: Any) -> list[dict[str, Any]]:
        held = self._handed.setdefault(kind, {})
        now, out = {}, []
        for key, obj in stored.items():
            version = obj["metadata"].get("resourceVersion")
            was = held.get(key)
            if was is None or was[0] != version:
                was = (version, copy.deepcopy(obj))
            now[key] = was
            out.append(was[1])
        self._handed[kind] = now
        return out

    def list_nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self.nodes
        return nodes


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "metadata": {"name": name, "namespace": "bench", "generation": 1},
        "spec": {
            "replicas": 1,
            "gpusPerReplica": 1,
            "profile": inline_profile(),
            "gpu": {"mode": "auto"},
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
    }


def timed(rec: Reconciler) -> tuple[float, Any, float]:
    """Wall seconds of one pass, its report, and the CPU seconds the process spent in it
    (every thread: what a busy machine inflates less than the wall time)."""
    t0, c0 = time.perf_counter(), time.process_time()
    report = rec.run_pass()
    return time.perf_counter() - t0, report, time.process_time() - c0


def peak_mib(rec: Reconciler) -> float:
    """Peak Python allocations during one pass (a pass of its own: tracing slows it)."""
    tracemalloc.start()
    rec.run_pass()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def one(nodes: int, running: int, queued: int) -> dict[str, Any]:
    api = ViewApi([node(f"n{i:05d}", gpus=8) for i in range(nodes)])
    # no per-pass cap: the set-up places every running job in its first pass, and the
    # placing pass measures all ``queued`` jobs at once
    rec = Reconciler(
        api,
        load_default_predictor(),
        KEY,
        workers=8,
        progress_deadline=3600.0,
        max_jobs_per_pass=100_000,
    )
    try:
        for i in range(running):
            api.add_dljob(job(f"run-{i:05d}"))
        t0 = time.perf_counter()
        for _ in range(6):  # admit+place, create+bind, Running (the defer), settle
            rec.run_pass()
            api.run_bound_pods()
        setup = time.perf_counter() - t0
        phases = [(j.get("status") or {}).get("phase") for j in api.dljobs.values()]
        placed = sum(p in (c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_RUNNING) for p in phases)
        rec.run_pass()  # warm
        steady_s, steady, steady_cpu = timed(rec)
        rec.live_source.forget()  # the next pass builds the live state in full
        full_s, full, full_cpu = timed(rec)
        steady_mib = peak_mib(rec)
        placing_s, report, placing_cpu = 0.0, None, 0.0
        if queued:
            for i in range(queued):
                api.add_dljob(job(f"new-{i:05d}"))
            placing_s, report, placing_cpu = timed(rec)
        row = {
            "nodes": nodes,
            "gpus": nodes * 8,
            "running_jobs": placed,
            "queued_jobs": queued,
            "steady_pass_seconds": round(steady_s, 3),
            "steady_pass_state_seconds": round(steady.timings["state"], 3),
            "full_build_pass_seconds": round(full_s, 3),
            "full_build_pass_state_seconds": round(full.timings["state"], 3),
            "steady_over_full_build": round(steady_s / full_s, 2),
            "steady_pass_peak_alloc_mib": round(steady_mib, 1),
            "steady_pass_cpu_seconds": round(steady_cpu, 3),
            "full_build_pass_cpu_seconds": round(full_cpu, 3),
            "placing_pass_cpu_seconds": round(placing_cpu, 3),
            "placing_pass_seconds": round(placing_s, 3),
            "placed_in_that_pass": report.placed if report is not None else 0,
            "setup_seconds": round(setup, 1),
        }
        print(json.dumps(row), flush=True)
        return row
    finally:
        rec.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--size",
        action="append",
        metavar="NODES,RUNNING,QUEUED",
        help="measure only this size (repeatable; instead of the default table)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/operator-pass.json")
    args = ap.parse_args()
    sizes = (
        [(100, 0, 100), (100, 400, 100)]
        if args.quick
        else [tuple(int(x) for x in s.split(",")) for s in args.size]
        if args.size
        else [
            (100, 0, 0),
            (1000, 0, 0),
            (5000, 0, 0),
            (1000, 1000, 0),
            (1000, 4000, 0),
            (5000, 10000, 0),
            (1000, 1000, 100),
            (1000, 1000, 1000),
            (5000, 10000, 1000),
        ]
    )
    rows = [one(*s) for s in sizes]
    doc = {
        "benchmark": "operator-pass",
        "command": "benchmarks/operator_pass.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
