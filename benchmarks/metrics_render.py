"""What the operator's per-GPU gauge costs a scrape, per ``--gpu-metrics`` mode (issue 27).

    .venv/bin/python benchmarks/metrics_render.py                 # 5,000 nodes x 8 GPUs
    .venv/bin/python benchmarks/metrics_render.py --nodes 1000 --busy 0.5

``horus_gpu_predicted_utilization_ratio`` has one series per GPU under ``all`` (the default):
40,000 at 5,000 nodes x 8 GPUs. For each mode this sets the gauge from one pass's rows
(``OperatorMetrics.set_gpu_utils``, a ``--busy`` share of the GPUs carrying a predicted
share) and renders ``/metrics`` as the HTTP handler does (``prometheus_client.generate_latest``
over the operator's registry): CPU seconds of the first set and of the best of ``--repeats``
renders, bytes and lines, and each mode's render time as a ratio of ``all``'s (the baseline,
measured in the same run). Writes ``benchmarks/results/metrics-render.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from prometheus_client import generate_latest  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.operator.metrics import OperatorMetrics  # noqa: E402


def measure(mode: c.GpuMetrics, nodes: int, gpus: int, busy: float, repeats: int) -> dict[str, Any]:
    every = max(1, round(1 / busy)) if busy > 0 else 0
    rows = [
        (
            f"node-{n:05d}",
            g,
            f"GPU-{n:05d}-{g}",
            50.0 if every and (n * gpus + g) % every == 0 else 0.0,
        )
        for n in range(nodes)
        for g in range(gpus)
    ]
    m = OperatorMetrics(gpus=mode)
    t = time.process_time()
    m.set_gpu_utils(rows)
    set_s = time.process_time() - t
    best = float("inf")
    text = b""
    for _ in range(repeats):
        t = time.process_time()
        text = generate_latest(m.registry)
        best = min(best, time.process_time() - t)
    return {
        "set_cpu_seconds": round(set_s, 3),
        "render_cpu_seconds": round(best, 4),
        "bytes": len(text),
        "lines": text.count(b"\n"),
        "gpu_series": text.count(c.METRIC_GPU_PREDICTED_UTIL_SUM.encode() + b"{"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--busy", type=float, default=0.25, help="share of GPUs with a job (0..1)")
    ap.add_argument("--repeats", type=int, default=3, help="renders per mode, best taken")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/metrics-render.json")
    args = ap.parse_args()
    if not 1 <= args.nodes <= 20_000 or not 1 <= args.gpus_per_node <= 16:
        ap.error("--nodes must be 1..20000 and --gpus-per-node 1..16")
    if not 0 <= args.busy <= 1 or not 1 <= args.repeats <= 100:
        ap.error("--busy must be 0..1 and --repeats 1..100")
    modes = {
        mode: measure(mode, args.nodes, args.gpus_per_node, args.busy, args.repeats)
        for mode in c.GPU_METRICS_MODES
    }
    base = modes[c.GPU_METRICS_ALL]["render_cpu_seconds"]
    result = {
        "benchmark": "metrics-render",
        "command": "benchmarks/metrics_render.py " + " ".join(sys.argv[1:]),
        "gpus": args.nodes * args.gpus_per_node,
        "busy_share": args.busy,
        "machine": {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        "modes": modes,
        "render_ratio_over_all": {
            mode: round(r["render_cpu_seconds"] / base, 3) if base else None
            for mode, r in modes.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for mode, r in modes.items():
        print(
            f"{mode:5s}: {r['gpu_series']:6d} GPU series, {r['bytes'] / 1e6:6.2f} MB, render "
            f"{r['render_cpu_seconds']:.3f} s CPU ({result['render_ratio_over_all'][mode]}x all)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
