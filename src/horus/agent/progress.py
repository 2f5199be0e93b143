"""Pair speeds from the jobs' own progress: the rate alone, the rate next to a
neighbour, their ratio and how sure it is.

Every cycle the agent reads each pod's progress file (:mod:`horus.progress.reader`) and tells
this module in which *context* the pod ran since the previous read: alone on its GPU(s), next to
exactly one other pod (whose job kind names the pair), or something that cannot be attributed
(three pods, a gang replica whose neighbours this agent cannot see, a neighbour of unknown
kind). One read to the next is one *window*; its rate is the samples (steps where the job gives
no samples) done in it over the training seconds in it — the job's own monotonic time less the
seconds it marked as eval or checkpoint. A window counts only when the context held at both
ends, the job wrote in between, the run is the same and no counter went back.

Why medians of windows: a training job's rate is not steady — evaluation it did not mark, a
checkpoint, a data-loader stall, a batch-size change. A window with no progress at all is a
pause and is dropped; a job that stops writing for ``stale_seconds`` (or three times its usual
gap between writes, whichever is longer) restarts its windows (the hang is not read as a
slowdown); what remains is summarised by the median, which a few odd
windows do not move. Samples rather than steps make a batch-size change harmless.

**Speed** of a pod next to kind K on GPU model M = median rate next to K / median rate alone.
The solo baseline is the pod's own when it has ``min_windows`` solo windows; otherwise the
pooled solo windows of pods of the same kind on the same GPU model with the same core share
(a replica or an earlier run of the same job, counting the same unit), so a pod placed beside
a neighbour at once still gets a speed once a sibling ran alone. **Error** is the standard
error of that ratio, from each median's standard error (1.253 · 1.4826 · MAD / √n, the
median's error for normal noise, MAD-based so outliers do not inflate it) combined in
quadrature; the scheduler's margin on the pair is z times it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from horus.common.constants import MIN_OBSERVED_PAIR_SPEED, PAIR_SOURCE_PROGRESS
from horus.progress.reader import ProgressRecord

#: Windows needed alone and next to one neighbour kind before a speed is given.
MIN_WINDOWS = 3
#: Windows kept per context (at a 5 s cycle: the last 10 minutes).
MAX_WINDOWS = 120
#: A job that wrote nothing for this long was paused or hung: its next window starts afresh.
STALE_SECONDS = 30.0
#: The longest gap between a job's writes taken as normal (steps of minutes), seconds.
MAX_GAP = 300.0
#: Shorter windows (a job writing once a second, read every few) wait for the next read.
MIN_WINDOW_SECONDS = 1.0
#: Faster is not a training job's progress (a garbage file that passed validation).
MAX_RATE = 1e9
#: Solo pools kept for (kind, GPU model, share, unit) keys.
MAX_POOLS = 4096

#: (neighbour job kind, GPU model), as :mod:`horus.agent.feedback` keys pairs.
PairKey = tuple[str, str]


@dataclass(frozen=True)
class Context:
    """Where a pod ran during a window: alone (``neighbour`` None) or next to the one pod
    ``neighbour`` of job kind ``kind``, on a GPU of ``gpu_model`` with ``core_percent``."""

    gpu_model: str
    core_percent: int
    neighbour: str | None = None
    kind: str | None = None

    @property
    def solo(self) -> bool:
        return self.neighbour is None


@dataclass(frozen=True)
class PairReading:
    """A measured pair speed as published (``status.observed.pairs``)."""

    speed: float
    samples: int  # windows next to the neighbour kind
    error: float  # typical absolute error of speed
    source: str


def median_and_error(values: Iterable[float]) -> tuple[float, float, int]:
    """(median, its standard error, n) of ``values``; see the module docstring."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return 0.0, math.inf, 0
    med = statistics.median(v)
    mad = statistics.median(abs(x - med) for x in v)
    return med, 1.2533 * 1.4826 * mad / math.sqrt(n), n


@dataclass
class _Pod:
    kind: str | None = None
    last: ProgressRecord | None = None
    last_context: Context | None = None
    stale_t: float | None = None  # the monotonic time of the record a pause was seen on
    gap: float = 0.0  # typical seconds between new records (a job with long steps writes rarely)
    unit: str | None = None  # "samples" or "steps"
    solo: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_WINDOWS))
    shared: dict[PairKey, deque[float]] = field(default_factory=dict)
    solo_key: tuple[str, str, int, str] | None = None


