"""The node's side of the progress file: read it as untrusted input.

A job writes what it likes into its progress directory, and that directory is a host path the
node agent reads as root. So the reader opens the file without following links and without
blocking (a FIFO or a link to a host file is refused, never read), reads at most
:data:`~horus.progress.report.MAX_FILE_BYTES` + 1 bytes, and accepts only the documented
format: every number finite and in range, counters whole and non-negative, the phase one of the
known names. Monotonic checks across reads (a counter that goes back within one run) belong to
the caller, who keeps the previous record (``horus.agent.progress``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from horus.progress.report import (
    FILE_NAME,
    FORMAT,
    MAX_FILE_BYTES,
    PHASES,
    SIM_SPEED_FILE,
    SIM_SPEED_FORMAT,
)

#: Counters beyond this are not a training job's (and would lose precision as floats).
MAX_COUNT = 2**53
#: Seconds: a monotonic clock or a pause longer than ~300 years is garbage.
MAX_SECONDS = 1e10
_RUN = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ProgressError(ValueError):
    """The progress file exists but is not a valid record; the message says what is wrong."""


@dataclass(frozen=True)
class ProgressRecord:
    """One validated progress file (fields as in :mod:`horus.progress.report`)."""

    run: str
    pid: int
    t: float
    wall: float
    steps: int
    samples: int
    paused: float
    phase: str


def _count(obj: dict[str, object], key: str) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_COUNT:
        raise ProgressError(f"{key} must be a whole number in 0..2^53, got {v!r:.40}")
    return v


def _seconds(obj: dict[str, object], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProgressError(f"{key} must be a number, got {v!r:.40}")
    f = float(v)
    if not math.isfinite(f) or not 0.0 <= f <= MAX_SECONDS:
        raise ProgressError(f"{key} must be finite and in 0..1e10, got {v!r:.40}")
    return f


def parse_progress(data: bytes) -> ProgressRecord:
    """The record in ``data`` (the file's bytes), or :class:`ProgressError` saying why not."""
    if len(data) > MAX_FILE_BYTES:
        raise ProgressError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ProgressError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise ProgressError("not a JSON object")
    if obj.get("format") != FORMAT:
        raise ProgressError(f"format must be {FORMAT!r}, got {obj.get('format')!r:.40}")
    run = obj.get("run")
    if not isinstance(run, str) or not _RUN.fullmatch(run):
        raise ProgressError("run must be 1-64 characters of [A-Za-z0-9._-]")
    phase = obj.get("phase")
    if phase not in PHASES:
        raise ProgressError(f"phase must be one of {PHASES}, got {phase!r:.40}")
    pid = obj.get("pid", 0)
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < 2**31:
        raise ProgressError(f"pid must be a whole number, got {pid!r:.40}")
    t = _seconds(obj, "t")
    paused = _seconds(obj, "paused")
    if paused > t:
        raise ProgressError(f"paused ({paused}) cannot exceed the monotonic time t ({t})")
    return ProgressRecord(
        run=run,
        pid=pid,
        t=t,
        wall=_seconds(obj, "wall"),
        steps=_count(obj, "steps"),
        samples=_count(obj, "samples"),
        paused=paused,
        phase=str(phase),
    )


def _read_small(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path``; None when it does not exist.
    A link, FIFO, device or directory there raises :class:`ProgressError` (never opened for
    reading through a link, never blocks)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ProgressError(f"{path.name} is a symbolic link; not followed") from None
        raise ProgressError(f"{path.name} cannot be opened: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProgressError(f"{path.name} is not a regular file")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_progress(directory: Path) -> ProgressRecord | None:
    """The pod's progress record in ``directory``; None when the job has written none (a job
    that does not report: the agent keeps the utilisation signal). Raises
    :class:`ProgressError` for a file that is there but not a valid record."""
    data = _read_small(directory / FILE_NAME, MAX_FILE_BYTES + 1)
    return None if data is None else parse_progress(data)


def write_simulated_speed(directory: Path, speed: float) -> None:
    """SIMULATION ONLY (simulated GPUs): tell the pod's workload the speed the simulated GPU
    gives it now (:func:`horus.progress.report.simulated_speed` reads it). Written atomically
    under a temporary name of the agent's; whatever the job left at that name that is not a
    regular file (a link, a FIFO) is removed first and never followed, and ``os.replace``
    renames over a link at the final name instead of writing through it."""
    data = json.dumps(
        {"format": SIM_SPEED_FORMAT, "speed": round(min(1.0, max(0.05, speed)), 4)}
    ).encode()
    tmp = directory / f".{SIM_SPEED_FILE}.agent.tmp"
    try:
        if not stat.S_ISREG(os.lstat(tmp).st_mode):
            os.unlink(tmp)
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, directory / SIM_SPEED_FILE)
