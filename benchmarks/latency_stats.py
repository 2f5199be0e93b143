"""Latency figures the benchmarks print and store, computed one way.

Why a module: the device-plugin, operator and real-node benchmarks each report percentiles
of measured latencies; with one definition (nearest rank on the sorted samples, no
interpolation) their p50/p99 figures mean the same thing and can be compared.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def percentile(xs: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``xs`` (NaN when there are none)."""
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(xs: list[float], unit: str, digits: int) -> dict[str, float]:
    """Count, p50/p90/p99, mean and max of ``xs``, keys suffixed with ``unit`` (``p50_s``)."""
    out: dict[str, float] = {"n": len(xs)}
    for q in (50, 90, 99):
        out[f"p{q}_{unit}"] = round(percentile(xs, q), digits)
    out[f"mean_{unit}"] = round(statistics.fmean(xs), digits)
    out[f"max_{unit}"] = round(max(xs), digits)
    return out


def print_table(
    rows: Mapping[str, Mapping[str, float]],
    labels: Sequence[tuple[str, str]],
    say: Callable[[str], None] = print,
    width: int = 28,
) -> None:
    """p50/p90/p99/mean in seconds, one line per (label, key of ``rows``), under a header."""
    say(f"{'':{width}}{'p50':>8}{'p90':>8}{'p99':>8}{'mean':>8}")
    for label, key in labels:
        s = rows[key]
        say(f"{label:{width}}{s['p50_s']:8.2f}{s['p90_s']:8.2f}{s['p99_s']:8.2f}{s['mean_s']:8.2f}")


def write_results(path: Path, out: Mapping[str, Any], say: Callable[[str], None] = print) -> None:
    """The results JSON at ``path`` (its folder made), and a line saying where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    say(f"wrote {path}")
