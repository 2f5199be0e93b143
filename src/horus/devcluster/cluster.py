"""Start, inspect and stop one local control plane: etcd, apiserver, controller-manager,
scheduler and kwok, each a child process with its own free port: on 127.0.0.1, except the
apiserver, which (as root) listens on an address of its own that pods reach through the
``kubernetes`` Service and nothing off the host reaches (:mod:`horus.devcluster.apiaddress`).

Everything of one cluster lives in one private folder (``HORUS_CLUSTER_DIR``, default
``~/.local/state/horus/cluster``): certificates, kubeconfigs, etcd data, logs, and
``state.json`` with the PIDs and ports. ``down`` stops exactly the processes recorded there
(after checking each PID still runs the binary that was started, so a recycled PID is never
killed) and removes the folder. ``up`` refuses to start a second copy in the same folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from horus.common.errors import ClusterError
from horus.devcluster import apiaddress, binaries, certs
from horus.devcluster.processes import (
    ManagedProcess,
    free_port,
    load_state_fields,
    port_open,
    save_state,
    spawn,
)

STATE_FILE = "state.json"
ADMIN_KUBECONFIG = "kubeconfig"
SERVICE_CIDR = "10.96.0.0/16"
COMPONENT_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def default_dir() -> Path:
    env = os.environ.get("HORUS_CLUSTER_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "horus" / "cluster"


@dataclass
class DevClusterState:
    """What ``up`` started; enough for ``status`` and ``down`` in another process."""

    directory: str
    server: str
    kubeconfig: str
    ports: dict[str, int]
    bin_dir: str
    processes: list[ManagedProcess] = field(default_factory=list)
    token: str = ""
    #: Where the apiserver listens: its own address (:mod:`horus.devcluster.apiaddress`), or
    #: 127.0.0.1 when ``up`` ran without root.
    apiserver_address: str = apiaddress.LOOPBACK

    def save(self) -> None:
        save_state(Path(self.directory) / STATE_FILE, self)

    @classmethod
    def load(cls, directory: Path) -> DevClusterState | None:
        raw = load_state_fields(directory / STATE_FILE)
        return None if raw is None else cls(**raw)

    def ca_file(self) -> Path:
        return Path(self.directory) / "pki" / "ca.crt"


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "horus-local",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "horus-local", "context": {"cluster": "horus-local", "user": user}}],
        "current-context": "horus-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


#: Pod stage workers of kwok (its default is 4). kwok's own client is not rate limited
#: (``flowcontrol.NewFakeAlwaysRateLimiter``), so with 4 workers each waiting on one status
#: patch to a busy apiserver, bound pods reached Running at ~5/s; more workers overlap them.
KWOK_POD_STAGE_PARALLELISM = 32
KWOK_NODE_STAGE_PARALLELISM = 8


#: A kubelet's default node lease (``nodeLeaseDurationSeconds``), which kwok copies: renewed
#: every quarter of it, so 5,000 kwok nodes make 500 lease writes a second.
DEFAULT_NODE_LEASE_SECONDS = 40


def _kwok_config(node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS) -> dict[str, Any]:
    """kwok's ``KwokConfiguration`` (``--config``), the documented home of these options."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "podPlayStageParallelism": KWOK_POD_STAGE_PARALLELISM,
            "nodePlayStageParallelism": KWOK_NODE_STAGE_PARALLELISM,
            "nodeLeaseDurationSeconds": node_lease_seconds,
        },
    }


def _node_monitor_grace(node_lease_seconds: int) -> list[str]:
    """The controller-manager's grace before a node whose lease was not renewed is NotReady:
    its default (50 s) over the default lease (40 s), kept in that proportion for a longer
    lease (a benchmark's thousands of kwok nodes renewing less often)."""
    if node_lease_seconds == DEFAULT_NODE_LEASE_SECONDS:
        return []
    return [f"--node-monitor-grace-period={node_lease_seconds + node_lease_seconds // 4}s"]


