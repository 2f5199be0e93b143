"""The demo's live placement table and the rule that says when the story has been told.

Why a module of its own: the table and its stop rule are what a newcomer watches, and they
are pure functions of the API objects (``render_table``, ``settled``, ``decided``,
``moves_done``, ``moved_jobs``: unit-tested on hand-made objects in
``tests/unit/devcluster/test_demo_table.py``); the loop that refreshes them (``watch``) only
adds reading the cluster and Prometheus.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TextIO

from horus.api.assignment import decode_assignment
from horus.common import constants as c
from horus.common.clock import timestamp
from horus.common.errors import ClusterError, HorusError
from horus.devcluster.demo_state import DemoOptions, DemoState, kubectl
from horus.devcluster.demo_workload import UNPLACEABLE, WAITING
from horus.devcluster.processes import ManagedProcess
from horus.devcluster.report import query
from horus.predictor.interface import GraphProfile, Predictor

TERMINAL = ("Succeeded", "Failed")
HEADER = (
    "DLJOB",
    "PHASE",
    "MOVES",
    "PRED UTIL",
    "PRED MEM",
    "PLACEMENT (node/gpu core% memMiB)",
    "MEASURED PAIR SPEED (PREDICTED)",
    "REASON",
)
#: (a DLJob, its neighbour's job kind, GPU model) → the predicted speed of the job beside it.
PairPredictor = Callable[[dict[str, Any], str, str], float | None]


# --- reading the cluster ----------------------------------------------------------------------


def list_jobs(state: DemoState) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        kubectl(state, "get", "dljobs", "-A", "-o", "json").stdout
    )["items"]
    return items


def check_running(procs: list[ManagedProcess]) -> None:
    for p in procs:
        if not p.running():
            raise ClusterError(f"{p.name} exited; see {p.log}:\n{p.log_tail()}")


def wait_placed(
    state: DemoState, procs: list[ManagedProcess], out: TextIO, timeout: float = 90.0
) -> None:
    """Until every submitted job was placed, refused or queued with a reason (the late
    arrival is meant to find every GPU busy); goes on after ``timeout`` regardless."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_running(procs)
        if all(decided(j) for j in list_jobs(state)):
            return
        time.sleep(1.0)
    print(f"    (not every job was placed after {timeout:.0f}s; going on)", file=out, flush=True)


def watch(
    state: DemoState,
    opts: DemoOptions,
    out: TextIO,
    prom_t0: float,
    procs: list[ManagedProcess],
) -> None:
    """Refresh the placement table until the story is told (or ``watch_seconds``): every
    job settled, the memory hog evicted, a move finished, and ``min_history_seconds`` of
    metrics after the last of them."""
    tty = out.isatty()
    predictor = _load_predictor()
    deadline = time.monotonic() + opts.watch_seconds
    last = ""
    settled_at = 0.0
    moved_at = 0.0
    while True:
        check_running(procs)
        jobs = list_jobs(state)
        predict = pair_predictor(jobs, predictor) if predictor is not None else None
        table = render_table(jobs, _pods(state), predict, _claims(state))
        header = (
            f"Horus demo — {len(jobs)} DLJobs, t={time.time() - prom_t0:4.0f}s "
            f"(refresh {opts.refresh_seconds:.0f}s, Prometheus {state.prometheus_url})"
        )
        if tty:
            out.write("\033[H\033[J" + header + "\n" + table + "\n")
            out.flush()
        elif table != last:
            print(header + "\n" + table, file=out, flush=True)
        last = table
        now = time.monotonic()
        settled_at = (settled_at or now) if settled(jobs) else 0.0
        moved_at = (moved_at or now) if moves_done(jobs) else 0.0
        story = settled_at and moved_at and evictions_seen(state)
        if story and now - max(settled_at, moved_at) >= opts.min_history_seconds:
            break
        if now > deadline:
            missing = "" if moved_at else "; no job was moved"
            print(
                f"(stopped watching after {opts.watch_seconds:.0f}s{missing})", file=out, flush=True
            )
            break
        time.sleep(opts.refresh_seconds)
    if tty:
        print("", file=out, flush=True)


def _pods(state: DemoState) -> list[dict[str, Any]]:
    """The DLJobs' pods (none when the listing fails: the table then shows no placements)."""
    listing = kubectl(
        state, "get", "pods", "-A", "-l", c.LABEL_DLJOB_NAME, "-o", "json", check=False
    ).stdout
    pods: list[dict[str, Any]] = json.loads(listing or '{"items": []}')["items"]
    return pods


def _claims(state: DemoState) -> list[dict[str, Any]]:
    """The DLJobs' ResourceClaims on the dra path (none on the other path, or when the
    listing fails)."""
    listing = kubectl(
        state, "get", "resourceclaims", "-A", "-l", c.LABEL_DLJOB_NAME, "-o", "json", check=False
    ).stdout
    try:
        claims: list[dict[str, Any]] = json.loads(listing or '{"items": []}')["items"]
    except (ValueError, KeyError):
        return []
    return claims


