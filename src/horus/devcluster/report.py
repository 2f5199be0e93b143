"""The demo's PNG report, drawn from Prometheus range queries — the same numbers the Grafana
dashboards show, so the picture is proof the metrics pipeline works end to end, not a
re-computation from the scheduler's own memory.

Top: utilisation of every GPU that ran something, over time (observed, solid) with the
scheduler's summed prediction for it (dashed), and a vertical line where Horus moved a job
(``moves``: the jobs' ``status.migrations``). Middle, when a job was moved: the moved jobs' own
observed utilisation, one line per place it ran (node/GPU) — the move's effect on the job.
Bottom: predicted vs observed utilisation per pod (mean over the last minute); the gap between
the two bars is the interference the scheduler accepted when it made jobs share.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from horus.common import constants as c


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[Any]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    with urllib.request.urlopen(
        f"{url}/api/v1/query_range?" + urllib.parse.urlencode(params), timeout=30
    ) as resp:
        body = json.load(resp)
    return list(body["data"]["result"])


def query(url: str, expr: str, timeout: float = 30) -> list[Any]:
    """An instant query's result list."""
    with urllib.request.urlopen(
        f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=timeout
    ) as resp:
        body = json.load(resp)
    return list(body["data"]["result"])


def write_report(
    url: str,
    start: float,
    end: float,
    path: Path,
    moves: Sequence[tuple[float, str]] = (),
) -> Path:
    """Draw the report for ``[start, end]`` (Unix seconds) from Prometheus at ``url``;
    ``moves``: (Unix time, "job: from → to") of each move to mark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = max(2.0, (end - start) / 300)
    observed = query_range(url, c.METRIC_GPU_UTILIZATION, start, end, step)
    predicted = query_range(url, c.METRIC_GPU_PREDICTED_UTIL_SUM, start, end, step)
    bars = _pod_bars(url)

    moved = sorted({text.split(":", 1)[0] for _, text in moves})
    panels = 3 if moved else 2
    fig, axes = plt.subplots(panels, 1, figsize=(13, 5 * panels), constrained_layout=True)
    top, bottom = axes[0], axes[-1]
    _gpus(top, plt.get_cmap("tab20"), observed, predicted, start, end)
    for ax in axes[:-1]:
        _mark_moves(ax, moves, start, whole=ax is not top)
    if moved:
        _moved_jobs(axes[1], url, moved, start, end, step)
    _predicted_vs_observed(bottom, *bars)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _gpus(
    ax: Any,
    cmap: Any,
    observed: list[Any],
    predicted: list[Any],
    start: float,
    end: float,
) -> None:
    """The top panel: each busy GPU's observed utilisation (solid) and the summed prediction
    of the pods on it (dashed, same colour)."""
    pred_by_gpu = {(s["metric"].get("node"), s["metric"].get("gpu")): s for s in predicted}
    busy = [s for s in observed if any(float(v) > 0 for _, v in s["values"])]
    busy.sort(key=lambda s: (s["metric"].get("node", ""), int(s["metric"].get("gpu", "0"))))
    for i, s in enumerate(busy):
        key = (s["metric"].get("node"), s["metric"].get("gpu"))
        label = f"{str(key[0]).replace('gpu-node-', 'node ')} / GPU {key[1]}"
        ax.plot(*_percent(s, start), color=cmap(i % 20), label=label)
        p = pred_by_gpu.get(key)
        if p is not None:
            ax.plot(*_percent(p, start), color=cmap(i % 20), ls="--", lw=1)
    ax.set_title(
        f"GPU utilisation over time ({len(busy)} of {len(observed)} GPUs busy) — "
        "solid: observed (agent), dashed: summed prediction (operator)"
    )
    _time_axis(ax, end - start)
    if busy:
        ax.legend(fontsize=7, ncol=4, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no GPU reported utilisation", ha="center", transform=ax.transAxes)


def _mark_moves(ax: Any, moves: Sequence[tuple[float, str]], start: float, whole: bool) -> None:
    """A dotted vertical line at each move, labelled with the job (``whole``: and where it
    moved from and to)."""
    for when, text in moves:
        ax.axvline(when - start, color="black", ls=":", lw=1.5)
        ax.annotate(
            f"moved {text}" if whole else f"moved {text.split(':', 1)[0]}",
            (when - start, 0.5),
            xycoords=("data", "axes fraction"),
            xytext=(-3, 0),
            textcoords="offset points",
            rotation=90,
            ha="right",
            va="center",
            fontsize=8,
        )


def _place(m: dict[str, str]) -> tuple[str | None, ...]:
    """A pod series' place: a moved pod keeps its name, its (node, GPU) tells its series apart."""
    return (m.get("namespace"), m.get("pod"), m.get("node"), m.get("gpu"))