def _scheduler_config(kubeconfig: Path, extra: dict[str, Any] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }
    if extra:
        # clientConnection is merged, so a caller can set qps/burst and keep the kubeconfig.
        conn = {**cfg["clientConnection"], **(extra.get("clientConnection") or {})}
        cfg.update(extra)
        cfg["clientConnection"] = conn
    return cfg


#: Every port ``up`` picks (a free one each): the components' and etcd's peer port.
PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)


def _etcd_argv(etcd: Path, data_dir: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(etcd),
        "--name=horus",
        f"--data-dir={data_dir}",
        f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
        f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
        f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
        f"--initial-cluster=horus=http://127.0.0.1:{ports['etcd-peer']}",
        "--quota-backend-bytes=4294967296",
        "--auto-compaction-retention=1",
        "--logger=zap",
        "--log-level=warn",
    ]


def _apiserver_argv(
    bin_dir: Path, ports: dict[str, int], creds: certs.Credentials, address: str
) -> list[str]:
    """The apiserver on ``address``: its own address publishes itself as the ``kubernetes``
    Service's endpoint (the default lease reconciler); on loopback, which may not be an
    endpoint, nothing is published."""
    reconciler = ["--endpoint-reconciler-type=none"] if address == apiaddress.LOOPBACK else []
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        *reconciler,
        f"--secure-port={ports['kube-apiserver']}",
        f"--tls-cert-file={creds.serving_cert}",
        f"--tls-private-key-file={creds.serving_key}",
        f"--client-ca-file={creds.ca_cert}",
        f"--token-auth-file={creds.token_file}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={creds.sa_public_key}",
        f"--service-account-signing-key-file={creds.sa_private_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        # Real nodes (add-nodes --real) act as system:node:<name>: the Node authorizer
        # and NodeRestriction confine each kubelet to its own Node and pods. (This adds to
        # the default plugins: ValidatingAdmissionPolicy, which Horus' node and annotation
        # policies need, stays on; so does the node claim in pod-bound ServiceAccount
        # tokens, ServiceAccountTokenPodNodeInfo, GA and locked on since 1.32 —
        # tests/integration/operator/test_trust_admission.py proves both on this apiserver.)
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={creds.kubelet_client_cert}",
        f"--kubelet-client-key={creds.kubelet_client_key}",
        # Node names do not resolve here; logs/exec reach a kubelet by its InternalIP.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--allow-privileged=true",
        "--profiling=false",
        "--event-ttl=1h",
        # Debian's etcd (3.4.23) cannot serve progress requests, so the apiserver's
        # watch-list streams fail; with WatchList on, the apiserver also turns every
        # watch at resourceVersion 0 into one (kwok's informers watch that way), and
        # kwok then sees new pods only when it re-lists, 20-50 s later.
        "--feature-gates=WatchList=false",
        "--v=1",
    ]


def _controller_manager_argv(
    bin_dir: Path,
    ports: dict[str, int],
    creds: certs.Credentials,
    kubeconfig: Path,
    node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS,
) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-controller-manager']}",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={creds.sa_private_key}",
        f"--root-ca-file={creds.ca_cert}",
        # Pod CIDRs are not allocated (kwok and the real nodes' CNI bring their own). The
        # cloud controllers (service-lb, cloud-node-lifecycle) are gone from 1.37's
        # controller-manager; naming them is an error there.
        "--controllers=*,-node-ipam-controller",
        *_node_monitor_grace(node_lease_seconds),
        "--profiling=false",
        "--v=1",
    ]


def _scheduler_argv(bin_dir: Path, ports: dict[str, int], config: Path) -> list[str]:
    return [
        str(bin_dir / "kube-scheduler"),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-scheduler']}",
        "--profiling=false",
        "--v=1",
    ]