class ProgressSpeeds:
    """Windowed progress rates per pod and context, and the pair speeds they give."""

    def __init__(
        self,
        min_windows: int = MIN_WINDOWS,
        stale_seconds: float = STALE_SECONDS,
        min_window_seconds: float = MIN_WINDOW_SECONDS,
    ) -> None:
        self.min_windows = min_windows
        self.stale_seconds = stale_seconds
        self.min_window_seconds = min_window_seconds
        self.pods: dict[str, _Pod] = {}
        #: (kind, GPU model, core %, unit) → solo window rates of every pod of that kind.
        self.pools: dict[tuple[str, str, int, str], deque[float]] = {}
        #: Why the last read of a pod gave no window (for tests and debug logs).
        self.why: dict[str, str] = {}

    def reporting(self, uid: str) -> bool:
        """Whether the pod has given at least one progress window."""
        p = self.pods.get(uid)
        return p is not None and (bool(p.solo) or any(p.shared.values()))

    def observe(
        self,
        uid: str,
        record: ProgressRecord | None,
        context: Context | None,
        kind: str | None,
        wall_now: float,
    ) -> float | None:
        """One read of pod ``uid``: its progress record (None: no file, or an invalid one),
        the context it ran in now (None: not attributable) and its own job kind. Returns the
        window rate recorded, or None (``why[uid]`` says why)."""
        p = self.pods.setdefault(uid, _Pod())
        p.kind = kind or p.kind
        rate, keep_base = self._window(uid, p, record, context, wall_now)
        if not keep_base:
            p.last = record
        elif context is None or context != p.last_context:
            p.last = None  # the window would span a change of neighbours: start afresh
        p.last_context = context
        if rate is None or context is None:
            return None
        unit = "samples" if record is not None and record.samples > 0 else "steps"
        if p.unit != unit:  # the job began (or stopped) giving samples: rates not comparable
            p.unit = unit
            p.solo.clear()
            p.shared.clear()
        if context.solo:
            p.solo.append(rate)
            if p.kind is not None:
                key = (p.kind, context.gpu_model, context.core_percent, unit)
                if key not in self.pools and len(self.pools) >= MAX_POOLS:
                    self.pools.pop(next(iter(self.pools)))
                self.pools.setdefault(key, deque(maxlen=MAX_WINDOWS)).append(rate)
                p.solo_key = key
        elif context.kind is not None:
            k = (context.kind, context.gpu_model)
            p.shared.setdefault(k, deque(maxlen=MAX_WINDOWS)).append(rate)
            if p.kind is not None:
                p.solo_key = (p.kind, context.gpu_model, context.core_percent, unit)
        return rate

    def _window(
        self,
        uid: str,
        p: _Pod,
        record: ProgressRecord | None,
        context: Context | None,
        wall_now: float,
    ) -> tuple[float | None, bool]:
        """The window's rate (or None, ``why`` set) and whether the previous record stays the
        window's start (the next read extends this window rather than starting a new one)."""
        prev, prev_ctx = p.last, p.last_context

        def no(why: str, keep_base: bool = False) -> tuple[None, bool]:
            self.why[uid] = why
            return None, keep_base

        if record is None:
            return no("no progress file")
        if record.t == p.stale_t:  # the record a pause ended on: not the start of a window
            p.last = None
            return no("no progress written for a while (paused or hung)", keep_base=True)
        if prev is None or prev.run != record.run:
            if prev is None and p.stale_t is not None and record.t > p.stale_t:
                # not hung, perhaps only slow to write: learn that (a real hang teaches a gap
                # too, at most MAX_GAP, so one later hang may land in a window: the median)
                p.gap = min(MAX_GAP, record.t - p.stale_t)
            return no("first read of this run")
        if record.t == prev.t:
            # silent for longer than it usually is between writes (a job whose steps take a
            # minute writes once a minute): paused or hung
            if wall_now - record.wall > max(self.stale_seconds, 3.0 * p.gap):
                p.last, p.stale_t = None, record.t
                return no("no progress written for a while (paused or hung)", keep_base=True)
            return no("no new write since the last read", keep_base=True)
        if (
            record.t < prev.t
            or record.steps < prev.steps
            or record.samples < prev.samples
            or record.paused < prev.paused
        ):
            return no("a counter went back within one run")
        gap = min(MAX_GAP, record.t - prev.t)
        p.gap = gap if p.gap == 0.0 else 0.7 * p.gap + 0.3 * gap
        if context is None or prev_ctx != context:
            return no("the GPU's neighbours changed, or cannot be attributed")
        if record.phase == "done" or prev.phase == "done":
            return no("the job said it is done")
        train = (record.t - prev.t) - (record.paused - prev.paused)
        if train < self.min_window_seconds:
            return no("window too short", keep_base=True)
        use_samples = record.samples > 0  # the job counts samples (0 at its start is fine)
        done = record.samples - prev.samples if use_samples else record.steps - prev.steps
        if done <= 0:
            return no("no progress in the window (a pause)")
        rate = done / train
        if not math.isfinite(rate) or rate > MAX_RATE:
            return no("an impossible rate")
        self.why.pop(uid, None)
        return rate, False

    def baseline(self, uid: str) -> tuple[float, float, int] | None:
        """(median solo rate, its standard error, windows) of the pod: its own, else its
        kind's pool on that GPU model and share; None with fewer than ``min_windows``."""
        p = self.pods.get(uid)
        if p is None:
            return None
        if len(p.solo) >= self.min_windows:
            return median_and_error(p.solo)
        pool = self.pools.get(p.solo_key) if p.solo_key is not None else None
        if pool is not None and len(pool) >= self.min_windows:
            return median_and_error(pool)
        return None

    def speeds(self, uid: str) -> dict[PairKey, PairReading]:
        """(neighbour kind, GPU model) → reading, for each pair with enough windows."""
        p = self.pods.get(uid)
        base = self.baseline(uid)
        if p is None or base is None or base[0] <= 0:
            return {}
        m0, se0, _ = base
        out: dict[PairKey, PairReading] = {}
        for key, rates in p.shared.items():
            if len(rates) < self.min_windows:
                continue
            m, se, n = median_and_error(rates)
            speed = min(1.0, max(MIN_OBSERVED_PAIR_SPEED, m / m0))
            rel = math.hypot(se / m if m > 0 else 1.0, se0 / m0)
            out[key] = PairReading(speed, n, min(1.0, speed * rel), PAIR_SOURCE_PROGRESS)
        return out

    def forget(self, present_uids: Iterable[str]) -> None:
        keep = set(present_uids)
        for uid in [u for u in self.pods if u not in keep]:
            del self.pods[uid]
            self.why.pop(uid, None)
