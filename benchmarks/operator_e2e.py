"""End-to-end placement through the real apiserver: Horus operator vs the stock kube-scheduler.

    .venv/bin/python benchmarks/operator_e2e.py                 # 300 jobs, 50 nodes × 8 GPUs
    .venv/bin/python benchmarks/operator_e2e.py --jobs 100 --nodes 20   # a quicker run

Starts its own local control plane (etcd, kube-apiserver, controller-manager, kube-scheduler,
kwok; ``horus.devcluster``), adds kwok GPU nodes that advertise both the Horus resources and
``nvidia.com/gpu: 8``, then runs the same workload twice:

* **horus** — N single-replica DLJobs (auto-sized from the prediction) created as fast as a
  client can; the operator (``python -m horus.operator``, a subprocess as in production)
  validates, predicts, places, creates and binds each replica pod;
* **baseline** — N plain pods requesting ``nvidia.com/gpu: 1`` (whole GPUs), placed by the
  stock kube-scheduler.

Measured from a pod watch: pods Bound per second (first creation → last binding) and, per
job, creation → its pod Bound (p50/p99); from the control plane, per job: kube-apiserver +
etcd CPU seconds over the round (``/proc``) and the requests the apiserver served by verb
(its own ``apiserver_request_total``: LISTs and writes per job). Ratios Horus / baseline are
printed and written. ``--baseline-qps`` sets kube-scheduler's client QPS (burst 2×); the
operator's client has no rate limit, so the same-QPS comparison gives the baseline a limit
it does not reach (e.g. 1000). Writes ``benchmarks/results/operator-e2e.json``.
Numbers depend on the machine: on a loaded 2-core VM the apiserver, etcd, kwok and both
schedulers share two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from latency_stats import percentile  # noqa: E402

from horus.common import constants as c  # noqa: E402
from horus.devcluster.cluster import LocalCluster  # noqa: E402
from horus.devcluster.nodes import NodeSpec, node_manifest  # noqa: E402

PROFILE = ROOT / "examples" / "profiles" / "resnet50-bs64.yaml"


class BoundWatch:
    """Records, per pod name in a namespace, when it was first seen bound."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client
        from kubernetes import watch as _watch

        watch: Any = _watch
        self.core: Any = client.CoreV1Api(api)
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self._stopped = False
        self._w = watch.Watch()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stopped:
            try:
                for ev in self._w.stream(self.core.list_namespaced_pod, self.namespace):
                    pod = ev["object"]
                    if pod.spec.node_name and pod.metadata.name not in self.bound:
                        self.bound[pod.metadata.name] = time.time()
            except Exception:  # a broken watch is restarted (or we are done)
                time.sleep(0.1)

    def stop(self) -> None:
        self._stopped = True
        self._w.stop()


def add_gpu_nodes(api: Any, count: int, gpus: int) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    spec = NodeSpec(count=count, gpus_per_node=gpus, prefix="bench")
    for i in range(count):
        m = node_manifest(f"bench-{i:04d}", spec)
        for k in ("capacity", "allocatable"):
            m["status"][k]["nvidia.com/gpu"] = str(gpus)
        core.create_node(m)
    deadline = time.time() + 120
    while time.time() < deadline:
        ready = 0
        for n in core.list_node().items:
            conds = {x.type: x.status for x in n.status.conditions or []}
            ready += conds.get("Ready") == "True"
        if ready >= count:
            return
        time.sleep(0.5)
    raise RuntimeError("nodes not Ready in 120 s")


def use_cached_binaries() -> None:
    """Without ``HORUS_BIN_DIR``, use a control-plane folder already built into the cache
    (the cache also holds e.g. a Prometheus-only one, which lacks the control plane)."""
    cached = sorted(
        d for d in (Path.home() / ".cache/horus/bin").glob("*/") if (d / "kube-apiserver").is_file()
    )
    if cached and "HORUS_BIN_DIR" not in os.environ:
        os.environ["HORUS_BIN_DIR"] = str(cached[-1])


def gpu_cluster(
    prefix: str,
    nodes: int,
    gpus: int,
    pool_size: int,
    scheduler_config: dict[str, Any] | None = None,
) -> tuple[LocalCluster, Any, Any]:
    """A local control plane with the DLJob CRD and ``nodes`` kwok GPU nodes: (cluster, its
    state, an API client). The caller takes it down (``cluster.down``) when done."""
    use_cached_binaries()
    local = LocalCluster(Path(tempfile.mkdtemp(prefix=prefix)) / "c")
    state = local.up(timeout=180, scheduler_config=scheduler_config)
    try:
        from kubernetes import config as _config

        config: Any = _config
        api = config.new_client_from_config(config_file=state.kubeconfig)
        api.configuration.connection_pool_maxsize = pool_size
        subprocess.run(
            [
                str(Path(state.bin_dir) / "kubectl"),
                "--kubeconfig",
                state.kubeconfig,
                "apply",
                "-f",
                str(ROOT / "manifests/crds/horus.io_dljobs.yaml"),
            ],
            check=True,
            capture_output=True,
        )
        add_gpu_nodes(api, nodes, gpus)
    except BaseException:
        local.down(quiet=True)
        raise
    return local, state, api