def _kwok_argv(bin_dir: Path, ports: dict[str, int], kubeconfig: Path, config: Path) -> list[str]:
    return [
        str(bin_dir / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        "--node-lease-duration-seconds=40",
        "--cidr=10.244.0.0/16",
        "--node-ip=10.0.0.1",
    ]


class LocalCluster:
    """One local control plane rooted at ``directory``."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = (directory or default_dir()).resolve()

    # ------------------------------------------------------------------ queries
    def state(self) -> DevClusterState | None:
        return DevClusterState.load(self.directory)

    def kubeconfig(self) -> Path:
        return self.directory / ADMIN_KUBECONFIG

    def readyz(self, state: DevClusterState, timeout: float = 3.0) -> bool:
        ctx = ssl.create_default_context(cafile=str(state.ca_file()))
        req = urllib.request.Request(
            f"{state.server}/readyz", headers={"Authorization": f"Bearer {state.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def status(self) -> dict[str, Any]:
        """Which of our processes run, and whether the apiserver is ready."""
        state = self.state()
        if state is None:
            return {"up": False, "directory": str(self.directory)}
        from horus.devcluster.realnodes import RealNodes

        procs = {p.name: {"pid": p.pid, "running": p.running()} for p in state.processes}
        return {
            "up": True,
            "directory": state.directory,
            "server": state.server,
            "kubeconfig": state.kubeconfig,
            "ready": self.readyz(state),
            "processes": procs,
            "real_nodes": RealNodes(self.directory).status(),
        }

    # ------------------------------------------------------------------ up
    def up(
        self,
        timeout: float = 120.0,
        scheduler_config: dict[str, Any] | None = None,
        node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS,
    ) -> DevClusterState:
        """Start every component and wait for ``/readyz``; refuses when already up.

        ``node_lease_seconds``: the kwok nodes' lease (a kubelet's 40 s by default); the
        scale benchmarks lengthen it so that thousands of simulated nodes' heartbeats do not
        take a small machine's apiserver from the work being measured."""
        if not 10 <= node_lease_seconds <= 3600:
            raise ValueError(f"node_lease_seconds must be 10..3600, got {node_lease_seconds}")
        self._refuse_running_or_clear_leftovers()
        bin_dir = binaries.ensure_binaries()
        etcd = binaries.etcd_binary()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        ports = {name: free_port() for name in PORT_NAMES}
        address = self._claim_address(ports)
        try:
            creds = certs.generate(self.directory / "pki", address)
            server = f"https://{address}:{ports['kube-apiserver']}"
            kubeconfigs = self._write_kubeconfigs(server, creds)
        except BaseException:
            if address != apiaddress.LOOPBACK:
                apiaddress.release(ports["kube-apiserver"])
            raise
        sched_cfg = self.directory / "scheduler-config.yaml"
        sched_cfg.write_text(
            yaml.safe_dump(
                _scheduler_config(kubeconfigs["system:kube-scheduler"], scheduler_config)
            )
        )
        kwok_cfg = self.directory / "kwok.yaml"
        kwok_cfg.write_text(yaml.safe_dump(_kwok_config(node_lease_seconds)))

        state = DevClusterState(
            directory=str(self.directory),
            server=server,
            kubeconfig=str(self.kubeconfig()),
            ports=ports,
            bin_dir=str(bin_dir),
            token=creds.tokens["horus-admin"],
            apiserver_address=address,
        )
        state.save()
        commands = {
            "etcd": _etcd_argv(etcd, self.directory / "etcd", ports),
            "kube-apiserver": _apiserver_argv(bin_dir, ports, creds, address),
            "kube-controller-manager": _controller_manager_argv(
                bin_dir,
                ports,
                creds,
                kubeconfigs["system:kube-controller-manager"],
                node_lease_seconds,
            ),
            "kube-scheduler": _scheduler_argv(bin_dir, ports, sched_cfg),
            "kwok": _kwok_argv(bin_dir, ports, kubeconfigs["kwok"], kwok_cfg),
        }
        self._start_components(state, commands, timeout)
        return state

    def _claim_address(self, ports: dict[str, int]) -> str:
        """The apiserver's own address (root), taking another port while another cluster
        holds this one's; 127.0.0.1 without root (see :mod:`horus.devcluster.apiaddress`)."""
        if not apiaddress.can_make():
            return apiaddress.LOOPBACK
        for _ in range(20):
            if apiaddress.claim(ports["kube-apiserver"], f"horus dev cluster {self.directory}"):
                return apiaddress.address_for(ports["kube-apiserver"])
            ports["kube-apiserver"] = free_port()
        raise ClusterError("no free apiserver address: 20 ports tried were held by other clusters")

    def _release_address(self, state: DevClusterState) -> None:
        if state.apiserver_address != apiaddress.LOOPBACK:
            left = apiaddress.release(state.ports["kube-apiserver"])
            if left:
                raise ClusterError("down left behind: " + "; ".join(left))

    def _refuse_running_or_clear_leftovers(self) -> None:
        """Refuse when a cluster runs in our folder; remove one whose processes all died."""
        existing = self.state()
        if existing is None:
            return
        alive = [p.name for p in existing.processes if p.running()]
        if alive:
            raise ClusterError(
                f"a local cluster is already up in {self.directory} (running: "
                f"{', '.join(alive)}); use it with KUBECONFIG={existing.kubeconfig}, or "
                "run 'horus dev cluster down' first"
            )
        # Leftovers of a cluster whose processes all died (e.g. after a reboot).
        from horus.devcluster.realnodes import RealNodes

        RealNodes(self.directory).remove()
        self._release_address(existing)
        self._remove_directory()

    def _write_kubeconfigs(self, server: str, creds: certs.Credentials) -> dict[str, Path]:
        """One kubeconfig per user (admin and each component); their paths by user."""
        kubeconfigs = {}
        for user, filename in (
            ("horus-admin", ADMIN_KUBECONFIG),
            ("system:kube-controller-manager", "controller-manager.kubeconfig"),
            ("system:kube-scheduler", "scheduler.kubeconfig"),
            ("kwok", "kwok.kubeconfig"),
        ):
            path = self.directory / filename
            write_kubeconfig(path, server, creds.ca_cert, creds.tokens[user], user)
            kubeconfigs[user] = path
        return kubeconfigs

    def _start_components(
        self, state: DevClusterState, commands: dict[str, list[str]], timeout: float
    ) -> None:
        """Start in :data:`COMPONENT_ORDER`, waiting for etcd's port and the apiserver's
        ``/readyz``; on any failure stop what started and re-raise."""
        try:
            for name in COMPONENT_ORDER:
                self._start(state, name, commands[name])
                if name == "etcd":
                    self._wait_port(state, name, state.ports["etcd"], timeout)
                elif name == "kube-apiserver":
                    self._wait_ready(state, timeout)
        except BaseException:
            self.down(quiet=True)
            raise

    def _start(self, state: DevClusterState, name: str, argv: list[str]) -> None:
        state.processes.append(spawn(name, argv, self.directory))
        state.save()

    def _check_alive(self, state: DevClusterState) -> None:
        for p in state.processes:
            if not p.running():
                raise ClusterError(
                    f"{p.name} exited while the cluster was starting; last lines of {p.log}:\n"
                    + p.log_tail()
                )

    def _wait_port(self, state: DevClusterState, name: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive(state)
            if port_open(port):
                return
            time.sleep(0.2)
        raise ClusterError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")

    def _wait_ready(self, state: DevClusterState, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive(state)
            if self.readyz(state, timeout=2):
                return
            time.sleep(0.5)
        raise ClusterError(
            f"kube-apiserver was not ready within {timeout:.0f}s; see "
            f"{self.directory / 'logs' / 'kube-apiserver.log'}"
        )

    # ------------------------------------------------------------------ down
    def down(self, quiet: bool = False, grace: float = 15.0) -> bool:
        """Stop our processes (newest first) and remove the folder; False when nothing ran."""
        from horus.devcluster.realnodes import RealNodes

        # Real nodes first (their kubelets need the apiserver to stop cleanly); what they
        # changed on the host is undone even when the control plane is already gone.
        real = RealNodes(self.directory)
        had_real = real.state() is not None
        real.remove()
        state = self.state()
        if state is None:
            if self.directory.exists() and not quiet:
                self._remove_directory()
            return had_real
        # Signal everything first (newest first) so they shut down in parallel, then wait.
        for proc in reversed(state.processes):
            if proc.running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in reversed(state.processes):
            proc.stop(grace)
        self._release_address(state)
        self._remove_directory()
        return True

    def _remove_directory(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
