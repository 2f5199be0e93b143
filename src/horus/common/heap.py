"""Keep Python's cyclic garbage collector off the large, long-lived copy of the cluster.

A process that holds the watch-fed copy of a cluster (tens of thousands of pod dicts, the live
state built from them) pays for every full collection with a walk over all of it, landing on
whatever request happens to allocate the object that triggers it, so without this the
extender's slowest requests are those pauses, not its work (``docs/results/operator.md``).
:func:`settle` runs one full collection and then moves every surviving object into the
collector's permanent generation (:func:`gc.freeze`), which later collections skip; objects
in it are still freed by reference counting when dropped. The next :func:`settle` first
takes them back (:func:`gc.unfreeze`), so a reference cycle that became garbage meanwhile is
collected then and never kept for good.

What Python frees it does not always give back: objects over 512 bytes (a pod's JSON text, a
large dict) come from the C library's ``malloc``, and glibc keeps freed memory in per-thread
*arenas* (up to eight per core) and at the top of each heap, so a process whose threads once
held a burst of jobs keeps that much resident after the jobs are gone, and a little more
after each burst as the arenas fragment: the operator's RSS rises with each cycle of jobs
while what Python itself holds grows only by its bounded caches (before and after capping and
trimming: ``benchmarks/results/operator-scale-1000-arenas-baseline.json`` and
``operator-scale-1000-arenas.json``). :func:`limit_arenas`
caps the arenas (glibc's ``M_ARENA_MAX``, what ``MALLOC_ARENA_MAX`` sets) before the threads
start, and :func:`release` hands freed memory back (``malloc_trim``), every few seconds while
the process's data changes (:class:`Releaser`). Both do nothing where the C library is not
glibc (musl has neither call and returns memory itself).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
import time
from typing import Any

__all__ = ["Releaser", "keep", "limit_arenas", "release", "release_beside", "settle"]

_lock = threading.Lock()
_releasing = threading.Lock()  # held while a release_beside thread runs

#: glibc's ``mallopt`` parameter for the most arenas (``M_ARENA_MAX`` in ``malloc.h``).
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> Any:
    """This process's C library (the symbols already loaded; opened once), or None where
    unreadable."""
    try:
        return ctypes.CDLL(None)
    except OSError:  # pragma: no cover - every Linux Python can load itself
        return None


def limit_arenas(most: int) -> bool:
    """Let glibc's ``malloc`` use at most ``most`` arenas; whether it was set (False where the C
    library has no ``mallopt``, or refused it). Call it first thing, before threads start:
    arenas already made stay."""
    if most < 1:
        raise ValueError(f"arenas must be at least 1, got {most}")
    fn = getattr(_libc(), "mallopt", None)
    return bool(fn is not None and fn(_M_ARENA_MAX, most) == 1)


def release() -> bool:
    """Give the memory ``malloc`` holds free back to the system (``malloc_trim(0)``); whether
    the call exists here. It walks every arena (58–250 ms for a 1.1–1.3 GiB heap, measured,
    while other threads' ``malloc`` may wait): call it every few seconds at most, not per
    request."""
    fn = getattr(_libc(), "malloc_trim", None)
    if fn is None:
        return False
    fn(0)
    return True


def release_beside() -> bool:
    """:func:`release` in a thread of its own, beside the caller's work — unless the last one
    is still running: a trim walks the whole heap, so two side by side (after full builds in
    a row) would only take turns at the arenas' locks. Whether one was started."""
    if not _releasing.acquire(blocking=False):
        return False

    def run() -> None:
        try:
            release()
        finally:
            _releasing.release()

    try:
        threading.Thread(target=run, name="horus-heap-release", daemon=True).start()
    except BaseException:
        _releasing.release()
        raise
    return True


def settle() -> float:
    """Collect everything unreachable, then freeze what is left; returns the seconds it took.

    Call it after the long-lived data changed (a rebuilt cluster state), not per request:
    it is one full collection."""
    t0 = time.perf_counter()
    with _lock:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    return time.perf_counter() - t0


def keep() -> None:
    """Freeze what is alive now without a collection first: after a small change to the
    long-lived data (an incremental update of the live state), whose new objects would
    otherwise be walked by the next full collection; garbage cycles made since the last
    :func:`settle` stay until the next one."""
    with _lock:
        gc.freeze()


class Releaser:
    """Whether to :func:`release` now: when what the process holds changed since the last
    release (``mark``: anything that moves with it, e.g. a watch-fed view's generations).

    Asked every ``HEAP_RELEASE_SECONDS``, that gives back what a burst freed within that
    time of the burst (a quiet cluster does not wait for a pass to notice), at most once per
    tick while jobs keep coming, and never while nothing changes."""

    def __init__(self) -> None:
        self._mark: object = None

    def due(self, mark: object) -> bool:
        if mark == self._mark:
            return False
        self._mark = mark
        return True
