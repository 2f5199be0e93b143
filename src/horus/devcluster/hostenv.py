"""What real nodes change on the host itself, recorded once per host and undone by the last one.

Real nodes (:mod:`horus.devcluster.realnodes`) share one machine and its network namespace.
A few things they need or cause are host-wide rather than per node, so they are recorded in a
small registry (``/run/horus-dev``, tmpfs, gone after a reboot) under a file lock:

* **which local clusters have real nodes**, each with its own ``10.N.0.0/16`` pod range
  (``N`` is the cluster's *network index*): two clusters side by side never share a subnet;
* **mount points** that each node binds a private folder over inside its own mount namespace
  (``/var/lib/kubelet``, ``/var/log/pods``, ``/run/netns`` …): where one did not exist, an
  empty directory is created for the bind and removed again by the last cluster;
* **kernel settings the kubelet writes** on start (``vm.overcommit_memory``, ``kernel.panic``
  …; ``protectKernelDefaults: false``): their values from before the first node are restored;
* **iptables chains every kubelet ensures** (``KUBE-FIREWALL`` with its jumps from INPUT and
  OUTPUT, ``KUBE-KUBELET-CANARY``, ``KUBE-IPTABLES-HINT``): removed again, unless they existed
  before the first node (a real kubelet on this host owns them then).

The last cluster to release its index restores all of it and removes the registry, so after
``horus dev cluster down`` the host is as it was (``tests/integration`` checks).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from horus.common.errors import ClusterError

REGISTRY = Path(os.environ.get("HORUS_DEV_HOST_REGISTRY", "/run/horus-dev"))

#: Host paths a node binds a private folder over, inside its mount namespace. The kubelet
#: hard-codes the device-plugin socket directory (/var/lib/kubelet/device-plugins, whatever
#: --root-dir says) and the pod log directories; containerd 1.6 hard-codes /var/run/netns
#: (CRI network namespaces), the shims' socket directory (/run/containerd/s) and libcni's
#: cache (/var/lib/cni); the device plugin hands out the MPS pipe directory as a host path
#: (its default, and the chart's node.mps.root under /run/horus); /run/cdi (= /var/run/cdi)
#: is where the node's containerd reads CDI specs and its DRA driver writes them.
PRIVATE_MOUNTS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/netns",
    "/run/containerd",
    "/var/lib/cni",
    "/tmp/nvidia-mps",
    "/run/horus",
    "/run/cdi",
)

#: Written by the kubelet's container manager at start (pkg/kubelet/cm, setupKernelTunables).
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)

#: (table, chain) the kubelet ensures (pkg/kubelet/kubelet_network_linux.go), IPv4 and IPv6.
KUBELET_CHAINS = (
    ("filter", "KUBE-FIREWALL"),
    ("mangle", "KUBE-KUBELET-CANARY"),
    ("nat", "KUBE-KUBELET-CANARY"),
    ("filter", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-IPTABLES-HINT"),
)
IPTABLES = ("iptables", "ip6tables")

#: Network indices tried for a cluster's pod range 10.N.0.0/16.
NET_INDICES = range(200, 250)


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    REGISTRY.mkdir(mode=0o700, parents=True, exist_ok=True)
    with (REGISTRY / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield REGISTRY


def _read(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _clusters(reg: Path) -> dict[int, str]:
    """Network index -> cluster folder, dropping entries whose folder is gone."""
    out: dict[int, str] = {}
    for entry in (reg / "clusters").glob("*.json"):
        data = _read(entry)
        folder = str(data.get("directory", ""))
        if folder and Path(folder).is_dir():
            out[int(entry.stem)] = folder
        else:
            entry.unlink(missing_ok=True)
    return out


def _routes_in_use() -> list[ipaddress.IPv4Network]:
    proc = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True)
    nets = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "prohibit", "blackhole"):
            word = line.split()[1]
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(word, strict=False))
    return [n for n in nets if isinstance(n, ipaddress.IPv4Network) and n.prefixlen > 0]


def clusters() -> dict[int, str]:
    """Network index -> folder of every local cluster with real nodes on this host."""
    if not REGISTRY.is_dir():
        return {}
    with _locked() as reg:
        return _clusters(reg)


def acquire(cluster_dir: Path) -> int:
    """Register ``cluster_dir`` for real nodes; returns its network index (the same one when
    it already has one). The first registration on the host records the host's state."""
    with _locked() as reg:
        clusters = _clusters(reg)
        for index, folder in clusters.items():
            if folder == str(cluster_dir):
                return index
        if not clusters:
            _record_host(reg)
        used = _routes_in_use()
        for index in NET_INDICES:
            net = ipaddress.ip_network(f"10.{index}.0.0/16")
            if index in clusters or any(net.overlaps(u) for u in used):
                continue
            (reg / "clusters").mkdir(exist_ok=True)
            (reg / "clusters" / f"{index}.json").write_text(
                json.dumps({"directory": str(cluster_dir)})
            )
            return index
        raise ClusterError(
            f"no free pod range 10.N.0.0/16 for N in {NET_INDICES.start}..{NET_INDICES.stop - 1}:"
            " every one overlaps a route of this host or another local cluster's real nodes"
        )


