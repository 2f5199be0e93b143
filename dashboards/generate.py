"""Writes the Grafana dashboards in this folder (``python dashboards/generate.py``).

Why generated: four dashboards share one datasource variable, the same label filters and the
same panel boilerplate; writing the JSON by hand invites a typo'd metric name that only shows
up as an empty panel in production. Every PromQL expression here names metrics through
``horus.common.constants`` (the names the components export), and
``tests/e2e/test_dashboards.py`` checks the JSON files both equal this script's output and
reference no metric outside constants.py. The JSON files are committed so Grafana users and the
chart (``tools/sync-chart.sh`` copies them to ``charts/horus/dashboards``) need no Python.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from horus.common import constants as c

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}

# Metric names with the suffixes the Prometheus client adds.
GPU_UTIL = c.METRIC_GPU_UTILIZATION
GPU_MEM = c.METRIC_GPU_MEMORY_USED
GPU_MEM_TOTAL = c.METRIC_GPU_MEMORY_TOTAL
GPU_PRED = c.METRIC_GPU_PREDICTED_UTIL_SUM
POD_MEM = c.METRIC_POD_GPU_MEMORY_USED
POD_CORE = c.METRIC_POD_GPU_CORE_SHARE
POD_MEM_LIMIT = c.METRIC_POD_GPU_MEMORY_LIMIT
POD_PRED = c.METRIC_POD_PREDICTED_UTIL
POD_OBS = c.METRIC_POD_OBSERVED_UTIL
EVICTIONS = c.METRIC_ENFORCEMENT_EVICTIONS + "_total"
QUEUE = c.METRIC_QUEUE_LENGTH
DECISIONS = c.METRIC_SCHEDULING_DECISIONS + "_total"
FAILURES = c.METRIC_SCHEDULING_FAILURES + "_total"
LATENCY = c.METRIC_DECISION_LATENCY
PHASES = c.METRIC_DLJOB_PHASE
BACKEND_UP = c.METRIC_AGENT_BACKEND_UP
CYCLE = c.METRIC_AGENT_CYCLE_DURATION

NODE = 'node=~"$node"'
NS = 'namespace=~"$namespace"'


class Board:
    """Lays panels out on Grafana's 24-column grid, left to right, row by row."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        self.uid, self.title, self.description = uid, title, description
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = self.row_h = 0
        self.variables: list[dict[str, Any]] = [datasource_variable()]

    def add(
        self,
        kind: str,
        title: str,
        targets: list[tuple[str, str]],
        *,
        w: int = 12,
        h: int = 8,
        unit: str = "",
        description: str = "",
        instant: bool = False,
        options: dict[str, Any] | None = None,
    ) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel: dict[str, Any] = {
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
            "options": options or {},
            "targets": [
                {
                    "refId": chr(ord("A") + i),
                    "datasource": DS,
                    "expr": expr,
                    "legendFormat": legend,
                    "instant": instant,
                    "range": not instant,
                    **({"format": "table"} if kind == "table" else {}),
                }
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def query_variable(self, name: str, label: str, query: str, *, multi: bool = True) -> None:
        self.variables.append(
            {
                "name": name,
                "label": label,
                "type": "query",
                "datasource": DS,
                "query": {"query": query, "refId": f"{name}-values"},
                "definition": query,
                "refresh": 2,
                "includeAll": True,
                "allValue": ".*",
                "multi": multi,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "sort": 1,
            }
        )

    def json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["horus", "gpu"],
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "editable": True,
            "graphTooltip": 1,
            "refresh": "10s",
            "time": {"from": "now-30m", "to": "now"},
            "timezone": "browser",
            "templating": {"list": self.variables},
            "annotations": {"list": []},
            "links": [
                {"type": "dashboards", "tags": ["horus"], "asDropdown": True, "title": "Horus"}
            ],
            "panels": self.panels,
        }


def datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
    }


