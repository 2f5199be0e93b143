"""Starts and supervises the node's CUDA MPS control daemon (``nvidia-cuda-mps-control -d``).

Core shares are enforced by MPS (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, which the device plugin hands to each container); they
only bite while one control daemon serves the node, with its pipes in the directory the device
plugin mounts into pods. If that daemon dies, new CUDA contexts silently run unshared — the
"limits silently not enforced" failure — so the agent checks it every cycle and restarts it,
counting restarts in ``horus_mps_daemon_restarts_total``.

``-d`` daemonises, so the started process exits at once. Liveness is read from the daemon's
pid file in the pipe directory (``nvidia-cuda-mps-control.pid``) when present, else by asking
the daemon itself (``echo get_server_list | nvidia-cuda-mps-control``, exit status 0 when a
daemon answers).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger("horus.agent.mps")

PID_FILE = "nvidia-cuda-mps-control.pid"
QUERY_TIMEOUT = 5.0


class MpsSupervisor:
    """Keeps one MPS control daemon running; call :meth:`check` periodically."""

    def __init__(self, binary: str, pipe_directory: Path, log_directory: Path) -> None:
        self.binary = binary
        self.pipe_directory = pipe_directory
        self.log_directory = log_directory
        self.restarts = 0
        self.started = False

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_directory),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_directory),
        }

    def _pid(self) -> int | None:
        try:
            return int((self.pipe_directory / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self._pid()
        if pid is not None:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return False
            return state not in ("Z", "X")
        return self._query("get_server_list") == 0

    def _query(self, command: str) -> int:
        try:
            proc = subprocess.run(
                [self.binary],
                input=command + "\n",
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=QUERY_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired):
            return -1
        return proc.returncode

    def start(self) -> bool:
        """Start the daemon (``BINARY -d``); False (logged) when it could not be started."""
        for d in (self.pipe_directory, self.log_directory):
            d.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [self.binary, "-d"], env=self._env(), capture_output=True, text=True, timeout=30
            )
        except FileNotFoundError:
            log.error(
                "MPS: %s not found: install the NVIDIA driver utilities on the node (or run with "
                "--enforcement none); core shares are NOT enforced",
                self.binary,
            )
            return False
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.error(
                "MPS: starting %s -d failed: %s; core shares are NOT enforced", self.binary, exc
            )
            return False
        if proc.returncode != 0:
            log.error(
                "MPS: %s -d exited %d: %s; core shares are NOT enforced",
                self.binary,
                proc.returncode,
                (proc.stderr or proc.stdout).strip(),
            )
            return False
        self.started = True
        log.info("MPS: control daemon started (pipes in %s)", self.pipe_directory)
        return True

    def check(self) -> bool:
        """Restart the daemon when it is not running; True when it runs after the check."""
        if self.alive():
            return True
        if self.started:
            log.warning("MPS: control daemon is gone; restarting it")
            self.restarts += 1
        ok = self.start()
        return ok and self.alive()

    def stop(self) -> None:
        """Ask the daemon to quit (used at agent shutdown)."""
        if self.started:
            self._query("quit")
            self.started = False
