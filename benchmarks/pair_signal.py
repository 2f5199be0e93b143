"""Does GPU utilisation behave as the agent's pair-speed proxy assumes? Checked on Lucid's data.

The sharing agent estimates a pod's speed next to a neighbour as its utilisation in the pair over
its utilisation alone (``horus.agent.feedback.PairSpeeds``). That rests on a premise: a job that
runs at speed s keeps the GPU busy s times as long as alone, so under time-slicing (kernels of
two processes never overlap) the GPU's utilisation with two jobs on it is ``u1·s1 + u2·s2``.

No GPU is needed to test the premise in aggregate: Lucid's co-location table records, for 1,388
pairs on one GPU, both jobs' measured speeds and the GPU's mean nvidia-smi utilisation while
they shared it, and its single-run table each job's utilisation alone. This script compares the
measured pair utilisation with ``u1·s1 + u2·s2`` (and with ``min(100, u1 + u2)``), and prints
what the proxy would report if each job's share of the pair utilisation were proportional to
``u·s`` (the only attribution the data allows). Figures go to ``docs/agent.md``.

    .venv/bin/python benchmarks/pair_signal.py [--lucid-dir data/noncommercial/lucid]

Lucid's data is non-commercial (S-Lab License 1.0); it sits in ``data/noncommercial/lucid``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from horus.sim.datasets import LUCID, dataset_file, missing  # noqa: E402


def check(lucid_dir: Path) -> dict[str, float]:
    solo: dict[tuple[str, str, str], float] = {}
    with (lucid_dir / "single_data.csv").open() as fh:
        for r in csv.DictReader(fh):
            solo[(r["model"], r["batchsize"], r["amp"])] = float(r["gpu_util"])
    u1, u2, s1, s2, pair = [], [], [], [], []
    with (lucid_dir / "colocate_info.csv").open() as fh:
        for r in csv.DictReader(fh):
            u1.append(solo[(r["model1"], r["batchsize1"], r["amp1"])])
            u2.append(solo[(r["model2"], r["batchsize2"], r["amp2"])])
            s1.append(float(r["speed1"]))
            s2.append(float(r["speed2"]))
            pair.append(float(r["gpu_util"]))
    a1, a2, b1, b2, u = map(np.array, (u1, u2, s1, s2, pair))
    premise = a1 * b1 + a2 * b2
    summed = np.minimum(100.0, a1 + a2)
    # The proxy's report for job 1 if the pair's utilisation is split in proportion to u·s:
    # (u_pair · u1 s1 / premise) / u1 = s1 · u_pair / premise.
    proxy = np.clip(b1 * u / premise, 0.05, 1.0)
    speeds = np.concatenate([b1, b2])
    proxies = np.concatenate([proxy, np.clip(b2 * u / premise, 0.05, 1.0)])
    low = (a1 + a2) <= 80.0
    return {
        "pairs": len(u),
        "pair_util_mean": float(u.mean()),
        "premise_minus_measured_mean_pp": float((premise - u).mean()),
        "premise_mae_pp": float(np.abs(premise - u).mean()),
        "premise_corr": float(np.corrcoef(premise, u)[0, 1]),
        "sum_minus_measured_mean_pp": float((summed - u).mean()),
        "measured_over_premise_median": float(np.median(u / premise)),
        "measured_over_premise_median_solo_sum_le_80": float(np.median(u[low] / premise[low])),
        "pairs_solo_sum_le_80": int(low.sum()),
        "proxy_mae": float(np.abs(proxies - np.minimum(speeds, 1.0)).mean()),
        "proxy_bias": float((proxies - np.minimum(speeds, 1.0)).mean()),
        # the spread of the proxy's error: the simulator's agent model draws from it
        # (horus.sim.observation, for pairs whose utilisation was not measured)
        "proxy_error_sd": float((proxies - np.minimum(speeds, 1.0)).std()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--lucid-dir", type=Path, default=None, help="default: the data folder's Lucid copy"
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "pair-signal.json"
    )
    args = ap.parse_args()
    if args.lucid_dir is None:
        why = missing(LUCID, "colocate_info.csv")
        if why:
            ap.error(why)
        args.lucid_dir = dataset_file(LUCID, "colocate_info.csv").parent
    if not (args.lucid_dir / "colocate_info.csv").exists():
        ap.error(f"{args.lucid_dir} has no colocate_info.csv (Lucid's data; data/README.md)")
    r = check(args.lucid_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2))
    print(f"Lucid pairs: {r['pairs']}, mean GPU utilisation in a pair {r['pair_util_mean']:.1f} %")
    print(
        f"u1*s1 + u2*s2 (the proxy's premise) minus measured: mean {r['premise_minus_measured_mean_pp']:+.1f} pp, "
        f"MAE {r['premise_mae_pp']:.1f} pp, correlation {r['premise_corr']:.2f}"
    )
    print(f"min(100, u1 + u2) minus measured: mean {r['sum_minus_measured_mean_pp']:+.1f} pp")
    print(
        f"measured / premise: median {r['measured_over_premise_median']:.2f} "
        f"({r['measured_over_premise_median_solo_sum_le_80']:.2f} on the {r['pairs_solo_sum_le_80']} "
        "pairs whose solo utilisations sum to <= 80 %)"
    )
    print(
        f"proxy vs measured speed (pair utilisation split in proportion to u*s): "
        f"MAE {r['proxy_mae']:.3f}, bias {r['proxy_bias']:+.3f}, sd {r['proxy_error_sd']:.3f}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
