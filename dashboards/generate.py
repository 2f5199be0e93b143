"""Writes the Grafana dashboards in this folder (``python dashboards/generate.py``).

Why generated: four dashboards share one datasource variable, the same label filters and the
same panel boilerplate; writing the JSON by hand invites a typo'd metric name that only shows
up as an empty panel in production. The panels are built with Grafana's own typed builders
(``grafana-foundation-sdk``, Apache-2.0, a ``dev`` extra) rather than dicts, so a misspelt
option is an AttributeError here, not a silently ignored key in Grafana. Every PromQL
expression names metrics through ``horus.common.constants`` (the names the components export);
``tests/unit/packaging`` checks the JSON files equal this script's output and name no metric
outside constants.py, and ``tests/e2e/test_demo.py`` evaluates every query against the demo's
real Prometheus. The JSON files are committed so Grafana users and the chart
(``tools/sync-chart.sh`` copies them to ``charts/horus/dashboards``) need no Python.

Conventions, after NVIDIA's dcgm-exporter dashboard: every panel says what it shows in its
description; every board filters by Prometheus job, node and GPU (where its metrics carry
them); ratio panels have a 0..1 range and thresholds. Counts and per-GPU series are
de-duplicated with ``max by (node, gpu)``, so one GPU scraped twice (a ServiceMonitor beside
annotation discovery, two Prometheus jobs) still counts once; operator gauges are read from
the replica that holds the Lease only (``and on (job, instance) (horus_operator_leader == 1)``),
since a replica that lost it may still export its last queue figures.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, histogram, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as gc
from grafana_foundation_sdk.models import dashboard as gm
from grafana_foundation_sdk.models import prometheus as gp

from horus.common import constants as c

HERE = Path(__file__).resolve().parent
DS = gm.DataSourceRef(type_val="prometheus", uid="${datasource}")

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
LEADER = c.METRIC_OPERATOR_LEADER
BACKEND_UP = c.METRIC_AGENT_BACKEND_UP
CYCLE = c.METRIC_AGENT_CYCLE_DURATION
PAIR_SPEED = c.METRIC_POD_PAIR_SPEED

# Label filters of the template variables.
JOB = 'job=~"$job"'
NODE = 'node=~"$node"'
GPU = 'gpu=~"$gpu"'
NS = 'namespace=~"$namespace"'
PER_GPU = f"{JOB}, {NODE}, {GPU}"
PER_POD = f"{JOB}, {NS}, {NODE}, {GPU}"


def leader(expr: str) -> str:
    """Only the series of the operator replica that holds the Lease."""
    return f"({expr} and on (job, instance) ({LEADER}{{{JOB}}} == 1))"


def per_gpu(expr: str) -> str:
    """One series per GPU, however often it was scraped."""
    return f"max by (node, gpu) ({expr})"


# --- panels -----------------------------------------------------------------------------------

Query = tuple[str, str]  # (PromQL, legend)

GREEN, ORANGE, RED = "green", "orange", "red"


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> gd.ThresholdsConfig:
    return (
        gd.ThresholdsConfig()
        .mode(gm.ThresholdsMode.ABSOLUTE)
        .steps([gm.Threshold(value=v, color=col) for v, col in steps])
    )


#: Busy is good for utilisation: red when a GPU idles, green when it is used.
UTIL_STEPS = ((None, RED), (0.3, ORANGE), (0.6, GREEN))
#: A measured pair speed: 1 is as fast as alone, below about half the pair costs more than it
#: saves.
SPEED_STEPS = ((None, RED), (0.5, ORANGE), (0.8, GREEN))
#: Filling up is bad for memory and limits.
FILL_STEPS = ((None, GREEN), (0.8, ORANGE), (0.95, RED))
#: Summed predicted utilisation of a GPU's jobs: above 1 they are predicted to slow each other
#: down, above 2 (the default utilCap, 200 %) the scheduler would not have packed them.
PRED_STEPS = ((None, GREEN), (1.0, ORANGE), (2.0, RED))


class Board:
    """One dashboard: its variables and panels, laid out left to right on the 24-column grid."""

    def __init__(self, uid: str, title: str, description: str) -> None:
        self.uid = uid
        self.builder = (
            gd.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["horus", "gpu"])
            .editable()
            .tooltip(gm.DashboardCursorSync.CROSSHAIR)
            .refresh("10s")
            .time("now-30m", "now")
            .timezone("browser")
            .link(
                gd.DashboardLink("Horus")
                .type(gm.DashboardLinkType.DASHBOARDS)
                .tags(["horus"])
                .as_dropdown(True)
                .include_vars(True)
                .keep_time(True)
            )
            .with_variable(
                gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
            )
        )
        self.next_id = 1

    def variable(self, name: str, label: str, query: str, description: str) -> Board:
        self.builder.with_variable(
            gd.QueryVariable(name)
            .label(label)
            .description(description)
            .datasource(DS)
            .query(query)
            .refresh(gm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(gm.VariableSort.NATURAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(gm.VariableOption(selected=True, text=["All"], value=["$__all"]))
        )
        return self

    def gpu_variables(self, metric: str = GPU_MEM_TOTAL, *, gpu: bool = True) -> Board:
        """job → node → GPU, each narrowing the next one's choices."""
        self.variable(
            "job",
            "Job",
            f"label_values({metric}, job)",
            "Prometheus job that scraped Horus (several installations or scrape paths)",
        )
        self.variable("node", "Node", f"label_values({metric}{{{JOB}}}, node)", "Kubernetes node")
        if gpu:
            self.variable(
                "gpu",
                "GPU",
                f"label_values({metric}{{{JOB}, {NODE}}}, gpu)",
                "GPU index on its node (nvidia-smi's index)",
            )
        return self

    def add(
        self,
        panel: timeseries.Panel | stat.Panel | table.Panel | bargauge.Panel | histogram.Panel,
        title: str,
        description: str,
        targets: Sequence[Query],
        *,
        w: int = 12,
        h: int = 8,
        unit: str = "",
        ratio: Sequence[tuple[float | None, str]] | None = None,
        unbounded: bool = False,
        instant: bool = False,
    ) -> None:
        """A panel with its queries. ``ratio``: a non-negative ratio with these thresholds,
        shown on a 0..1 scale unless ``unbounded`` (sums that may exceed one GPU)."""
        panel.id(self.next_id).title(title).description(description).datasource(DS)
        panel.span(w).height(h)
        if unit:
            panel.unit(unit)
        if ratio is not None:
            panel.min(0).thresholds(_thresholds(ratio))
            if not unbounded:
                panel.max(1)
        for i, (expr, legend) in enumerate(targets):
            q = prometheus.Dataquery().ref_id(chr(ord("A") + i)).expr(expr).datasource(DS)
            q.legend_format(legend)
            if instant:
                q.instant().format(
                    gp.PromQueryFormat.TABLE
                    if isinstance(panel, table.Panel)
                    else gp.PromQueryFormat.TIME_SERIES
                )
            else:
                q.range()
            panel.with_target(q)
        self.builder.with_panel(panel)
        self.next_id += 1

    def json(self) -> str:
        return json.dumps(self.builder.build(), cls=JSONEncoder, indent=2, ensure_ascii=False)


