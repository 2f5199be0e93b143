"""Scheduler benchmarks: policies on three traces, placement throughput, per-node evaluation,
simulator speed.

    .venv/bin/python benchmarks/scheduler.py            # everything (~30 min on 2 shared cores)
    .venv/bin/python benchmarks/scheduler.py --only placement,evaluate,simspeed,policies --quick

Writes ``benchmarks/results/scheduler-*.json`` (and PNG plots) and prints every target as a
ratio measured in this run: ``policies`` runs ``horus`` (the whole system: prediction, the
agent's measurements, migration, preemption) beside its ablations, ``oracle`` and the
baselines, with moves per job against the cap; ``priority`` is issue 17's variant with 10 %
high-priority jobs (their p95 wait and everyone's mean JCT, with vs without preemption). The trained predictor is used when its artifact exists; otherwise
the profiled stand-in, and the JSON says which (the issue counts only the trained one).
Arrival times are compressed until the load inside each trace's arrival window reaches
``--load`` (``horus.sim.traces.windowed_load``; as far as the trace allows); the factor, the
load reached and the makespan lower bound (latest arrival + duration) are printed and stored. Ground truth is never tuned to a policy.

Data: the repository's ``data/`` (or ``--data-dir`` / ``$HORUS_DATA_DIR``): Gavel for philly,
Lucid (non-commercial, ``data/noncommercial/lucid``) for the alibaba and synthetic traces,
placement and simulator speed. The alibaba trace is not redistributed: without
``horus sim fetch alibaba`` its column is left out, with that instruction printed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from horus.predictor.interface import Predictor
from horus.scheduler import ClusterState, JobRequest, Placement, Scheduler
from horus.sim.config import parse_run
from horus.sim.datasets import ALIBABA, ALIBABA_FILE, missing
from horus.sim.engine import SimConfig
from horus.sim.groundtruth import GroundTruth, load_truth
from horus.sim.observation import ObservationModel
from horus.sim.report import plot, ratios, table, to_json, write_json
from horus.sim.results import SimResult
from horus.sim.run import (
    TraceSpec,
    load_trace,
    make_predictor,
    run_policies,
    trained_predictor_available,
)
from horus.sim.traces import (
    SyntheticSpec,
    TraceJob,
    offered_load,
    scale_arrivals,
    scale_for_load,
    windowed_load,
    with_priorities,
)

RESULTS = Path(__file__).resolve().parent / "results"
#: ``horus`` is the whole system (prediction + the agent's measurements from the jobs'
#: progress + migration + preemption); ``horus-predict-only`` is its ablation, and the same
#: system reading pairs from the utilisation ratio (split and overlap models) or exactly
#: stands beside it (issue 26); ``horus sim compare`` runs the older list.
POLICIES = [
    "binpack",
    "horus-predict-only",
    "horus",
    *(f"horus+observed-{s}+migrate+preempt" for s in ("split", "overlap", "exact")),
    "oracle",
]
#: The high-priority variant: the whole system against itself without preemption.
PRIORITY_RUNS = ["horus+observed+migrate", "horus"]


def _specs(args: argparse.Namespace, seed: int = 0) -> list[tuple[str, TraceSpec, int]]:
    """(name, trace, GPUs) of each trace asked for (``--traces``).

    Alibaba's jobs include months-long ones (the longest runs 145 days): on 1,024 GPUs no
    compression of arrivals keeps exclusive's GPUs more than ~2 % busy, so no policy can
    differ. Its cluster is sized instead (``--alibaba-gpus``, default 32: its GPU-seconds
    ÷ 32 are half its longest pod, and exclusive measured 0.535 busy there), and the run
    prints exclusive's busy fraction against the ≥ 0.5 the issue asks for."""
    philly_truth = (
        "gavel" if trained_predictor_available() and args.predictor != "profiled" else "lucid"
    )
    philly = TraceSpec("philly", philly_truth, limit=args.jobs)
    specs = {
        # philly's kinds are Gavel's own job types: the trace is the same for every seed
        "philly": (philly, args.gpus),
        "philly-512gpus": (philly, args.gpus // 2),
        "alibaba": (
            TraceSpec("alibaba", "lucid", limit=args.jobs, seed=1 + seed),
            args.alibaba_gpus,
        ),
        "synthetic": (
            TraceSpec(
                "synthetic",
                "lucid",
                synthetic=SyntheticSpec(
                    jobs=args.jobs,
                    arrival_rate=1.0,
                    duration_median=3600,
                    duration_sigma=0.8,
                    seed=2 + seed,
                ),
            ),
            args.gpus,
        ),
    }
    out = []
    for name in args.traces.split(","):
        if name not in specs:
            raise SystemExit(f"--traces: unknown trace {name!r}; use {', '.join(specs)}")
        out.append((name, *specs[name]))
    return out


def _runs(args: argparse.Namespace, default: list[str]) -> list[str]:
    names = args.policies.split(",") if args.policies else default
    for n in names:
        parse_run(n)  # a ConfigError names the runs that exist
    return names


#: Runs whose result does not depend on the measurement seed (no noisy signal): on a trace
#: that is the same for every seed (philly) they run once and count for every seed.
def _seed_free(run: str) -> bool:
    return parse_run(run).observe in (None, "exact")


def _summary(per_seed: list[dict[str, object]], runs: list[str]) -> dict[str, object]:
    """Per run, over seeds: mean and (min, max) of mean JCT and makespan × oracle, mean JCT ×
    binpack and × predict-only, moves per job."""
    out: dict[str, object] = {}
    for run in runs:
        rows: dict[str, list[float]] = {}
        for doc in per_seed:
            pol = doc["policies"]
            assert isinstance(pol, dict)
            me, orc = pol[run], pol.get("oracle")
            vals = {"moves_per_job": me["migrations_per_job"], "jct_mean_s": me["jct_mean_s"]}
            if orc:
                vals["jct_mean_over_oracle"] = me["jct_mean_s"] / orc["jct_mean_s"]
                vals["makespan_over_oracle"] = me["makespan_s"] / orc["makespan_s"]
            for other, key in (("binpack", "binpack"), ("horus-predict-only", "predict_only")):
                if other in pol:
                    vals[f"jct_mean_over_{key}"] = me["jct_mean_s"] / pol[other]["jct_mean_s"]
            for k, v in vals.items():
                rows.setdefault(k, []).append(float(v))
        out[run] = {
            k: {"mean": statistics.fmean(v), "min": min(v), "max": max(v), "values": v}
            for k, v in rows.items()
        }
    return out


def _targets(name: str, summary: dict[str, object]) -> list[str]:
    """The issue-26 targets for the whole system (``horus``), as printed lines."""
    h = summary.get("horus")
    if not isinstance(h, dict):
        return []
    lines = []
    limit = 1.08 if name.startswith("philly") else 1.04 if name == "synthetic" else None
    j = h.get("jct_mean_over_oracle")
    if j:
        goal = f" (target ≤ {limit}: {'met' if j['mean'] <= limit else 'MISSED'})" if limit else ""
        lines.append(
            f"  horus mean JCT × oracle: mean {j['mean']:.3f} over seeds "
            f"(spread {j['min']:.3f}–{j['max']:.3f}){goal}"
        )
    p = h.get("jct_mean_over_predict_only")
    if p:
        worse = sum(v > 1.0 for v in p["values"])
        lines.append(
            f"  horus mean JCT × horus-predict-only: mean {p['mean']:.3f} (spread "
            f"{p['min']:.3f}–{p['max']:.3f}); worse than prediction alone in {worse} of "
            f"{len(p['values'])} seeds"
        )
    b = h.get("jct_mean_over_binpack")
    if b:
        lines.append(
            f"  horus mean JCT × binpack: mean {b['mean']:.3f} ({b['min']:.3f}–{b['max']:.3f})"
        )
    m = h["moves_per_job"]
    lines.append(f"  horus moves per job: max over seeds {m['max']:.4f} (target ≤ 0.5)")
    return lines


def _merge(args: argparse.Namespace, runs: list[str]) -> dict[str, object]:
    """``--merge``: the summary over the per-seed files ``--seeds`` seeds wrote, possibly from
    separate processes; on philly (the same trace for every seed) a seed's missing seed-free
    runs are seed 0's."""
    out: dict[str, object] = {}
    for name, _, gpus in _specs(args):
        docs = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            path = RESULTS / f"scheduler-policies-{name}{args.suffix}-seed{seed}.json"
            docs.append(json.loads(path.read_text()))
        first = docs[0]["policies"]
        for doc in docs[1:]:
            pol = doc["policies"]
            for run in runs:
                if run not in pol and name.startswith("philly") and _seed_free(run):
                    pol[run] = first[run]
                    doc.setdefault("reused_from_seed_0", []).append(run)
        summary = _summary(docs, runs)
        print(f"\n== {name}: over {len(docs)} seeds (merged)")
        for line in _targets(name, summary):
            print(line)
        doc = {
            "trace": name,
            "gpus": gpus,
            "target_load": args.load,
            "seeds": len(docs),
            "summary": summary,
            "per_seed": docs,
            "command": " ".join(sys.argv),
        }
        write_json(RESULTS / f"scheduler-policies-{name}{args.suffix}.json", doc)
        out[name] = doc
    return out


def policies(args: argparse.Namespace) -> dict[str, object]:
    """Every run on every trace for ``--seeds`` seeds (seed s: the measurement noise, and the
    synthetic and alibaba traces' own seeds + s); per-seed tables, then the summary over
    seeds with the issue's targets."""
    out: dict[str, object] = {}
    runs = _runs(args, POLICIES)
    if args.merge:
        return _merge(args, runs)
    for name, _, gpus in _specs(args):
        per_seed: list[dict[str, object]] = []
        reused: dict[str, SimResult] = {}
        t0 = time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            spec = next(s for n, s, _ in _specs(args, seed) if n == name)
            loaded = _load(name, spec, gpus, args)
            if loaded is None:
                break
            truth, predictor, trace, scale = loaded
            cfg = _config(gpus, args, seed)
            fixed = name.startswith("philly")  # the trace does not change with the seed
            todo = [r for r in runs if not (fixed and r in reused)]
            done = run_policies(trace, truth, todo, predictor, cfg, None, name)
            if fixed:
                reused.update({r.policy: r for r in done if _seed_free(r.policy)})
            by = {r.policy: r for r in done}
            results = [by.get(r) or reused[r] for r in runs]
            # No policy can finish before the latest (arrival + solo duration) of a kept job.
            start = min(r.submit for r in results[0].records)
            bound = max(r.submit + r.duration for r in results[0].records) - start
            print(
                f"-- seed {seed}"
                + (" (seed-free runs reused from seed 0)" if fixed and seed else "")
            )
            print(table(results))
            print(f"  makespan lower bound (latest arrival + solo duration): {bound:.0f} s")
            m = {r.policy: r.metrics() for r in results}
            if "exclusive" in m:
                busy = m["exclusive"]["gpu_busy_fraction"]
                print(f"  exclusive keeps the GPUs {busy:.3f} busy (issue 17: ≥ 0.5)")
            for k, v in ratios(results).items():
                print(f"  {k:<40} {v:.3f}")
            per_seed.append(
                to_json(
                    results,
                    {
                        "seed": seed,
                        "arrival_scale": scale,
                        "jobs": len(trace),
                        "offered_load": offered_load(trace, gpus),
                        "windowed_load": windowed_load(trace, gpus),
                        "makespan_lower_bound_s": bound,
                        "reused_from_seed_0": sorted(r for r in reused if seed and r in runs),
                    },
                )
            )
            # each seed on its own too, so seeds run in separate processes can be merged
            # (--merge) and a long run keeps what it finished
            write_json(
                RESULTS / f"scheduler-policies-{name}{args.suffix}-seed{seed}.json", per_seed[-1]
            )
            if seed == 0:
                plot(results, RESULTS / f"scheduler-{name}{args.suffix}")
        if not per_seed:
            continue
        summary = _summary(per_seed, runs)
        print(f"\n== {name}: over {len(per_seed)} seeds")
        for line in _targets(name, summary):
            print(line)
        doc = {
            "trace": name,
            "truth": truth.source,
            "gpu_model": truth.gpu_model,
            "gpus": gpus,
            "target_load": args.load,
            "max_moves_per_job": _config(gpus, args).migration.max_moves_per_job,
            "predictor": predictor.version,
            "pair_coverage": truth.coverage(),
            "seeds": len(per_seed),
            "summary": summary,
            "per_seed": per_seed,
            "wall_seconds": time.perf_counter() - t0,
            "command": " ".join(sys.argv),
        }
        write_json(RESULTS / f"scheduler-policies-{name}{args.suffix}.json", doc)
        out[name] = doc
    return out


def _config(gpus: int, args: argparse.Namespace, seed: int = 0) -> SimConfig:
    return SimConfig(
        gpus=gpus,
        progress=args.progress,
        drop_impossible=True,
        observation=ObservationModel(seed=seed, data_dir=args.data_dir),
    )


def _load(
    name: str, spec: TraceSpec, gpus: int, args: argparse.Namespace, high_priority: float = 0.0
) -> tuple[GroundTruth, Predictor, list[TraceJob], float] | None:
    """Truth, predictor and the trace at ``--load`` (printed), or None when its data is
    missing (said why)."""
    why = missing(ALIBABA, ALIBABA_FILE, args.data_dir) if name == "alibaba" else None
    if why:
        print(f"\n== {name}: left out: {why}", flush=True)
        return None
    truth = load_truth(spec.truth, args.data_dir)
    predictor = make_predictor(args.predictor, truth)
    trace = load_trace(spec, truth, args.data_dir)
    if high_priority:
        trace = with_priorities(trace, high_priority, seed=spec.seed)
    # Same method for every trace and policy: compress arrivals until the load inside the
    # arrival window reaches --load (or as far as the trace allows; see windowed_load).
    scale = scale_for_load(trace, gpus, args.load)
    trace = scale_arrivals(trace, scale)
    print(
        f"\n== {name}: {len(trace)} jobs, {truth.source} ground truth ({truth.gpu_model}), "
        f"{gpus} GPUs, arrivals × {scale:.4g} → windowed load "
        f"{windowed_load(trace, gpus):.2f} (offered {offered_load(trace, gpus):.2f}), "
        f"predictor {predictor.version}"
        + (f", {sum(j.priority > 0 for j in trace)} high-priority jobs" if high_priority else ""),
        flush=True,
    )
    return truth, predictor, trace, scale


def priority(args: argparse.Namespace) -> dict[str, object]:
    """Issue 17's trace variant: ``--high-priority`` (10 %) of the jobs at priority 1; the
    whole system with preemption (``horus``) against it without (``horus+observed+migrate``).
    Prints the p95 wait of the high-priority jobs and the mean JCT of all jobs, as ratios."""
    out: dict[str, object] = {}
    runs = _runs(args, PRIORITY_RUNS)
    for name, spec, gpus in _specs(args):
        loaded = _load(name, spec, gpus, args, args.high_priority)
        if loaded is None:
            continue
        truth, predictor, trace, scale = loaded
        t0 = time.perf_counter()
        results = run_policies(trace, truth, runs, predictor, _config(gpus, args), None, name)
        print(table(results))
        rows: dict[str, dict[str, float]] = {}
        for r in results:
            high = sorted(x.wait for x in r.records if x.priority > 0)
            m = r.metrics()
            rows[r.policy] = {
                "high_priority_jobs": float(len(high)),
                "high_wait_p95_s": high[min(len(high) - 1, int(0.95 * len(high)))]
                if high
                else math.nan,
                "high_wait_mean_s": statistics.fmean(high) if high else math.nan,
                "jct_mean_s": m["jct_mean_s"],
                "preemptions": m["preemptions"],
            }
            print(
                f"  {r.policy:<24} high-priority wait p95 {rows[r.policy]['high_wait_p95_s']:.0f} s"
                f" (mean {rows[r.policy]['high_wait_mean_s']:.0f} s), all jobs JCT mean "
                f"{m['jct_mean_s']:.0f} s, {m['preemptions']:.0f} preemptions"
            )
        ratio: dict[str, float | None] = {}
        if len(runs) == 2:
            base, ours = rows[runs[0]], rows[runs[1]]
            # No wait to cut without preemption: the ratio is undefined, not 0.
            waited = base["high_wait_p95_s"] > 0
            ratio = {
                "high_wait_p95_with_over_without": ours["high_wait_p95_s"] / base["high_wait_p95_s"]
                if waited
                else None,
                "jct_mean_with_over_without": ours["jct_mean_s"] / base["jct_mean_s"],
            }
            wait_ratio = ratio["high_wait_p95_with_over_without"]
            print(
                f"  high-priority p95 wait, {runs[1]} / {runs[0]}: "
                + (
                    f"{wait_ratio:.3f}"
                    if wait_ratio is not None
                    else f"undefined (0 s without preemption: {runs[0]} keeps them from waiting)"
                )
                + " (target ≤ 0.25); mean JCT of all jobs: "
                f"{ratio['jct_mean_with_over_without']:.3f} (target ≤ 1.05)"
            )
        doc = {
            "trace": name,
            "truth": truth.source,
            "gpus": gpus,
            "jobs": len(trace),
            "high_priority_fraction": args.high_priority,
            "arrival_scale": scale,
            "windowed_load": windowed_load(trace, gpus),
            "predictor": predictor.version,
            "runs": rows,
            "metrics": {r.policy: r.metrics() for r in results},
            "ratios": ratio,
            "wall_seconds": time.perf_counter() - t0,
            "command": " ".join(sys.argv),
        }
        write_json(RESULTS / f"scheduler-priority-{name}{args.suffix}.json", doc)
        out[name] = doc
    return out


def backlog(args: argparse.Namespace) -> dict[str, object]:
    """Why a run's mean JCT is what it is on a backlogged cluster (issue 26, alibaba): while
    jobs wait, how many run at once, at what summed speed, and how much of each GPU's
    budgets (3 job slots, core %, summed predicted utilisation ≤ util_cap) is in use.
    Runs ``--policies`` (default: prediction alone, exact pairs from the start, the whole
    system) on ``--traces`` (default alibaba) for seed 0."""
    from horus.sim import engine

    class Probe(engine._Run):
        """The engine's run, integrating the cluster's use over the time a queue exists."""

        acc: dict[str, float]

        def _advance_to(self, t_next: float) -> None:
            dt = t_next - self.now
            if len(self.queue) and dt > 0:
                st, a = self.st, self.acc
                a["seconds"] = a.get("seconds", 0.0) + dt
                use = {
                    "running_jobs": len(self.running),
                    "summed_speed": sum(r.rate for r in self.running.values()),
                    "gpus_with_3_jobs": float((st.njobs >= 3).sum()),
                    "core_used_pct": float(st.core_used.mean()),
                    "util_sum_pct": float(st.util_sum.mean()),
                }
                for k, v in use.items():
                    a[k] = a.get(k, 0.0) + v * dt
            super()._advance_to(t_next)

    out: dict[str, object] = {}
    runs = _runs(args, ["horus-predict-only", "oracle", "horus+observed", "horus"])
    for name, spec, gpus in _specs(args):
        loaded = _load(name, spec, gpus, args)
        if loaded is None:
            continue
        truth, predictor, trace, _ = loaded
        rows: dict[str, dict[str, float]] = {}
        for run in runs:
            sim = engine.Simulator(trace, truth, run, predictor, _config(gpus, args), None, name)
            probe = Probe(sim)
            probe.acc = {}
            res = probe.loop()
            secs = probe.acc.pop("seconds", 0.0)
            row = {k: v / secs for k, v in probe.acc.items()} if secs else {}
            row["seconds_with_a_queue"] = secs
            row["jct_mean_s"] = res.metrics()["jct_mean_s"]
            rows[run] = row
            print(
                f"  {run:<22} mean JCT {row['jct_mean_s']:>9.0f} s; while jobs wait "
                f"({secs:.0f} s): {row.get('running_jobs', 0):.1f} jobs running at summed speed "
                f"{row.get('summed_speed', 0):.1f}, {row.get('gpus_with_3_jobs', 0):.1f} of {gpus} "
                f"GPUs at 3 jobs, core {row.get('core_used_pct', 0):.1f} %, summed predicted util "
                f"{row.get('util_sum_pct', 0):.1f} % per GPU",
                flush=True,
            )
        doc = {"trace": name, "gpus": gpus, "runs": rows, "command": " ".join(sys.argv)}
        write_json(RESULTS / f"scheduler-backlog-{name}{args.suffix}.json", doc)
        out[name] = doc
    return out


def placement(args: argparse.Namespace) -> dict[str, object]:
    truth = load_truth("lucid", args.data_dir)
    predictor = make_predictor(args.predictor, truth)
    state = ClusterState.uniform(1000, 8, truth.gpu_model, truth.gpu_memory_mib)
    sched = Scheduler("horus", predictor)
    kinds = truth.kinds

    def req(i: int) -> JobRequest:
        k = kinds[(i * 7919) % len(kinds)]
        return JobRequest(name=f"j{i}", profile=truth.profile(k), kind=k, submit_time=float(i))

    placed = 0
    i = 0
    while placed < 6000:
        if isinstance(sched.place(state, req(i)), Placement):
            placed += 1
        i += 1
    lat = []
    n_ok = 0
    decisions = args.decisions
    for j in range(decisions):
        r = req(10_000_000 + j)
        t0 = time.perf_counter()
        out = sched.place(state, r)
        lat.append(time.perf_counter() - t0)
        if isinstance(out, Placement):
            n_ok += 1
            state.release(r.name)  # keep the cluster at 6,000 placed jobs
    lat.sort()
    total = sum(lat)
    doc = {
        "cluster": "1000 nodes × 8 GPUs",
        "placed_before": 6000,
        "decisions": decisions,
        "placed": n_ok,
        "decisions_per_second": decisions / total,
        "latency_p50_ms": 1000 * lat[len(lat) // 2],
        "latency_p99_ms": 1000 * lat[int(0.99 * len(lat))],
        "latency_mean_ms": 1000 * statistics.fmean(lat),
        "predictor": predictor.version,
    }
    print("\n== placement:", json.dumps(doc, indent=1))
    write_json(RESULTS / "scheduler-placement.json", doc)
    return doc


def evaluate(args: argparse.Namespace) -> dict[str, object]:
    """Per-node answers for the scheduler extender: ``Scheduler.evaluate`` over every node
    against ``place`` once per node with the other nodes' GPUs masked unhealthy (what the
    extender did before it), on the placement benchmark's cluster; the answers must agree."""
    truth = load_truth("lucid", args.data_dir)
    predictor = make_predictor(args.predictor, truth)
    state = ClusterState.uniform(1000, 8, truth.gpu_model, truth.gpu_memory_mib)
    sched = Scheduler("horus", predictor)
    kinds = truth.kinds

    def req(i: int, gpus_per_replica: int = 1) -> JobRequest:
        k = kinds[(i * 7919) % len(kinds)]
        return JobRequest(
            name=f"j{i}",
            profile=truth.profile(k),
            kind=k,
            submit_time=float(i),
            gpus_per_replica=gpus_per_replica,
        )

    placed, i = 0, 0
    while placed < 12_000:
        placed += isinstance(sched.place(state, req(i)), Placement)
        i += 1
    nodes = list(state.node_names)
    t_eval: list[float] = []
    t_mask: list[float] = []
    fits = 0
    for j in range(args.evaluations):
        r = req(20_000_000 + j, gpus_per_replica=8 if j % 2 else 1)
        t0 = time.perf_counter()
        answers = sched.evaluate(state, r, nodes)
        t_eval.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        masked = {}
        healthy = state.healthy.copy()
        for n, name in enumerate(nodes):
            state.healthy = healthy & (state.node_of == n)
            masked[name] = sched.place(state, r)
            if isinstance(masked[name], Placement):
                state.release(r.name)
        state.healthy = healthy
        t_mask.append(time.perf_counter() - t0)
        if answers != masked:
            raise SystemExit(f"evaluate disagrees with place on one node for job {r.name}")
        fits += sum(isinstance(a, Placement) for a in answers.values())
    doc = {
        "cluster": "1000 nodes × 8 GPUs",
        "placed_before": 12_000,
        "jobs": args.evaluations,
        "nodes_per_job": len(nodes),
        "nodes_fit_mean": fits / args.evaluations,
        "evaluate_ms_median": 1000 * statistics.median(t_eval),
        "place_per_node_ms_median": 1000 * statistics.median(t_mask),
        "speedup": statistics.median(t_mask) / statistics.median(t_eval),
        "answers_agree": True,
        "predictor": predictor.version,
    }
    print("\n== per-node evaluation:", json.dumps(doc, indent=1))
    write_json(RESULTS / "scheduler-evaluate.json", doc)
    return doc


def simspeed(args: argparse.Namespace) -> dict[str, object]:
    from horus.sim.engine import Simulator

    truth = load_truth("lucid", args.data_dir)
    predictor = make_predictor(args.predictor, truth)
    n = args.sim_jobs
    gpus = 2048
    spec = TraceSpec(
        "synthetic",
        "lucid",
        synthetic=SyntheticSpec(jobs=n, arrival_rate=1.0, duration_median=1800, seed=4),
    )
    trace = load_trace(spec, truth, args.data_dir)
    trace = scale_arrivals(trace, offered_load(trace, gpus) / 0.9)
    t0 = time.perf_counter()
    res = Simulator(
        trace, truth, "horus", predictor, SimConfig(gpus=gpus, progress=args.progress)
    ).run()
    wall = time.perf_counter() - t0
    doc = {
        "jobs": n,
        "gpus": gpus,
        "policy": "horus",
        "offered_load": offered_load(trace, gpus),
        "wall_seconds": wall,
        "target_seconds": 120 * n / 100_000,
        "predictor": predictor.version,
        "makespan_s": res.metrics()["makespan_s"],
    }
    print("\n== simulator speed:", json.dumps(doc, indent=1))
    write_json(RESULTS / "scheduler-simspeed.json", doc)
    return doc


def main() -> int:
    global RESULTS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--only",
        default="placement,evaluate,simspeed,policies,priority",
        help="steps: placement, evaluate, simspeed, policies, priority, backlog (diagnostic; "
        "not in the default)",
    )
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--alibaba-gpus", type=int, default=32, help="GPUs of the alibaba runs")
    p.add_argument("--traces", default="philly,philly-512gpus,alibaba,synthetic")
    p.add_argument(
        "--seeds", type=int, default=3, help="policies step: seeds (measurement noise, traces)"
    )
    p.add_argument("--first-seed", type=int, default=0, help="policies step: first seed")
    p.add_argument(
        "--merge",
        action="store_true",
        help="policies step: only merge the per-seed files of --seeds seeds into the summary",
    )
    p.add_argument(
        "--policies", default=None, help="runs (comma-separated) instead of the step's default"
    )
    p.add_argument(
        "--suffix",
        default="",
        help="appended to the policies/priority result names (e.g. -diagnostic), so a run "
        "with other --policies keeps the main results",
    )
    p.add_argument(
        "--high-priority",
        type=float,
        default=0.1,
        help="priority step: fraction of jobs at priority 1",
    )
    p.add_argument("--jobs", type=int, default=15000, help="jobs per policy trace")
    p.add_argument("--load", type=float, default=2.0, help="windowed load of the policy traces")
    p.add_argument("--sim-jobs", type=int, default=100_000)
    p.add_argument("--decisions", type=int, default=2000)
    p.add_argument("--evaluations", type=int, default=40, help="jobs evaluated on every node")
    p.add_argument("--predictor", default="auto")
    p.add_argument(
        "--data-dir", type=Path, default=None, help="default: $HORUS_DATA_DIR, else data/"
    )
    p.add_argument("--progress", action="store_true")
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="where the JSON and plots go")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    args = p.parse_args()
    RESULTS = args.results_dir
    if args.quick:
        args.jobs, args.sim_jobs, args.decisions, args.evaluations = 600, 5000, 300, 5
    todo = args.only.split(",")
    summary = {}
    steps = (
        ("placement", placement),
        ("evaluate", evaluate),
        ("simspeed", simspeed),
        ("policies", policies),
        ("priority", priority),
        ("backlog", backlog),
    )
    for name, fn in steps:
        if name in todo:
            summary[name] = fn(args)
    print("\nresults in", RESULTS, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
