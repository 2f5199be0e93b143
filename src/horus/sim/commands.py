"""``horus sim``, ``horus sim compare`` and ``horus sim fetch``: the trace simulator from the shell.

Registration imports nothing heavy (numpy, matplotlib load inside the handlers), so
``horus --help`` stays fast. Data comes from the repository's ``data/`` unless ``--data-dir``
or ``$HORUS_DATA_DIR`` names another folder (:mod:`horus.sim.datasets`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from horus.common.flags import count, integer, number
from horus.sim.datasets import DEFAULT_TRUTH, ENV_DATA_DIR

#: The runs ``horus sim compare`` (and ``benchmarks/scheduler.py``) compare by default.
COMPARED_RUNS = (
    "exclusive",
    "binpack",
    "spread",
    "horus-original",
    "horus-predict-only",
    "horus+observed",
    "horus",
    "oracle",
)
_RUNS_HELP = (
    "a policy (exclusive, binpack, spread, horus-original, oracle), horus (the whole system: "
    "prediction + the agent's measurements from the jobs' progress + migration + preemption) "
    "or horus-predict-only, optionally with features +observed (progress), +observed-split, "
    "+observed-overlap (the utilisation ratio), +observed-exact, +migrate, +preempt "
    "(docs/scheduler.md, 'Run names')"
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default="synthetic", help="philly, alibaba or synthetic")
    p.add_argument("--trace-file", type=Path, default=None, help="a specific trace file")
    p.add_argument(
        "--truth",
        default=DEFAULT_TRUTH,
        help="ground truth (default %(default)s): gavel (V100, MIT), lucid (RTX 3090; S-Lab "
        "License 1.0, NON-COMMERCIAL use only) or measured:DIR (pair speeds 'horus predictor "
        "measure' wrote to DIR)",
    )
    p.add_argument(
        "--gpus", type=count(1_000_000), default=1024, help="GPUs in the simulated cluster"
    )
    p.add_argument("--gpus-per-node", type=count(1024), default=8)
    p.add_argument(
        "--seed",
        type=integer(0, 2**32 - 1),
        default=0,
        help="seed for kind mapping and synthetic",
    )
    p.add_argument("--limit", type=count(), default=None, help="use only the first N jobs")
    p.add_argument(
        "--arrival-scale",
        type=number(0.0, 1e6, lo_open=True),
        default=1.0,
        help="multiply arrival times (<1 = more load)",
    )
    p.add_argument(
        "--jobs", type=count(10_000_000), default=10_000, help="synthetic: number of jobs"
    )
    p.add_argument(
        "--rate",
        type=number(0.0, 1e6, lo_open=True),
        default=1 / 60,
        help="synthetic: arrivals per second",
    )
    p.add_argument(
        "--duration",
        type=number(0.0, 1e7, lo_open=True),
        default=3600.0,
        help="synthetic: median seconds",
    )
    p.add_argument(
        "--high-priority",
        type=number(0.0, 1.0),
        default=0.0,
        help="fraction of jobs (seeded by --seed) given priority 1 instead of 0",
    )
    p.add_argument(
        "--restart-seconds",
        type=number(0.0, 1e7),
        default=None,
        help="seconds a moved or preempted job makes no progress (default 30: Pollux's "
        "re-allocation delay)",
    )
    p.add_argument(
        "--lost-progress-seconds",
        type=number(0.0, 1e7),
        default=None,
        help="seconds of progress redone after a move or preemption (default 0: jobs "
        "checkpoint on SIGTERM)",
    )
    p.add_argument(
        "--predictor", default="auto", help="trained, profiled (stand-in) or auto (default)"
    )
    _data_dir_flag(p)
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write PNG plots with this prefix")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _data_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"data folder (default: ${ENV_DATA_DIR}, else the repository's data/)",
    )


def register(sub: Any) -> None:
    sim = sub.add_parser(
        "sim",
        help="trace-driven simulation of the scheduling policies",
        description=(
            "Event-driven simulation of a GPU cluster: job speeds come from measured pair "
            "tables (Gavel by default, Lucid or your own measurements), placements from "
            "horus.scheduler. Example: horus sim --trace philly --policy horus --gpus 1024"
        ),
    )
    _common(sim)
    sim.add_argument(
        "--policy",
        default="horus",
        help=_RUNS_HELP,
    )
    sim.set_defaults(handler=_run_one)
    ssub = sim.add_subparsers(dest="sim_command", metavar="ACTION")
    cmp_ = ssub.add_parser("compare", help="several policies on the same trace, with ratios")
    _common(cmp_)
    cmp_.add_argument(
        "--policies",
        default=",".join(COMPARED_RUNS),
        help=f"comma-separated runs: {_RUNS_HELP}",
    )
    cmp_.set_defaults(handler=_compare)
    fetch = ssub.add_parser(
        "fetch",
        help="download a dataset Horus may not redistribute (alibaba: the Alibaba GPU v2023 "
        "pod list, pinned by commit and SHA-256) into the data folder's external/",
    )
    fetch.add_argument("dataset", choices=["alibaba"], help="which dataset")
    _data_dir_flag(fetch)
    fetch.set_defaults(handler=_fetch)


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    from horus.sim.config import MoveCosts, SimConfig
    from horus.sim.datasets import LUCID
    from horus.sim.run import TraceSpec, load, make_predictor
    from horus.sim.traces import SyntheticSpec, with_priorities

    spec = TraceSpec(
        name=args.trace,
        truth=args.truth,
        arrival_scale=args.arrival_scale,
        limit=args.limit,
        seed=args.seed,
        path=args.trace_file,
        synthetic=SyntheticSpec(
            jobs=args.jobs, arrival_rate=args.rate, duration_median=args.duration, seed=args.seed
        ),
    )
    truth, trace = load(spec, args.data_dir)
    if args.high_priority:
        trace = with_priorities(trace, args.high_priority, args.seed)
    if truth.source == LUCID.name:
        print(
            f"note: --truth lucid uses Lucid's data ({LUCID.licence}; "
            "data/noncommercial/lucid/LICENSE)",
            file=sys.stderr,
        )
    predictor = make_predictor(args.predictor, truth)
    # As the benchmark does: a job that can never fit this cluster (e.g. predicted to need
    # more memory than its GPUs have) is left out and counted, not a failed run.
    costs = MoveCosts()
    if args.restart_seconds is not None:
        costs = MoveCosts(args.restart_seconds, costs.lost_progress_s)
    if args.lost_progress_seconds is not None:
        costs = MoveCosts(costs.restart_s, args.lost_progress_seconds)
    config = SimConfig(
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        progress=not args.no_progress,
        drop_impossible=True,
        costs=costs,
    )
    return truth, trace, predictor, config


def _emit(args: argparse.Namespace, results: list[Any], predictor: Any) -> None:
    from horus.sim.report import plot, ratios, table, to_json, write_json

    print(table(results))
    left_out = results[0].rejected
    if left_out:
        print(
            f"  {len(left_out)} of {len(left_out) + len(results[0].records)} jobs can never fit "
            f"this cluster and were left out (first: {left_out[0]})"
        )
    rs = ratios(results)
    for k, v in rs.items():
        print(f"  {k:<40} {v:.3f}")
    if args.json:
        write_json(
            args.json,
            to_json(
                results,
                {
                    "trace": args.trace,
                    "truth": args.truth,
                    "gpus": args.gpus,
                    "predictor": predictor.version,
                    "jobs": len(results[0].records),
                },
            ),
        )
        print(f"wrote {args.json}")
    if args.plot:
        for p in plot(results, args.plot):
            print(f"wrote {p}")


def _run_one(args: argparse.Namespace) -> int:
    from horus.sim.config import parse_run
    from horus.sim.engine import Simulator

    parse_run(args.policy)  # unknown names fail before any loading
    truth, trace, predictor, config = _setup(args)
    t0 = time.perf_counter()
    result = Simulator(trace, truth, args.policy, predictor, config, None, args.trace).run()
    _emit(args, [result], predictor)
    print(f"{len(trace)} jobs on {args.gpus} GPUs in {time.perf_counter() - t0:.1f} s")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from horus.sim.config import parse_run
    from horus.sim.run import run_policies

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        parse_run(p)
    truth, trace, predictor, config = _setup(args)
    results = run_policies(trace, truth, policies, predictor, config, None, args.trace)
    _emit(args, results, predictor)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from horus.sim.datasets import ALIBABA_URL, fetch_alibaba

    print(f"fetching {ALIBABA_URL}", file=sys.stderr)
    path, downloaded = fetch_alibaba(args.data_dir)
    print(f"{'wrote' if downloaded else 'already there, checksum ok:'} {path}")
    return 0
