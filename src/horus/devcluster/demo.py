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
* **A real Prometheus** (built from its Go module with the Kubernetes service discovery;
  :mod:`horus.devcluster.prometheus`) scrapes both, so every Grafana panel in
  ``dashboards/`` can be evaluated against the demo (``tests/e2e/test_demo.py``). On real
  nodes it finds the operator and agent pods itself, through the apiserver (EndpointSlices of
  the chart's metrics Services); the kwok variant's processes are local, on fixed ports.
* **The workload** is ``examples/*.yaml`` plus a few generated jobs from the profile zoo
  (``examples/profiles``) so that GPUs must be shared, and one job whose simulated memory use
  (annotation ``horus.io/simulated-memory-mib``, demo/test only) exceeds its share, so the
  agent's watchdog evicts it and the Enforcement dashboard has something to show.
* **Horus corrects a placement while the demo watches** (a move). The jobs arrive in
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

Where each part lives: this module is the story's order (``Demo.up``: start, submit, watch,
report, explain; ``down``; ``status``); ``demo_state`` what is recorded between ``up`` and
``down``; ``demo_startup`` the preflight checks, the two ways of starting Horus and
Prometheus, and the settings named above; ``demo_workload`` the jobs submitted and their
real-node rewrite; ``demo_table`` the live table and its stop rule; ``report`` the PNG.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from horus.common.errors import ClusterError
from horus.devcluster.cluster import LocalCluster
from horus.devcluster.demo_startup import NAMESPACE, preflight, start_kwok, start_real
from horus.devcluster.demo_state import REPORT_FILE, DemoOptions, DemoState, kubectl
from horus.devcluster.demo_table import CLAIM_COLUMNS, list_jobs, moved_jobs, wait_placed, watch
from horus.devcluster.demo_workload import LATE, UNPLACEABLE, WAITING, short, workload
from horus.devcluster.processes import ManagedProcess


class Demo:
    """``up`` / ``down`` / ``status`` of one demo folder."""

    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.options = options
        self.directory = options.directory
        self.out = out or sys.stdout

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def step(self, text: str) -> None:
        self.say(f"==> {text}")

    def state(self) -> DemoState | None:
        return DemoState.load(self.directory)

    # -- up --

    def up(self) -> DemoState:
        """Run the whole demo; leaves the cluster and processes running for exploring."""
        t0 = time.monotonic()
        self._refuse_if_up()
        preflight(self.options)
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
            if self.options.kwok:
                procs = start_kwok(state, cstate.server, self.options, self.say)
            else:
                procs = start_real(state, self.options, self.say)
            return self._run_jobs(state, procs, t0)
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

    def _run_jobs(self, state: DemoState, procs: list[ManagedProcess], t0: float) -> DemoState:
        """Submit the workload, show the live table, draw the report, print what to explore."""
        prom_t0 = time.time()
        self._submit(state, procs)
        watch(state, self.options, self.out, prom_t0, procs)
        self._claims(state)
        moves = self._report(state, prom_t0)
        self.say("")
        self.say(f"demo ready in {time.monotonic() - t0:.0f}s. Explore it:")
        self._explore(state, moves)
        return state

    def _submit(self, state: DemoState, procs: list[ManagedProcess]) -> None:
        """The first wave, then (once it is placed) the late arrival."""
        self.step("submitting DLJobs")
        first, late = workload(self.options)
        for path in first:
            kubectl(state, "apply", "-f", str(path))
            self.say(f"    kubectl apply -f {short(path)}")
        wait_placed(state, procs, self.out)
        self.step(f"every GPU is busy: {LATE} arrives (it may be moved: OnCheckpoint)")
        for path in late:
            kubectl(state, "apply", "-f", str(path))
            self.say(f"    kubectl apply -f {short(path)}")

    def _on_dra(self, state: DemoState) -> bool:
        """Whether Horus runs on the dra path here (the chart's node DaemonSet runs the DRA
        driver: gpuSharing.path, auto on the real-node cluster's 1.37); the kwok demo runs no
        DaemonSet."""
        out = kubectl(
            state, "get", "daemonset", "horus-node", "-n", NAMESPACE, "-o", "json", check=False
        )
        if out.returncode != 0:
            return False
        spec = json.loads(out.stdout)["spec"]["template"]["spec"]
        return any(x["name"] == "dra-driver" for x in spec["containers"])

    def _claims(self, state: DemoState) -> None:
        """On the dra path: each replica's share as the kube-scheduler allocated it."""
        if not self._on_dra(state):
            return
        self.step("each replica's ResourceClaim, allocated by the kube-scheduler")
        self.say("    kubectl get resourceclaims -A -l horus.io/dljob -o custom-columns=...")
        out = kubectl(
            state, "get", "resourceclaims", "-A", "-l", "horus.io/dljob",
            "-o", f"custom-columns={CLAIM_COLUMNS}", check=False,
        )  # fmt: skip
        for line in (out.stdout or out.stderr).splitlines():
            self.say(f"    {line}")

    def _report(self, state: DemoState, prom_t0: float) -> list[tuple[float, str]]:
        """Draw the PNG report (recorded in the state); returns the moves it marks."""
        self.step("report")
        report = self.directory / REPORT_FILE
        from horus.devcluster.report import write_report

        moves = moved_jobs(list_jobs(state))
        write_report(state.prometheus_url, prom_t0, time.time(), report, moves)
        for when, text in moves:
            self.say(f"    t={when - prom_t0:.0f}s moved {text}")
        state.report = str(report)
        state.save()
        self.say(f"    {report}")
        return moves

    def _explore(self, state: DemoState, moves: list[tuple[float, str]]) -> None:
        """What to look at next, with the commands that show it."""
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
            if self._on_dra(state):
                self.say(
                    "  kubectl get resourceclaims -A   # one claim per replica (dra path); "
                    "its share:"
                )
                self.say(f"  kubectl get resourceclaims -A -o custom-columns={CLAIM_COLUMNS}")
        self.say(f"  Prometheus: {state.prometheus_url}  (try horus_gpu_utilization_ratio)")
        self.say(f"  report:     {self.directory / REPORT_FILE}")
        self.say(f"  logs:       {self.directory / 'logs'}")
        self.say("stop everything with: make demo-down")

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