def evictions_seen(state: DemoState) -> bool:
    """Prometheus has recorded a watchdog eviction."""
    try:
        return bool(query(state.prometheus_url, f"{c.METRIC_ENFORCEMENT_EVICTIONS}_total", 5))
    except (OSError, KeyError, ValueError):
        return False


# --- the story's state, from the API objects ----------------------------------------------------


def settled(jobs: list[dict[str, Any]]) -> bool:
    """Every job has been decided: running/finished, or waiting with a reason given."""
    if not jobs:
        return False
    for job in jobs:
        st = job.get("status") or {}
        phase = st.get("phase", "")
        if phase in (c.DLJOB_PHASE_RUNNING, *TERMINAL):
            continue
        if job["metadata"]["name"] in (UNPLACEABLE, WAITING) and st.get("reason"):
            continue
        return False
    return True


def decided(job: dict[str, Any]) -> bool:
    """Placed, finished, or waiting with the scheduler's reason."""
    st = job.get("status") or {}
    phase = st.get("phase", "")
    if phase in (c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_RUNNING, *TERMINAL):
        return True
    return phase == c.DLJOB_PHASE_QUEUED and bool(st.get("reason"))


def moves_done(jobs: list[dict[str, Any]]) -> bool:
    """At least one job was moved, and no move is under way (``status.migration``)."""
    counts = [
        int(((j.get("status") or {}).get("migrations") or {}).get("count") or 0) for j in jobs
    ]
    return sum(counts) > 0 and not any((j.get("status") or {}).get("migration") for j in jobs)


def moved_jobs(jobs: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(Unix time of the last move, "job: from → to") for every job Horus moved."""
    out = []
    for job in jobs:
        m = (job.get("status") or {}).get("migrations") or {}
        when = timestamp(m.get("lastTime"))
        if int(m.get("count") or 0) > 0 and when > 0:
            text = f"{job['metadata']['name']}: {m.get('lastFrom', '?')} → {m.get('lastTo', '?')}"
            out.append((when, text))
    return sorted(out)


# --- the table ----------------------------------------------------------------------------------


def render_table(
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    predict_pair: PairPredictor | None = None,
    claims: list[dict[str, Any]] | None = None,
) -> str:
    """One row per DLJob: phase, moves, where its replicas run (node/GPU, share), prediction,
    the pair speed the node agents measured (beside the predicted one, from ``predict_pair``)
    and the reason — why it is not running, or where it was last moved from."""
    by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(c.LABEL_DLJOB_NAME)
        if job:
            by_job.setdefault((meta.get("namespace", ""), job), []).append(pod)
    by_name = {
        (cl["metadata"].get("namespace", ""), cl["metadata"].get("name", "")): cl
        for cl in claims or []
    }
    rows: list[tuple[str, ...]] = [HEADER]
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        meta = job["metadata"]
        job_pods = by_job.get((meta.get("namespace", ""), meta["name"]), [])
        rows.append(_row(job, job_pods, predict_pair, by_name))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(len(widths))) + "  " + r[-1])
    return "\n".join(lines)


def _row(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    predict_pair: PairPredictor | None = None,
    claims: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> tuple[str, ...]:
    """One DLJob's row of the table, its pods' placements included."""
    st = job.get("status") or {}
    pred = st.get("predicted") or {}
    util = pred.get("utilMean")
    mem = pred.get("memoryMiBUpper")
    moves = st.get("migrations") or {}
    return (
        job["metadata"]["name"],
        st.get("phase", "-"),
        str(int(moves.get("count") or 0)),
        f"{float(util):.0f}%" if isinstance(util, int | float) else "-",
        f"{int(mem)}" if isinstance(mem, int | float) else "-",
        ", ".join(_places(pods, claims)) or "-",
        _measured(job, predict_pair),
        _reason(st, moves)[:90],
    )


def _measured(job: dict[str, Any], predict_pair: PairPredictor | None) -> str:
    """The job's measured pair speed with the most weight (a progress reading first, then the
    most samples): "0.62±0.01 progress by bert@16 (0.80)", the predicted speed in brackets."""
    observed = (job.get("status") or {}).get("observed") or {}
    pairs = observed.get("pairs") if isinstance(observed, dict) else None
    valid = [
        p
        for p in (pairs if isinstance(pairs, list) else [])
        if isinstance(p, dict) and isinstance(p.get("speed"), int | float)
    ]
    if not valid:
        return "-"
    p = max(valid, key=lambda p: (p.get("source") == c.PAIR_SOURCE_PROGRESS, p.get("samples", 0)))
    text = f"{float(p['speed']):.2f}"
    if isinstance(p.get("error"), int | float):
        text += f"±{float(p['error']):.2f}"
    other, gpu = str(p.get("other", "?")), str(p.get("gpuModel", ""))
    text += f" {p.get('source') or c.PAIR_SOURCE_UTILISATION} by {other[:24]}"
    predicted = predict_pair(job, other, gpu) if predict_pair is not None else None
    return text + (f" ({predicted:.2f})" if predicted is not None else "")


def _load_predictor() -> Predictor | None:
    """The shipped predictor (for predicted pair speeds in the table); None if it cannot load."""
    try:
        from horus.predictor import load_default_predictor

        return load_default_predictor()
    except Exception:  # the table goes on without predictions
        return None


def pair_predictor(jobs: list[dict[str, Any]], predictor: Predictor) -> PairPredictor:
    """Predicted pair speeds between the jobs' kinds (their inline profiles), as the operator
    would predict them: ``predictor.pair_speed`` of the job's profile beside the neighbour
    kind's, on that GPU model."""
    from horus.api.dljob import InlineProfile, parse_dljob
    from horus.predictor.schema import profile_from_dict
    from horus.scheduler import job_kind

    profiles: dict[str, GraphProfile] = {}
    by_job: dict[str, GraphProfile] = {}
    for job in jobs:
        try:
            src = parse_dljob(job).spec.profile
            if isinstance(src, InlineProfile):
                profile = profile_from_dict(src.to_document(), job["metadata"]["name"])
                profiles.setdefault(job_kind(profile), profile)
                by_job[job["metadata"]["name"]] = profile
        except (HorusError, ValueError, TypeError, KeyError, AttributeError):
            continue

    def predict(job: dict[str, Any], other: str, gpu: str) -> float | None:
        mine, theirs = by_job.get(job["metadata"]["name"]), profiles.get(other)
        if mine is None or theirs is None:
            return None
        try:
            return float(predictor.pair_speed(mine, theirs, gpu))
        except Exception:
            return None

    return predict


