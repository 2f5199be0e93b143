"""Tests that start a cluster with real nodes take turns on the host.

Only one cluster with real nodes may exist on a host — every node's kube-proxy owns the host's
Service chains, so ``add-nodes --real`` refuses a second cluster. A test that starts one first
takes this host-wide lock (the same file ``flock /tmp/horus-realnodes.lock CMD`` takes), so a
suite run and a developer's real-node run on one machine wait for each other instead of one
being refused. Do not wrap a pytest run that starts real nodes in ``flock`` on the same file:
the test inside would wait for its own parent.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

LOCK = Path(os.environ.get("HORUS_REALNODES_LOCK", "/tmp/horus-realnodes.lock"))


@contextmanager
def real_node_host(timeout: float = 3600.0) -> Iterator[None]:
    """Hold the host's real-node lock; fail (not hang) after ``timeout`` seconds of waiting."""
    with LOCK.open("a") as fh:
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another real-node run held {LOCK} for {timeout:.0f}s")
                if not waited:
                    print(f"waiting for {LOCK}: another cluster with real nodes runs here")
                    waited = True
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
