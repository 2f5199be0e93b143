"""The one-command demo (``make demo`` → ``horus dev demo up``): Horus as a cluster admin meets
it, on the local control plane, with nothing faked but the GPUs.

Why it is built this way:

* **helm installs Horus**, exactly as on a real cluster, but with the operator Deployment and
  the node DaemonSet switched off: kwok nodes run no containers, so those pods could never
  start. The chart still provides everything else — the DLJob CRD, the ServiceAccounts and
  their RBAC, the ``horus-config`` ConfigMap and the assignment-key Secret.
* **The operator and the agent run as local processes** that read the chart's ConfigMap as
  their ``--config`` and authenticate with ``kubectl create token`` of the chart's
  ServiceAccounts — so the demo proves the chart's configuration loads and its least-privilege
  RBAC is enough for real work (a missing rule shows up as a 403 in their logs). The agent
  may not read Secrets, so the demo reads the assignment key as admin and hands it a file, as
  the DaemonSet's volume would.
* **A real Prometheus** (Debian's ``/usr/bin/prometheus``) scrapes both, so every Grafana
  panel in ``dashboards/`` can be evaluated against the demo (``tests/e2e/test_demo.py``).
* **The workload** is ``examples/*.yaml`` plus a few generated jobs from the profile zoo
  (``examples/profiles``) so that GPUs must be shared, and one job whose simulated memory use
  (annotation ``horus.io/simulated-memory-mib``, demo/test only) exceeds its share, so the
  agent's watchdog evicts it and the Enforcement dashboard has something to show.
* **Horus corrects a placement while the demo watches** (issue 17: moves). The jobs arrive in
  two waves: everything else first, then ``resnet50-movable`` (``spec.migration.policy:
  OnCheckpoint``; the generated zoo jobs of the full demo opt in the same way) once every other
  job is placed — every GPU already holds a ~90 % job or the memory hog, so it must share one
  with a ~90 % job. When the watchdog evicts the memory hog (``WATCHDOG_GRACE_S`` after it
  first exceeds its share, later than the arrivals) its GPU has room, and the operator's next
  correction round moves the job there: SIGTERM, checkpoint, a new pod on the new GPU that
  resumes from the checkpoint. The live table counts it (``MOVES``, reason ``Migrating`` while
  it happens), ``kubectl describe`` shows the ``Migrated`` Event, the report marks it on the
  utilisation plot. Settings that make it happen within the watch: the operator's
  ``--correction-period`` ``CORRECTION_PERIOD_S`` (10 s, default 30) and ``--restart-seconds``
  ``RESTART_S`` (10 s: the demo workload restarts in seconds, not the default minute); the
  agents sample every 2 s and write ``status.observed`` every 10 s (a job is not moved before it
  was observed where it runs); ``migration.min_interval_s`` stays at its default (1 h), so no
  job moves twice during the demo.
* **Every process and the cluster folder are recorded in one state directory**
  (``state.json``), so ``down`` stops exactly what ``up`` started (checking each PID still runs
  the command that was started, never a recycled one) and nothing is left running.

Processes are started as subprocesses (``python -m horus …``) rather than imported: the
import-linter layers keep ``horus.devcluster`` independent of the operator and agent packages.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from horus.api.assignment import decode_assignment
from horus.common import constants as c
from horus.common.clock import timestamp
from horus.common.errors import ClusterError, HorusError
from horus.devcluster.cluster import LocalCluster, write_kubeconfig
from horus.devcluster.images import IMAGES, reference
from horus.devcluster.nodes import NodeSpec, add_nodes
from horus.devcluster.processes import (
    ManagedProcess,
    free_port,
    load_state_fields,
    save_state,
    spawn,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
CHART = ROOT / "charts" / "horus"
PROMETHEUS = "/usr/bin/prometheus"
STATE_FILE = "demo.json"
REPORT_FILE = "report.png"
NAMESPACE = c.HORUS_NAMESPACE
RELEASE = "horus"
#: The example that can never be placed (it asks for more memory than any GPU has).
UNPLACEABLE = "does-not-fit"
#: The demo-only job whose simulated memory use exceeds its share: the watchdog evicts it.
HOG = "memory-hog"
#: The demo-only gang that needs every GPU of the cluster whole: it fits an empty cluster, so
#: it waits in the queue (with the scheduler's reason) behind the jobs already running.
WAITING = "whole-cluster"

#: The job that arrives last, when every GPU is busy, and is moved once the hog's GPU is free.
LATE = "resnet50-movable"
#: Seconds the watchdog lets the memory hog exceed its share before evicting it: long enough
#: for every job to arrive and be placed first (the eviction is what frees a better GPU for
#: the move), short enough for the demo's watch.
WATCHDOG_GRACE_S = 15
#: The operator's correction rounds (moves, preemptions) in the demo: every 10 s instead of
#: 30 s, and a moved job's restart counted as 10 s (the demo workload restarts in seconds).
CORRECTION_PERIOD_S = 10
RESTART_S = 10
OPERATOR_ARGS = (
    *("--resync-period", "5"),
    *("--correction-period", str(CORRECTION_PERIOD_S), "--restart-seconds", str(RESTART_S)),
)
#: The agents sample every 2 s and write status.observed every 10 s.
AGENT_ARGS = ("--interval-seconds", "2", "--feedback-interval-seconds", "10")

#: Helm values of the demo: no in-cluster workloads (kwok runs no containers); the agent's
#: watchdog evicts (enforcement mps) but the local agent is told ``--enforcement none``
#: since there is no MPS daemon on a laptop.
HELM_VALUES = (
    "operator.enabled=false",
    "node.enabled=false",
    "node.backend=simulated",
    "enforcement=mps",
    f"watchdogGraceSeconds={WATCHDOG_GRACE_S}",
)


#: Helm values of the real-node demo, on top of horus.devcluster.chart.real_node_values: the
#: watchdog grace above, the operator's 5 s resync and correction settings, and the agents'
#: intervals.
REAL_HELM_VALUES: dict[str, Any] = {
    "watchdogGraceSeconds": WATCHDOG_GRACE_S,
    "operator": {"extraArgs": list(OPERATOR_ARGS)},
    "node": {"agent": {"extraArgs": ["--enforcement", "none", *AGENT_ARGS]}},
}
#: The example workload's arguments in the demo: run until demo-down, light on CPU (about
#: 1 % of a core per container), a progress line every 10 s.
WORKLOAD_ARGS = ("--step-sleep", "0.1", "--report-seconds", "10")


def default_dir() -> Path:
    env = os.environ.get("HORUS_DEMO_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "horus" / "demo"


@dataclass(frozen=True)
class DemoOptions:
    """How big the demo is and how long it watches."""

    directory: Path
    #: The test suite's variant: 2 nodes × 2 GPUs, the examples only, a shorter watch.
    quick: bool = False
    nodes: int = 3
    gpus_per_node: int = 4
    #: Longest time the live table refreshes before the report is drawn anyway.
    watch_seconds: float = 150.0
    #: Seconds of metrics the report shows at least after every job has settled (running,
    #: or refused/queued with a reason).
    min_history_seconds: float = 40.0
    #: Fixed Prometheus port (0: a free one).
    prometheus_port: int = 0
    #: Seconds between live-table refreshes.
    refresh_seconds: float = 2.0
    #: kwok nodes (no containers; the operator and agent run as local processes) instead of
    #: real kubelet nodes with Horus in-cluster. For machines where root is not available.
    kwok: bool = False

    @classmethod
    def make(cls, directory: Path | None, quick: bool, **overrides: Any) -> DemoOptions:
        base: dict[str, Any] = {"directory": directory or default_dir(), "quick": quick}
        if quick:
            base.update(nodes=2, gpus_per_node=2, watch_seconds=90.0, min_history_seconds=10.0)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass
class DemoState:
    """What ``up`` started; ``down`` (another process, later) reads it."""

    directory: str
    cluster_dir: str
    kubeconfig: str
    bin_dir: str
    prometheus_url: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ManagedProcess] = field(default_factory=list)
    started_at: float = 0.0
    report: str = ""

    def save(self) -> None:
        save_state(Path(self.directory) / STATE_FILE, self)

    @classmethod
    def load(cls, directory: Path) -> DemoState | None:
        raw = load_state_fields(directory / STATE_FILE)
        return None if raw is None else cls(**raw)


# --- processes ------------------------------------------------------------------------------


def _check_port_free(port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ClusterError(
                f"port 127.0.0.1:{port} for {what} is busy; free it or choose another "
                "(HORUS_DEMO_PROMETHEUS_PORT, 0 = any free port)"
            ) from None


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= int(resp.status) < 300
    except (OSError, urllib.error.URLError):
        return False


def _wait(
    what: str, check: Callable[[], bool], timeout: float, proc: ManagedProcess | None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and not proc.running():
            raise ClusterError(
                f"{what}: {proc.name} exited; see its log {proc.log}:\n{proc.log_tail()}"
            )
        time.sleep(0.5)
    where = f"; see {proc.log}:\n{proc.log_tail()}" if proc else ""
    raise ClusterError(f"{what}: not ready after {timeout:.0f}s{where}")


# --- the demo -------------------------------------------------------------------------------


class Demo:
    """``up`` / ``down`` / ``status`` of one demo folder."""

    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.options = options
        self.directory = options.directory
        self.out = out or sys.stdout

    # -- helpers --

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def step(self, text: str) -> None:
        self.say(f"==> {text}")

    def kubectl(
        self, state: DemoState, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self._tool(state, "kubectl", args, input=input, check=check)

    def helm(self, state: DemoState, *args: str) -> subprocess.CompletedProcess[str]:
        return self._tool(state, "helm", args)

    def _tool(
        self,
        state: DemoState,
        tool: str,
        args: Sequence[str],
        input: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": state.kubeconfig,
            "HELM_CACHE_HOME": str(Path(state.directory) / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(Path(state.directory) / "helm" / "config"),
            "HELM_DATA_HOME": str(Path(state.directory) / "helm" / "data"),
        }
        proc = subprocess.run(
            [str(Path(state.bin_dir) / tool), *args],
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"{tool} {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def state(self) -> DemoState | None:
        return DemoState.load(self.directory)

    # -- up --

    def up(self) -> DemoState:
        """Run the whole demo; leaves the cluster and processes running for exploring."""
        t0 = time.monotonic()
        self._refuse_if_up()
        opts = self.options
        if opts.prometheus_port:
            _check_port_free(opts.prometheus_port, "Prometheus")
        if not Path(PROMETHEUS).exists():
            raise ClusterError(f"{PROMETHEUS} is missing: apt-get install prometheus")
        if not opts.kwok:
            from horus.devcluster.realnodes import check_host

            try:
                check_host()
            except ClusterError as exc:
                raise ClusterError(
                    f"{exc}. The demo runs real kubelet nodes; DEMO_KWOK=1 make demo (horus dev "
                    "demo up --kwok) runs it on kwok nodes, without containers and without root"
                ) from None
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        (self.directory / REPORT_FILE).unlink(missing_ok=True)
        cluster_dir = self.directory / "cluster"

        self.step("local control plane (etcd, apiserver, controller-manager, scheduler, kwok)")
        cstate = LocalCluster(cluster_dir).up(timeout=180)
        state = DemoState(
            directory=str(self.directory),
            cluster_dir=str(cluster_dir),
            kubeconfig=cstate.kubeconfig,
            bin_dir=cstate.bin_dir,
            started_at=time.time(),
        )
        state.save()
        try:
            return self._up(state, cstate.server, t0)
        except BaseException:
            self.say(f"demo failed; logs in {self.directory / 'logs'}; stopping what started")
            self.down(quiet=True, keep_logs=True)
            raise

    def _refuse_if_up(self) -> None:
        existing = self.state()
        if existing is None:
            if LocalCluster(self.directory / "cluster").state() is not None:
                LocalCluster(self.directory / "cluster").down()  # a half-started demo's cluster
            return
        alive = [p.name for p in existing.processes if p.running()]
        cluster = LocalCluster(Path(existing.cluster_dir)).status()
        if alive or any(p["running"] for p in cluster.get("processes", {}).values()):
            raise ClusterError(
                f"the demo is already up in {self.directory} (Prometheus "
                f"{existing.prometheus_url or '-'}, KUBECONFIG={existing.kubeconfig}); "
                "stop it first with 'make demo-down' (horus dev demo down)"
            )
        self.down(quiet=True)  # leftovers of a demo whose processes all died

    def _up(self, state: DemoState, server: str, t0: float) -> DemoState:
        if not self.options.kwok:
            return self._up_real(state, t0)
        opts = self.options
        folder = self.directory
        self.step(f"{opts.nodes} kwok node(s) × {opts.gpus_per_node} simulated H100 (80 GiB)")
        names = add_nodes(
            state.kubeconfig,
            NodeSpec(count=opts.nodes, gpus_per_node=opts.gpus_per_node),
            wait=120,
        )
        self.say(f"    nodes Ready: {', '.join(names)}")

        self.step(f"helm install {RELEASE} charts/horus -n {NAMESPACE} (CRD, RBAC, config, key)")
        args = ["install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait"]
        for value in HELM_VALUES:
            args += ["--set", value]
        self.helm(state, *args)
        self.kubectl(state, "wait", "--for=condition=Established", "crd/dljobs.horus.io")

        # What the pods would mount: the chart's config, its ServiceAccount tokens, the key.
        config = folder / "config.yaml"
        config.write_text(
            self.kubectl(
                state,
                *("get", "configmap", "horus-config", "-n", NAMESPACE),
                "-o",
                "jsonpath={.data.config\\.yaml}",
            ).stdout
        )
        ca = Path(state.cluster_dir) / "pki" / "ca.crt"
        kubeconfigs = {}
        for role, sa in (("operator", "horus-operator"), ("agent", "horus-node")):
            token = self.kubectl(
                state, "create", "token", sa, "-n", NAMESPACE, "--duration=24h"
            ).stdout.strip()
            path = folder / f"{role}.kubeconfig"
            write_kubeconfig(path, server, ca, token, f"system:serviceaccount:{NAMESPACE}:{sa}")
            kubeconfigs[role] = path
        key_b64 = self.kubectl(
            state,
            *("get", "secret", c.ASSIGNMENT_KEY_SECRET, "-n", NAMESPACE),
            "-o",
            f"jsonpath={{.data.{c.ASSIGNMENT_KEY_SECRET_KEY}}}",
        ).stdout.strip()
        key_file = folder / "assignment.key"
        key_file.write_bytes(base64.b64decode(key_b64))
        key_file.chmod(0o600)

        env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
        env.pop("KUBECONFIG", None)
        env["PYTHONUNBUFFERED"] = "1"
        py = [sys.executable, "-m", "horus"]
        op_port, agent_port = free_port(), free_port()
        prom_port = opts.prometheus_port or free_port()
        state.ports = {"operator-metrics": op_port, "agent-metrics": agent_port}

        self.step(f"operator (local process, ServiceAccount horus-operator, metrics :{op_port})")
        op = spawn(
            "operator",
            [
                *py,
                *("operator", "run", "--config", str(config)),
                *("--kubeconfig", str(kubeconfigs["operator"])),
                *("--metrics-port", str(op_port), "--metrics-host", "127.0.0.1"),
                *OPERATOR_ARGS,
                *("--identity", "demo-operator"),
            ],
            folder,
            env,
        )
        state.processes.append(op)
        state.save()

        self.step(
            f"agent (simulated backend for type=kwok nodes, ServiceAccount horus-node, :{agent_port})"
        )
        agent = spawn(
            "agent",
            [
                *py,
                *("agent", "run", "--config", str(config)),
                *("--node-selector", f"{c.KWOK_NODE_TYPE_LABEL}={c.KWOK_NODE_TYPE_VALUE}"),
                *("--backend", "simulated", "--enforcement", "none", "--watchdog", "evict"),
                *AGENT_ARGS,
                *("--kubeconfig", str(kubeconfigs["agent"])),
                *("--assignment-key-file", str(key_file)),
                *("--metrics-address", "127.0.0.1", "--metrics-port", str(agent_port)),
                *("--training-rows", str(folder / "training-rows.csv")),
                *("--pair-rows", str(folder / "pair-rows.csv")),
            ],
            folder,
            env,
        )
        state.processes.append(agent)
        state.save()

        prom = self._prometheus(
            state,
            prom_port,
            [
                {
                    "job_name": "horus-operator",
                    "static_configs": [{"targets": [f"127.0.0.1:{op_port}"]}],
                },
                {
                    "job_name": "horus-agent",
                    "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}],
                },
            ],
            env,
        )
        _wait(
            "operator metrics",
            lambda: _http_ok(f"http://127.0.0.1:{op_port}/metrics"),
            90,
            op,
        )
        _wait(
            "agent metrics",
            lambda: _http_ok(f"http://127.0.0.1:{agent_port}/metrics"),
            60,
            agent,
        )
        return self._run_jobs(state, [op, agent, prom], t0)

    def _prometheus(
        self,
        state: DemoState,
        port: int,
        scrape_configs: list[dict[str, Any]],
        env: dict[str, str],
    ) -> ManagedProcess:
        """A real Prometheus on 127.0.0.1:``port`` (recorded in the state), ready."""
        folder = self.directory
        self.step(f"Prometheus 127.0.0.1:{port} scraping operator and agent every 2 s")
        prom_cfg = folder / "prometheus.yml"
        prom_cfg.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
                    "scrape_configs": scrape_configs,
                },
                sort_keys=False,
            )
        )
        prom = spawn(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={prom_cfg}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1d",
            ],
            folder,
            env,
        )
        state.processes.append(prom)
        state.prometheus_url = f"http://127.0.0.1:{port}"
        state.ports["prometheus"] = port
        state.save()
        _wait("Prometheus", lambda: _http_ok(f"{state.prometheus_url}/-/ready"), 60, prom)
        return prom

    def _run_jobs(self, state: DemoState, procs: list[ManagedProcess], t0: float) -> DemoState:
        """Submit the workload, show the live table, draw the report, print what to explore."""
        folder = self.directory
        prom_t0 = time.time()
        self.step("submitting DLJobs")
        first, late = self.workload()
        for path in first:
            self.kubectl(state, "apply", "-f", str(path))
            self.say(f"    kubectl apply -f {_short(path)}")
        self._wait_placed(state, procs)
        self.step(f"every GPU is busy: {LATE} arrives (it may be moved: OnCheckpoint)")
        for path in late:
            self.kubectl(state, "apply", "-f", str(path))
            self.say(f"    kubectl apply -f {_short(path)}")

        self.watch(state, prom_t0, procs)

        self.step("report")
        report = folder / REPORT_FILE
        from horus.devcluster.report import write_report

        moves = moved_jobs(self._jobs(state))
        write_report(state.prometheus_url, prom_t0, time.time(), report, moves)
        for when, text in moves:
            self.say(f"    t={when - prom_t0:.0f}s moved {text}")
        state.report = str(report)
        state.save()
        self.say(f"    {report}")
        self.say("")
        self.say(f"demo ready in {time.monotonic() - t0:.0f}s. Explore it:")
        self.say(f"  export KUBECONFIG={state.kubeconfig} PATH={state.bin_dir}:$PATH")
        self.say("  kubectl get dljobs -A -o wide       # phase, placement, reasons")
        self.say(f"  kubectl describe dljob {UNPLACEABLE}   # why Horus refused it")
        for name in sorted({text.split(":", 1)[0] for _, text in moves}):
            self.say(
                f"  kubectl describe dljob {name}   # Events: Migrated, with the expected gain"
            )
        self.say(f"  kubectl get dljob {WAITING} -o jsonpath='{{.status.message}}'  # why it waits")
        self.say("  kubectl get events --field-selector reason=GPUMemoryEvicted")
        if not self.options.kwok:
            self.say(
                "  kubectl logs resnet50-train-0 | head -3   # the GPU share the container got"
            )
            self.say(f"  kubectl logs {LATE}-0 | grep resumed   # where it resumed after its move")
            self.say(f"  kubectl -n {NAMESPACE} get pods -o wide   # operator x2, node DaemonSet")
        self.say(f"  Prometheus: {state.prometheus_url}  (try horus_gpu_utilization_ratio)")
        self.say(f"  report:     {report}")
        self.say(f"  logs:       {folder / 'logs'}")
        self.say("stop everything with: make demo-down")
        return state

    def _up_real(self, state: DemoState, t0: float) -> DemoState:
        """Real kubelet nodes, images built here, the chart with its operator and DaemonSet."""
        from horus.devcluster import chart

        opts = self.options
        self.step(
            f"{opts.nodes} real kubelet node(s) × {opts.gpus_per_node} simulated H100 (80 GiB), "
            "Horus images from this checkout, helm install (operator ×2 + node DaemonSet)"
        )
        local = LocalCluster(Path(state.cluster_dir))
        cstate = local.state()
        assert cstate is not None
        rc = chart.prepare(
            local,
            cstate,
            opts.nodes,
            opts.gpus_per_node,
            REAL_HELM_VALUES,
            lambda text: self.say(f"    {text}"),
        )
        targets = self.directory / "prometheus-targets"
        found = chart.write_scrape_targets(rc.kube, targets)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
        prom = self._prometheus(
            state,
            opts.prometheus_port or free_port(),
            chart.prometheus_scrape_configs(targets),
            env,
        )
        want = sum(len(t) for t in found.values())
        _wait(
            f"Prometheus scraping the {want} operator and agent pods by pod IP",
            lambda: self._targets_up(state) >= want,
            60,
            prom,
        )
        return self._run_jobs(state, [prom], t0)

    def _targets_up(self, state: DemoState) -> int:
        url = f"{state.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": "up == 1"})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return len(json.load(resp)["data"]["result"])
        except (OSError, KeyError, ValueError):
            return 0

    # -- workload --

    def workload(self) -> tuple[list[Path], list[Path]]:
        """The manifests to apply, in two waves: the memory hog (first: it must get an idle
        GPU before the others fill them), the examples and zoo extras (full demo only) and the
        waiting gang, highest priority first; then the late arrival (``LATE``), once every job
        of the first wave is placed."""
        jobs = self.directory / "jobs"
        jobs.mkdir(exist_ok=True)
        first = [p for p in sorted(EXAMPLES.glob("*.yaml")) if p.stem != LATE]
        late = [EXAMPLES / f"{LATE}.yaml"]
        extras: list[tuple[str, str, int]] = (
            []
            if self.options.quick
            else [
                ("vgg16-train", "vgg16-bs256.yaml", 2),
                ("bert-amp", "bert-base-b32-amp.yaml", 2),
                ("mobilenet-v3", "mobilenet-v3-small-b128.yaml", 2),
                ("resnet50-b64", "resnet50-b64.yaml", 2),
                ("lstm-b64", "lstm-lm-b64.yaml", 2),
            ]
        )
        for name, profile, replicas in extras:
            path = jobs / f"{name}.yaml"
            doc = zoo_job(name, EXAMPLES / "profiles" / profile, replicas, movable=True)
            path.write_text(yaml.safe_dump(doc))
            first.append(path)
        hog = jobs / f"{HOG}.yaml"
        hog_doc = yaml.safe_load(HOG_MANIFEST)
        # Inline profile (not the bert example's ConfigMap): it is submitted before that exists.
        profile = yaml.safe_load((EXAMPLES / "profiles" / "bert-base-bs16.yaml").read_text())
        profile.pop("apiVersion", None)
        profile.pop("kind", None)
        hog_doc["spec"]["profile"] = profile
        hog.write_text(HOG_MANIFEST.split("apiVersion:", 1)[0] + yaml.safe_dump(hog_doc))
        first.insert(0, hog)
        gpus = self.options.nodes * self.options.gpus_per_node
        waiting = zoo_job(WAITING, EXAMPLES / "profiles" / "resnet50-b64.yaml", gpus)
        waiting["spec"].update(
            priority=-1000, gpu={"mode": "explicit", "corePercent": 100, "memoryMiB": 40960}
        )
        path = jobs / f"{WAITING}.yaml"
        path.write_text(
            f"# DEMO ONLY: {gpus} replicas, each a whole GPU: fits only an empty cluster, so it\n"
            "# waits in the queue with the scheduler's reason (horus_queue_length).\n"
            + yaml.safe_dump(waiting)
        )
        first.append(path)
        # Highest priority first, so the passes place them in the order one queue pass would
        # (a job submitted early is placed early, whatever its priority).
        first.sort(key=lambda p: -_priority(p))
        if self.options.kwok:
            return first, late
        return [self._on_real_nodes(p, jobs) for p in first], [
            self._on_real_nodes(p, jobs) for p in late
        ]

    def _on_real_nodes(self, path: Path, jobs: Path) -> Path:
        """The manifest as real nodes can run it. A container of another image (the examples
        name training images this machine cannot pull) becomes the example workload image: a
        training loop that prints the share it received and its step rate
        (examples/workload/train.py), keeping its volume mounts; one that already runs the
        workload image keeps its arguments, and so do init containers of that image (the
        movable jobs' checkpoint-folder owner); other init containers are dropped. A hostPath
        volume (a checkpoint that must outlive the pod) is moved into the demo's folder, so
        demo-down removes it with the rest."""
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        workload = reference(IMAGES["workload"].repository)
        ours = IMAGES["workload"].repository
        for doc in docs:
            if doc.get("kind") != "DLJob":
                continue
            model = str((doc["spec"].get("profile") or {}).get("model", doc["metadata"]["name"]))
            spec = doc["spec"]["template"].setdefault("spec", {})
            out_containers = []
            for container in spec.get("containers") or [{}]:
                if ours in str(container.get("image", "")):
                    args = list(container.get("args") or [])
                    if "--step-sleep" not in args:
                        args += ["--step-sleep", WORKLOAD_ARGS[1]]
                    out_containers.append(
                        {**container, "image": workload, "imagePullPolicy": "Never", "args": args}
                    )
                else:
                    mounts = container.get("volumeMounts")
                    out_containers.append(
                        {
                            "name": container.get("name", "trainer"),
                            "image": workload,
                            "imagePullPolicy": "Never",
                            "args": ["--model", model, *WORKLOAD_ARGS],
                            **({"volumeMounts": mounts} if mounts else {}),
                        }
                    )
            spec["containers"] = out_containers
            inits = [
                {**init, "image": workload, "imagePullPolicy": "Never"}
                for init in spec.get("initContainers") or []
                if ours in str(init.get("image", ""))
            ]
            if inits:
                spec["initContainers"] = inits
            else:
                spec.pop("initContainers", None)
            kept = {
                m.get("name")
                for c in (*out_containers, *inits)
                for m in c.get("volumeMounts") or []
            }
            volumes = []
            for volume in spec.get("volumes") or []:
                if volume.get("name") not in kept:
                    continue
                if "hostPath" in volume:
                    where = self.directory / "hostpath" / volume["hostPath"]["path"].strip("/")
                    where.mkdir(parents=True, exist_ok=True)
                    volume = {**volume, "hostPath": {"path": str(where), "type": "Directory"}}
                volumes.append(volume)
            if volumes:
                spec["volumes"] = volumes
            else:
                spec.pop("volumes", None)
            spec["terminationGracePeriodSeconds"] = min(
                int(spec.get("terminationGracePeriodSeconds", 2)), 30
            )
        out = jobs / f"real-{path.name}"
        out.write_text(
            f"# {_short(path)}, as the demo's real nodes run it\n" + yaml.safe_dump_all(docs)
        )
        return out

    # -- live table --

    def _jobs(self, state: DemoState) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.kubectl(state, "get", "dljobs", "-A", "-o", "json").stdout
        )["items"]
        return items

    def _wait_placed(
        self, state: DemoState, procs: list[ManagedProcess], timeout: float = 90.0
    ) -> None:
        """Until every submitted job was placed, refused or queued with a reason (the late
        arrival is meant to find every GPU busy); goes on after ``timeout`` regardless."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _check_running(procs)
            if all(decided(j) for j in self._jobs(state)):
                return
            time.sleep(1.0)
        self.say(f"    (not every job was placed after {timeout:.0f}s; going on)")

    def watch(self, state: DemoState, prom_t0: float, procs: list[ManagedProcess]) -> None:
        """Refresh the placement table until the story is told (or ``watch_seconds``): every
        job settled, the memory hog evicted, a move finished, and ``min_history_seconds`` of
        metrics after the last of them."""
        opts = self.options
        tty = self.out.isatty()
        deadline = time.monotonic() + opts.watch_seconds
        last = ""
        settled_at = 0.0
        moved_at = 0.0
        while True:
            _check_running(procs)
            jobs = self._jobs(state)
            pods = json.loads(
                self.kubectl(
                    state, "get", "pods", "-A", "-l", c.LABEL_DLJOB_NAME, "-o", "json", check=False
                ).stdout
                or '{"items": []}'
            )
            table = render_table(jobs, pods["items"])
            elapsed = time.time() - prom_t0
            header = (
                f"Horus demo — {len(jobs)} DLJobs, t={elapsed:4.0f}s "
                f"(refresh {opts.refresh_seconds:.0f}s, Prometheus {state.prometheus_url})"
            )
            if tty:
                self.out.write("\033[H\033[J" + header + "\n" + table + "\n")
                self.out.flush()
            elif table != last:
                self.say(header + "\n" + table)
            last = table
            now = time.monotonic()
            settled_at = (settled_at or now) if settled(jobs) else 0.0
            moved_at = (moved_at or now) if moves_done(jobs) else 0.0
            story = settled_at and moved_at and self._evictions_seen(state)
            if story and now - max(settled_at, moved_at) >= opts.min_history_seconds:
                break
            if now > deadline:
                missing = "" if moved_at else "; no job was moved"
                self.say(f"(stopped watching after {opts.watch_seconds:.0f}s{missing})")
                break
            time.sleep(opts.refresh_seconds)
        if tty:
            self.say("")

    def _evictions_seen(self, state: DemoState) -> bool:
        url = f"{state.prometheus_url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": f"{c.METRIC_ENFORCEMENT_EVICTIONS}_total"}
        )
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return bool(json.load(resp)["data"]["result"])
        except (OSError, KeyError, ValueError):
            return False

    # -- down / status --

    def down(self, quiet: bool = False, keep_logs: bool = False) -> bool:
        """Stop every recorded process and the cluster; keep only the report (and logs)."""
        state = self.state()
        cluster = LocalCluster(Path(state.cluster_dir) if state else self.directory / "cluster")
        found = state is not None or cluster.state() is not None
        if state is not None:
            for proc in reversed(state.processes):
                proc.stop()
        cluster.down()
        if self.directory.is_dir():
            keep = {REPORT_FILE} | ({"logs"} if keep_logs else set())
            for entry in self.directory.iterdir():
                if entry.name in keep:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        if not quiet:
            if found:
                report = self.directory / REPORT_FILE
                kept = f"; the report stays at {report}" if report.exists() else ""
                self.say(f"demo in {self.directory} stopped{kept}")
            else:
                self.say(f"no demo runs in {self.directory}; nothing to stop")
        return found

    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {"up": False, "directory": str(self.directory)}
        return {
            "up": True,
            "directory": str(self.directory),
            "kubeconfig": state.kubeconfig,
            "prometheus": state.prometheus_url,
            "report": state.report,
            "processes": {
                p.name: {"pid": p.pid, "running": p.running(), "log": p.log}
                for p in state.processes
            },
            "cluster": LocalCluster(Path(state.cluster_dir)).status(),
        }


