"""What a real node (:mod:`horus.devcluster.realnodes`) needs from this host and does to it
outside its own folder: the root, tools and binaries it checks for, the commands it runs, the
cgroups it makes and removes, the processes it finds and waits on, and kube-proxy's cleanup of
the host's Service chains."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from horus.common.errors import ClusterError
from horus.devcluster.processes import ManagedProcess

#: Where the host's CNI plugins are (Debian's containernetworking-plugins).
CNI_BIN_DIR = "/usr/lib/cni"
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
CGROUP_FS = Path("/sys/fs/cgroup")


def run(argv: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise ClusterError(f"{what} failed: {' '.join(argv)}: {proc.stderr.strip()}")
    return proc


def prefer_bin_dir(bin_dir: Path) -> None:
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


def make_cgroup_root(name: str) -> None:
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


def remove_cgroup_root(name: str, timeout: float = 15.0) -> list[str]:
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


def pids_naming(marker: str) -> list[int]:
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


def exited(proc: ManagedProcess) -> bool:
    """Whether a process this one started has exited. A child of ours is asked with waitpid:
    its /proc/<pid>/cmdline reads empty while it is inside execve, which on a loaded machine
    lasted longer than :meth:`ManagedProcess.running` waits."""
    try:
        pid, _status = os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return not proc.running()
    return pid != 0


def wait_for(what: str, check: Callable[[], bool], timeout: float, proc: ManagedProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if exited(proc):
            raise ClusterError(f"{what} exited; last lines of {proc.log}:\n{proc.log_tail()}")
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s; see {proc.log}")
