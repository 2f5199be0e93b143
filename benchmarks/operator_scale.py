"""The operator at cluster scale (issue 27): thousands of kwok GPU nodes, thousands of DLJobs.

    .venv/bin/python benchmarks/operator_scale.py                         # 5,000 × 8, 10,000 jobs
    .venv/bin/python benchmarks/operator_scale.py --nodes 500 --jobs 1000 --cycles 3

Starts its own local control plane (``horus.devcluster``) with ``--nodes`` kwok nodes × 8 H100
and the operator (``python -m horus.operator``, a subprocess), then runs ``--cycles`` rounds of:
create ``--jobs`` single-replica DLJobs (auto-sized) as fast as 16 client threads can → wait
until every one is decided (phase Scheduled/Running, or Queued with a condition naming the
reason) → wait until every placed job is Running and nothing changed for 10 s → measure the
steady state over ``--steady`` seconds (the LIST requests the apiserver served, by resource,
from its own ``apiserver_request_total``; the operator's CPU) → delete them all and wait for
their pods to go. Reported per cycle: jobs placed / queued with a reason / undecided, seconds
until all were decided, the operator's RSS at the peak and after the cycle, its CPU seconds,
and how its passes got their live state (``kept`` or ``full: <why>``, from its
``horus_operator_live_state_builds_total``) until all were decided and in the steady state.
The benchmark itself follows DLJobs and pods by WATCH (it makes no LIST of them).

Writes ``benchmarks/results/operator-scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from operator_e2e import (  # noqa: E402
    cpu_seconds,
    dljob,
    operator_command,
    request_counts,
    rss_mib,
    use_cached_binaries,
)

from horus.api.raw import discard  # noqa: E402
from horus.common import constants as c  # noqa: E402
from horus.devcluster.cluster import DEFAULT_NODE_LEASE_SECONDS, LocalCluster  # noqa: E402
from horus.devcluster.nodes import NodeSpec, node_manifest  # noqa: E402
from horus.devcluster.processes import free_port  # noqa: E402

NS = "scale"
_OP_ARGS = ("--metrics-host", "127.0.0.1", "--identity", "scale")
_RESOURCES = ("dljobs", "pods", "nodes", "priorityclasses", "resourceclaims", "resourceslices")


def operator_counter(port: int, metric: str, label: str, where: str = "") -> dict[str, float]:
    """One of the operator's own counters so far, summed by ``label``, over the series whose
    labels contain ``where`` (read from its /metrics)."""
    import urllib.request

    prefix = f"{metric}_total{{"
    out: dict[str, float] = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(prefix) and where in line:
                labels, value = line.rsplit(" ", 1)
                key = labels.split(f'{label}="', 1)[1].split('"', 1)[0]
                out[key] = out.get(key, 0.0) + float(value)
    return out


def operator_lists(port: int) -> dict[str, float]:
    """LISTs the operator's own view has made so far, by resource (its
    ``horus_operator_view_requests_total{verb="list"}``): the apiserver's counter has no
    client label, and kwok and the controllers list too."""
    return operator_counter(port, c.METRIC_VIEW_REQUESTS, "resource", 'verb="list"')


def live_state_builds(port: int) -> dict[str, float]:
    """How the operator's passes got their live state so far (``kept``, ``full: <why>``)."""
    return operator_counter(port, c.METRIC_LIVE_STATE_BUILDS, "how")


def since(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in sorted(after) if after[k] != before.get(k)}


def list_counts(state: Any) -> dict[str, float]:
    """LIST requests served so far, by resource (the apiserver's apiserver_request_total)."""
    served = request_counts(state, verb="LIST", by="resource")
    return {r: served.get(r, 0.0) for r in _RESOURCES}