def cluster() -> Board:
    b = Board(
        "horus-cluster",
        "Horus / Cluster",
        "GPU capacity in use, utilisation, DLJobs by phase, the queue and why jobs wait, and "
        "the scheduler's decision rate and latency.",
    )
    gpus_total = f"count({GPU_MEM_TOTAL})"
    gpus_used = f"count(count by (node, gpu) ({POD_CORE} > 0))"
    b.add("stat", "GPUs", [(gpus_total, "GPUs")], w=4, h=5, instant=True)
    b.add("stat", "GPUs in use", [(f"{gpus_used} or vector(0)", "in use")], w=4, h=5, instant=True)
    b.add(
        "stat",
        "GPUs free",
        [(f"{gpus_total} - ({gpus_used} or vector(0))", "free")],
        w=4,
        h=5,
        instant=True,
    )
    b.add(
        "stat",
        "Mean GPU utilisation",
        [(f"avg({GPU_UTIL})", "mean")],
        w=4,
        h=5,
        unit="percentunit",
        instant=True,
    )
    b.add(
        "stat",
        "GPU memory in use",
        [(f"sum({GPU_MEM}) / sum({GPU_MEM_TOTAL})", "memory")],
        w=4,
        h=5,
        unit="percentunit",
        instant=True,
    )
    b.add("stat", "Queue length", [(f"sum({QUEUE})", "queued")], w=4, h=5, instant=True)
    b.add(
        "timeseries",
        "GPU utilisation (mean, max) and memory in use",
        [
            (f"avg({GPU_UTIL})", "mean utilisation"),
            (f"max({GPU_UTIL})", "max utilisation"),
            (f"sum({GPU_MEM}) / sum({GPU_MEM_TOTAL})", "memory in use"),
        ],
        unit="percentunit",
    )
    b.add("timeseries", "DLJobs by phase", [(f"sum by (phase) ({PHASES})", "{{phase}}")])
    b.add(
        "bargauge",
        "Top reasons jobs are pending",
        [(f"topk(5, sum by (reason) ({QUEUE}))", "{{reason}}")],
        instant=True,
        description="Queued jobs by the scheduler's reason (horus_queue_length by reason).",
        options={"orientation": "horizontal", "displayMode": "basic"},
    )
    b.add(
        "timeseries",
        "Scheduling decisions (by outcome) and job failures per second",
        [
            (f"sum by (outcome) (rate({DECISIONS}[$__rate_interval]))", "{{outcome}}"),
            (f"sum by (reason) (rate({FAILURES}[$__rate_interval]))", "failed: {{reason}}"),
        ],
        unit="ops",
    )
    b.add(
        "timeseries",
        "Decision latency",
        [
            (
                f"histogram_quantile({q}, sum by (le) (rate({LATENCY}_bucket[$__rate_interval])))",
                f"p{round(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
        unit="s",
    )
    b.add(
        "timeseries",
        "Summed predicted utilisation per GPU (top 10)",
        [(f"topk(10, {GPU_PRED})", "{{node}}/{{gpu}}")],
        unit="percentunit",
    )
    return b


def node_gpu() -> Board:
    b = Board(
        "horus-node-gpu",
        "Horus / Node & GPU",
        "Per-GPU utilisation and memory on the selected nodes, and the pods sharing each GPU "
        "with their core and memory shares.",
    )
    b.query_variable("node", "Node", f"label_values({GPU_UTIL}, node)")
    b.add(
        "timeseries",
        "GPU utilisation",
        [(f"{GPU_UTIL}{{{NODE}}}", "{{node}}/{{gpu}}")],
        unit="percentunit",
    )
    b.add(
        "timeseries",
        "GPU memory used / total",
        [(f"{GPU_MEM}{{{NODE}}} / {GPU_MEM_TOTAL}{{{NODE}}}", "{{node}}/{{gpu}}")],
        unit="percentunit",
    )
    b.add(
        "timeseries",
        "Predicted (summed over its pods) vs observed utilisation per GPU",
        [
            (f"{GPU_PRED}{{{NODE}}}", "predicted {{node}}/{{gpu}}"),
            (f"{GPU_UTIL}{{{NODE}}}", "observed {{node}}/{{gpu}}"),
        ],
        unit="percentunit",
    )
    b.add(
        "timeseries",
        "GPU memory used",
        [(f"{GPU_MEM}{{{NODE}}}", "{{node}}/{{gpu}}")],
        unit="bytes",
    )
    b.add(
        "table",
        "Pods on each GPU: core share",
        [(f"{POD_CORE}{{{NODE}}}", "")],
        w=12,
        h=10,
        unit="percentunit",
        instant=True,
    )
    b.add(
        "table",
        "Pods on each GPU: memory limit",
        [(f"{POD_MEM_LIMIT}{{{NODE}}}", "")],
        w=12,
        h=10,
        unit="bytes",
        instant=True,
    )
    b.add(
        "stat",
        "GPU backend up (per node)",
        [(f"{BACKEND_UP}{{{NODE}}}", "{{node}} {{backend}}")],
        w=12,
        h=5,
        instant=True,
    )
    b.add(
        "timeseries",
        "Agent sampling cycle duration",
        [(CYCLE, "{{instance}}")],
        w=12,
        h=5,
        unit="s",
    )
    return b


def jobs() -> Board:
    b = Board(
        "horus-jobs",
        "Horus / Jobs",
        "Predicted vs observed GPU utilisation per pod, the prediction error distribution and "
        "the slowdown pods see from sharing.",
    )
    b.query_variable("namespace", "Namespace", f"label_values({POD_PRED}, namespace)")
    pred = f"sum by (namespace, pod) ({POD_PRED}{{{NS}}})"
    obs = f"sum by (namespace, pod) ({POD_OBS}{{{NS}}})"
    b.add(
        "timeseries",
        "Predicted vs observed utilisation per pod",
        [(pred, "predicted {{namespace}}/{{pod}}"), (obs, "observed {{namespace}}/{{pod}}")],
        w=24,
        unit="percentunit",
    )
    b.add(
        "histogram",
        "Prediction error (observed − predicted) across pods",
        [(f"{obs} - {pred}", "{{namespace}}/{{pod}}")],
        unit="percentunit",
        instant=True,
        description="Positive: the pod uses more of its GPU than predicted.",
    )
    b.add(
        "table",
        "Slowdown per pod (predicted solo utilisation ÷ observed)",
        [(f"sort_desc({pred} / {obs})", "")],
        instant=True,
        description=(
            "Above 1: the pod gets less of the GPU than it would alone — the interference "
            "Horus predicted (or missed)."
        ),
    )
    b.add(
        "timeseries",
        "Mean absolute prediction error",
        [(f"avg(abs({obs} - {pred}))", "MAE")],
        w=24,
        unit="percentunit",
    )
    return b


def enforcement() -> Board:
    b = Board(
        "horus-enforcement",
        "Horus / Enforcement",
        "Watchdog evictions and the pods closest to their GPU memory limit.",
    )
    b.query_variable("node", "Node", f"label_values({POD_MEM}, node)")
    b.add(
        "stat",
        "Evictions (selected range)",
        [(f"sum(increase({EVICTIONS}{{{NODE}}}[$__range])) or vector(0)", "evictions")],
        w=8,
        h=5,
        instant=True,
    )
    b.add(
        "timeseries",
        "Evictions per node",
        [(f"sum by (node) (increase({EVICTIONS}{{{NODE}}}[$__rate_interval]))", "{{node}}")],
        w=16,
        h=5,
    )
    b.add(
        "table",
        "Pods nearest their memory limit (used ÷ limit, top 20)",
        [
            (
                f"topk(20, {POD_MEM}{{{NODE}}} / on (namespace, pod, node, gpu) "
                f"{POD_MEM_LIMIT}{{{NODE}}})",
                "",
            )
        ],
        w=24,
        h=10,
        unit="percentunit",
        instant=True,
        description="Above 1 for longer than the grace period: the watchdog reports or evicts.",
    )
    b.add(
        "timeseries",
        "Pod GPU memory used vs limit",
        [
            (f"{POD_MEM}{{{NODE}}}", "used {{namespace}}/{{pod}}"),
            (f"{POD_MEM_LIMIT}{{{NODE}}}", "limit {{namespace}}/{{pod}}"),
        ],
        w=24,
        unit="bytes",
    )
    return b


BOARDS = {"cluster": cluster, "node-gpu": node_gpu, "jobs": jobs, "enforcement": enforcement}


def render() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {
        f"horus-{name}.json": json.dumps(build().json(), indent=2, ensure_ascii=False) + "\n"
        for name, build in BOARDS.items()
    }


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
