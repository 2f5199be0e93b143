"""A bounded memo for pure functions of API objects, so a pass works on what changed.

Why: every operator pass (and every extender answer) reads the whole watch-fed copy of the
cluster, and most of its cost was re-reading objects that did not change since the last pass:
parsing a DLJob or its status, decoding a node's GPU inventory, verifying a signature. The
apiserver gives every change of an object a new ``resourceVersion``, so an answer computed
for (uid, resourceVersion, the exact fields read) is the answer for as long as that object
is unchanged. Keys therefore always include the text that is read (or the version that
covers it); a key ring that takes part (signature checks) is kept with the answer and
compared by identity, so a rotated or lost key never reuses an old verdict.

Bounded: past ``limit`` entries the memo starts afresh (entries of objects long gone are
dropped with the rest; the next pass recomputes what it needs).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Memo", "sweep_all"]

T = TypeVar("T")

_ALL: weakref.WeakSet[Any] = weakref.WeakSet()


def sweep_all() -> None:
    """:meth:`Memo.sweep` every memo of this process (the operator, after each pass)."""
    for memo in list(_ALL):
        memo.sweep()


class Memo(Generic[T]):
    """``get(key, compute, *held, slot=...)``: ``compute()`` once per ``key`` (and per
    identity of each object in ``held``, which the memo keeps alive while the answer is kept).

    ``slot`` names the object the answer is about (its namespace/name/uid): a slot holds one
    answer, so a new version of an object replaces its old one instead of piling up beside it
    — the memo then holds about one version of each object, not every version it ever saw.
    """

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[Hashable, T, tuple[object, ...]]] = {}
        self._used: set[Hashable] = set()
        self.hits = 0
        self.misses = 0
        _ALL.add(self)

    def get(
        self, key: Hashable, compute: Callable[[], T], *held: object, slot: Hashable = None
    ) -> T:
        full = (key, tuple(id(h) for h in held))
        where = full if slot is None else slot
        with self._lock:
            hit = self._items.get(where)
            self._used.add(where)
        if (
            hit is not None
            and hit[0] == full
            and all(a is b for a, b in zip(hit[2], held, strict=True))
        ):
            self.hits += 1
            return hit[1]
        value = compute()
        self.misses += 1
        with self._lock:
            if len(self._items) >= self.limit and where not in self._items:
                self._items.clear()
            self._items[where] = (full, value, held)
        return value

    def sweep(self) -> None:
        """Drop the answers no :meth:`get` asked for since the last sweep: a reader that
        reads every live object once per round (a reconcile pass) sweeps after it, and the
        answers about deleted objects go with the objects they hold."""
        with self._lock:
            self._items = {k: v for k, v in self._items.items() if k in self._used}
            self._used = set()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._used.clear()
