"""The demo's PNG report, drawn from Prometheus range queries — the same numbers the Grafana
dashboards show, so the picture is proof the metrics pipeline works end to end, not a
re-computation from the scheduler's own memory.

Top: utilisation of every GPU that ran something, over time (observed, solid) with the
scheduler's summed prediction for it (dashed). Bottom: predicted vs observed utilisation per
pod (mean over the last minute); the gap between the two bars is the interference the
scheduler accepted when it made jobs share.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
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


def query(url: str, expr: str) -> list[Any]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=30
    ) as resp:
        body = json.load(resp)
    return list(body["data"]["result"])


def write_report(url: str, start: float, end: float, path: Path) -> Path:
    """Draw the report for ``[start, end]`` (Unix seconds) from Prometheus at ``url``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = max(2.0, (end - start) / 300)
    observed = query_range(url, c.METRIC_GPU_UTILIZATION, start, end, step)
    predicted = query_range(url, c.METRIC_GPU_PREDICTED_UTIL_SUM, start, end, step)
    pred_by_gpu = {(s["metric"].get("node"), s["metric"].get("gpu")): s for s in predicted}
    busy = [s for s in observed if any(float(v) > 0 for _, v in s["values"])]
    busy.sort(key=lambda s: (s["metric"].get("node", ""), int(s["metric"].get("gpu", "0"))))
    pods_pred = query(url, f"avg_over_time({c.METRIC_POD_PREDICTED_UTIL}[1m])")
    pods_obs = query(url, f"avg_over_time({c.METRIC_POD_OBSERVED_UTIL}[1m])")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 10), constrained_layout=True)
    cmap = plt.get_cmap("tab20")
    for i, s in enumerate(busy):
        key = (s["metric"].get("node"), s["metric"].get("gpu"))
        label = f"{str(key[0]).replace('gpu-node-', 'node ')} / GPU {key[1]}"
        ts = [float(t) - start for t, _ in s["values"]]
        top.plot(ts, [100 * float(v) for _, v in s["values"]], color=cmap(i % 20), label=label)
        p = pred_by_gpu.get(key)
        if p is not None:
            pts = [float(t) - start for t, _ in p["values"]]
            top.plot(
                pts, [100 * float(v) for _, v in p["values"]], color=cmap(i % 20), ls="--", lw=1
            )
    top.set_title(
        f"GPU utilisation over time ({len(busy)} of {len(observed)} GPUs busy) — "
        "solid: observed (agent), dashed: summed prediction (operator)"
    )
    top.set_xlabel("seconds since the jobs were submitted")
    top.set_ylabel("utilisation %")
    top.set_ylim(bottom=0)
    if busy:
        top.legend(fontsize=7, ncol=4, loc="upper left")
    else:
        top.text(0.5, 0.5, "no GPU reported utilisation", ha="center", transform=top.transAxes)

    obs_by_pod = {(s["metric"].get("namespace"), s["metric"].get("pod")): s for s in pods_obs}
    names, pv, ov = [], [], []
    for s in sorted(pods_pred, key=lambda s: str(s["metric"].get("pod"))):
        key = (s["metric"].get("namespace"), s["metric"].get("pod"))
        if key not in obs_by_pod:
            continue
        names.append(str(key[1]))
        pv.append(100 * float(s["value"][1]))
        ov.append(100 * float(obs_by_pod[key]["value"][1]))
    xs = list(range(len(names)))
    bottom.bar([x - 0.2 for x in xs], pv, width=0.4, label="predicted (solo)")
    bottom.bar([x + 0.2 for x in xs], ov, width=0.4, label="observed (sharing)")
    bottom.set_xticks(xs, names, rotation=45, ha="right", fontsize=7)
    bottom.set_ylabel("utilisation % (mean, last minute)")
    bottom.set_title("Predicted vs observed utilisation per pod")
    bottom.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
