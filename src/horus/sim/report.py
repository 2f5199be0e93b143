"""Turning simulation results into a table, JSON and PNG plots (JCT CDF, utilisation over time)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from horus.sim.results import SimResult

COLUMNS = (
    ("makespan_s", "makespan s"),
    ("jct_mean_s", "JCT mean"),
    ("jct_median_s", "JCT p50"),
    ("jct_p95_s", "JCT p95"),
    ("queue_delay_mean_s", "wait mean"),
    ("gpu_busy_fraction", "busy"),
    ("summed_util_mean_pct", "util %"),
    ("jobs_slowed", "slowed<0.8"),
    ("migrations_per_job", "moves/job"),
    ("migrations_max_per_job", "max moves"),
    ("preemptions", "preempted"),
    ("wall_seconds", "wall s"),
)


# counts print as whole numbers, even when small
_COUNTS = frozenset({"jobs_slowed", "migrations_max_per_job", "preemptions"})


def table(results: Sequence[SimResult]) -> str:
    """A fixed-width text table, one row per policy."""
    head = f"{'run':<24}" + "".join(f"{label:>11}" for _, label in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in results:
        m = r.metrics()
        cells = []
        for key, _ in COLUMNS:
            v = m[key]
            whole = key in _COUNTS or abs(v) >= 10
            cells.append(f"{v:>11.0f}" if whole else f"{v:>11.3f}")
        lines.append(f"{r.policy:<24}" + "".join(cells))
    return "\n".join(lines)


def ratios(results: Sequence[SimResult]) -> dict[str, float]:
    """The ratios of ``horus`` (the whole system), its ablations and ``oracle+migrate``
    against the other runs present."""
    by = {r.policy: r.metrics() for r in results}
    out: dict[str, float] = {}
    for ours in ("horus", "horus-predict-only", "horus+observed", "oracle+migrate"):
        h = by.get(ours)
        if h is None:
            continue
        for other in ("exclusive", "binpack", "spread", "horus-original", "oracle"):
            o = by.get(other)
            if o is None:
                continue
            out[f"makespan_{ours}_over_{other}"] = h["makespan_s"] / o["makespan_s"]
            out[f"jct_mean_{ours}_over_{other}"] = h["jct_mean_s"] / o["jct_mean_s"]
    return out


def to_json(results: Sequence[SimResult], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **(extra or {}),
        "policies": {
            r.policy: {**r.metrics(), "utilisation_source": r.util_source} for r in results
        },
        "ratios": ratios(results),
    }


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def plot(results: Sequence[SimResult], out_prefix: Path) -> list[Path]:
    """``<prefix>-jct-cdf.png`` and ``<prefix>-util.png``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = sorted(x.jct / 3600 for x in r.records)
        ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF — {results[0].trace}" if results else "JCT CDF")
    ax.legend()
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "-jct-cdf.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for r in results:
        t = [x[0] / 3600 for x in r.timeline]
        a1.plot(t, [x[1] for x in r.timeline], label=r.policy, lw=0.8)
        a2.plot(t, [x[2] for x in r.timeline], label=r.policy, lw=0.8)
    a1.set_ylabel("GPUs busy (fraction)")
    a2.set_ylabel("summed util per GPU (%)")
    a2.set_xlabel("time (h)")
    a1.legend(fontsize=7)
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "-util.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths
