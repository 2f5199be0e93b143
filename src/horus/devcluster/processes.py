"""Background processes that outlive the command that started them, and their state file.

Both the local control plane (``cluster.py``) and the demo (``demo.py``) start long-running
children, record them in a JSON file in their private folder, and stop them later from
*another* process. Two rules keep that safe:

* a recorded PID is only signalled while ``/proc/<pid>/cmdline`` still contains the owner's
  folder (``marker``) — every child we start names that folder in its arguments — so a PID
  the kernel recycled for someone else's process is never killed;
* zombies count as stopped, and children of the current process are reaped while waiting.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class ManagedProcess:
    """One background process we started."""

    name: str
    pid: int
    #: A string in its command line that identifies it as ours (the owner's folder).
    marker: str
    log: str

    def running(self) -> bool:
        """True while the PID is alive (not a zombie) and still runs the command we started."""
        # While a freshly spawned child is inside execve(), /proc/<pid>/cmdline reads empty
        # for a moment: re-read briefly instead of declaring it gone (seen on a loaded machine).
        for attempt in range(20):
            try:
                stat = Path(f"/proc/{self.pid}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] == "Z":
                    return False
                cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except (OSError, IndexError):
                return False
            if cmdline.strip() or attempt == 19:
                return self.marker.encode() in cmdline
            time.sleep(0.01)
        return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(Path(self.log).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns once it is gone."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not self.running():
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                _reap(self.pid)
                if not self.running():
                    return
                time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect our own child's exit status (when the stopper is also the starter)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def spawn(
    name: str,
    argv: Sequence[str],
    folder: Path,
    env: Mapping[str, str] | None = None,
) -> ManagedProcess:
    """Start ``argv`` in its own session (a Ctrl-C of the starter does not reach it), logging
    to ``folder/logs/<name>.log``. ``argv`` must mention ``folder`` (see the module docstring)."""
    if not any(str(folder) in arg for arg in argv):
        raise ValueError(f"{name}: its arguments must name {folder} so it can be recognised")
    log = folder / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=str(folder),
            start_new_session=True,
        )
    return ManagedProcess(name=name, pid=proc.pid, marker=str(folder), log=str(log))


#: Ports :func:`free_port` handed out in this process (never twice: nothing holds them
#: until the component that was given one starts).
_GIVEN: set[int] = set()
_LISTEN_PORTS = range(20000, 32768)  # below Linux's default ephemeral range


def _ephemeral_range() -> range:
    """The range the kernel picks outgoing connections' local ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a component to listen on.

    Not one the kernel would give an outgoing connection (its ephemeral range): between this
    call and the component's start, the cluster's own clients open many connections, and a
    port from that range (what binding port 0 returns) was sometimes taken by one of them
    ("bind: address already in use" when etcd or the apiserver started). Random within
    20000-32767 outside that range, checked free, never the same twice in one process."""
    ephemeral = _ephemeral_range()
    candidates = [p for p in _LISTEN_PORTS if p not in ephemeral and p not in _GIVEN]
    rng = random.SystemRandom()
    for port in rng.sample(candidates, min(64, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all taken: any port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def save_state(path: Path, state: Any) -> None:
    """Write a dataclass as JSON atomically (readers never see half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(path)


def load_state_fields(path: Path) -> dict[str, Any] | None:
    """The saved fields with ``processes`` turned back into :class:`ManagedProcess`."""
    if not path.is_file():
        return None
    raw: dict[str, Any] = json.loads(path.read_text())
    procs = []
    for p in raw.get("processes", []):
        if "binary" in p:  # written before 0.1.0's shared process module: marker = folder
            p.pop("binary")
            p.setdefault("marker", str(path.parent))
        procs.append(ManagedProcess(**p))
    raw["processes"] = procs
    return raw
