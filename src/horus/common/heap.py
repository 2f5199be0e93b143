"""Keep Python's cyclic garbage collector off the large, long-lived copy of the cluster.

A process that holds the watch-fed copy of a cluster (tens of thousands of pod dicts, the live
state built from them) pays for every full collection with a walk over all of it: 40–130 ms
at 1,000 nodes on the development VM, landing on whatever request happens to allocate the
object that triggers it (issue 27: the extender's p99 was those pauses, not its work).
:func:`settle` runs one full collection and then moves every surviving object into the
collector's permanent generation (:func:`gc.freeze`), which later collections skip; objects
in it are still freed by reference counting when dropped. The next :func:`settle` first
takes them back (:func:`gc.unfreeze`), so a reference cycle that became garbage meanwhile is
collected then and never kept for good.
"""

from __future__ import annotations

import gc
import threading
import time

__all__ = ["keep", "settle"]

_lock = threading.Lock()


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