class Follow:
    """DLJob phases/reasons and live pods in the namespace, from two watches."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client

        self.custom: Any = client.CustomObjectsApi(api)
        self.core: Any = client.CoreV1Api(api)
        self.jobs: dict[str, tuple[str, str]] = {}
        self.pods: set[str] = set()
        self.changed = time.monotonic()
        self._stop = False
        for target in (self._jobs, self._pods):
            threading.Thread(target=target, daemon=True).start()

    def _stream(self, fn: Any, on: Any) -> None:
        from kubernetes import watch as _watch

        watch: Any = _watch
        version = ""  # resume from the last event: a deletion between two watches is seen
        while not self._stop:
            w: Any = watch.Watch()
            since = {"resource_version": version} if version else {}
            try:
                for ev in w.stream(fn, timeout_seconds=120, **since):
                    obj = ev["raw_object"]
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if ev["type"] != "BOOKMARK":
                        on(ev["type"], obj)
                        self.changed = time.monotonic()
                    if self._stop:
                        return
            except Exception:
                version = ""  # expired or broken: start over from the current state
                time.sleep(0.5)

    def _jobs(self) -> None:
        def fn(**kw: Any) -> Any:
            return self.custom.list_namespaced_custom_object(
                c.API_GROUP, c.API_VERSION, NS, c.DLJOB_PLURAL, **kw
            )

        def on(kind: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                self.jobs.pop(name, None)
                return
            status = obj.get("status") or {}
            conds = [x for x in status.get("conditions") or [] if x.get("status") != "True"]
            reason = conds[0].get("reason", "") if conds else ""
            self.jobs[name] = (str(status.get("phase") or ""), str(reason))

        self._stream(fn, on)

    def _pods(self) -> None:
        def fn(**kw: Any) -> Any:
            return self.core.list_namespaced_pod(NS, _preload_content=False, **kw)

        def on(kind: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                self.pods.discard(name)
            else:
                self.pods.add(name)

        self._stream(fn, on)

    def tally(self) -> dict[str, int]:
        placed = queued = other = 0
        for phase, reason in list(self.jobs.values()):
            if phase in (c.DLJOB_PHASE_SCHEDULED, c.DLJOB_PHASE_RUNNING):
                placed += 1
            elif phase == c.DLJOB_PHASE_QUEUED and reason:
                queued += 1
            else:
                other += 1
        return {"placed": placed, "queued_with_reason": queued, "undecided": other}

    def scheduled(self) -> int:
        """Jobs still at Scheduled (placed, not yet written Running)."""
        return sum(p == c.DLJOB_PHASE_SCHEDULED for p, _ in list(self.jobs.values()))

    def stop(self) -> None:
        self._stop = True


def add_nodes(api: Any, count: int, gpus: int) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    spec = NodeSpec(count=count, gpus_per_node=gpus, prefix="scale")

    def one(i: int) -> None:
        discard(core.create_node(node_manifest(f"scale-{i:05d}", spec), _preload_content=False))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))
    # Wait until kwok has taken every node over (Ready): before that, kwok relists pods
    # node by node, and those LISTs would count in the first cycle's steady window.
    deadline = time.time() + 600
    while time.time() < deadline:
        nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
        ready = sum(
            any(
                x.get("type") == "Ready" and x.get("status") == "True"
                for x in (n.get("status") or {}).get("conditions") or []
            )
            for n in nodes
        )
        if ready >= count:
            return
        time.sleep(2.0)
    raise RuntimeError(f"{count} nodes not Ready in 600 s")


def retried(call: Callable[[], Any], done: int, what: str) -> None:
    """``call`` (an API write), again after a dropped connection or HTTP 429/5xx from a busy
    apiserver, up to 20 times; HTTP ``done`` counts as success (404 for a delete, 409 for a
    create whose cut-off attempt had landed)."""
    from kubernetes.client.exceptions import ApiException

    for attempt in range(20):
        try:
            discard(call())
            return
        except ApiException as exc:
            if exc.status == done:
                return
            if exc.status not in (429, 500, 503, 504):
                raise
        except Exception:  # a dropped connection on a busy apiserver: try again
            pass
        time.sleep(min(5.0, 0.5 * (attempt + 1)))
    raise RuntimeError(f"{what}: not done after 20 attempts")


def delete_jobs(custom: Any, names: list[str]) -> None:
    """Delete every DLJob one by one from 16 threads (404: gone already). One collection
    delete of 10,000 DLJobs outlives the apiserver's request timeout (HTTP 504) or has its
    connection dropped, and stops where it was; single deletes each finish in time."""

    def one(name: str) -> None:
        retried(
            lambda: custom.delete_namespaced_custom_object(
                c.API_GROUP, c.API_VERSION, NS, c.DLJOB_PLURAL, name, _preload_content=False
            ),
            404,
            f"delete of DLJob {NS}/{name}",
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))


_PASS_LINE = re.compile(r"pass \d+: placed (\d+),.* deleted (\d+), .*\((\d+\.\d+)s:")


def pass_extremes(log: Path, start: int) -> dict[str, float]:
    """From the operator's log after byte ``start`` (its INFO line per pass that did
    something, ``pass N: placed K, … deleted D, … (S s: …``): the most jobs one pass placed
    (the pass whose temporaries the process keeps room for), the most pods one pass deleted
    (leftovers of the last cycle's jobs: many would mean the view lags the deletions) and
    the slowest pass."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    rows = [(int(p), int(d), float(s)) for p, d, s in _PASS_LINE.findall(text)]
    return {
        "largest_pass_placed": max((r[0] for r in rows), default=0),
        "most_pods_deleted_by_a_pass": max((r[1] for r in rows), default=0),
        "slowest_pass_seconds": max((r[2] for r in rows), default=0.0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--steady", type=float, default=30.0, help="seconds of steady state")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per cycle, seconds")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/operator-scale.json")
    ap.add_argument(
        "--node-lease-seconds",
        type=int,
        default=DEFAULT_NODE_LEASE_SECONDS,
        help="the kwok nodes' lease, renewed every quarter of it (a kubelet's: 40 s; 10..3600)",
    )
    ap.add_argument(
        "--max-jobs-per-pass",
        type=int,
        default=None,
        help="the operator's --max-jobs-per-pass (default: the operator's own default)",
    )
    args = ap.parse_args()
    if not 10 <= args.node_lease_seconds <= 3600:
        ap.error(f"--node-lease-seconds must be 10..3600, got {args.node_lease_seconds}")
    use_cached_binaries()
    import tempfile

    local = LocalCluster(Path(tempfile.mkdtemp(prefix="horus-bench-scale-")) / "c")
    state = local.up(timeout=180, node_lease_seconds=args.node_lease_seconds)
    op: subprocess.Popen[bytes] | None = None
    try:
        from kubernetes import client
        from kubernetes import config as _config

        config: Any = _config
        api = config.new_client_from_config(config_file=state.kubeconfig)
        api.configuration.connection_pool_maxsize = 20
        kubectl = [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", state.kubeconfig]
        subprocess.run(
            [*kubectl, "apply", "-f", str(ROOT / "manifests/crds/horus.io_dljobs.yaml")],
            check=True,
            capture_output=True,
        )
        t0 = time.time()
        add_nodes(api, args.nodes, args.gpus_per_node)
        print(f"{args.nodes} nodes created in {time.time() - t0:.0f}s", flush=True)
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NS}})
        log = local.directory / "operator.log"
        metrics_port = free_port()
        op = subprocess.Popen(
            operator_command(
                state.kubeconfig,
                "--metrics-port",
                str(metrics_port),
                *_OP_ARGS,
                *(
                    ("--max-jobs-per-pass", str(args.max_jobs_per_pass))
                    if args.max_jobs_per_pass is not None
                    else ()
                ),
            ),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 300
        while "is now leader" not in log.read_text(errors="replace"):
            if time.time() > deadline or op.poll() is not None:
                raise RuntimeError(f"operator did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        follow = Follow(api)
        peak = [0.0]
        sampling = [True]

        def sample() -> None:
            while sampling[0] and op is not None and op.poll() is None:
                peak[0] = max(peak[0], rss_mib(op.pid))
                time.sleep(0.5)

        threading.Thread(target=sample, daemon=True).start()
        rss_start = rss_mib(op.pid)
        cycles: list[dict[str, Any]] = []
        for cycle in range(args.cycles):
            log_from = log.stat().st_size
            peak[0] = 0.0
            cpu0 = cpu_seconds(op.pid)
            builds0 = live_state_builds(metrics_port)
            t0 = time.time()

            def create(i: int, cycle: int = cycle) -> None:
                body = dljob(f"c{cycle}-{i:05d}")
                retried(
                    lambda: custom.create_namespaced_custom_object(
                        c.API_GROUP, c.API_VERSION, NS, c.DLJOB_PLURAL, body, _preload_content=False
                    ),
                    409,
                    f"create of DLJob {NS}/{body['metadata']['name']}",
                )

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, range(args.jobs)))
            created_s = time.time() - t0
            while time.time() - t0 < args.timeout:
                tally = follow.tally()
                if len(follow.jobs) >= args.jobs and tally["undecided"] == 0:
                    break
                time.sleep(1.0)
            decided_s = time.time() - t0
            tally = follow.tally()
            builds_decided = live_state_builds(metrics_port)
            print(f"cycle {cycle}: {tally} in {decided_s:.0f}s", flush=True)
            # steady: wait until every placed job is Running (the operator's last writes of
            # the burst: a job is decided at Scheduled, and kwok starts its pod at once) and
            # nothing changed for 10 s, then count LISTs and CPU over --steady s
            quiet = time.monotonic()
            while (
                follow.scheduled() or time.monotonic() - follow.changed < 10
            ) and time.monotonic() - quiet < 600:
                time.sleep(1.0)
            settle_s = time.monotonic() - quiet
            before, steady_cpu0 = list_counts(state), cpu_seconds(op.pid)
            own_before = operator_lists(metrics_port)
            builds_steady = live_state_builds(metrics_port)
            time.sleep(args.steady)
            after, steady_cpu = list_counts(state), cpu_seconds(op.pid) - steady_cpu0
            own_after = operator_lists(metrics_port)
            builds_after = live_state_builds(metrics_port)
            own = {k: own_after[k] - own_before.get(k, 0.0) for k in sorted(own_after)}
            lists = {k: after[k] - before[k] for k in _RESOURCES}
            rss_peak = max(peak[0], rss_mib(op.pid))
            cpu = cpu_seconds(op.pid) - cpu0
            print(
                f"cycle {cycle}: steady LISTs (apiserver) {lists}, the operator's own {own}, "
                f"RSS peak {rss_peak:.0f} MiB",
                flush=True,
            )
            t1 = time.time()
            delete_jobs(custom, [f"c{cycle}-{i:05d}" for i in range(args.jobs)])
            while (follow.jobs or follow.pods) and time.time() - t1 < args.timeout:
                time.sleep(1.0)
            time.sleep(5.0)
            row = {
                "cycle": cycle,
                **tally,
                "create_seconds": round(created_s, 1),
                "all_decided_seconds": round(decided_s, 1),
                "steady_lists_by_resource": lists,
                "steady_operator_lists_by_resource": own,
                "steady_seconds": args.steady,
                "settle_seconds": round(settle_s, 1),
                "steady_operator_cpu_seconds": round(steady_cpu, 2),
                "live_state_until_decided": since(builds_decided, builds0),
                "live_state_steady": since(builds_after, builds_steady),
                "operator_rss_peak_mib": round(rss_peak, 1),
                "operator_rss_after_cycle_mib": round(rss_mib(op.pid), 1),
                "operator_cpu_seconds": round(cpu, 1),
                "deleted_seconds": round(time.time() - t1, 1),
                **pass_extremes(log, log_from),
            }
            cycles.append(row)
            print(json.dumps(row), flush=True)
        sampling[0] = False
        follow.stop()
        rss_after = [float(r["operator_rss_after_cycle_mib"]) for r in cycles]
        result = {
            "benchmark": "operator-scale",
            "command": "benchmarks/operator_scale.py " + " ".join(sys.argv[1:]),
            "cluster": {
                "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node,
                "node_lease_seconds": args.node_lease_seconds,
            },
            "jobs_per_cycle": args.jobs,
            "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
            "operator_rss_start_mib": round(rss_start, 1),
            "cycles": cycles,
            "rss_after_cycles_spread": round(
                (max(rss_after) - min(rss_after)) / max(min(rss_after), 1), 3
            )
            if rss_after
            else None,
            "steady_state_lists_total": sum(
                sum(r["steady_lists_by_resource"].values()) for r in cycles
            ),
            "steady_state_operator_lists_total": sum(
                sum(r["steady_operator_lists_by_resource"].values()) for r in cycles
            ),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
        return 0
    finally:
        if op is not None:
            op.terminate()
            try:
                op.wait(15)
            except subprocess.TimeoutExpired:
                op.kill()
        local.down(quiet=True)


if __name__ == "__main__":
    raise SystemExit(main())
