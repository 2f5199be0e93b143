"""Real nodes for the local cluster: a kubelet of the pinned version, its own containerd, runc
and CNI bridge per node, so Horus pods run as real containers (``add-nodes --real``).

Several kubelets share this one machine, so each node is isolated the way a machine would be:

* **its own containerd** (root, state, socket, runc root, CNI config under the node's folder)
  and kubelet (ports, ``--cgroup-root /horus-dev-N-k``, certificates, logs);
* **its own mount namespace**, shared by its containerd, kubelet and device plugin, in which a
  private folder is bound over every host path they hard-code (``/var/lib/kubelet`` and with
  it the device-plugin socket directory, ``/var/log/pods``, ``/run/netns``, …; see
  :data:`horus.devcluster.hostenv.PRIVATE_MOUNTS`). When the node's processes are gone the
  namespace is gone, and with it every mount its containers needed;
* **its own bridge** ``hdNnK`` with the node's IP ``10.N.K.1`` (its InternalIP: the kubelet
  rejects a loopback node IP, and the apiserver reaches kubelets by InternalIP for logs and
  exec) and pod subnet ``10.N.K.0/24`` (host-local IPAM in the node's folder). The bridge
  forwards (its own ``forwarding`` switch, not the host's) so pods reach Services whose pods
  sit on other nodes' bridges; nothing is masqueraded beyond this host;
* **its own identity**: a client certificate ``system:node:<name>`` in group ``system:nodes``,
  so the apiserver's Node authorizer and NodeRestriction admission judge it as a node.

Services work as on any cluster: every node runs **kube-proxy** (iptables mode, a host process
like the kubelet; :func:`kube_proxy_config` says what it leaves alone) and **CoreDNS** runs as a
Deployment behind ``kube-dns`` (:mod:`horus.devcluster.dns`), the kubelets' ``clusterDNS``.
The nodes share this host's network namespace, so their kube-proxies write the same chains,
and a second cluster's would rewrite them: one cluster at a time may have real nodes, and
``kube-proxy --cleanup`` removes the chains with the last node. The ``kubernetes`` Service is
one of them: the apiserver listens on an address of its own on this host
(:mod:`horus.devcluster.apiaddress`) and publishes it as that Service's endpoint, so pods reach
it at ``10.96.0.1:443`` through kube-proxy like any other Service.

Simulated GPUs come from the Horus device plugin (``--backend simulated``), either started here
as a host process in the node's mount namespace (``device_plugin="host"``) or left to the
chart's DaemonSet (``"none"``). The host process authenticates as a dev-only user (client
certificate, the chart's node role), not as the node ServiceAccount with a pod-bound token: in
a cluster that also has Horus' admission policies (the chart, ``manifests/``) it is no Horus
identity, and its ``horus.io/gpu-allocated`` mark would be refused — there the chart's
DaemonSet is the device plugin (``"none"``, as the real-node demo and tests run). Teardown (:meth:`RealNodes.remove`, ``horus dev cluster down``)
stops the processes, kills what is left in the node's cgroups, removes the cgroups, the bridge
and the folder, runs ``kube-proxy --cleanup`` after the last node, and hands the host's shared state back to
:mod:`horus.devcluster.hostenv`.

Why one module, not several: it is one
lifecycle — a node's folder, cgroup root, bridge, containerd, kubelet, kube-proxy and
identity are made in :meth:`RealNodes.add` and undone, in the reverse order, in
:meth:`RealNodes.remove`, and the guarantee that ``down`` leaves nothing behind is only
checkable when every "make" sits next to its "undo". The parts that stand alone already live
elsewhere: host-wide state in :mod:`horus.devcluster.hostenv`, certificates in
:mod:`horus.devcluster.certs`, process handling in :mod:`horus.devcluster.processes`, images in
:mod:`horus.devcluster.images`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError, ValidationError
from horus.devcluster import apiaddress, certs, dns, hostenv
from horus.devcluster.processes import ManagedProcess, free_port, spawn

STATE_FILE = "real-nodes.json"
#: What each real node runs from the binaries folder besides containerd's.
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns")
NODES_DIR = "nodes"
#: The service IP of ``kubernetes`` (first address of the cluster's service range).
APISERVER_SERVICE_IP = certs.SERVICE_IP
CNI_BIN_DIR = "/usr/lib/cni"
#: Where a node's containerd reads CDI specs (the path a DRA driver writes by default). Inside
#: the node's mount namespace it is the node's own folder: ``/run/cdi`` (``/var/run`` is a link
#: to ``/run``) is one of :data:`horus.devcluster.hostenv.PRIVATE_MOUNTS`, bound from
#: ``<node>/mounts/run-cdi`` (:meth:`RealNodes.cdi_dir`).
CDI_SPEC_DIR = "/var/run/cdi"
#: containerd 2.x, its runc shim and ctr, built from containerd's Go module beside the kubelet
#: (tools/controlplane/build.sh): Debian bookworm's containerd 1.6 has no CDI.
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
#: What a real node needs on the host, and the Debian package that brings it.
HOST_TOOLS = {
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
DEVICE_PLUGIN_USER = "horus-dev:device-plugin"
DEVICE_PLUGIN_GROUP = "horus-dev:device-plugins"
DEVICE_PLUGIN_ROLE = "horus-dev-device-plugin"
CGROUP_FS = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class RealNodeSpec:
    """What ``add-nodes --real`` was asked for."""

    count: int
    gpus_per_node: int = 2
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81920
    prefix: str = "real-node"
    #: "host": run the Horus device plugin (simulated GPUs) as a process of the node;
    #: "none": leave the GPUs to the chart's node DaemonSet.
    device_plugin: str = "host"

    def __post_init__(self) -> None:
        if not 1 <= self.count <= 16:
            raise ValidationError(
                f"--count must be between 1 and 16 for real nodes (each runs a kubelet and a "
                f"containerd, ~150 MB), got {self.count}"
            )
        if not 1 <= self.gpus_per_node <= 16:
            raise ValidationError(
                f"--gpus-per-node must be between 1 and 16, got {self.gpus_per_node}"
            )
        if not 1024 <= self.gpu_memory_mib <= 1_048_576:
            raise ValidationError(
                f"--gpu-memory-mib must be between 1024 and 1048576 MiB, got {self.gpu_memory_mib}"
            )
        if not self.gpu_model.replace("-", "").replace("_", "").isalnum():
            raise ValidationError(
                f"--gpu-model must be letters, digits, '-' or '_' (e.g. H100), got {self.gpu_model!r}"
            )
        if self.device_plugin not in ("host", "none"):
            raise ValidationError(
                f"--device-plugin must be 'host' or 'none', got {self.device_plugin!r}"
            )
        if not self.prefix or len(self.prefix) > 40 or not _dns_label(self.prefix):
            raise ValidationError(
                f"--prefix must be a DNS label of at most 40 characters, got {self.prefix!r}"
            )


def _dns_label(text: str) -> bool:
    return (
        text[0].isalnum()
        and text[-1].isalnum()
        and all(ch.isdigit() or ("a" <= ch <= "z") or ch == "-" for ch in text)
    )


@dataclass
class RealNode:
    """One node: where it lives, its network, its ports and its processes."""

    name: str
    index: int
    directory: str
    bridge: str
    node_ip: str
    subnet: str
    cgroup_root: str
    kubelet_port: int
    healthz_port: int
    gpus: int
    gpu_model: str
    gpu_memory_mib: int
    device_plugin: str
    processes: list[ManagedProcess] = field(default_factory=list)
    #: containerd's sockets live here, not in ``directory``: a unix socket path has at most
    #: 104 characters, and cluster folders (pytest's tmp_path) can be longer.
    socket_dir: str = ""
    proxy_healthz_port: int = 0
    proxy_metrics_port: int = 0

    @property
    def socket(self) -> Path:
        return Path(self.socket_dir or self.directory) / "containerd.sock"

    def process(self, name: str) -> ManagedProcess | None:
        return next((p for p in self.processes if p.name == name), None)


@dataclass
class RealNodesState:
    """Every real node of one cluster (``<cluster>/real-nodes.json``)."""

    cluster_dir: str
    net_index: int
    nodes: list[RealNode] = field(default_factory=list)
    #: Image descriptors (``horus dev images``) to import into every node, new ones too.
    images: list[str] = field(default_factory=list)

    @property
    def pod_range(self) -> str:
        return f"10.{self.net_index}.0.0/16"

    def save(self) -> None:
        path = Path(self.cluster_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, cluster_dir: Path) -> RealNodesState | None:
        path = cluster_dir / STATE_FILE
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        nodes = []
        for n in raw.pop("nodes", []):
            n["processes"] = [ManagedProcess(**p) for p in n.get("processes", [])]
            nodes.append(RealNode(**n))
        return cls(nodes=nodes, **raw)


# --- host commands ---------------------------------------------------------------------------


def _run(argv: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise ClusterError(f"{what} failed: {' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def _prefer_bin_dir(bin_dir: Path) -> None:
    """Put ``bin_dir`` first on this process's PATH: the ``ctr`` that imports images
    (:mod:`horus.devcluster.images`) is then the one built with the nodes' containerd, not a
    Debian one that may also be installed."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if parts[:1] != [str(bin_dir)]:
        os.environ["PATH"] = os.pathsep.join([str(bin_dir), *(p for p in parts if p)])


