"""Predictor benchmark: held-out accuracy, calibration and speed, with every baseline in one run.

    .venv/bin/python benchmarks/predictor.py [--lucid-dir data/noncommercial/lucid] [--quick]

Reads the repository's ``data/`` (or ``$HORUS_DATA_DIR``): raw GPUMemNet for the dataset's
own-columns baseline, and Lucid (non-commercial) for its rows, which are left out when absent.

Writes ``benchmarks/results/predictor.json`` and prints a Markdown table (copied into docs/predictor.md).

Protocol (only held-out rows are ever scored):
* GPUMemNet: leave-one-architecture-family-out (MLP: uniform/pyramid/bottleneck/gradual; CNN:
  7 families), separately for MLPs and CNNs; utilisation MAE (pp) and memory MAPE.
* Lucid isolated util: leave-one-model-out over its 14 models (train on the others).
* Lucid pairs: leave-one-model-out — every pair containing the held-out model is scored by a
  model trained on pairs that contain neither job; normalised-speed MAE and the accuracy of
  "this pair slows someone below 0.85x".
* Upper-quantile coverage: cross-conformal — the offset for a held-out family comes from the
  held-out residuals of the *other* families.
* Baselines in the same run, same learner: the thesis prototype's features, FLOPs only, and the
  training mean.
* Speed: batched predictions/s and single-prediction p99 latency of the shipped artifact;
  profiling ResNet-50 at batch 64 on CPU (skipped without torch).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from horus.predictor.dataset import FEATURE_SETS, load_gpumemnet, load_lucid_single  # noqa: E402
from horus.predictor.pairfeatures import PAIR_FEATURES  # noqa: E402
from horus.predictor.train import QUANTILE, fit_gbr, fit_pair  # noqa: E402
from horus.sim.datasets import LUCID, data_dir, dataset_file, missing  # noqa: E402


def _x(rows: list[dict[str, float]], names: list[str]) -> np.ndarray:
    return np.array([[r[n] for n in names] for r in rows], dtype=np.float64)


def lofo(x: np.ndarray, y: np.ndarray, groups: list[str], *, mean: bool = False) -> np.ndarray:
    """Leave-one-group-out predictions."""
    g = np.array(groups)
    pred = np.full(len(y), np.nan)
    for grp in sorted(set(groups)):
        test = g == grp
        if mean:
            pred[test] = y[~test].mean()
        else:
            pred[test] = fit_gbr(x[~test], y[~test], 0).predict(x[test])
    return pred


def coverage(y: np.ndarray, pred: np.ndarray, groups: list[str]) -> float:
    """Cross-conformal coverage of the QUANTILE upper bound (offset from other groups)."""
    g = np.array(groups)
    hit = np.zeros(len(y), dtype=bool)
    for grp in sorted(set(groups)):
        test = g == grp
        off = np.quantile((y - pred)[~test], QUANTILE)
        hit[test] = y[test] <= pred[test] + off
    return float(hit.mean())


GPUMEMNET_FILES = {
    "gpumemnet-mlp1": "mlp_data_step1.csv",
    "gpumemnet-mlp2": "mlp_data_step2.csv",
    "gpumemnet-cnn": "cnn_data_step1_early_f5a3f5d.csv",
}


def own_columns(raw_dir: Path, sources: list[str], row_ids: list[int]) -> np.ndarray | None:
    """The issue's "dataset's own columns" baseline input for table rows (source, row index):
    depth, log total activations, log parameters, log batch, BN and dropout counts, activation
    one-hot — read from the raw GPUMemNet CSVs (None when they are not there)."""
    import csv

    raw: dict[tuple[str, int], dict[str, str]] = {}
    for source, name in GPUMEMNET_FILES.items():
        path = raw_dir / name
        if not path.exists():
            return None
        with path.open() as fh:
            for i, row in enumerate(csv.DictReader(fh)):
                raw[(source, i)] = row
    acts = sorted({r["Activation Function"] for r in raw.values()})

    def vec(r: dict[str, str]) -> list[float]:
        bn = r.get("Batch Normalization Layers") or r.get("BatchNorm2d Count") or "0"
        drop = r.get("Dropout Layers") or r.get("Dropout Count") or "0"
        v = [
            float(r["Depth"]),
            float(np.log1p(float(r["Total Activations"]))),
            float(np.log1p(float(r["Total Parameters"]))),
            float(np.log(float(r["Batch Size"]))),
            float(bn),
            float(drop),
        ]
        return v + [float(r["Activation Function"] == a) for a in acts]

    return np.array([vec(raw[(s, i)]) for s, i in zip(sources, row_ids, strict=True)])


def random_folds(x: np.ndarray, y: np.ndarray, k: int = 5) -> np.ndarray:
    """Predictions from a seeded random k-fold split (rows of one family on both sides)."""
    idx = np.random.default_rng(0).permutation(len(y))
    pred = np.full(len(y), np.nan)
    for test in np.array_split(idx, k):
        train = np.setdiff1d(idx, test)
        pred[test] = fit_gbr(x[train], y[train], 0).predict(x[test])
    return pred


def single_benchmarks(results: dict[str, object], lucid_dir: Path | None) -> None:
    import csv

    from horus.predictor.tables import DATA_DIR

    t = load_gpumemnet()
    fam = np.array(t.family)
    with (DATA_DIR / "gpumemnet.csv").open() as fh:
        table_ids = [(r["source"], int(r["row"])) for r in csv.DictReader(fh)]
    raw_dir = data_dir() / "gpumemnet"
    for kind in ("mlp", "cnn"):
        sel = np.array([f.startswith(kind) for f in t.family])
        for target in ("util", "memory"):
            y_all = t.util if target == "util" else t.memory_mib
            mask = sel & ~np.isnan(y_all)
            rows = [t.rows[i] for i in np.flatnonzero(mask)]
            groups = list(fam[mask])
            y = y_all[mask] if target == "util" else np.log(y_all[mask])
            entry: dict[str, object] = {"rows": int(mask.sum()), "families": len(set(groups))}
            for name in ("full", "thesis", "flops", "mean"):
                x = _x(rows, FEATURE_SETS["full" if name == "mean" else name])
                pred = lofo(x, y, groups, mean=name == "mean")
                if target == "util":
                    entry[f"{name}_mae_pp"] = float(np.mean(np.abs(pred - y)))
                else:
                    entry[f"{name}_mape"] = float(
                        np.mean(np.abs(np.exp(pred) - np.exp(y)) / np.exp(y))
                    )
                if name == "full":
                    entry["full_coverage_p90"] = coverage(y, pred, groups)
            own = own_columns(
                raw_dir,
                [table_ids[i][0] for i in np.flatnonzero(mask)],
                [table_ids[i][1] for i in np.flatnonzero(mask)],
            )
            if target == "util" and own is not None:
                # The issue quotes ~1.9 / 9 pp for "quick gradient-boosting baselines on the
                # dataset's own columns": the same learner on those columns, held out the same
                # way as ours, and (for comparison only) on a random 5-fold split.
                x_full = _x(rows, FEATURE_SETS["full"])
                entry["own_columns_mae_pp"] = float(np.mean(np.abs(lofo(own, y, groups) - y)))
                entry["random5_own_columns_mae_pp"] = float(
                    np.mean(np.abs(random_folds(own, y) - y))
                )
                entry["random5_full_mae_pp"] = float(np.mean(np.abs(random_folds(x_full, y) - y)))
            results[f"gpumemnet_{kind}_{target}"] = entry
            print(kind, target, entry, flush=True)

    if lucid_dir is None:
        return
    lt = load_lucid_single(lucid_dir)
    y = lt.util
    entry = {"rows": len(y), "models": len(set(lt.family))}
    fam = np.array(lt.family)
    for name in ("full", "thesis", "flops", "mean"):
        x = _x(lt.rows, FEATURE_SETS["full" if name == "mean" else name])
        pred = lofo(x, y, lt.family, mean=name == "mean")
        entry[f"{name}_mae_pp"] = float(np.mean(np.abs(pred - y)))
        entry[f"{name}_per_model_mae_pp"] = {
            m: round(float(np.mean(np.abs(pred - y)[fam == m])), 1) for m in sorted(set(lt.family))
        }
        entry[f"{name}_mae_pp_without_pointnet"] = float(
            np.mean(np.abs(pred - y)[fam != "PointNet"])
        )
        if name == "full":
            entry["full_coverage_p90"] = coverage(y, pred, lt.family)
    # The shipped (GPUMemNet-only) util head applied to Lucid's real models: pure transfer.
    from horus.predictor.model import load_default_predictor

    p = load_default_predictor()
    entry["shipped_default_mae_pp"] = float(
        np.mean(np.abs(np.clip(p.util.predict(lt.rows), 0, 100) - y))
    )
    entry["full_vs_thesis_reduction"] = 1 - entry["full_mae_pp"] / entry["thesis_mae_pp"]  # type: ignore[operator]
    # The `--with-lucid` protocol: GPUMemNet rows always in training, plus the other Lucid
    # models; the held-out model is never seen. Same learner, same split, every feature set.
    has_util = ~np.isnan(t.util)
    g_rows = [t.rows[i] for i in np.flatnonzero(has_util)]
    for name in ("full", "thesis", "flops"):
        names = FEATURE_SETS[name]
        xl, xg = _x(lt.rows, names), _x(g_rows, names)
        pred = np.full(len(y), np.nan)
        for m in sorted(set(lt.family)):
            test = fam == m
            x_tr = np.vstack([xg, xl[~test]])
            y_tr = np.concatenate([t.util[has_util], y[~test]])
            pred[test] = fit_gbr(x_tr, y_tr, 0).predict(xl[test])
        err = np.abs(np.clip(pred, 0, 100) - y)
        entry[f"with_gpumemnet_{name}_mae_pp"] = float(err.mean())
        entry[f"with_gpumemnet_{name}_mae_pp_without_pointnet"] = float(
            err[fam != "PointNet"].mean()
        )
    results["lucid_util_lomo"] = entry
    print("lucid util", entry, flush=True)


def pair_benchmarks(results: dict[str, object], lucid_dir: Path) -> None:
    from horus.predictor.model import load_default_predictor
    from horus.predictor.train import lucid_pairs

    rows, y, ga, gb = lucid_pairs(None, None, lucid_dir, measured_isolated=True)
    ga_a, gb_a = np.array(ga), np.array(gb)
    graph_only = [
        n for n in PAIR_FEATURES if "pred_" not in n and not n.startswith(("util_", "mem_"))
    ]
    iso_only = ["a_pred_util", "b_pred_util", "a_pred_mem_frac", "b_pred_mem_frac", "util_sum"]
    variants = {
        "graph+isolated": PAIR_FEATURES,
        "graph_only": graph_only,
        "isolated_only": iso_only,
        "mean": PAIR_FEATURES,
    }
    models = sorted(set(ga))
    entry: dict[str, object] = {"rows": len(y), "models": len(models)}
    for name, names in variants.items():
        x = _x(rows, names)
        pred = np.full(len(y), np.nan)
        for m in models:
            test = ga_a == m
            train = (ga_a != m) & (gb_a != m)
            if name == "mean":
                pred[test] = y[train].mean()
            else:
                pred[test] = fit_pair(x[train], y[train], 0).predict(x[test])
        mae = float(np.mean(np.abs(pred - y)))
        # rows come in (a,b),(b,a) order: pair i = rows 2i and 2i+1
        true_slow = np.minimum(y[0::2], y[1::2]) < 0.85
        pred_slow = np.minimum(pred[0::2], pred[1::2]) < 0.85
        entry[f"{name}_mae"] = mae
        entry[f"{name}_slow085_accuracy"] = float(np.mean(true_slow == pred_slow))
        print("pairs", name, mae, entry[f"{name}_slow085_accuracy"], flush=True)
    entry["slow085_base_rate"] = float(np.mean(np.minimum(y[0::2], y[1::2]) < 0.85))
    # The shipped (Gavel-trained) pair head on Lucid: transfer across data sets and GPUs.
    p = load_default_predictor()
    from horus.predictor.catalog import job_type

    prof_pairs = []
    with (lucid_dir / "colocate_info.csv").open() as fh:
        import csv

        for r in csv.DictReader(fh):
            a = job_type("lucid", r["model1"], int(r["batchsize1"]), r["amp1"] == "1").profile
            b = job_type("lucid", r["model2"], int(r["batchsize2"]), r["amp2"] == "1").profile
            prof_pairs += [(a, b), (b, a)]
    shipped = np.array(p.pair_speeds(prof_pairs, "RTX3090"))
    entry["shipped_default_mae"] = float(np.mean(np.abs(shipped - y)))
    results["lucid_pairs_lomo"] = entry


def gavel_pair_benchmarks(results: dict[str, object]) -> None:
    """The shipped pair head's own data, leave-one-GPU-out (K80/P100/V100): how the head
    carries to a GPU generation it has not seen, without any Lucid row."""
    import csv

    from horus.predictor.model import load_default_predictor
    from horus.predictor.tables import DATA_DIR
    from horus.predictor.train import gavel_pairs

    p = load_default_predictor()
    rows, y, _ = gavel_pairs(p.util, p.memory)
    with (DATA_DIR / "gavel_pairs.csv").open() as fh:
        gpus = np.array([r["gpu"] for r in csv.DictReader(fh)])
    x = _x(rows, PAIR_FEATURES)
    pred = np.full(len(y), np.nan)
    for g in sorted(set(gpus)):
        test = gpus == g
        pred[test] = fit_pair(x[~test], y[~test], 0).predict(x[test])
    err = np.abs(pred - y)
    results["gavel_pairs_logo"] = {
        "rows": len(y),
        "mae": float(err.mean()),
        "per_gpu_mae": {g: round(float(err[gpus == g].mean()), 3) for g in sorted(set(gpus))},
        "mean_speed_per_gpu": {g: round(float(y[gpus == g].mean()), 3) for g in sorted(set(gpus))},
    }
    print("gavel pairs", results["gavel_pairs_logo"], flush=True)


def _slowed_accuracy(pred: np.ndarray, y: np.ndarray) -> float:
    """ "The pair's slower job runs below 0.85×" right, rows in (a,b),(b,a) order."""
    t = np.minimum(y[0::2], y[1::2]) < 0.85
    p = np.minimum(pred[0::2], pred[1::2]) < 0.85
    return float(np.mean(t == p))


def _scored(pred: np.ndarray, y: np.ndarray, pairs: bool = True) -> dict[str, float]:
    pred = np.clip(pred, 0.05, 1.0)
    out = {"mae": float(np.mean(np.abs(pred - y))), "bias": float(np.mean(pred - y))}
    if pairs:
        out["slowed_accuracy"] = _slowed_accuracy(pred, y)
    return out


def pair_model_benchmarks(results: dict[str, object], lucid_dir: Path | None) -> None:
    """Issue 26's pair model: the contention bound min(1, 100/(u_a+u_b)) as the base, the
    learned head as corrections on top (``pair_base=contention_bound``), against the bound
    alone and the head that predicts the speed itself, under three protocols:

    * Gavel leave-one-GPU-out (K80/P100/V100; utilisation predicted, Gavel measured none);
    * Lucid as the unseen GPU (RTX 3090; trained on every Gavel pair): the bound from each
      job's measured solo utilisation (what the agent has once a job ran alone) and from
      the predicted one; the pair model there is the bound alone (no pairs from that GPU),
      and the Gavel-learned corrections added anyway are shown beside it;
    * Lucid held out by model with corrections learned from the other Lucid models' pairs on
      that GPU (a cluster's own pairs, ``--extra-pair-rows``)."""
    import csv

    from horus.predictor.model import load_default_predictor
    from horus.predictor.pairfeatures import row_bound
    from horus.predictor.tables import DATA_DIR
    from horus.predictor.train import gavel_pairs, lucid_pairs

    p = load_default_predictor()
    rows, y, _ = gavel_pairs(p.util, p.memory)
    with (DATA_DIR / "gavel_pairs.csv").open() as fh:
        gpus = np.array([r["gpu"] for r in csv.DictReader(fh)])
    x, base = _x(rows, PAIR_FEATURES), np.array([row_bound(r) for r in rows])
    out: dict[str, object] = {}
    logo: dict[str, object] = {}
    for g in sorted(set(gpus)):
        te = gpus == g
        direct = fit_pair(x[~te], y[~te], 0).predict(x[te])
        resid = fit_pair(x[~te], (y - base)[~te], 0).predict(x[te])
        logo[g] = {
            "rows": int(te.sum()),
            "contention_bound": _scored(base[te], y[te], pairs=False),
            "bound_plus_other_gpus_corrections": _scored(base[te] + resid, y[te], pairs=False),
            "head_predicts_speed": _scored(direct, y[te], pairs=False),
        }
        print("pair model, gavel leave-one-GPU-out", g, logo[g], flush=True)
    out["gavel_logo"] = logo
    if lucid_dir is not None:
        lrows, ly, ga, gb = lucid_pairs(None, None, lucid_dir, measured_isolated=True)
        prows, _, _, _ = lucid_pairs(p.util, p.memory, lucid_dir)
        ly = np.minimum(ly, 1.0)  # as the simulator's ground truth: sharing never speeds up
        lx = _x(lrows, PAIR_FEATURES)
        lbase = np.array([row_bound(r) for r in lrows])
        pbase = np.array([row_bound(r) for r in prows])
        gavel_resid = fit_pair(x, y - base, 0)
        gavel_direct = fit_pair(x, y, 0)
        unseen = {
            "pairs": len(ly) // 2,
            "slowed_base_rate": float(np.mean(np.minimum(ly[0::2], ly[1::2]) < 0.85)),
            "contention_bound_measured_util": _scored(lbase, ly),
            "contention_bound_predicted_util": _scored(pbase, ly),
            # what the shipped rule predicts there: no pairs from this GPU → the bound alone
            "pair_model_measured_util": _scored(lbase, ly),
            "bound_plus_gavel_corrections": _scored(lbase + gavel_resid.predict(lx), ly),
            "head_predicts_speed_gavel": _scored(gavel_direct.predict(lx), ly),
        }
        print("pair model, Lucid as the unseen GPU", unseen, flush=True)
        out["lucid_unseen_gpu"] = unseen
        ga_a, gb_a = np.array(ga), np.array(gb)
        resid_pred = np.full(len(ly), np.nan)
        direct_pred = np.full(len(ly), np.nan)
        for m in sorted(set(ga)):
            te = ga_a == m
            tr = (ga_a != m) & (gb_a != m)
            resid_pred[te] = lbase[te] + fit_pair(lx[tr], (ly - lbase)[tr], 0).predict(lx[te])
            direct_pred[te] = fit_pair(lx[tr], ly[tr], 0).predict(lx[te])
        own = {
            "models": len(set(ga)),
            "contention_bound": _scored(lbase, ly),
            "pair_model": _scored(resid_pred, ly),
            "head_predicts_speed": _scored(direct_pred, ly),
        }
        print("pair model, Lucid held out by model, corrections from its other models", own)
        out["lucid_lomo_own_gpu"] = own
    results["pair_model"] = out


def pair_model_markdown(r: dict) -> str:  # type: ignore[type-arg]
    """The pair-model rows: MAE / "slowed < 0.85×" accuracy, the bound beside each."""
    pm = r.get("pair_model")
    if not pm:
        return ""

    def cell(d: dict) -> str:  # type: ignore[type-arg]
        acc = f", {100 * d['slowed_accuracy']:.1f} %" if "slowed_accuracy" in d else ""
        return f"{d['mae']:.3f} (bias {d['bias']:+.3f}{acc})"

    lines = [
        "| protocol | pair model (bound + corrections) | contention bound | head predicting the speed |",
        "|---|---|---|---|",
    ]
    for g, d in pm["gavel_logo"].items():
        lines.append(
            f"| Gavel leave-one-GPU-out, {g} held out ({d['rows']} rows; util predicted) | "
            f"with the other GPUs' corrections {cell(d['bound_plus_other_gpus_corrections'])}; "
            f"as the model predicts on a GPU it has no pairs from: the bound | "
            f"{cell(d['contention_bound'])} | {cell(d['head_predicts_speed'])} |"
        )
    u = pm.get("lucid_unseen_gpu")
    if u:
        lines.append(
            f"| Lucid as the unseen GPU ({u['pairs']} pairs, trained on Gavel; solo util "
            f"measured): the model = the bound alone there | {cell(u['pair_model_measured_util'])}; "
            f"with Gavel's corrections added anyway {cell(u['bound_plus_gavel_corrections'])} | "
            f"{cell(u['contention_bound_measured_util'])}; predicted util "
            f"{cell(u['contention_bound_predicted_util'])} | {cell(u['head_predicts_speed_gavel'])} |"
        )
    o = pm.get("lucid_lomo_own_gpu")
    if o:
        lines.append(
            f"| Lucid held out by model ({o['models']} models), corrections from the other "
            f"models' pairs on that GPU | {cell(o['pair_model'])} | {cell(o['contention_bound'])} | "
            f"{cell(o['head_predicts_speed'])} |"
        )
    lines.append("Target on the unseen GPU (Lucid): MAE ≤ 0.06 and accuracy ≥ 88 %.")
    return "\n".join(lines)


def observed_pair_benchmarks(results: dict[str, object], lucid_dir: Path) -> None:
    """The online-learning hooks, with Lucid standing in for a user's cluster of RTX 3090s.

    Lucid's measurements are written in the agent's file formats and read back through the
    loaders ``horus predictor train`` uses: its pairs as ``--pair-rows`` (``--extra-pair-rows``)
    and its single runs as ``--training-rows`` (``--extra-rows``). For each Lucid model M the
    pair head is trained on the shipped data (Gavel pairs) plus the pairs *not* involving M, and
    judged on M's pairs (M next to anything), so M has never been measured next to anything:

    * ``pairs_only``: util/memory heads as shipped (GPUMemNet) — M has not run in the cluster;
    * ``pairs_and_solo``: heads retrained with every model's single run as an extra row — M has
      run alone once (the agent needs that baseline anyway before it reports a pair speed);
    * ``shipped``: the shipped pair head, no observed rows.
    """
    import csv
    import tempfile

    from horus.predictor.catalog import job_type
    from horus.predictor.dataset import concat, load_gpumemnet
    from horus.predictor.interface import GraphProfile
    from horus.predictor.model import load_default_predictor
    from horus.predictor.schema import FEATURE_NAMES
    from horus.predictor.tables import DATA_DIR
    from horus.predictor.train import gavel_pairs, observed_pair_rows, train_single_heads
    from horus.predictor.userdata import (
        PAIR_ROW_COLUMNS,
        load_extra_pair_rows,
        load_extra_rows,
    )

    def profile(model: str, batch: str, amp: str) -> GraphProfile:
        return job_type("lucid", model, int(batch), amp == "1").profile

    with tempfile.TemporaryDirectory() as tmp:
        pairs_csv, solo_csv = Path(tmp) / "pairs.csv", Path(tmp) / "rows.csv"
        with (lucid_dir / "colocate_info.csv").open() as src, pairs_csv.open("w") as dst:
            w = csv.DictWriter(dst, fieldnames=[*PAIR_ROW_COLUMNS, "model", "other_model"])
            w.writeheader()
            for r in csv.DictReader(src):
                a, b = (profile(r[f"model{i}"], r[f"batchsize{i}"], r[f"amp{i}"]) for i in (1, 2))
                m1, m2 = r["model1"], r["model2"]
                for ma, mb, pa, pb, speed in (
                    (m1, m2, a, b, r["speed1"]),
                    (m2, m1, b, a, r["speed2"]),
                ):
                    row = {"gpu": "RTX3090", "speed": speed, "model": ma, "other_model": mb}
                    row.update({f"a_{k}": pa.features[k] for k in FEATURE_NAMES})
                    row.update({f"b_{k}": pb.features[k] for k in FEATURE_NAMES})
                    w.writerow(row)
        with (lucid_dir / "single_data.csv").open() as src, solo_csv.open("w") as dst:
            w = csv.DictWriter(dst, fieldnames=["gpu", "util", "memory_mib", *FEATURE_NAMES])
            w.writeheader()
            for r in csv.DictReader(src):
                f = profile(r["model"], r["batchsize"], r["amp"]).features
                row = {"gpu": "RTX3090", "util": r["gpu_util"], "memory_mib": r["gmem"]}
                w.writerow({**row, **{k: f[k] for k in FEATURE_NAMES}})
        observed = load_extra_pair_rows(pairs_csv)
        with pairs_csv.open() as fh:
            others = np.array([r["other_model"] for r in csv.DictReader(fh)])
        solo = load_extra_rows(solo_csv)
    ga = np.array([o.group for o in observed])
    y = np.array([o.speed for o in observed])
    p = load_default_predictor()
    heads = {
        "pairs_only": (p.util, p.memory),
        "pairs_and_solo": train_single_heads(concat([load_gpumemnet(DATA_DIR), solo]), 0)[:2],
    }
    preds: dict[str, np.ndarray] = {}
    for name, (util, mem) in heads.items():
        grows, gy, _ = gavel_pairs(util, mem)
        gx = _x(grows, PAIR_FEATURES)
        orows, _, _ = observed_pair_rows(observed, util, mem)
        ox = _x(orows, PAIR_FEATURES)
        pred = np.full(len(y), np.nan)
        for m in sorted(set(ga)):
            test = ga == m
            train = (ga != m) & (others != m)
            pred[test] = fit_pair(np.r_[gx, ox[train]], np.r_[gy, y[train]], 0).predict(ox[test])
        preds[name] = pred
        if name == "pairs_only":
            preds["shipped"] = np.array(p.pair.predict(orows))
    entry: dict[str, object] = {"rows": len(y), "models": len(set(ga))}
    true_slow = np.minimum(y[0::2], y[1::2]) < 0.85  # rows come as (a,b),(b,a)
    for name, est in preds.items():
        pred_slow = np.minimum(est[0::2], est[1::2]) < 0.85
        entry[f"{name}_mae"] = float(np.mean(np.abs(est - y)))
        entry[f"{name}_bias"] = float(np.mean(est - y))
        entry[f"{name}_slow085_accuracy"] = float(np.mean(true_slow == pred_slow))
    entry["mean_predictor_mae"] = float(np.mean(np.abs(y - y.mean())))
    entry["slow085_base_rate"] = float(np.mean(true_slow))
    results["observed_pairs_lomo"] = entry
    print("observed pairs", entry, flush=True)


def speed_benchmarks(results: dict[str, object]) -> None:
    from horus.predictor.catalog import measured_job_types
    from horus.predictor.model import load_default_predictor

    t0 = time.perf_counter()
    p = load_default_predictor()
    load_s = time.perf_counter() - t0
    profs = [jt.profile for jt in measured_job_types()]
    batch = (profs * (20000 // len(profs) + 1))[:20000]
    p.predict_many(batch[:100], "A100")
    # Wall time is what a caller sees; CPU time (process_time) is what the code costs, and is
    # far less disturbed by other processes on a shared 2-core machine. Both are reported.
    # Throughput: best and median of 5 runs (other processes share these 2 cores; the best run
    # is the least disturbed, as timeit reports).
    walls, cpus = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        p.predict_many(batch, "A100")
        walls.append(len(batch) / (time.perf_counter() - t0))
        cpus.append(len(batch) / (time.process_time() - c0))
    batched, batched_cpu = max(walls), max(cpus)

    # Single predictions: the scalar fast path. "cached" cycles through the 92 catalogued job
    # types (the scheduler's case: the same job kinds are asked about again and again, so after
    # the first call per kind and GPU the answer comes from the per-profile cache); "uncached"
    # clears the cache before every call, so every call computes features and walks the trees.
    def timed(fn: object, n: int, clear: bool) -> tuple[list[float], list[float]]:
        lat, cpu = [], []
        p.clear_cache()
        for i in range(n):
            if clear:
                p.clear_cache()
            s, c = time.perf_counter(), time.process_time()
            fn(i)  # type: ignore[operator]
            lat.append(time.perf_counter() - s)
            cpu.append(time.process_time() - c)
        return lat, cpu

    def single(i: int) -> None:
        p.predict(profs[i % len(profs)], "A100")

    def pair(i: int) -> None:
        p.pair_speed(profs[i % len(profs)], profs[(i * 7) % len(profs)], "A100")

    lat, cpu = timed(single, 5000, clear=False)
    lat_u, cpu_u = timed(single, 5000, clear=True)
    pair_lat, pair_cpu = timed(pair, 2000, clear=False)
    pair_lat_u, pair_cpu_u = timed(pair, 2000, clear=True)
    import os

    results["speed"] = {
        "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "artifact_load_s": load_s,
        "batched_predictions_per_s": batched,
        "batched_predictions_per_cpu_s": batched_cpu,
        "batched_predictions_per_s_median": float(np.median(walls)),
        "single_p50_ms": float(np.percentile(lat, 50) * 1e3),
        "single_p99_ms": float(np.percentile(lat, 99) * 1e3),
        "single_cpu_mean_ms": float(np.mean(cpu) * 1e3),
        "single_uncached_p50_ms": float(np.percentile(lat_u, 50) * 1e3),
        "single_uncached_p99_ms": float(np.percentile(lat_u, 99) * 1e3),
        "single_uncached_cpu_mean_ms": float(np.mean(cpu_u) * 1e3),
        "pair_p50_ms": float(np.percentile(pair_lat, 50) * 1e3),
        "pair_p99_ms": float(np.percentile(pair_lat, 99) * 1e3),
        "pair_cpu_mean_ms": float(np.mean(pair_cpu) * 1e3),
        "pair_uncached_p50_ms": float(np.percentile(pair_lat_u, 50) * 1e3),
        "pair_uncached_p99_ms": float(np.percentile(pair_lat_u, 99) * 1e3),
        "pair_uncached_cpu_mean_ms": float(np.mean(pair_cpu_u) * 1e3),
    }
    try:
        import torch  # noqa: F401

        from horus.predictor.zoo import profile_zoo

        profile_zoo("resnet18-cifar", 8)  # warm imports
        t0 = time.perf_counter()
        profile_zoo("resnet50", 64)
        results["speed"]["profile_resnet50_b64_s"] = time.perf_counter() - t0  # type: ignore[index]
    except ImportError:
        results["speed"]["profile_resnet50_b64_s"] = None  # type: ignore[index]
    print("speed", results["speed"], flush=True)


def markdown(r: dict) -> str:  # type: ignore[type-arg]
    """The results table for docs/predictor.md."""

    def f(v: object, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    lines = [
        "| metric (held-out only) | Horus (full features) | thesis features | FLOPs only | mean | target | met? |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, target in (("mlp", 1.5), ("cnn", 6.0)):
        e = r[f"gpumemnet_{kind}_util"]
        lines.append(
            f"| GPUMemNet {kind.upper()} util MAE, leave-one-family-out ({e['rows']} rows, {e['families']} families) "
            f"| {e['full_mae_pp']:.2f} pp | {e['thesis_mae_pp']:.2f} pp | {e['flops_mae_pp']:.2f} pp | {e['mean_mae_pp']:.2f} pp "
            f"| ≤ {target} pp | {'yes' if e['full_mae_pp'] <= target else 'no'} |"
        )
        if "own_columns_mae_pp" in e:
            lines.append(
                f"| ↳ the dataset's own columns, same learner: leave-one-family-out "
                f"{e['own_columns_mae_pp']:.2f} pp; random 5-fold {e['random5_own_columns_mae_pp']:.2f} pp "
                f"(Horus features, random 5-fold: {e['random5_full_mae_pp']:.2f} pp) | | | | | | |"
            )
    for kind in ("mlp", "cnn"):
        e = r[f"gpumemnet_{kind}_memory"]
        lines.append(
            f"| GPUMemNet {kind.upper()} peak-memory MAPE, leave-one-family-out ({e['rows']} rows) "
            f"| {e['full_mape'] * 100:.1f} % | {e['thesis_mape'] * 100:.1f} % | {e['flops_mape'] * 100:.1f} % | {e['mean_mape'] * 100:.1f} % "
            f"| ≤ 15 % | {'yes' if e['full_mape'] <= 0.15 else 'no'} |"
        )
    if "lucid_util_lomo" in r:
        e = r["lucid_util_lomo"]
        red = e["full_vs_thesis_reduction"] * 100
        lines.append(
            f"| Lucid util MAE, leave-one-model-out ({e['rows']} rows, {e['models']} models) "
            f"| {e['full_mae_pp']:.1f} pp | {e['thesis_mae_pp']:.1f} pp | {e['flops_mae_pp']:.1f} pp | {e['mean_mae_pp']:.1f} pp "
            f"| ≥ 20 % below thesis | {'yes' if red >= 20 else 'no'} ({red:+.0f} %) |"
        )
        lines.append(
            f"| ↳ same, without PointNet (input-pipeline-bound) "
            f"| {e['full_mae_pp_without_pointnet']:.1f} pp | {e['thesis_mae_pp_without_pointnet']:.1f} pp "
            f"| {e['flops_mae_pp_without_pointnet']:.1f} pp | {e['mean_mae_pp_without_pointnet']:.1f} pp | | |"
        )
        if "with_gpumemnet_full_mae_pp" in e:
            w = [e[f"with_gpumemnet_{n}_mae_pp"] for n in ("full", "thesis", "flops")]
            wp = [
                e[f"with_gpumemnet_{n}_mae_pp_without_pointnet"]
                for n in ("full", "thesis", "flops")
            ]
            lines.append(
                "| ↳ trained on GPUMemNet + the other Lucid models (the `--with-lucid` protocol); "
                f"without PointNet {wp[0]:.1f} / {wp[1]:.1f} / {wp[2]:.1f} pp "
                f"| {w[0]:.1f} pp | {w[1]:.1f} pp | {w[2]:.1f} pp | | | |"
            )
        lines.append(
            f"| ↳ shipped artifact (GPUMemNet only, no Lucid rows) on Lucid | {e['shipped_default_mae_pp']:.1f} pp | | | | | |"
        )
    if "lucid_pairs_lomo" in r:
        e = r["lucid_pairs_lomo"]
        lines.append(
            f"| Lucid pair normalised-speed MAE, leave-one-model-out ({e['rows']} ordered pairs) "
            f"| {e['graph+isolated_mae']:.3f} (graph + isolated util/mem); {e['graph_only_mae']:.3f} (graph only) "
            f"| | {e['isolated_only_mae']:.3f} (isolated util/mem only) | {e['mean_mae']:.3f} | ≤ 0.07 "
            f"| {'yes' if e['graph+isolated_mae'] <= 0.07 else 'no'} |"
        )
        lines.append(
            f'| "slows someone below 0.85×" accuracy (base rate {e["slow085_base_rate"] * 100:.0f} %) '
            f"| {e['graph+isolated_slow085_accuracy'] * 100:.1f} %; {e['graph_only_slow085_accuracy'] * 100:.1f} % (graph only) "
            f"| | {e['isolated_only_slow085_accuracy'] * 100:.1f} % | {e['mean_slow085_accuracy'] * 100:.1f} % | ≥ 88 % "
            f"| {'yes' if e['graph+isolated_slow085_accuracy'] >= 0.88 else 'no'} |"
        )
        lines.append(
            f"| ↳ shipped artifact (Gavel pairs only) on Lucid pairs | {e['shipped_default_mae']:.3f} | | | | | |"
        )
    if "observed_pairs_lomo" in r:
        e = r["observed_pairs_lomo"]

        def hook(k: str) -> str:
            return (
                f"{e[k + '_mae']:.3f} (bias {e[k + '_bias']:+.3f}, 0.85× accuracy "
                f"{e[k + '_slow085_accuracy'] * 100:.1f} %)"
            )

        lines.append(
            "| ↳ online hooks, held-out Lucid model never measured in a pair: shipped head "
            f"{hook('shipped')}; + the other models' pairs as `--extra-pair-rows` "
            f"{hook('pairs_only')}; + every model's solo run as `--extra-rows` "
            f"{hook('pairs_and_solo')} | | | | {e['mean_predictor_mae']:.3f} | | |"
        )
    if "gavel_pairs_logo" in r:
        e = r["gavel_pairs_logo"]
        per = ", ".join(f"{g.split(':')[-1].upper()} {v:.3f}" for g, v in e["per_gpu_mae"].items())
        lines.append(
            f"| Gavel pair speed MAE, leave-one-GPU-out ({e['rows']} ordered pairs; shipped head's data) "
            f"| {e['mae']:.3f} ({per}) | | | | | |"
        )
    covs = [
        (name, r[key]["full_coverage_p90"])
        for name, key in (
            ("MLP util", "gpumemnet_mlp_util"),
            ("CNN util", "gpumemnet_cnn_util"),
            ("MLP memory", "gpumemnet_mlp_memory"),
            ("CNN memory", "gpumemnet_cnn_memory"),
            ("Lucid util", "lucid_util_lomo"),
        )
        if key in r
    ]
    ok = all(0.88 <= c <= 0.95 for _, c in covs)
    lines.append(
        "| p90 upper-bound coverage (cross-conformal) | "
        + ", ".join(f"{n} {c * 100:.1f} %" for n, c in covs)
        + f" | | | | 88–95 % | {'yes' if ok else 'partly'} |"
    )
    sp = r["speed"]
    lines.append(
        f"| batched predictions / s (20,000 profiles, best of 5) | {sp['batched_predictions_per_s']:,.0f} wall "
        f"(median {sp['batched_predictions_per_s_median']:,.0f}); "
        f"{sp['batched_predictions_per_cpu_s']:,.0f} per CPU-second | | | | ≥ 20,000 | "
        f"{'yes' if sp['batched_predictions_per_s'] >= 20000 else 'no'} |"
    )

    def lat(key: str) -> str:
        if f"{key}_cpu_mean_ms" not in sp:
            return "n/a"
        return (
            f"p50 {sp[f'{key}_p50_ms']:.3f} ms, p99 {sp[f'{key}_p99_ms']:.2f} ms wall; "
            f"mean CPU {sp[f'{key}_cpu_mean_ms']:.3f} ms"
        )

    load = f"load average {sp['load_average_1m']:.1f} on {sp['cpus']} CPUs"
    lines.append(
        f"| single prediction latency, repeated job kinds (per-profile cache) | {lat('single')} ({load}) "
        f"| | | | p99 ≤ 1 ms | {'yes' if sp['single_p99_ms'] <= 1 else 'no'} |"
    )
    lines.append(
        f"| ↳ uncached (features + tree walk every call) | {lat('single_uncached')} | | | | p99 ≤ 1 ms "
        f"| {'yes' if sp.get('single_uncached_p99_ms', 99) <= 1 else 'no'} |"
    )
    lines.append(
        f"| pair prediction latency, cached / uncached | {lat('pair')}; {lat('pair_uncached')} | | | | | |"
    )
    prof = sp.get("profile_resnet50_b64_s")
    lines.append(
        f"| profile ResNet-50, batch 64, CPU (in process) | {f(prof, '.2f')} s | | | | ≤ 20 s | "
        f"{'yes' if prof is not None and prof <= 20 else 'n/a'} |"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--lucid-dir", type=Path, default=None, help="default: the data folder's Lucid copy"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "predictor.json")
    ap.add_argument("--trees", type=int, default=None, help="smaller ensembles (smoke runs only)")
    ap.add_argument("--speed-only", action="store_true", help="re-measure speed into --out")
    ap.add_argument(
        "--pairs-only",
        action="store_true",
        help="re-measure only the pair model (issue 26) into --out (~1 min)",
    )
    args = ap.parse_args()
    if args.trees:
        from horus.predictor import train

        train._OVERRIDES["n_estimators"] = args.trees
    lucid: Path | None = args.lucid_dir
    if lucid is None:
        why = missing(LUCID, "single_data.csv")
        lucid = None if why else dataset_file(LUCID, "single_data.csv").parent
    elif not (lucid / "single_data.csv").exists():
        why, lucid = f"{lucid} has no single_data.csv", None
    if lucid is None:
        print(f"Lucid rows left out: {why}", flush=True)
    results: dict[str, object] = {"machine": f"{platform.machine()} {platform.processor()}".strip()}
    start = time.perf_counter()
    if args.speed_only or args.pairs_only:
        results = json.loads(args.out.read_text())
        if args.speed_only:
            speed_benchmarks(results)
        else:
            pair_model_benchmarks(results, lucid)
        args.out.write_text(json.dumps(results, indent=2))
        print(markdown(results))
        print(pair_model_markdown(results))
        return 0
    speed_benchmarks(results)
    single_benchmarks(results, lucid)
    gavel_pair_benchmarks(results)
    pair_model_benchmarks(results, lucid)
    if lucid is not None:
        pair_benchmarks(results, lucid)
        observed_pair_benchmarks(results, lucid)
    results["wall_s"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(markdown(results))
    print(pair_model_markdown(results))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
