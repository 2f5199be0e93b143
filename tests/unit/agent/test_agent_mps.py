"""The MPS supervisor against a fake ``nvidia-cuda-mps-control`` (a shell script)."""

import contextlib
import os
import signal
import stat
import time
from pathlib import Path

from horus.agent.mps import PID_FILE, MpsSupervisor

FAKE = """#!/bin/bash
# Fake nvidia-cuda-mps-control: -d starts a background "daemon" and writes its pid file;
# client mode reads commands on stdin (quit, get_server_list).
PIPE="${CUDA_MPS_PIPE_DIRECTORY:?}"
if [ "$1" = "-d" ]; then
  echo "$@" >> "$PIPE/starts"
  nohup sleep 600 >/dev/null 2>&1 &
  echo $! > "$PIPE/nvidia-cuda-mps-control.pid"
  exit 0
fi
read -r cmd
pid=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)
case "$cmd" in
  quit) kill "$pid" 2>/dev/null; rm -f "$PIPE/nvidia-cuda-mps-control.pid"; exit 0;;
  get_server_list) kill -0 "$pid" 2>/dev/null && exit 0 || exit 1;;
esac
exit 1
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "nvidia-cuda-mps-control"
    path.write_text(FAKE)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _wait_dead(pid: int) -> None:
    for _ in range(100):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists():
            return
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if st == "Z":
            return
        time.sleep(0.05)


def test_start_supervise_restart_and_stop(tmp_path: Path) -> None:
    sup = MpsSupervisor(str(_fake(tmp_path)), tmp_path / "pipe", tmp_path / "log")
    assert sup.check()
    pid1 = int((tmp_path / "pipe" / PID_FILE).read_text())
    assert sup.alive() and sup.restarts == 0
    assert (tmp_path / "pipe" / "starts").read_text().split() == ["-d"]
    assert sup.check() and sup.restarts == 0  # alive: nothing to do
    os.kill(pid1, signal.SIGKILL)
    _wait_dead(pid1)
    assert not sup.alive()
    assert sup.check()
    pid2 = int((tmp_path / "pipe" / PID_FILE).read_text())
    assert pid2 != pid1 and sup.restarts == 1
    sup.stop()
    _wait_dead(pid2)
    assert not sup.alive()


def test_missing_binary_is_logged_not_raised(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    sup = MpsSupervisor(str(tmp_path / "nope"), tmp_path / "pipe", tmp_path / "log")
    assert not sup.check()
    assert "not found" in caplog.text and "NOT enforced" in caplog.text