def check_host(bin_dir: Path | None = None) -> None:
    """Root, the tools and the CNI plugins a real node needs, and containerd's binaries in
    ``bin_dir``; the error names the fix."""
    if os.geteuid() != 0:
        raise ClusterError(
            "real nodes need root (they start containerd, kubelets and kube-proxies, create bridges "
            "and cgroups); run as root, or use kwok nodes (add-nodes without --real)"
        )
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
    missing += [
        "containernetworking-plugins"
        for p in CNI_PLUGINS[:1]
        if not (Path(CNI_BIN_DIR) / p).is_file()
    ]
    if missing:
        raise ClusterError(
            f"real nodes need Debian packages {', '.join(missing)}: run tools/dev/setup.sh "
            f"(or apt-get install -y {' '.join(missing)})"
        )
    lacking = [b for b in CONTAINERD_BINARIES if bin_dir and not (bin_dir / b).is_file()]
    if lacking:
        raise ClusterError(
            f"{bin_dir} lacks {', '.join(lacking)} (containerd 2.x for real nodes): run "
            "tools/controlplane/build.sh (tools/dev/setup.sh runs it), or point HORUS_BIN_DIR "
            "at a folder it built"
        )


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, the v2 one)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        mountpoint = left.split()[4]
        if fstype in ("cgroup", "cgroup2") and mountpoint.startswith(str(CGROUP_FS)):
            out.append(Path(mountpoint))
    return out


