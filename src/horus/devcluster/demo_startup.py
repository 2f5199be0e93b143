"""How the demo brings Horus up around its control plane: preflight checks, then either the
kwok variant (helm-installed chart without in-cluster workloads; the operator and the agent as
local processes, the operator with the chart's ServiceAccount, the agent with a dev-only one) or the real-node variant (the chart as
shipped, on real kubelets; ``chart``), and a real Prometheus scraping them.

Why a module of its own: this is the only part of the demo that starts processes and changes
the cluster, and each start is recorded in ``DemoState`` *before* the next one, so a failure at
any step is undone by ``Demo.down`` (``demo``). The settings that make the demo's move happen
within the watch (``WATCHDOG_GRACE_S``, ``CORRECTION_PERIOD_S``, ``RESTART_S``) are passed to
the processes here; ``demo``'s docstring says why they have these values.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError
from horus.devcluster import certs, prometheus
from horus.devcluster.cluster import LocalCluster, write_kubeconfig
from horus.devcluster.demo_state import DemoOptions, DemoState, helm, kubectl
from horus.devcluster.demo_workload import ROOT
from horus.devcluster.nodes import NodeSpec, add_nodes
from horus.devcluster.processes import ManagedProcess, free_port, spawn

Say = Callable[[str], None]

CHART = ROOT / "charts" / "horus"
NAMESPACE = c.HORUS_NAMESPACE
RELEASE = "horus"

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
    # kwok nodes have no kubelet for a DRA driver: their GPUs are extended resources the dev
    # cluster writes, so the kwok demo is the device-plugin path (the real-node one: auto, dra)
    "gpuSharing.path=devicePlugin",
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
    # No gpuSharing.path: the chart's auto, which is dra on this 1.37 cluster — each replica's
    # share a ResourceClaim the kube-scheduler allocates (printed by ``demo up``; checked by
    # tests/e2e/test_demo.py). The kwok variant stays on the device plugin (HELM_VALUES):
    # kwok nodes run no kubelet to prepare a claim.
    "watchdogGraceSeconds": WATCHDOG_GRACE_S,
    "operator": {"extraArgs": list(OPERATOR_ARGS)},
    "node": {"agent": {"extraArgs": ["--enforcement", "none", *AGENT_ARGS]}},
}


# --- before anything starts -------------------------------------------------------------------


def preflight(opts: DemoOptions) -> None:
    """Refuse early, naming the fix: a busy fixed Prometheus port, no Prometheus, or (real
    nodes) a host that cannot run kubelets."""
    if opts.prometheus_port:
        _check_port_free(opts.prometheus_port, "Prometheus")
    prometheus.binary()  # the built one (tools/controlplane/build.sh), or a ClusterError
    if not opts.kwok:
        from horus.devcluster.realnode_host import check_host

        try:
            check_host()
        except ClusterError as exc:
            raise ClusterError(
                f"{exc}. The demo runs real kubelet nodes; DEMO_KWOK=1 make demo (horus dev "
                "demo up --kwok) runs it on kwok nodes, without containers and without root"
            ) from None


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


# --- kwok nodes: Horus' processes run here ------------------------------------------------------


def start_kwok(state: DemoState, server: str, opts: DemoOptions, say: Say) -> list[ManagedProcess]:
    """kwok nodes, the chart without in-cluster workloads, the operator and the agent as
    local processes, Prometheus; returns the processes the watch must see running."""
    _add_kwok_nodes(state, opts, say)
    _install_chart(state, say)
    config, kubeconfigs, key_file = _pod_mounts(state, server, opts.directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
    env.pop("KUBECONFIG", None)
    env["PYTHONUNBUFFERED"] = "1"
    op_port, agent_port = free_port(), free_port()
    prom_port = opts.prometheus_port or free_port()
    state.ports = {"operator-metrics": op_port, "agent-metrics": agent_port}
    say(f"==> operator (local process, ServiceAccount horus-operator, metrics :{op_port})")
    op = _spawn(
        state,
        "operator",
        [
            *("operator", "run", "--config", str(config)),
            *("--kubeconfig", str(kubeconfigs["operator"])),
            *("--metrics-port", str(op_port), "--metrics-host", "127.0.0.1"),
            *OPERATOR_ARGS,
            *("--identity", "demo-operator"),
        ],
        env,
    )
    say(
        "==> agent (simulated backend for type=kwok nodes, dev-only ServiceAccount "
        f"{c.KWOK_AGENT_SERVICE_ACCOUNT}, :{agent_port})"
    )
    _write_verify_keys(state, key_file, op)
    agent = _spawn(state, "agent", _agent_args(config, kubeconfigs, key_file, agent_port), env)
    scrape = [
        {"job_name": f"horus-{name}", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        for name, port in (("operator", op_port), ("agent", agent_port))
    ]
    prom = start_prometheus(state, prom_port, scrape, env, say)
    _wait("operator metrics", lambda: _http_ok(f"http://127.0.0.1:{op_port}/metrics"), 90, op)
    _wait("agent metrics", lambda: _http_ok(f"http://127.0.0.1:{agent_port}/metrics"), 60, agent)
    return [op, agent, prom]


def _add_kwok_nodes(state: DemoState, opts: DemoOptions, say: Say) -> None:
    say(f"==> {opts.nodes} kwok node(s) × {opts.gpus_per_node} simulated H100 (80 GiB)")
    names = add_nodes(
        state.kubeconfig,
        NodeSpec(count=opts.nodes, gpus_per_node=opts.gpus_per_node),
        wait=120,
    )
    say(f"    nodes Ready: {', '.join(names)}")


def _install_chart(state: DemoState, say: Say) -> None:
    say(f"==> helm install {RELEASE} charts/horus -n {NAMESPACE} (CRD, RBAC, config, key)")
    args = ["install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait"]
    for value in HELM_VALUES:
        args += ["--set", value]
    helm(state, *args)
    kubectl(state, "wait", "--for=condition=Established", "crd/dljobs.horus.io")


def kwok_agent_rbac() -> list[dict[str, Any]]:
    """The kwok demo agent's own ServiceAccount, dev cluster only (never in the chart).

    The chart's node identity, ``horus-node``, may write only with the token the kubelet mounts
    in its DaemonSet pod, which names that pod's node; the admission policies compare it with
    every pod and Node it writes (manifests/rbac/node.yaml). The kwok demo's agent is one local
    process serving every simulated node with one token made here, which names no node, so as
    ``horus-node`` it could write nothing. It gets this account instead: what the agent does on
    simulated nodes (read nodes by label and pods, delete a pod over its share, write
    ``status.observed`` and Events) and nothing the device plugin does (no pod or node patch:
    kwok nodes have no device plugin). It is no Horus identity to the policies, so it may not
    write Horus' pod annotations either.
    """
    name = c.KWOK_AGENT_SERVICE_ACCOUNT
    meta = {"name": name, "labels": {"app.kubernetes.io/component": "dev-kwok-agent"}}
    dljobs = c.DLJOB_PLURAL
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        {"apiGroups": [c.API_GROUP], "resources": [dljobs], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [c.API_GROUP], "resources": [f"{dljobs}/status"], "verbs": ["get", "patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    rbac = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**meta, "namespace": NAMESPACE},
        },
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    ]


def _pod_mounts(state: DemoState, server: str, folder: Path) -> tuple[Path, dict[str, Path], Path]:
    """What the pods would mount, as files in ``folder``: the chart's config, a kubeconfig
    per role with its ServiceAccount's token, and where the published verify keys go
    (:func:`_write_verify_keys` writes them once the operator has published them)."""
    config = folder / "config.yaml"
    config.write_text(
        kubectl(
            state,
            *("get", "configmap", "horus-config", "-n", NAMESPACE),
            "-o",
            "jsonpath={.data.config\\.yaml}",
        ).stdout
    )
    ca = Path(state.cluster_dir) / "pki" / "ca.crt"
    kubectl(state, "apply", "-f", "-", input=yaml.safe_dump_all(kwok_agent_rbac()))
    kubeconfigs = {}
    for role, sa in (
        ("operator", c.OPERATOR_SERVICE_ACCOUNT),
        ("agent", c.KWOK_AGENT_SERVICE_ACCOUNT),  # dev only: kwok_agent_rbac says why
    ):
        token = kubectl(
            state, "create", "token", sa, "-n", NAMESPACE, f"--duration={certs.TOKEN_DURATION}"
        ).stdout.strip()
        path = folder / f"{role}.kubeconfig"
        write_kubeconfig(path, server, ca, token, f"system:serviceaccount:{NAMESPACE}:{sa}")
        kubeconfigs[role] = path
    return config, kubeconfigs, folder / "verify-keys.pem"


def _write_verify_keys(state: DemoState, key_file: Path, operator: ManagedProcess) -> None:
    """The public keys the agent verifies with (the ConfigMap the chart mounts on nodes),
    as soon as the operator has published them on its first start."""

    def published() -> bool:
        text = kubectl(
            state,
            *("get", "configmap", c.VERIFY_KEYS_CONFIGMAP, "-n", NAMESPACE),
            "-o",
            "jsonpath={.data.keys\\.pem}",  # c.VERIFY_KEYS_CONFIGMAP_ENTRY
            check=False,
        ).stdout
        if "BEGIN PUBLIC KEY" not in text:
            return False
        key_file.write_text(text)
        return True

    _wait("the operator's published verify keys", published, 90, operator)


def _agent_args(config: Path, kubeconfigs: dict[str, Path], key_file: Path, port: int) -> list[str]:
    folder = config.parent
    return [
        *("agent", "run", "--config", str(config)),
        *("--node-selector", f"{c.KWOK_NODE_TYPE_LABEL}={c.KWOK_NODE_TYPE_VALUE}"),
        *("--backend", "simulated", "--enforcement", "none", "--watchdog", "evict"),
        *AGENT_ARGS,
        *("--kubeconfig", str(kubeconfigs["agent"])),
        *("--assignment-key-file", str(key_file)),
        *("--metrics-address", "127.0.0.1", "--metrics-port", str(port)),
        *("--training-rows", str(folder / "training-rows.csv")),
        *("--pair-rows", str(folder / "pair-rows.csv")),
    ]


def _spawn(state: DemoState, name: str, args: list[str], env: dict[str, str]) -> ManagedProcess:
    """``python -m horus <args>`` in the background, recorded in the state at once."""
    proc = spawn(name, [sys.executable, "-m", "horus", *args], Path(state.directory), env)
    state.processes.append(proc)
    state.save()
    return proc


# --- real nodes: Horus runs in-cluster ----------------------------------------------------------


def start_real(state: DemoState, opts: DemoOptions, say: Say) -> list[ManagedProcess]:
    """Real kubelet nodes, images built here, the chart with its operator and DaemonSet, and
    Prometheus scraping their pods; returns the processes the watch must see running."""
    from horus.devcluster import chart

    say(
        f"==> {opts.nodes} real kubelet node(s) × {opts.gpus_per_node} simulated H100 (80 GiB), "
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
        lambda text: say(f"    {text}"),
    )
    discovery = prometheus.grant_discovery(
        rc.kube,
        cstate.server,
        cstate.ca_file(),
        opts.directory / "prometheus-discovery.kubeconfig",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
    prom = start_prometheus(
        state,
        opts.prometheus_port or free_port(),
        prometheus.scrape_configs(discovery),
        env,
        say,
    )
    pods = rc.kube.json(
        "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component in (operator,node)"
    )["items"]
    want = {p["metadata"]["name"] for p in pods}
    _wait(
        f"Prometheus discovering and scraping the {len(want)} operator and agent pods "
        "(Kubernetes service discovery: EndpointSlices of the chart's metrics Services)",
        lambda: want <= _discovered(state),
        60,
        prom,
    )
    return [prom]


def _discovered(state: DemoState) -> set[str]:
    try:
        return set().union(*prometheus.discovered_pods(state.prometheus_url).values())
    except (OSError, KeyError, ValueError):
        return set()


# --- Prometheus -------------------------------------------------------------------------------


def start_prometheus(
    state: DemoState,
    port: int,
    scrape_configs: list[dict[str, Any]],
    env: dict[str, str],
    say: Say,
) -> ManagedProcess:
    """A real Prometheus on 127.0.0.1:``port`` (recorded in the state), ready."""
    folder = Path(state.directory)
    say(f"==> Prometheus 127.0.0.1:{port} scraping operator and agent every 2 s")
    prom_cfg = prometheus.write_config(folder, scrape_configs)
    prom = spawn("prometheus", prometheus.command(prom_cfg, folder, port), folder, env)
    state.processes.append(prom)
    state.prometheus_url = f"http://127.0.0.1:{port}"
    state.ports["prometheus"] = port
    state.save()
    _wait("Prometheus", lambda: _http_ok(f"{state.prometheus_url}/-/ready"), 60, prom)
    return prom
