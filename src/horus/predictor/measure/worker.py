"""The harness's side of a measuring worker: start ``python -m horus.predictor.workload``,
read its JSON lines, tell it when to run its window, stop it (the worker's side is
:mod:`horus.predictor.workload`)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from horus.predictor.workload import WorkerJob


class WorkerFailed(Exception):
    """A worker died or did not answer; the message carries the end of its stderr."""


class Worker:
    """One measuring process (``python -m horus.predictor.workload``) and the JSON lines it
    answers with; its stderr goes to ``log_path``."""

    def __init__(self, job: WorkerJob, log_path: Path, env: Mapping[str, str]) -> None:
        self.job = job
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "horus.predictor.workload", job.to_json()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=dict(env),
            start_new_session=True,
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.pid = 0
        self.nvml_pid: int | None = None  # the PID the driver reports (see Measurer._start)
        self.mps_thread_percent: str | None = None  # as the worker saw it in its environment

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            with contextlib.suppress(ValueError):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def _tail(self) -> str:
        self._log.flush()
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text().strip().splitlines()
            if lines:
                return " | ".join(lines[-3:])
        return "no output"

    def expect(self, key: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerFailed(
                    f"{self.job.zoo}:{self.job.batch_size} gave no {key!r} within {timeout:.0f} s "
                    f"(log {self.log_path}: {self._tail()})"
                ) from None
            if msg is None:
                code = self.proc.wait()
                raise WorkerFailed(
                    f"{self.job.zoo}:{self.job.batch_size} exited with status {code} before "
                    f"{key!r} ({self._tail()})"
                )
            if key in msg:
                return msg

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        self.send("stop")
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self._log.close()