def _priority(path: Path) -> int:
    """The highest ``spec.priority`` of the DLJobs in a manifest (0 when unset)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return max(
        (int((d.get("spec") or {}).get("priority") or 0) for d in docs if d.get("kind") == "DLJob"),
        default=0,
    )


def _check_running(procs: list[ManagedProcess]) -> None:
    for p in procs:
        if not p.running():
            raise ClusterError(f"{p.name} exited; see {p.log}:\n{p.log_tail()}")


def _short(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


HOG_MANIFEST = f"""\
# DEMO/TEST ONLY: a job whose simulated GPU memory use (3 GiB) exceeds its explicit share
# (2 GiB). The agent's watchdog (enforcement mps → evict) evicts it after the grace period
# and records horus_enforcement_evictions_total; the annotation is read only by the
# simulated backend, never on real GPUs. Submitted first and at the highest priority so it is
# placed on an idle GPU: placed last it may find only shared GPUs that the interference model
# declines, and the eviction this job exists to show would never happen. It holds its GPU
# whole (corePercent 100), so the eviction leaves that GPU idle: the better place Horus then
# moves a job to.
apiVersion: horus.io/v1alpha1
kind: DLJob
metadata:
  name: {HOG}
spec:
  priority: 1000
  gpu:
    mode: explicit
    corePercent: 100
    memoryMiB: 2048
  profile:
    configMapRef:
      name: bert-base-profile
      key: profile.yaml
  template:
    metadata:
      annotations:
        {c.ANNOTATION_SIMULATED_MEMORY}: "3072"
    spec:
      restartPolicy: Never
      containers:
        - name: hog
          image: busybox:1.36
          command: ["sleep", "infinity"]
