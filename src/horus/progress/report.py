"""Report a training job's progress to the Horus node agent: one small file, no network.

Why: the agent's only other per-job signal is GPU utilisation, which says how busy the GPU was,
not how fast the job went. A job that reports steps and samples lets the agent
measure its real speed alone and next to each neighbour, which is what placement needs.

How: on a Horus GPU node every pod gets its own directory, named by ``$HORUS_PROGRESS_DIR``
(the device plugin, or the DRA driver, mounts it; see ``docs/agent.md``). The job rewrites one
file there, ``progress.json``, at most once per ``min_interval`` seconds, atomically (a temporary
file, then a rename), so the agent never reads half of one. Without the variable every call is
a no-op: the same training script runs anywhere.

This file depends on nothing but the standard library, so it can be copied into an image that
does not install Horus (``examples/workload`` does that).

Usage::

    from horus.progress.report import ProgressReporter
    progress = ProgressReporter()              # reads $HORUS_PROGRESS_DIR; no-op without it
    for batch in loader:
        train_step(batch)
        progress.step(samples=len(batch))      # one optimiser step of len(batch) samples
        if time_to_evaluate:
            with progress.phase("eval"):       # time outside training, not counted as slow
                evaluate()
    progress.close()

The format (version 1), one JSON object, at most :data:`MAX_FILE_BYTES` bytes:

========== ======= ==========================================================================
key        type    meaning
========== ======= ==========================================================================
format     str     ``"horus-progress/1"``
run        str     a token new for every reporter (a restart, a resume): counters restart
pid        int     the writing process
t          float   ``time.monotonic()`` when the counters were taken (CLOCK_MONOTONIC: the
                   node's, the agent reads the same clock)
wall       float   ``time.time()`` at the same moment
steps      int     optimiser steps since the reporter started, never decreasing
samples    int     training samples since then (0 when the job does not say), never decreasing
paused     float   seconds spent outside training since then (eval, checkpoint: ``phase()``)
phase      str     what the job does now: ``train``, ``eval``, ``checkpoint``, ``other``,
                   ``done``
========== ======= ==========================================================================
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import time
import warnings
from collections.abc import Callable, Iterator

FORMAT = "horus-progress/1"
FILE_NAME = "progress.json"
#: The per-pod directory's path inside the container.
ENV_DIR = "HORUS_PROGRESS_DIR"
MAX_FILE_BYTES = 4096
PHASES = ("train", "eval", "checkpoint", "other", "done")

#: SIMULATION ONLY. On a simulated GPU (the dev cluster's nodes, kwok) the node agent writes
#: the speed the simulated GPU gives this pod (1.0 alone, less when sharing) here, and the
#: example workload stretches its step time by it (:func:`simulated_speed`). A real GPU
#: needs no such file: sharing slows the job by itself.
SIM_SPEED_FILE = "simulated-speed.json"
SIM_SPEED_FORMAT = "horus-simulated-speed/1"


class ProgressReporter:
    """Counts a training loop's steps and samples and rewrites the progress file.

    ``directory`` defaults to ``$HORUS_PROGRESS_DIR``; without either the reporter does
    nothing (``enabled`` is False). A file that cannot be written is warned about once and
    then skipped: reporting never stops training."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        where = directory if directory is not None else os.environ.get(ENV_DIR)
        self.directory = os.fspath(where) if where else None
        self.min_interval = max(0.0, float(min_interval))
        self._clock, self._wall = clock, wall
        self.run = secrets.token_hex(8)
        self.steps = 0
        self.samples = 0
        self.paused = 0.0
        self.phase_name = "train"
        self._phase_since: float | None = None
        self._last_write = -math.inf
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def step(self, samples: int | None = None, steps: int = 1) -> None:
        """Count ``steps`` optimiser steps (default 1) of ``samples`` training samples in all
        (give the batch size: a changing batch size then keeps the speed in samples/s)."""
        if steps < 0 or (samples is not None and samples < 0):
            raise ValueError("steps and samples count up: they cannot be negative")
        self.steps += int(steps)
        if samples is not None:
            self.samples += int(samples)
        self._maybe_write()

    def set_totals(self, steps: int, samples: int | None = None) -> None:
        """Set the counters to totals the framework keeps (e.g. a trainer's global step);
        counters never go back: a smaller total is ignored."""
        self.steps = max(self.steps, int(steps))
        if samples is not None:
            self.samples = max(self.samples, int(samples))
        self._maybe_write()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time spent inside is not training (``eval``, ``checkpoint``, ``other``): the agent
        leaves it out of the speed instead of reading it as a slowdown."""
        self.begin_phase(name)
        try:
            yield
        finally:
            self.end_phase()

    def begin_phase(self, name: str) -> None:
        if name not in PHASES or name in ("train", "done"):
            raise ValueError(f"phase must be one of eval, checkpoint, other; got {name!r}")
        if self._phase_since is None:
            self._phase_since = self._clock()
        self.phase_name = name
        self.write()

    def end_phase(self) -> None:
        if self._phase_since is not None:
            self.paused += max(0.0, self._clock() - self._phase_since)
            self._phase_since = None
        self.phase_name = "train"
        self.write()

    def close(self) -> None:
        """The last write (``phase: done``): the agent stops expecting progress."""
        if self._phase_since is not None:
            self.end_phase()
        self.phase_name = "done"
        self.write()

    def record(self) -> dict[str, object]:
        """The object the file holds (see the module docstring)."""
        now = self._clock()
        paused = self.paused
        if self._phase_since is not None:
            paused += max(0.0, now - self._phase_since)
        return {
            "format": FORMAT,
            "run": self.run,
            "pid": os.getpid(),
            "t": round(now, 6),
            "wall": round(self._wall(), 3),
            "steps": self.steps,
            "samples": self.samples,
            "paused": round(paused, 6),
            "phase": self.phase_name,
        }

    def _maybe_write(self) -> None:
        if self.directory is not None and self._clock() - self._last_write >= self.min_interval:
            self.write()

    def write(self) -> None:
        """Rewrite the file now (atomically: a temporary file in the same folder, renamed)."""
        if self.directory is None:
            return
        self._last_write = self._clock()
        data = json.dumps(self.record(), separators=(",", ":")).encode()
        tmp = os.path.join(self.directory, f".{FILE_NAME}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, os.path.join(self.directory, FILE_NAME))
        except OSError as exc:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"horus progress: cannot write {self.directory}/{FILE_NAME} ({exc}); "
                    "training goes on without reporting",
                    RuntimeWarning,
                    stacklevel=2,
                )


def simulated_speed(directory: str | os.PathLike[str] | None = None) -> float | None:
    """SIMULATION ONLY: the speed (0.05..1) the node's simulated GPU gives this pod now, or
    None on a real GPU (no file) or when the file is unreadable. The example workload divides
    its step time by it, so on simulated nodes sharing slows the job as the simulation says
    and the agent's progress reading can be checked against a known truth."""
    where = directory if directory is not None else os.environ.get(ENV_DIR)
    if not where:
        return None
    try:
        with open(os.path.join(os.fspath(where), SIM_SPEED_FILE), "rb") as fh:
            raw = fh.read(1024)
        obj = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict) or obj.get("format") != SIM_SPEED_FORMAT:
        return None
    speed = obj.get("speed")
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not math.isfinite(speed):
        return None
    return min(1.0, max(0.05, float(speed)))
