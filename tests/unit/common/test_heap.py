"""horus.common.heap: giving a burst's memory back, and when."""

from __future__ import annotations

import ctypes
import platform

import pytest

from horus.common import heap

GLIBC = platform.libc_ver()[0] == "glibc"


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not GLIBC, reason="malloc_trim and mallopt are glibc's")
def test_release_gives_freed_malloc_memory_back() -> None:
    """Memory malloc keeps after free (many small blocks, so none is an mmap of its own and
    the top of the heap stays pinned by the last one) leaves the resident set on release."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(64 * 1024) for _ in range(3000)]  # ~190 MiB, under the mmap cut
    for b in blocks:
        ctypes.memset(b, 1, 64 * 1024)  # touched: resident
    for b in blocks[:-1]:
        libc.free(b)
    held = _rss_kib()
    assert heap.release() is True
    after = _rss_kib()
    libc.free(blocks[-1])
    assert held - after > 100 * 1024, (held, after)


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_limit_arenas_is_accepted() -> None:
    assert heap.limit_arenas(8) is True  # this test process: glibc's own default bound


def test_limit_arenas_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        heap.limit_arenas(0)


def test_releaser_is_due_only_when_the_mark_moved() -> None:
    r = heap.Releaser()
    assert r.due((0, (1, 1, 1))) is True  # the first tick: whatever start-up built and freed
    assert r.due((0, (1, 1, 1))) is False  # nothing changed: nothing new to give back
    assert r.due((1, (1, 1, 1))) is True  # a pass ran
    assert r.due((1, (1, 2, 1))) is True  # the view changed (jobs deleted)
    assert r.due((1, (1, 2, 1))) is False


def test_the_operator_releases_when_its_view_moved_and_times_it() -> None:
    """The controller's tick (``Controller.release_heap``): a release, timed in
    ``horus_operator_heap_release_seconds``, on the first tick and after the view or the
    passes moved; none while nothing changed."""
    import asyncio
    from types import SimpleNamespace

    from horus.common import constants as c
    from horus.operator.controller import Controller
    from horus.operator.settings import OperatorSettings

    ctl = Controller(OperatorSettings(identity="t"))
    view = SimpleNamespace(generation=(1, 1, 1))
    releaser = heap.Releaser()

    def count() -> float:
        value = ctl.metrics.registry.get_sample_value(f"{c.METRIC_HEAP_RELEASE}_count")
        return value or 0.0

    async def ticks() -> list[bool]:
        out = [await ctl.release_heap(releaser)]  # no view yet
        ctl.view = view
        out.append(await ctl.release_heap(releaser))
        out.append(await ctl.release_heap(releaser))
        view.generation = (1, 2, 1)
        out.append(await ctl.release_heap(releaser))
        ctl.passes += 1
        out.append(await ctl.release_heap(releaser))
        return out

    assert asyncio.run(ticks()) == [False, True, False, True, True]
    assert count() == (3.0 if GLIBC else 0.0)


def test_release_beside_runs_one_trim_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extender trims beside its requests after each full build; builds in a row must not
    pile trims up side by side (each walks the whole heap)."""
    import threading

    started, go, done = threading.Event(), threading.Event(), threading.Event()
    calls: list[str] = []

    def slow_release() -> bool:
        calls.append(threading.current_thread().name)
        started.set()
        go.wait(10)
        done.set()
        return True

    monkeypatch.setattr(heap, "release", slow_release)
    assert heap.release_beside() is True
    assert started.wait(10)
    assert heap.release_beside() is False  # the first is still trimming
    go.set()
    assert done.wait(10)
    for _ in range(100):  # the thread gives the slot back right after release returns
        if heap.release_beside():
            break
        threading.Event().wait(0.01)
    else:
        raise AssertionError("no release started after the first ended")
    for _ in range(100):
        if len(calls) == 2:
            break
        threading.Event().wait(0.01)
    assert calls == ["horus-heap-release", "horus-heap-release"]