def dljob(name: str) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load(PROFILE.read_text())
    return {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "profile": {k: doc[k] for k in ("model", "batchSize", "features", "family")},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


CLK = os.sysconf("SC_CLK_TCK")
_WRITES = ("POST", "PATCH", "PUT", "DELETE")
_WRITE_KEY = ("resource", "subresource", "verb")
_RAW = ("get", "--raw", "/metrics")


def operator_command(kubeconfig: str, *args: str) -> list[str]:
    """The operator as a subprocess of this Python, against ``kubeconfig``, with ``args``."""
    return [sys.executable, "-m", "horus.operator", "--kubeconfig", kubeconfig, *args]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def control_plane_cpu(state: Any) -> float:
    """kube-apiserver + etcd CPU seconds so far."""
    return sum(cpu_seconds(p.pid) for p in state.processes if p.name in ("kube-apiserver", "etcd"))


def request_counts(
    state: Any, verb: str | None = None, by: str | tuple[str, ...] = "verb"
) -> dict[str, float]:
    """Requests the apiserver has served (its own ``apiserver_request_total``), summed by the
    label ``by`` (several labels: their values joined by ``/``, empty ones left out);
    ``verb``: only requests of that verb."""
    names = (by,) if isinstance(by, str) else by
    text = subprocess.run(
        [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", state.kubeconfig, *_RAW],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        if verb is not None and f'verb="{verb}"' not in labels:
            continue
        parts = [labels.split(f'{n}="', 1)[1].split('"', 1)[0] for n in names if f'{n}="' in labels]
        key = "/".join(p for p in parts if p) or "?"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def run_round(
    api: Any, namespace: str, jobs: int, horus: bool, workers: int, state: Any = None
) -> dict[str, Any]:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    watch = BoundWatch(api, namespace)
    time.sleep(0.5)
    created: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"j-{i:04d}"
        created[name] = time.time()
        if horus:
            custom.create_namespaced_custom_object(
                c.API_GROUP, c.API_VERSION, namespace, c.DLJOB_PLURAL, dljob(name)
            )
        else:
            core.create_namespaced_pod(namespace, plain_pod(name))

    cpu0 = control_plane_cpu(state) if state is not None else 0.0
    req0 = request_counts(state) if state is not None else {}
    writes0 = request_counts(state, by=_WRITE_KEY) if state is not None else {}
    t0 = time.time()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, range(jobs)))
    t_created = time.time()
    pod_of = {name: (f"{name}-0" if horus else name) for name in created}
    deadline = time.time() + 600
    while time.time() < deadline and len(watch.bound) < jobs:
        time.sleep(0.2)
    watch.stop()
    extra: dict[str, Any] = {}
    if state is not None:
        time.sleep(2.0)  # the writes that follow the binding (status Running, Events)
        cpu = control_plane_cpu(state) - cpu0
        req1 = request_counts(state)
        per_verb = {v: round((req1[v] - req0.get(v, 0.0)) / jobs, 2) for v in sorted(req1)}
        writes = sum(per_verb.get(v, 0.0) for v in _WRITES)
        writes1 = request_counts(state, by=_WRITE_KEY)
        by_kind = {
            k: round((n - writes0.get(k, 0.0)) / jobs, 2)
            for k, n in sorted(writes1.items())
            if k.rsplit("/", 1)[-1] in _WRITES
        }
        extra = {
            "control_plane_cpu_ms_per_job": round(cpu * 1e3 / jobs, 2),
            "requests_per_job_by_verb": {k: v for k, v in per_verb.items() if v},
            "writes_per_job": round(writes, 2),
            "writes_per_job_by_resource": {k: v for k, v in by_kind.items() if v},
        }
    lat = [watch.bound[pod_of[n]] - t for n, t in created.items() if pod_of[n] in watch.bound]
    last = max(watch.bound.values()) if watch.bound else float("nan")
    return {
        "jobs": jobs,
        "bound": len(watch.bound),
        "create_seconds": round(t_created - t0, 3),
        "makespan_seconds": round(last - t0, 3),
        "bound_per_second": round(len(watch.bound) / (last - t0), 2) if watch.bound else 0.0,
        "latency_p50_seconds": round(percentile(lat, 50), 3),
        "latency_p99_seconds": round(percentile(lat, 99), 3),
        "latency_mean_seconds": round(statistics.fmean(lat), 3) if lat else None,
        **extra,
    }


def ratios(horus: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Horus / baseline for each measure (None where the baseline is 0 or missing)."""

    def r(key: str) -> float | None:
        a, b = horus.get(key), base.get(key)
        return round(a / b, 2) if isinstance(a, (int, float)) and b else None

    return {
        "bound_per_second": r("bound_per_second"),
        "latency_p50": r("latency_p50_seconds"),
        "latency_p99": r("latency_p99_seconds"),
        "control_plane_cpu_per_job": r("control_plane_cpu_ms_per_job"),
        "writes_per_job": r("writes_per_job"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--workers", type=int, default=16, help="client threads creating objects")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/operator-e2e.json")
    ap.add_argument(
        "--operator-log", type=Path, default=None, help="keep the operator's log (pass timings)"
    )
    ap.add_argument(
        "--baseline-qps",
        type=int,
        default=None,
        help="kube-scheduler client QPS (burst 2x) for the baseline; default: its own (50/100)",
    )
    args = ap.parse_args()
    if args.jobs > args.nodes * args.gpus_per_node:
        ap.error("the baseline needs one whole GPU per job: --jobs <= nodes × GPUs")
    qps = args.baseline_qps
    if qps is not None and not 1 <= qps <= 100_000:
        ap.error(f"--baseline-qps must be 1..100000, got {qps}")
    sched = {"clientConnection": {"qps": qps, "burst": 2 * qps}} if qps else None
    local, state, api = gpu_cluster(
        "horus-bench-op-", args.nodes, args.gpus_per_node, args.workers + 4, sched
    )
    folder = local.directory
    op: subprocess.Popen[bytes] | None = None
    try:
        log = folder / "operator.log"
        op = subprocess.Popen(
            operator_command(state.kubeconfig, "--metrics-port", "0", "--identity", "bench"),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 60
        while "is now leader" not in log.read_text(errors="replace"):
            if time.time() > deadline or op.poll() is not None:
                raise RuntimeError(f"operator did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(1.0)
        print(f"horus: {args.jobs} DLJobs over {args.nodes}×{args.gpus_per_node} GPUs …")
        peak, op_cpu0 = [0.0], cpu_seconds(op.pid)

        def sample(proc: subprocess.Popen[bytes]) -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], rss_mib(proc.pid))
                time.sleep(0.5)

        threading.Thread(target=sample, args=(op,), daemon=True).start()
        horus = run_round(api, "bench-horus", args.jobs, True, args.workers, state)
        horus["operator_rss_peak_mib"] = round(max(peak[0], rss_mib(op.pid)), 1)
        horus["operator_cpu_seconds"] = round(cpu_seconds(op.pid) - op_cpu0, 1)
        print(json.dumps(horus))
        op.terminate()
        op.wait(15)
        op = None
        print(f"baseline: {args.jobs} pods with nvidia.com/gpu: 1, stock kube-scheduler …")
        base = run_round(api, "bench-baseline", args.jobs, False, args.workers, state)
        print(json.dumps(base))
        result = {
            "benchmark": "operator-e2e",
            "cluster": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node},
            "baseline_scheduler_qps": qps or "default (50, burst 100)",
            "machine": {"cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]},
            "command": "benchmarks/operator_e2e.py " + " ".join(sys.argv[1:]),
            "horus": horus,
            "baseline_kube_scheduler": base,
            "ratios_horus_over_baseline": ratios(horus, base),
            "targets": {
                "bound_per_second": ">= 0.8",
                "latency_p50": "<= 2",
                "latency_p99": "<= 2",
                "control_plane_cpu_per_job": "<= 1.5",
            },
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
        print("ratios Horus / baseline: " + json.dumps(result["ratios_horus_over_baseline"]))
        print(
            f"horus   : {horus['bound_per_second']:7.1f} pods bound/s, p50 "
            f"{horus['latency_p50_seconds']:.2f}s p99 {horus['latency_p99_seconds']:.2f}s\n"
            f"baseline: {base['bound_per_second']:7.1f} pods bound/s, p50 "
            f"{base['latency_p50_seconds']:.2f}s p99 {base['latency_p99_seconds']:.2f}s"
        )
        return 0
    finally:
        if op is not None:
            op.kill()
        if args.operator_log is not None and (folder / "operator.log").is_file():
            args.operator_log.write_bytes((folder / "operator.log").read_bytes())
        local.down(quiet=True)


if __name__ == "__main__":
    raise SystemExit(main())