def _make_cgroup_root(name: str) -> None:
    """The kubelet refuses a --cgroup-root that does not exist in every hierarchy."""
    for h in _cgroup_hierarchies():
        path = h / name.lstrip("/")
        path.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset child starts empty
            if (path / f).exists() and not (path / f).read_text().strip():
                (path / f).write_text((h / f).read_text())


def _cgroup_dirs(root: Path) -> list[Path]:
    """``root`` and every folder below it, deepest first (cgroups come and go meanwhile)."""
    found: list[Path] = []
    for dirpath, _dirs, _files in os.walk(root, onerror=lambda err: None):
        found.append(Path(dirpath))
    return sorted(found, key=lambda p: -len(p.parts))


def _cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for h in _cgroup_hierarchies():
        for d in _cgroup_dirs(h / name.lstrip("/")):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
    return pids


def _remove_cgroup_root(name: str, timeout: float = 15.0) -> list[str]:
    """Kill whatever still runs in the node's cgroups, then remove them; returns leftovers."""
    deadline = time.monotonic() + timeout
    while (pids := _cgroup_pids(name)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    left = []
    for h in _cgroup_hierarchies():
        for d in _cgroup_dirs(h / name.lstrip("/")):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            if d.exists():
                left.append(str(d))
    return left


def _pids_naming(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (a node's folder)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and int(entry.name) != os.getpid():
            out.append(int(entry.name))
    return out


# --- configuration files ---------------------------------------------------------------------


def containerd_config(node: RealNode, sandbox_image: str) -> str:
    """containerd 2.x's config (version 4, containerd v2.4's own) for one node; every path
    under its folder.

    CDI is on (containerd 2's default) and reads specs only from :data:`CDI_SPEC_DIR`, which
    inside the node's mount namespace is the node's own folder (``mounts/run-cdi``, a
    :data:`~horus.devcluster.hostenv.PRIVATE_MOUNTS` entry): a DRA driver of this node, as a
    host process in the namespace or as a DaemonSet pod with that hostPath, writes its specs
    where this node's containerd — and no other node's — reads them. The host's /etc/cdi is
    not read: a spec there would apply to every node. NRI is off: its socket
    (/var/run/nri/nri.sock) is one per host, and several containerds share this one.
    """
    d = Path(node.directory)
    return f"""\
# Written by horus dev cluster add-nodes --real for node {node.name} (containerd 2.x).
version = 4
root = "{d / "containerd" / "root"}"
state = "{d / "containerd" / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[debug]
  level = "warn"

[plugins."io.containerd.server.v1.grpc"]
  address = "{node.socket}"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "{node.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd" / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # This VM lacks CAP_SYS_RESOURCE: without it every sandbox fails with
  # "can't get final child's PID from pipe" (runc may not lower oom_score_adj).
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = ["{CDI_SPEC_DIR}"]

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  Root = "{d / "runc"}"
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{d / "cni" / "net.d"}"
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_config(node: RealNode) -> dict[str, Any]:
    """The node's pod network: a bridge we created (its IP is the node's), host-local IPAM."""
    return {
        "cniVersion": "0.4.0",
        "name": f"horus-{node.bridge}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                # The bridge already carries the node IP; isGateway would also switch on the
                # host's ip_forward, which nothing here needs (pods only talk to this host).
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.node_ip}]],
                    "routes": [{"dst": "0.0.0.0/0", "gw": node.node_ip}],
                    "dataDir": str(Path(node.directory) / "cni" / "ipam"),
                },
            }
        ],
    }


def kubelet_config(node: RealNode, ca_file: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "failSwapOn": False,
        "failCgroupV1": False,
        "rotateCertificates": False,
        "serializeImagePulls": False,
        # Every node shares this host's disk and memory: evict only when truly short, and
        # never garbage-collect the imported images (nothing could pull them back).
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 110,
        "resolvConf": "/etc/resolv.conf",
        # CoreDNS behind the kube-dns Service (horus.devcluster.dns): pods resolve Service
        # names as on any cluster, and the kubelet has a cluster DNS to write.
        "clusterDNS": [dns.DNS_SERVICE_IP],
        "clusterDomain": dns.CLUSTER_DOMAIN,
        "containerLogMaxSize": "10Mi",
        "shutdownGracePeriod": "0s",
        # How often the kubelet re-syncs every pod, and with it how late a changed Secret or
        # ConfigMap reaches a mounted volume (up to this plus the kubelet's cache TTL; the
        # default 1m). 10 s lets the e2e's assignment-key rotation reach the device plugin's
        # mounted key in seconds instead of a minute; it changes nothing else Horus relies on.
        "syncFrequency": "10s",
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path, pod_range: str) -> dict[str, Any]:
    """kube-proxy's configuration for one node (iptables mode). Every node's kube-proxy
    programs the same Service rules into this host's one network namespace, so each leaves
    the host's own settings alone: no conntrack table sizing or timeouts, no
    ``route_localnet`` for localhost NodePorts. Traffic to a Service is masqueraded to the
    bridge it leaves by (``masqueradeAll``): a reply from a pod on the client's own bridge
    then returns through this host, where conntrack undoes the DNAT."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "bindAddress": node.node_ip,
        "mode": "iptables",
        "clusterCIDR": pod_range,
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "nodePortAddresses": [f"{node.node_ip}/32"],
        "healthzBindAddress": f"127.0.0.1:{node.proxy_healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{node.proxy_metrics_port}",
    }


def kube_proxy_cleanup(bin_dir: Path) -> str:
    """``kube-proxy --cleanup``: removes every chain and rule kube-proxy made (iptables, IPv4
    and IPv6, and nftables); returns what it printed when it failed, else ""."""
    binary = bin_dir / "kube-proxy"
    if not binary.is_file():
        return ""
    proc = subprocess.run(
        [str(binary), "--cleanup", "--v=0"], capture_output=True, text=True, timeout=120
    )
    return "" if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()[-500:]


def _kubeconfig(path: Path, server: str, ca: Path, user: str, cert: Path, key: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "horus-local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "horus-local", "context": {"cluster": "horus-local", "user": user}}],
        "current-context": "horus-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


# --- the nodes -------------------------------------------------------------------------------


class RealNodes:
    """The real nodes of the cluster in ``cluster_dir`` (whose control plane is up)."""

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster_dir = cluster_dir.resolve()

    def state(self) -> RealNodesState | None:
        return RealNodesState.load(self.cluster_dir)

    def _cluster(self) -> Any:
        from horus.devcluster.cluster import DevClusterState

        cstate = DevClusterState.load(self.cluster_dir)
        if cstate is None:
            raise ClusterError(
                f"no local cluster is up in {self.cluster_dir}; run 'horus dev cluster up' first"
            )
        return cstate

    # -- add --

    def add(self, spec: RealNodeSpec, wait: float = 180.0) -> list[str]:
        """Start ``spec.count`` new real nodes and wait until they are Ready (and, with the
        host device plugin, until their GPUs are allocatable)."""
        cstate = self._cluster()
        bin_dir = Path(cstate.bin_dir)
        check_host(bin_dir)
        apiaddress.require_routable(cstate.apiserver_address)
        _prefer_bin_dir(bin_dir)
        if not (bin_dir / "kubelet").is_file():
            raise ClusterError(
                f"{bin_dir} has no kubelet: run tools/controlplane/build.sh (it builds the "
                "kubelet from the same Go module as the control plane), then retry"
            )
        lacking = [b for b in NODE_BINARIES if not (bin_dir / b).is_file()]
        if lacking:
            raise ClusterError(
                f"{bin_dir} has no {', '.join(lacking)}: run tools/controlplane/build.sh (it "
                "builds kube-proxy with the kubelet and CoreDNS from its module), then retry"
            )
        from horus.devcluster import images
        from horus.devcluster.binaries import repo_root

        state = self.state()
        if state is None:
            others = [d for d in hostenv.clusters().values() if d != str(self.cluster_dir)]
            if others:
                raise ClusterError(
                    f"another local cluster ({others[0]}) has real nodes on this host: their "
                    "kube-proxies own this host's Service chains (KUBE-SERVICES, one per "
                    "network namespace), so one cluster at a time may have real nodes; "
                    "'horus dev cluster down' it first"
                )
        base_images = images.build(repo_root(), ["pause", "coredns"], bin_dir=bin_dir)
        if state is None:
            state = RealNodesState(str(self.cluster_dir), hostenv.acquire(self.cluster_dir))
            state.save()
        api = _core_api(cstate.kubeconfig)
        taken = {n.metadata.name for n in api.list_node().items} | {n.name for n in state.nodes}
        used_idx = {n.index for n in state.nodes}
        names: list[str] = []
        indices: list[int] = []
        i = k = 0
        while len(names) < spec.count:
            name = f"{spec.prefix}-{i:04d}"
            if name not in taken:
                names.append(name)
            i += 1
        while len(indices) < spec.count:
            if k not in used_idx:
                indices.append(k)
            k += 1
        if max(indices) > 250:
            raise ClusterError("at most 250 real nodes per cluster (one /24 each in 10.N.0.0/16)")
        if spec.device_plugin == "host":
            _ensure_device_plugin_rbac(cstate.kubeconfig)
        started: list[RealNode] = []
        try:
            for name, index in zip(names, indices, strict=True):
                node = self._new_node(state, name, index, spec)
                state.nodes.append(node)
                state.save()
                started.append(node)
                self._start(node, cstate, base_images, state)
                state.save()
            self._wait_ready(api, started, wait)
            dns.deploy(bin_dir / "kubectl", cstate.kubeconfig, base_images[1].ref)
        except BaseException:
            for node in started:
                with contextlib.suppress(Exception):
                    self._teardown(node, api)
                state.nodes = [n for n in state.nodes if n.name != node.name]
            state.save()
            if not state.nodes:
                self._release(state)
            raise
        return names

    def _new_node(
        self, state: RealNodesState, name: str, index: int, spec: RealNodeSpec
    ) -> RealNode:
        n = state.net_index
        return RealNode(
            name=name,
            index=index,
            directory=str(self.cluster_dir / NODES_DIR / name),
            bridge=f"hd{n}n{index}",
            node_ip=f"10.{n}.{index}.1",
            subnet=f"10.{n}.{index}.0/24",
            cgroup_root=f"/horus-dev-{n}-{index}",
            socket_dir=str(hostenv.REGISTRY / "sockets" / f"{n}-{index}"),
            kubelet_port=free_port(),
            healthz_port=free_port(),
            proxy_healthz_port=free_port(),
            proxy_metrics_port=free_port(),
            gpus=spec.gpus_per_node,
            gpu_model=spec.gpu_model,
            gpu_memory_mib=spec.gpu_memory_mib,
            device_plugin=spec.device_plugin,
        )

    def _start(
        self, node: RealNode, cstate: Any, base_images: list[Any], state: RealNodesState
    ) -> None:
        from horus.devcluster import images

        d = Path(node.directory)
        for sub in ("pki", "cni/net.d", "cni/ipam", "containerd", "runc", "logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for mount in hostenv.PRIVATE_MOUNTS:
            (d / "mounts" / mount.strip("/").replace("/", "-")).mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        Path(node.socket_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        pki = Path(cstate.directory) / "pki"
        certs.issue_client_cert(
            pki,
            f"system:node:{node.name}",
            ["system:nodes"],
            d / "pki" / "kubelet-client.crt",
            d / "pki" / "kubelet-client.key",
        )
        _kubeconfig(
            d / "kubelet.kubeconfig",
            cstate.server,
            pki / "ca.crt",
            f"system:node:{node.name}",
            d / "pki" / "kubelet-client.crt",
            d / "pki" / "kubelet-client.key",
        )
        (d / "containerd.toml").write_text(containerd_config(node, base_images[0].ref))
        (d / "cni" / "net.d" / "10-horus.conflist").write_text(json.dumps(cni_config(node)))
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node, pki / "ca.crt")))

        # The bridge first: its address is the node IP the kubelet binds and reports.
        _run(["ip", "link", "add", node.bridge, "type", "bridge"], "create bridge")
        _run(["ip", "addr", "add", f"{node.node_ip}/24", "dev", node.bridge], "address bridge")
        _run(["ip", "link", "set", node.bridge, "up"], "bring bridge up")
        # Pods reach Services on other nodes' bridges: IPv4 forwarding is decided by the
        # interface a packet comes in by, so this bridge's own switch is enough (the host's
        # net.ipv4.ip_forward stays as it is; the setting goes with the bridge).
        Path(f"/proc/sys/net/ipv4/conf/{node.bridge}/forwarding").write_text("1")
        _make_cgroup_root(node.cgroup_root)

        binds = "".join(
            f'mount --bind "{d / "mounts" / m.strip("/").replace("/", "-")}" "{m}"\n'
            for m in hostenv.PRIVATE_MOUNTS
        )
        # containerd 2.x from the binaries folder; that folder first on its PATH, so the runc
        # shim it starts for each pod is the one built with it (containerd looks the shim up
        # on PATH before its own folder, and Debian's 1.6 shim may be in /usr/bin).
        bin_dir = Path(cstate.bin_dir)
        script = (
            f"set -e\n{binds}"
            f'PATH="{bin_dir}:$PATH" exec "{bin_dir / "containerd"}" --config "{d / "containerd.toml"}"\n'
        )
        containerd = spawn(
            "containerd",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                script,
                str(d),
            ],
            d,
        )
        node.processes.append(containerd)
        state.save()
        _wait_for("containerd", lambda: node.socket.exists(), 30, containerd)
        # Images loaded into the cluster before this node joined (a pruned one is rebuilt and
        # loaded by the next load-images).
        for ref_path in [
            *(b.descriptor for b in base_images),
            *(p for p in state.images if _descriptor_ref(Path(p))),
        ]:
            images.import_into(images.load_descriptor(Path(ref_path)), node.socket)
        self._start_kubelet(node, cstate)
        self._start_kube_proxy(node, cstate, state)
        if node.device_plugin == "host":
            self._start_device_plugin(node, cstate)

    def _nsenter(self, node: RealNode) -> list[str]:
        containerd = node.process("containerd")
        if containerd is None or not containerd.running():
            raise ClusterError(
                f"containerd of {node.name} is not running; remove the node "
                f"('horus dev cluster remove-nodes {node.name}') and add a new one"
            )
        return ["nsenter", f"--mount=/proc/{containerd.pid}/ns/mnt", "--"]

    def kubelet_argv(self, node: RealNode, cstate: Any) -> list[str]:
        d = Path(node.directory)
        labels = {
            c.LABEL_GPU_NODE: "true",
            c.LABEL_GPU_MODEL: node.gpu_model,
            c.LABEL_DEV_NODE: c.DEV_NODE_REAL,
        }
        return [
            *self._nsenter(node),
            str(Path(cstate.bin_dir) / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.node_ip}",
            "--root-dir=/var/lib/kubelet",
            f"--cert-dir={d / 'pki'}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
            "--v=1",
        ]

    def _start_kubelet(self, node: RealNode, cstate: Any) -> None:
        node.processes = [p for p in node.processes if p.name != "kubelet"]
        node.processes.append(
            spawn("kubelet", self.kubelet_argv(node, cstate), Path(node.directory))
        )

    def _start_kube_proxy(self, node: RealNode, cstate: Any, state: RealNodesState) -> None:
        """kube-proxy as ``system:kube-proxy`` (bound to ``system:node-proxier`` by the
        apiserver's bootstrap RBAC), a host process like the kubelet."""
        d = Path(node.directory)
        pki = Path(cstate.directory) / "pki"
        cert, key = d / "pki" / "kube-proxy.crt", d / "pki" / "kube-proxy.key"
        certs.issue_client_cert(pki, "system:kube-proxy", [], cert, key)
        kubeconfig = d / "kube-proxy.kubeconfig"
        _kubeconfig(kubeconfig, cstate.server, pki / "ca.crt", "system:kube-proxy", cert, key)
        config = d / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(kube_proxy_config(node, kubeconfig, state.pod_range)))
        argv = [str(Path(cstate.bin_dir) / "kube-proxy"), f"--config={config}", "--v=1"]
        node.processes.append(spawn("kube-proxy", argv, d))

    def _start_device_plugin(self, node: RealNode, cstate: Any) -> None:
        d = Path(node.directory)
        pki = Path(cstate.directory) / "pki"
        certs.issue_client_cert(
            pki,
            f"{DEVICE_PLUGIN_USER}:{node.name}",
            [DEVICE_PLUGIN_GROUP],
            d / "pki" / "device-plugin.crt",
            d / "pki" / "device-plugin.key",
        )
        _kubeconfig(
            d / "device-plugin.kubeconfig",
            cstate.server,
            pki / "ca.crt",
            f"{DEVICE_PLUGIN_USER}:{node.name}",
            d / "pki" / "device-plugin.crt",
            d / "pki" / "device-plugin.key",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HORUS_")}
        env.pop("KUBECONFIG", None)
        env["PYTHONUNBUFFERED"] = "1"
        argv = [
            *self._nsenter(node),
            sys.executable,
            "-m",
            "horus",
            "deviceplugin",
            "run",
            "--node-name",
            node.name,
            "--backend",
            "simulated",
            "--sim-gpu-count",
            str(node.gpus),
            "--sim-gpu-model",
            node.gpu_model,
            "--sim-gpu-memory-mib",
            str(node.gpu_memory_mib),
            "--enforcement",
            "mps",
            "--kubeconfig",
            str(d / "device-plugin.kubeconfig"),
        ]
        node.processes.append(spawn("device-plugin", argv, d, env))

    def _wait_ready(self, api: Any, nodes: list[RealNode], wait: float) -> None:
        deadline = time.monotonic() + wait
        pending = {n.name: n for n in nodes}
        while pending and time.monotonic() < deadline:
            for node in list(pending.values()):
                for proc in node.processes:
                    if _exited(proc):
                        raise ClusterError(
                            f"{proc.name} of {node.name} exited; last lines of {proc.log}:\n"
                            + proc.log_tail()
                        )
            for obj in api.list_node(label_selector=f"{c.LABEL_DEV_NODE}={c.DEV_NODE_REAL}").items:
                waiting = pending.get(obj.metadata.name)
                if waiting is None:
                    continue
                conds = {cd.type: cd.status for cd in (obj.status.conditions or [])}
                alloc = obj.status.allocatable or {}
                gpus_ok = (
                    waiting.device_plugin != "host"
                    or int(alloc.get(c.RESOURCE_GPU_CORE, "0") or 0)
                    == c.GPU_CORE_UNITS_PER_GPU * waiting.gpus
                )
                if conds.get("Ready") == "True" and gpus_ok:
                    del pending[waiting.name]
            if pending:
                time.sleep(0.5)
        if pending:
            late = next(iter(pending.values()))
            kubelet = late.process("kubelet")
            tail = kubelet.log_tail(20) if kubelet else ""
            raise ClusterError(
                f"{len(pending)} real node(s) not Ready (with their GPUs) after {wait:.0f}s, "
                f"e.g. {late.name}; last lines of its kubelet log:\n{tail}"
            )

    # -- day 2 --

    def restart_kubelet(self, name: str, down_seconds: float = 0.0) -> None:
        """Stop the node's kubelet (its containers keep running) and start it again."""
        state, node = self._node(name)
        kubelet = node.process("kubelet")
        if kubelet is not None:
            kubelet.stop(grace=15)
        time.sleep(down_seconds)
        self._start_kubelet(node, self._cluster())
        state.save()

    def socket(self, name: str) -> Path:
        """The node's containerd socket (``ctr --address``)."""
        return self._node(name)[1].socket

    def cdi_dir(self, name: str) -> Path:
        """The node's CDI spec folder as this host sees it: inside the node's mount namespace
        it is :data:`CDI_SPEC_DIR`, the one folder its containerd reads CDI specs from."""
        _, node = self._node(name)
        return Path(node.directory) / "mounts" / "run-cdi"

    def device_plugin_dir(self, name: str) -> Path:
        """Where the node's kubelet sees /var/lib/kubelet/device-plugins (its private bind)."""
        _, node = self._node(name)
        return Path(node.directory) / "mounts" / "var-lib-kubelet" / "device-plugins"

    def _node(self, name: str) -> tuple[RealNodesState, RealNode]:
        state = self.state()
        node = next((n for n in state.nodes if n.name == name), None) if state else None
        if state is None or node is None:
            raise ClusterError(f"no real node {name!r} in {self.cluster_dir}")
        return state, node

    def import_images(self, descriptors: list[Path]) -> None:
        """Import built images into every node, and remember them for nodes added later."""
        from horus.devcluster import images

        _prefer_bin_dir(Path(self._cluster().bin_dir))
        state = self.state()
        if state is None:
            raise ClusterError(
                "this cluster has no real nodes; add some with 'horus dev cluster add-nodes "
                "--real --count 2' first"
            )
        loaded = [images.load_descriptor(path) for path in descriptors]

        def load(node: RealNode) -> None:
            for image in loaded:
                images.import_into(image, node.socket)

        # One thread per node: each import is mostly the node's containerd writing and
        # unpacking layers, so nodes overlap well.
        with ThreadPoolExecutor(max_workers=max(1, len(state.nodes))) as pool:
            list(pool.map(load, state.nodes))
        for path, image in zip(descriptors, loaded, strict=True):
            state.images = [
                p for p in state.images if _descriptor_ref(Path(p)) not in ("", image.ref)
            ]
            state.images.append(str(path))
        state.save()

    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {}
        return {
            n.name: {
                "ip": n.node_ip,
                "gpus": f"{n.gpus}x {n.gpu_model} {n.gpu_memory_mib} MiB",
                "device_plugin": n.device_plugin,
                "processes": {p.name: {"pid": p.pid, "running": p.running()} for p in n.processes},
            }
            for n in state.nodes
        }

    # -- remove --

    def remove(self, names: list[str] | None = None) -> list[str]:
        """Tear the named nodes (all when None) down and delete their Node objects; the last
        node of the cluster also removes kube-proxy's chains and releases the host's state."""
        state = self.state()
        if state is None:
            return []
        wanted = set(names) if names is not None else {n.name for n in state.nodes}
        unknown = wanted - {n.name for n in state.nodes}
        if unknown:
            raise ClusterError(
                f"no real node(s) {', '.join(sorted(unknown))} in {self.cluster_dir}"
            )
        api = None
        with contextlib.suppress(Exception):
            from horus.devcluster.cluster import DevClusterState

            cstate = DevClusterState.load(self.cluster_dir)
            if cstate is not None:
                api = _core_api(cstate.kubeconfig)
        left: list[str] = []
        for node in [n for n in state.nodes if n.name in wanted]:
            try:
                left += self._teardown(node, api)
            except Exception as exc:  # keep going: every other node must still be stopped
                left.append(f"{node.name}: {exc!r}")
            state.nodes = [n for n in state.nodes if n.name != node.name]
            state.save()
        if not state.nodes:
            self._release(state)
        if left:
            raise ClusterError("could not remove: " + "; ".join(left))
        return sorted(wanted)

    def _release(self, state: RealNodesState) -> None:
        # The last node's kube-proxy is stopped; its chains (KUBE-SERVICES, KUBE-SVC-…, in
        # iptables and ip6tables) stay until kube-proxy's own cleanup removes them.
        cstate = None
        with contextlib.suppress(Exception):
            cstate = self._cluster()
        bin_dir = Path(cstate.bin_dir) if cstate is not None else None
        failed = kube_proxy_cleanup(bin_dir) if bin_dir is not None else ""
        (self.cluster_dir / STATE_FILE).unlink(missing_ok=True)
        shutil.rmtree(self.cluster_dir / NODES_DIR, ignore_errors=True)
        hostenv.release(state.net_index)
        if failed:
            raise ClusterError(f"kube-proxy --cleanup failed: {failed}")

    def _teardown(self, node: RealNode, api: Any) -> list[str]:
        """Stop everything of one node; returns what could not be removed."""
        for name in ("device-plugin", "kube-proxy", "kubelet"):
            proc = node.process(name)
            if proc is not None:
                proc.stop(grace=10)
        left = _remove_cgroup_root(node.cgroup_root)  # the containers, then their cgroups
        containerd = node.process("containerd")
        markers = [node.directory, *([node.socket_dir] if node.socket_dir else [])]

        def ours() -> set[int]:  # the shims name the socket, the rest the folder
            return {pid for m in markers for pid in _pids_naming(m)}

        for pid in ours():
            if containerd is None or pid != containerd.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if containerd is not None:
            containerd.stop(grace=10)
        deadline = time.monotonic() + 10
        while (pids := ours()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        if ours():
            left.append(f"processes of {node.name} still run")
        left += _remove_cgroup_root(node.cgroup_root)
        if Path(f"/sys/class/net/{node.bridge}").exists():
            deleted = _run(["ip", "link", "del", node.bridge], "delete bridge", check=False)
            if deleted.returncode != 0:
                left.append(f"bridge {node.bridge}: {deleted.stderr.strip()}")
        shutil.rmtree(node.directory, ignore_errors=True)
        if node.socket_dir:
            shutil.rmtree(node.socket_dir, ignore_errors=True)
        if api is not None:
            with contextlib.suppress(Exception):
                api.delete_node(node.name)
        return left


def _exited(proc: ManagedProcess) -> bool:
    """Whether a process this one started has exited. A child of ours is asked with waitpid:
    its /proc/<pid>/cmdline reads empty while it is inside execve, which on a loaded machine
    lasted longer than :meth:`ManagedProcess.running` waits."""
    try:
        pid, _status = os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return not proc.running()
    return pid != 0


def _wait_for(what: str, check: Any, timeout: float, proc: ManagedProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if _exited(proc):
            raise ClusterError(f"{what} exited; last lines of {proc.log}:\n{proc.log_tail()}")
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s; see {proc.log}")


def _core_api(kubeconfig: str) -> Any:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def _ensure_device_plugin_rbac(kubeconfig: str) -> None:
    """The host device plugin's rights: the chart's node role (manifests/rbac/node.yaml, the
    one source; its configmaps get covers the published verify keys it reads)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from horus.devcluster.binaries import repo_root

    docs = yaml.safe_load_all((repo_root() / "manifests" / "rbac" / "node.yaml").read_text())
    role = next(d for d in docs if d and d.get("kind") == "ClusterRole")
    rules = list(role["rules"])
    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    rbac: Any = client.RbacAuthorizationV1Api(api)
    objects: list[tuple[Any, Any, dict[str, Any]]] = [
        (
            rbac.create_cluster_role,
            rbac.replace_cluster_role,
            {"metadata": {"name": DEVICE_PLUGIN_ROLE}, "rules": rules},
        ),
        (
            rbac.create_cluster_role_binding,
            rbac.replace_cluster_role_binding,
            {
                "metadata": {"name": DEVICE_PLUGIN_ROLE},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": DEVICE_PLUGIN_ROLE,
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": DEVICE_PLUGIN_GROUP,
                    }
                ],
            },
        ),
    ]
    for create, replace, body in objects:
        try:
            create(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(body["metadata"]["name"], body)


def _descriptor_ref(path: Path) -> str:
    """The image a descriptor names, or "" when it is gone from the cache."""
    try:
        return str(json.loads(path.read_text())["ref"])
    except (OSError, ValueError, KeyError):
        return ""
