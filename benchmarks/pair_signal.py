"""How wrong is each pair-speed signal? Measured on Lucid's pairs and applied to Gavel's V100 pairs.

The node agent can read a pod's speed next to a neighbour from three signals
(:mod:`horus.sim.signals`, where each error model is computed from the data):

* ``util-split`` — the utilisation ratio (a pod's utilisation in the pair over alone), if the
  GPU's measured pair utilisation splits in proportion to ``u·s``;
* ``util-overlap`` — the same ratio if the two jobs' busy periods overlap independently
  (the GPU is busy ``1 − (1 − u1 s1)(1 − u2 s2)``);
* ``progress`` — the job's own step rate in the pair over alone, with the noise of one
  reading measured on Lucid's self-pairs (a job beside a copy of itself).

On Lucid (1,388 pairs, both orders) the utilisation readings are computed from each pair's
measured utilisation; the progress readings are drawn at the measured noise. On Gavel's V100
pairs (no utilisation was measured there) every reading is drawn from the signal's error model
at the pair's true speed, as the simulator draws it. Printed per signal: bias, sd, MAE, p95
|error| and the accuracy of "this pair slows someone below 0.85×"; also how well each
utilisation model predicts the GPU's pair utilisation.

    .venv/bin/python benchmarks/pair_signal.py [--seeds 3]

Lucid's data is non-commercial (S-Lab License 1.0); it sits in ``data/noncommercial/lucid``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from horus.sim.datasets import LUCID, missing  # noqa: E402
from horus.sim.groundtruth import load_gavel  # noqa: E402
from horus.sim.signals import (  # noqa: E402
    SIGNALS,
    lucid_pairs,
    overlap_pair_util,
    overlap_readings,
    signal_error,
    signal_stats,
    split_readings,
)

SHOWN = ("util-split", "util-overlap", "progress")


def _slowed(true: np.ndarray, read: np.ndarray) -> float:
    """Accuracy of "the pair's slower job runs below 0.85×" (rows in (a,b),(b,a) order)."""
    t = np.minimum(true[0::2], true[1::2]) < 0.85
    r = np.minimum(read[0::2], read[1::2]) < 0.85
    return float((t == r).mean())


def _stats(true: np.ndarray, read: np.ndarray) -> dict[str, float]:
    s = signal_stats(read - true, true, read)
    s["slowed_accuracy"] = _slowed(true, read)
    return s


def _drawn(signal: str, true: np.ndarray, seed: int) -> np.ndarray:
    model = signal_error(signal)  # type: ignore[arg-type]
    rng = random.Random(f"{seed}|{signal}")
    return np.array([model.read(float(t), rng) for t in true])


def run(seeds: int) -> dict[str, object]:
    p = lucid_pairs()
    n = len(p.speed) // 2
    # rows of LucidPairs are (all first jobs, all second jobs): interleave to (a,b),(b,a)
    order = np.ravel(np.column_stack([np.arange(n), np.arange(n) + n]))
    true = p.speed[order]
    overlap_pp = overlap_pair_util(p)[:n] - p.pair_util[:n]
    premise_pp = (p.util * p.speed + p.other_util * p.other_speed)[:n] - p.pair_util[:n]
    out: dict[str, object] = {
        "lucid_pairs": n,
        "lucid_self_pairs": len(p.self_pair_diff),
        "self_pair_diff_sd": float(np.std(p.self_pair_diff, ddof=1)),
        "pair_util_mean": float(p.pair_util[:n].mean()),
        "split_premise_minus_measured_pp": float(premise_pp.mean()),
        "split_premise_mae_pp": float(np.abs(premise_pp).mean()),
        "overlap_minus_measured_pp": float(overlap_pp.mean()),
        "overlap_mae_pp": float(np.abs(overlap_pp).mean()),
        "published_error": {s: signal_error(s).published_error for s in SIGNALS},
        "progress_noise_sd": signal_error("progress").noise_sd,
    }
    lucid: dict[str, object] = {
        "util-split": _stats(true, split_readings(p)[order]),
        "util-overlap": _stats(true, overlap_readings(p)[order]),
    }
    prog = [_stats(true, _drawn("progress", true, s)) for s in range(seeds)]
    lucid["progress"] = {k: float(np.mean([d[k] for d in prog])) for k in prog[0]}
    # the simulator's draws of the utilisation signals on Lucid (a check of the draw model)
    for sig in ("util-split", "util-overlap"):
        d = [_stats(true, _drawn(sig, true, s)) for s in range(seeds)]
        lucid[f"{sig} (drawn)"] = {k: float(np.mean([x[k] for x in d])) for k in d[0]}
    out["lucid"] = lucid
    # by true-speed band: how the utilisation signals' error depends on the speed
    bands = [(0.0, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 1.01)]
    by_band: dict[str, dict[str, float]] = {}
    for sig, read in (("util-split", split_readings(p)), ("util-overlap", overlap_readings(p))):
        by_band[sig] = {}
        for lo, hi in bands:
            sel = (p.speed >= lo) & (p.speed < hi)
            if sel.any():
                by_band[sig][f"{lo:.2f}-{min(hi, 1.0):.2f}"] = float((read - p.speed)[sel].mean())
    out["lucid_bias_by_true_speed"] = by_band
    g = load_gavel()
    keys = sorted(g.measured)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    for a, b in keys:  # both orders of every pair measured both ways, (a,b),(b,a) adjacent
        if (a, b) in seen or (b, a) not in g.measured:
            continue
        seen.update({(a, b), (b, a)})
        pairs += [(a, b), (b, a)]
    gtrue = np.array([g.measured[k] for k in pairs])
    gavel: dict[str, object] = {"pairs": len(pairs) // 2}
    for sig in SHOWN:
        d = [_stats(gtrue, _drawn(sig, gtrue, s)) for s in range(seeds)]
        gavel[sig] = {k: float(np.mean([x[k] for x in d])) for k in d[0]}
    out["gavel_v100"] = gavel
    out["seeds"] = seeds
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="draws of each drawn signal (averaged)")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "pair-signal.json"
    )
    args = ap.parse_args()
    why = missing(LUCID, "colocate_info.csv")
    if why:
        ap.error(why)
    r = run(args.seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2))
    print(
        f"Lucid: {r['lucid_pairs']} pairs, mean GPU utilisation in a pair "
        f"{r['pair_util_mean']:.1f} %; {r['lucid_self_pairs']} self-pairs, sd(s1 - s2) "
        f"{r['self_pair_diff_sd']:.4f} -> progress noise sd per reading "
        f"{r['progress_noise_sd']:.4f}"
    )
    print(
        f"pair utilisation, model minus measured: split u1*s1 + u2*s2 "
        f"{r['split_premise_minus_measured_pp']:+.1f} pp (MAE {r['split_premise_mae_pp']:.1f}); "
        f"overlap 1-(1-u1 s1)(1-u2 s2) {r['overlap_minus_measured_pp']:+.1f} pp "
        f"(MAE {r['overlap_mae_pp']:.1f})"
    )
    head = f"{'signal':<24} {'bias':>7} {'sd':>6} {'MAE':>6} {'p95|e|':>7} {'<0.85x acc':>10}"
    for name in ("lucid", "gavel_v100"):
        block = r[name]
        assert isinstance(block, dict)
        print(f"\n{name} ({'measured readings' if name == 'lucid' else 'drawn readings'}):")
        print(head)
        for sig, s in block.items():
            if not isinstance(s, dict):
                continue
            print(
                f"{sig:<24} {s['bias']:+7.3f} {s['sd']:6.3f} {s['mae']:6.3f} "
                f"{s['p95_abs']:7.3f} {100 * s['slowed_accuracy']:9.1f}%"
            )
    print("\nbias of the utilisation signals by true speed (Lucid):")
    for sig, bands in r["lucid_bias_by_true_speed"].items():  # type: ignore[attr-defined]
        print(f"  {sig:<14} " + ", ".join(f"{k}: {v:+.3f}" for k, v in bands.items()))
    pub = r["published_error"]
    assert isinstance(pub, dict)
    print(
        "\nerror each signal publishes (its MAE; the scheduler's margin on a measured pair): "
        + ", ".join(f"{k} {v:.3f}" for k, v in pub.items())
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