#: ``kubectl get resourceclaims`` columns that show each claim's share as the kube-scheduler
#: allocated it (the dra path; a built-in type has no printer columns of its own).
CLAIM_COLUMNS = (
    "NAMESPACE:.metadata.namespace,CLAIM:.metadata.name,"
    "POD:.status.reservedFor[0].name,NODE:.status.allocation.devices.results[0].pool,"
    "GPU:.status.allocation.devices.results[0].device,"
    "CORES:.status.allocation.devices.results[0].consumedCapacity.cores,"
    "MEMORY:.status.allocation.devices.results[0].consumedCapacity.memory"
)


def claim_places(claim: dict[str, Any]) -> list[str]:
    """ "node/gpu core% memMiB" of each Horus GPU a claim was allocated (the dra path)."""
    from horus.api.resources import parse_quantity
    from horus.common.errors import ValidationError

    alloc = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    places = []
    for r in alloc.get("results") or []:
        if not isinstance(r, dict) or r.get("driver") != c.DRA_DRIVER_NAME:
            continue
        consumed = r.get("consumedCapacity") or {}
        try:
            cores = parse_quantity(consumed.get(c.DRA_CAPACITY_CORES, "100"), "cores")
            mem = parse_quantity(consumed.get(c.DRA_CAPACITY_MEMORY, "0"), "memory") // c.MIB
        except ValidationError:
            continue
        node = str(r.get("pool", "?")).replace("gpu-node-", "n")
        gpu = str(r.get("device", "?")).removeprefix(c.DRA_DEVICE_PREFIX)
        places.append(f"{node}/{gpu} {cores}% {mem or 'all'}")
    return places


def _places(
    pods: list[dict[str, Any]], claims: dict[tuple[str, str], dict[str, Any]] | None = None
) -> list[str]:
    """ "node/gpu core% memMiB" of each GPU the (not deleted) pods were assigned: their signed
    assignment (device-plugin path) or their claims' allocation (dra path)."""
    places = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        text = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_GPU_ASSIGNMENT)
        if not text:
            ns = pod["metadata"].get("namespace", "")
            for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
                claim = (claims or {}).get((ns, str(ref.get("resourceClaimName", ""))))
                places += claim_places(claim) if claim else []
            continue
        try:
            a = decode_assignment(text)
        except (ValueError, HorusError):
            continue
        node = a.node.replace("gpu-node-", "n")
        for g in a.gpus or (a,):
            places.append(f"{node}/{g.gpu_index} {g.core_percent}% {g.memory_mib}")
    return places


def _reason(st: dict[str, Any], moves: dict[str, Any]) -> str:
    """Why a job is not running, or where a running one was last moved from."""
    if st.get("phase") != c.DLJOB_PHASE_RUNNING:
        reason = str(st.get("reason") or "")
        message = str(st.get("message") or "")
        return f"{reason}: {message}" if reason and message else reason or message
    if moves.get("count"):
        return f"moved from {moves.get('lastFrom', '?')} to {moves.get('lastTo', '?')}"
    return ""
