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
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["Memo", "PerObject", "sweep_all"]

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


class PerObject(Generic[T]):
    """What a reader derives from each object of a listing, kept for its next listing by the
    identity of the object — for a reader handed the watch-fed view's own dicts (the same
    dict while the object is unchanged, a new one when it changed), where a :class:`Memo`'s
    key tuples, lock and bookkeeping per object would cost more than a dict lookup.

    Each entry holds its object, so no other object has that identity while it is kept; only
    the last listing's objects are kept. ``context`` is what the values depend on besides the
    object (a key ring): when it differs from the last listing's, every value is derived
    anew. One reader at a time (a pass).
    """

    def __init__(self) -> None:
        self._held: dict[int, tuple[object, T]] = {}
        self._context: object = None

    def read(
        self, objs: Iterable[Any], derive: Callable[[Any], T], context: object = None
    ) -> list[T]:
        """``derive(obj)`` for each of ``objs``, in order: kept for a dict listed last time."""
        held = self._held if context == self._context else {}
        fresh: dict[int, tuple[object, T]] = {}
        out: list[T] = []
        for obj in objs:
            hit = held.get(id(obj))
            if hit is None:
                hit = (obj, derive(obj))
            fresh[id(obj)] = hit
            out.append(hit[1])
        self._held, self._context = fresh, context
        return out