# --- the boards -------------------------------------------------------------------------------


def cluster() -> Board:
    b = Board(
        "horus-cluster",
        "Horus / Cluster",
        "GPU capacity in use, utilisation, DLJobs by phase, the queue and why jobs wait, and "
        "the scheduler's decision rate and latency.",
    ).gpu_variables()
    gpus_total = f"count({per_gpu(f'{GPU_MEM_TOTAL}{{{PER_GPU}}}')})"
    gpus_used = f"count({per_gpu(f'{POD_CORE}{{{PER_GPU}}} > 0')})"
    util = per_gpu(f"{GPU_UTIL}{{{PER_GPU}}}")
    mem = (
        f"sum({per_gpu(f'{GPU_MEM}{{{PER_GPU}}}')}) / "
        f"sum({per_gpu(f'{GPU_MEM_TOTAL}{{{PER_GPU}}}')})"
    )
    queue = leader(f"{QUEUE}{{{JOB}}}")
    b.add(
        stat.Panel(),
        "GPUs",
        "GPUs the node agents report (each GPU once, however often it is scraped).",
        [(gpus_total, "GPUs")],
        w=4,
        h=5,
        instant=True,
    )
    b.add(
        stat.Panel(),
        "GPUs in use",
        "GPUs with at least one pod holding a core share on them.",
        [(f"{gpus_used} or vector(0)", "in use")],
        w=4,
        h=5,
        instant=True,
    )
    b.add(
        stat.Panel(),
        "GPUs free",
        "GPUs with no pod on them: what a job needing a whole GPU can still get.",
        [(f"{gpus_total} - ({gpus_used} or vector(0))", "free")],
        w=4,
        h=5,
        instant=True,
    )
    b.add(
        stat.Panel(),
        "Mean GPU utilisation",
        "Mean over the selected GPUs of the fraction of time a kernel ran (NVML utilisation). "
        "Red below 30 %: capacity is idle.",
        [(f"avg({util})", "mean")],
        w=4,
        h=5,
        unit="percentunit",
        ratio=UTIL_STEPS,
        instant=True,
    )
    b.add(
        stat.Panel(),
        "GPU memory in use",
        "GPU memory used over GPU memory installed, summed over the selected GPUs.",
        [(mem, "memory")],
        w=4,
        h=5,
        unit="percentunit",
        ratio=FILL_STEPS,
        instant=True,
    )
    b.add(
        stat.Panel(),
        "Queue length",
        "DLJobs waiting for GPUs, as the operator replica holding the Lease reports them.",
        [(f"sum({queue}) or vector(0)", "queued")],
        w=4,
        h=5,
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "GPU utilisation (mean, max) and memory in use",
        "Mean and busiest GPU's utilisation, and the share of GPU memory in use, over time.",
        [
            (f"avg({util})", "mean utilisation"),
            (f"max({util})", "max utilisation"),
            (mem, "memory in use"),
        ],
        unit="percentunit",
        ratio=FILL_STEPS,
    )
    b.add(
        timeseries.Panel(),
        "DLJobs by phase",
        "DLJobs in each phase (Pending, Queued, Scheduled, Running, Succeeded, Failed), as "
        "the leading operator replica counts them.",
        [(f"sum by (phase) ({leader(f'{PHASES}{{{JOB}}}')})", "{{phase}}")],
    )
    b.add(
        bargauge.Panel()
        .orientation(gc.VizOrientation.HORIZONTAL)
        .display_mode(gc.BarGaugeDisplayMode.BASIC),
        "Top reasons jobs are pending",
        "Queued DLJobs by the scheduler's reason for not placing them (condition reason, as "
        "in kubectl get dlj -o wide).",
        [(f"topk(5, sum by (reason) ({queue}))", "{{reason}}")],
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "Scheduling decisions (by outcome) and job failures per second",
        "Placement decisions per second by outcome (placed, or the refusal reason), and "
        "DLJobs failing per second by reason.",
        [
            (f"sum by (outcome) (rate({DECISIONS}{{{JOB}}}[$__rate_interval]))", "{{outcome}}"),
            (
                f"sum by (reason) (rate({FAILURES}{{{JOB}}}[$__rate_interval]))",
                "failed: {{reason}}",
            ),
        ],
        unit="ops",
    )
    b.add(
        timeseries.Panel(),
        "Decision latency",
        "How long one scheduling pass over the whole queue takes (p50, p99).",
        [
            (
                f"histogram_quantile({q}, sum by (le) "
                f"(rate({LATENCY}_bucket{{{JOB}}}[$__rate_interval])))",
                f"p{round(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
        unit="s",
    )
    b.add(
        timeseries.Panel(),
        "Summed predicted utilisation per GPU (top 10)",
        "What the scheduler believed when it packed jobs together: the sum of the predicted "
        "utilisation of the jobs on each GPU (1.0 = one GPU's compute). Above 1, the jobs "
        "are predicted to slow each other down.",
        [(f"topk(10, {per_gpu(leader(f'{GPU_PRED}{{{PER_GPU}}}'))})", "{{node}}/{{gpu}}")],
        unit="percentunit",
        ratio=PRED_STEPS,
        unbounded=True,
    )
    return b


def node_gpu() -> Board:
    b = Board(
        "horus-node-gpu",
        "Horus / Node & GPU",
        "Per-GPU utilisation and memory on the selected nodes, and the pods sharing each GPU "
        "with their core and memory shares.",
    ).gpu_variables()
    b.add(
        timeseries.Panel(),
        "GPU utilisation",
        "Fraction of time a kernel ran on each GPU (NVML utilisation).",
        [(per_gpu(f"{GPU_UTIL}{{{PER_GPU}}}"), "{{node}}/{{gpu}}")],
        unit="percentunit",
        ratio=UTIL_STEPS,
    )
    b.add(
        timeseries.Panel(),
        "GPU memory used / total",
        "Each GPU's memory in use over its installed memory; near 1 the next job's "
        "allocation fails.",
        [
            (
                f"{per_gpu(f'{GPU_MEM}{{{PER_GPU}}}')} / "
                f"{per_gpu(f'{GPU_MEM_TOTAL}{{{PER_GPU}}}')}",
                "{{node}}/{{gpu}}",
            )
        ],
        unit="percentunit",
        ratio=FILL_STEPS,
    )
    b.add(
        timeseries.Panel(),
        "Predicted (summed over its pods) vs observed utilisation per GPU",
        "The operator's summed prediction for the jobs on each GPU next to what the agent "
        "measures there; a gap means the predictor is off for these jobs.",
        [
            (per_gpu(leader(f"{GPU_PRED}{{{PER_GPU}}}")), "predicted {{node}}/{{gpu}}"),
            (per_gpu(f"{GPU_UTIL}{{{PER_GPU}}}"), "observed {{node}}/{{gpu}}"),
        ],
        unit="percentunit",
        ratio=PRED_STEPS,
        unbounded=True,
    )
    b.add(
        timeseries.Panel(),
        "GPU memory used",
        "GPU memory in use on each GPU, in bytes.",
        [(per_gpu(f"{GPU_MEM}{{{PER_GPU}}}"), "{{node}}/{{gpu}}")],
        unit="bytes",
    )
    b.add(
        table.Panel(),
        "Pods on each GPU: core share",
        "Each pod's assigned share of its GPU's compute (corePercent / 100; the MPS active "
        "thread percentage under enforcement=mps).",
        [(f"max by (namespace, pod, node, gpu) ({POD_CORE}{{{PER_GPU}}})", "")],
        h=10,
        unit="percentunit",
        ratio=FILL_STEPS,
        instant=True,
    )
    b.add(
        table.Panel(),
        "Pods on each GPU: memory limit",
        "Each pod's assigned GPU memory share, the limit the watchdog (and MPS) enforce.",
        [(f"max by (namespace, pod, node, gpu) ({POD_MEM_LIMIT}{{{PER_GPU}}})", "")],
        h=10,
        unit="bytes",
        instant=True,
    )
    b.add(
        stat.Panel(),
        "GPU backend up (per node)",
        "1 when the node agent can read its GPUs (NVML, or simulated on kwok nodes); 0 means "
        "the node's GPUs are unmonitored (alert HorusAgentGpuBackendDown).",
        [(f"max by (node, backend) ({BACKEND_UP}{{{JOB}, {NODE}}})", "{{node}} {{backend}}")],
        h=5,
        ratio=((None, RED), (1, GREEN)),
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "Agent sampling cycle duration",
        "How long each node agent's last sampling cycle took (NVML reads, pod mapping, "
        "watchdog); it should stay far below the sampling interval.",
        [(f"{CYCLE}{{{JOB}}}", "{{instance}}")],
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
    ).gpu_variables(POD_PRED)
    b.variable(
        "namespace",
        "Namespace",
        f"label_values({POD_PRED}{{{JOB}, {NODE}}}, namespace)",
        "Namespace of the pods",
    )
    pred = f"max by (namespace, pod) ({POD_PRED}{{{PER_POD}}})"
    obs = f"max by (namespace, pod) ({POD_OBS}{{{PER_POD}}})"
    b.add(
        timeseries.Panel(),
        "Predicted vs observed utilisation per pod",
        "Each pod's predicted solo utilisation (horus.io/predicted) next to what it is "
        "measured to use on its shared GPU (0..1 of the whole GPU).",
        [(pred, "predicted {{namespace}}/{{pod}}"), (obs, "observed {{namespace}}/{{pod}}")],
        w=24,
        unit="percentunit",
        ratio=UTIL_STEPS,
    )
    b.add(
        histogram.Panel(),
        "Prediction error (observed − predicted) across pods",
        "Distribution over pods of observed minus predicted utilisation. Positive: the pod "
        "uses more of its GPU than predicted.",
        [(f"{obs} - {pred}", "{{namespace}}/{{pod}}")],
        unit="percentunit",
        instant=True,
    )
    b.add(
        table.Panel(),
        "Slowdown per pod (predicted solo utilisation ÷ observed)",
        "Above 1: the pod gets less of the GPU than it would alone — the interference Horus "
        "predicted (or missed).",
        [(f"sort_desc({pred} / {obs})", "")],
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "Mean absolute prediction error",
        "Mean over the selected pods of |observed − predicted| utilisation: the predictor's "
        "error on this cluster's jobs (retrain with the agents' rows when it grows).",
        [(f"avg(abs({obs} - {pred}))", "MAE")],
        w=24,
        unit="percentunit",
        ratio=((None, GREEN), (0.1, ORANGE), (0.2, RED)),
    )
    b.add(
        table.Panel(),
        "Measured pair speed by workload",
        "The lowest speed the node agents measured over the time range for each workload "
        "(DLJob, Kueue Workload, gang, or a pod's controller such as ReplicaSet/web or "
        "Job/train) beside each neighbour job kind: 1 = as fast as alone. From the job's "
        "progress where it reports it, else its GPU utilisation. Pods of any owner.",
        [
            (
                f"sort(min by (namespace, workload, neighbour) "
                f"(min_over_time({PAIR_SPEED}{{{PER_POD}}}[$__range])))",
                "",
            )
        ],
        w=24,
        h=10,
        ratio=SPEED_STEPS,
        instant=True,
    )
    return b


def enforcement() -> Board:
    b = Board(
        "horus-enforcement",
        "Horus / Enforcement",
        "Watchdog evictions and the pods closest to their GPU memory limit.",
    ).gpu_variables(POD_MEM)
    sel = PER_GPU
    b.add(
        stat.Panel(),
        "Evictions (selected range)",
        "Pods the memory watchdog evicted for staying above their GPU memory share longer "
        "than the grace period, over the dashboard's time range.",
        [(f"sum(increase({EVICTIONS}{{{sel}}}[$__range])) or vector(0)", "evictions")],
        w=8,
        h=5,
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "Evictions per node",
        "Watchdog evictions on each node per interval.",
        [(f"sum by (node) (increase({EVICTIONS}{{{sel}}}[$__rate_interval]))", "{{node}}")],
        w=16,
        h=5,
    )
    b.add(
        table.Panel(),
        "Pods nearest their memory limit (used ÷ limit, top 20)",
        "GPU memory each pod uses over its share. Above 1 for longer than the grace period: "
        "the watchdog reports or evicts.",
        [
            (
                f"topk(20, max by (namespace, pod, node, gpu) ({POD_MEM}{{{sel}}}) / on "
                f"(namespace, pod, node, gpu) max by (namespace, pod, node, gpu) "
                f"({POD_MEM_LIMIT}{{{sel}}}))",
                "",
            )
        ],
        w=24,
        h=10,
        unit="percentunit",
        ratio=FILL_STEPS,
        unbounded=True,
        instant=True,
    )
    b.add(
        timeseries.Panel(),
        "Pod GPU memory used vs limit",
        "Each pod's GPU memory in use next to its limit, in bytes.",
        [
            (f"max by (namespace, pod) ({POD_MEM}{{{sel}}})", "used {{namespace}}/{{pod}}"),
            (
                f"max by (namespace, pod) ({POD_MEM_LIMIT}{{{sel}}})",
                "limit {{namespace}}/{{pod}}",
            ),
        ],
        w=24,
        unit="bytes",
    )
    return b


BOARDS = {"cluster": cluster, "node-gpu": node_gpu, "jobs": jobs, "enforcement": enforcement}


def render() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {f"horus-{name}.json": build().json() + "\n" for name, build in BOARDS.items()}


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