def _pod_bars(url: str) -> tuple[list[str], list[float], list[float]]:
    """Per pod (and place, for a pod seen in two): its label, predicted and observed
    utilisation % (mean over the last minute); pods with no observation are left out."""
    pods_pred = query(url, f"avg_over_time({c.METRIC_POD_PREDICTED_UTIL}[1m])")
    pods_obs = query(url, f"avg_over_time({c.METRIC_POD_OBSERVED_UTIL}[1m])")
    obs_by_pod = {_place(s["metric"]): s for s in pods_obs}
    twice = {p for p in (s["metric"].get("pod") for s in pods_pred) if p is not None}
    twice = {p for p in twice if sum(1 for s in pods_pred if s["metric"].get("pod") == p) > 1}
    names: list[str] = []
    pv: list[float] = []
    ov: list[float] = []
    for s in sorted(pods_pred, key=lambda s: [str(v) for v in _place(s["metric"])]):
        m = s["metric"]
        if _place(m) not in obs_by_pod:
            continue
        where = f" ({str(m.get('node')).replace('gpu-node-', 'n')}/{m.get('gpu')})"
        names.append(str(m.get("pod")) + (where if m.get("pod") in twice else ""))
        pv.append(100 * float(s["value"][1]))
        ov.append(100 * float(obs_by_pod[_place(m)]["value"][1]))
    return names, pv, ov


def _predicted_vs_observed(ax: Any, names: list[str], pv: list[float], ov: list[float]) -> None:
    """The bottom panel: predicted (solo) vs observed (sharing) bars per pod."""
    xs = list(range(len(names)))
    ax.bar([x - 0.2 for x in xs], pv, width=0.4, label="predicted (solo)")
    ax.bar([x + 0.2 for x in xs], ov, width=0.4, label="observed (sharing)")
    ax.set_xticks(xs, names, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("utilisation % (mean, last minute)")
    ax.set_title("Predicted vs observed utilisation per pod")
    ax.legend()


def _moved_jobs(
    ax: Any, url: str, jobs: Sequence[str], start: float, end: float, step: float
) -> None:
    """Each moved job's pods' observed utilisation, one line per (pod, node, GPU): the pod keeps
    its name across a move, so the place it ran is what tells before from after."""
    pods = "|".join(f"{job}-[0-9]+" for job in jobs)
    series = query_range(url, f'{c.METRIC_POD_OBSERVED_UTIL}{{pod=~"{pods}"}}', start, end, step)
    for s in sorted(series, key=lambda s: min(float(t) for t, _ in s["values"])):
        m = s["metric"]
        label = f"{m.get('pod')} on {m.get('node')} / GPU {m.get('gpu')}"
        ax.plot(*_percent(s, start), marker=".", ms=3, label=label)
    ax.set_title(
        f"The moved job{'s' if len(jobs) > 1 else ''} ({', '.join(jobs)}): observed utilisation "
        "before and after the move"
    )
    _time_axis(ax, end - start)
    if series:
        ax.legend(fontsize=8, loc="lower right")


def _percent(series: dict[str, Any], start: float) -> tuple[list[float], list[float]]:
    """A range query's series as (seconds since ``start``, percent)."""
    values = series["values"]
    return [float(t) - start for t, _ in values], [100 * float(v) for _, v in values]


def _time_axis(ax: Any, span: float) -> None:
    ax.set_xlabel("seconds since the jobs were submitted")
    ax.set_ylabel("utilisation %")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0, right=span)