"""


def zoo_job(name: str, profile_file: Path, replicas: int, movable: bool = False) -> dict[str, Any]:
    """A DLJob for one profile of the zoo (``examples/profiles``), GPU share sized by Horus.
    ``movable``: it may be moved and preempted as ``examples/resnet50-movable.yaml`` may (its
    migration policy, checkpoint volume and the init container that hands the folder to the
    workload's user), checkpointing under ``/checkpoints/<name>``."""
    profile = yaml.safe_load(profile_file.read_text())
    profile.pop("apiVersion", None)
    profile.pop("kind", None)
    container: dict[str, Any] = {
        "name": "trainer",
        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "command": ["python", "/workspace/train.py"],
        "args": ["--model", str(profile.get("model", name))],
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    job: dict[str, Any] = {
        "apiVersion": f"{c.API_GROUP}/{c.API_VERSION}",
        "kind": "DLJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "gpu": {"mode": "auto"},
            "profile": profile,
            "template": {"spec": pod},
        },
    }
    if movable:
        example = yaml.safe_load((EXAMPLES / f"{LATE}.yaml").read_text())["spec"]
        folder = str(example["migration"]["checkpointPath"]).rsplit("/", 1)[0]
        job["spec"]["migration"] = {
            **example["migration"],
            "checkpointPath": f"{folder}/{name}",
        }
        template = example["template"]["spec"]
        container["volumeMounts"] = template["containers"][0]["volumeMounts"]
        pod["initContainers"] = template["initContainers"]
        pod["volumes"] = template["volumes"]
    return job


# --- the table ------------------------------------------------------------------------------


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


TERMINAL = ("Succeeded", "Failed")


def render_table(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    """One row per DLJob: phase, moves, where its replicas run (node/GPU, share), prediction,
    and the reason — why it is not running, or where it was last moved from."""
    by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get(c.LABEL_DLJOB_NAME)
        if job:
            by_job.setdefault((meta.get("namespace", ""), job), []).append(pod)
    rows = [
        (
            "DLJOB",
            "PHASE",
            "MOVES",
            "PRED UTIL",
            "PRED MEM",
            "PLACEMENT (node/gpu core% memMiB)",
            "REASON",
        )
    ]
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        meta = job["metadata"]
        st = job.get("status") or {}
        pred = st.get("predicted") or {}
        util = pred.get("utilMean")
        mem = pred.get("memoryMiBUpper")
        moves = st.get("migrations") or {}
        places = []
        for pod in sorted(
            by_job.get((meta.get("namespace", ""), meta["name"]), []),
            key=lambda p: p["metadata"]["name"],
        ):
            text = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_GPU_ASSIGNMENT)
            if not text or pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                a = decode_assignment(text)
            except (ValueError, HorusError):
                continue
            node = a.node.replace("gpu-node-", "n")
            for g in a.gpus or (a,):
                places.append(f"{node}/{g.gpu_index} {g.core_percent}% {g.memory_mib}")
        if st.get("phase") != c.DLJOB_PHASE_RUNNING:
            reason = st.get("reason") or ""
            message = st.get("message") or ""
            reason = f"{reason}: {message}" if reason and message else reason or message
        elif moves.get("count"):
            reason = f"moved from {moves.get('lastFrom', '?')} to {moves.get('lastTo', '?')}"
        else:
            reason = ""
        rows.append(
            (
                meta["name"],
                st.get("phase", "-"),
                str(int(moves.get("count") or 0)),
                f"{float(util):.0f}%" if isinstance(util, int | float) else "-",
                f"{int(mem)}" if isinstance(mem, int | float) else "-",
                ", ".join(places) or "-",
                reason[:90],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(len(widths))) + "  " + r[-1])
    return "\n".join(lines)