def release(index: int) -> None:
    """Drop ``index``; the last cluster restores what the first one recorded."""
    if not REGISTRY.is_dir():
        return
    with _locked() as reg:
        (reg / "clusters" / f"{index}.json").unlink(missing_ok=True)
        if _clusters(reg):
            return
        _restore_host(reg)
        for entry in reg.iterdir():
            if entry.name != ".lock":
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
    shutil.rmtree(REGISTRY, ignore_errors=True)


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def _chain_exists(tool: str, table: str, chain: str) -> bool:
    proc = subprocess.run([tool, "-w", "-t", table, "-S", chain], capture_output=True)
    return proc.returncode == 0


def _record_host(reg: Path) -> None:
    created = []
    for mount in PRIVATE_MOUNTS:
        path = Path(mount)
        if not path.exists():
            path.mkdir(parents=True)
            created.append(mount)
    sysctls = {}
    for name in KUBELET_SYSCTLS:
        with contextlib.suppress(OSError):
            sysctls[name] = _sysctl_path(name).read_text().strip()
    preexisting = [
        [tool, table, chain]
        for tool in IPTABLES
        if shutil.which(tool)
        for table, chain in KUBELET_CHAINS
        if _chain_exists(tool, table, chain)
    ]
    (reg / "host.json").write_text(
        json.dumps(
            {"created_dirs": created, "sysctls": sysctls, "preexisting_chains": preexisting},
            indent=2,
        )
    )


def _restore_host(reg: Path) -> None:
    host = _read(reg / "host.json")
    for name, value in (host.get("sysctls") or {}).items():
        with contextlib.suppress(OSError):
            path = _sysctl_path(name)
            if path.read_text().strip() != value:
                path.write_text(value)
    keep = {tuple(x) for x in host.get("preexisting_chains") or []}
    for tool in IPTABLES:
        if not shutil.which(tool):
            continue
        for table, chain in KUBELET_CHAINS:
            if (tool, table, chain) in keep or not _chain_exists(tool, table, chain):
                continue
            if chain == "KUBE-FIREWALL":
                for parent in ("INPUT", "OUTPUT"):
                    while (
                        subprocess.run(
                            [tool, "-w", "-t", table, "-D", parent, "-j", chain],
                            capture_output=True,
                        ).returncode
                        == 0
                    ):
                        pass
            subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True)
            subprocess.run([tool, "-w", "-t", table, "-X", chain], capture_output=True)
    for mount in reversed(host.get("created_dirs") or []):
        with contextlib.suppress(OSError):
            Path(mount).rmdir()
