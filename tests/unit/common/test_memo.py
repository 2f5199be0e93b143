"""horus.common.memo (issue 27): one computation per key and per identity of what is held,
so a pass recomputes only what changed, and a new key ring or a replaced object never reuses
an old answer."""

from __future__ import annotations

import pytest

from horus.common.memo import Memo, sweep_all

pytestmark = pytest.mark.unit


def test_an_answer_is_reused_only_for_the_same_key_and_the_same_held_objects() -> None:
    memo: Memo[int] = Memo()
    calls: list[int] = []
    obj, ring = {"v": 1}, object()

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert memo.get("rv1", compute, obj, ring) == 1
    assert memo.get("rv1", compute, obj, ring) == 1  # same object, same version: reused
    assert memo.get("rv2", compute, obj, ring) == 2  # a new version
    assert memo.get("rv1", compute, {"v": 1}, ring) == 3  # an equal but other object
    assert memo.get("rv1", compute, obj, object()) == 4  # another key ring
    assert (memo.hits, memo.misses) == (1, 4)


def test_past_its_limit_the_memo_starts_afresh() -> None:
    memo: Memo[str] = Memo(limit=3)
    for k in range(3):
        memo.get(k, lambda k=k: f"v{k}")
    memo.get(99, lambda: "new")  # the fourth entry: everything before it is dropped
    assert memo.get(0, lambda: "recomputed") == "recomputed"


def test_an_error_is_not_kept() -> None:
    memo: Memo[int] = Memo()

    def fail() -> int:
        raise ValueError("bad object")

    with pytest.raises(ValueError):
        memo.get("k", fail)
    assert memo.get("k", lambda: 7) == 7


def test_a_slot_keeps_one_version_of_its_object() -> None:
    """A new version replaces the old answer (and lets the old object go)."""
    memo: Memo[str] = Memo()
    old, new = {"v": 1}, {"v": 2}
    assert memo.get("rv1", lambda: "a", old, slot=("ns", "pod")) == "a"
    assert memo.get("rv2", lambda: "b", new, slot=("ns", "pod")) == "b"
    assert len(memo) == 1
    assert memo.get("rv2", lambda: "recomputed", new, slot=("ns", "pod")) == "b"
    assert memo.get("rv1", lambda: "again", old, slot=("ns", "pod")) == "again"  # gone


def test_a_sweep_drops_what_was_not_asked_for_since_the_last_one() -> None:
    memo: Memo[str] = Memo()
    memo.get("a", lambda: "A", slot="a")
    memo.get("b", lambda: "B", slot="b")
    sweep_all()  # both were asked for: kept
    memo.get("a", lambda: "again", slot="a")  # only "a" is read in the next round
    sweep_all()
    assert len(memo) == 1
    assert memo.get("b", lambda: "recomputed", slot="b") == "recomputed"


def test_per_object_derives_once_per_object_and_context() -> None:
    """The view's unchanged objects are the same dicts pass after pass: derived once; a new
    dict (a changed object) or a new context (a key ring) derives again; objects no longer
    listed are not kept."""
    from horus.common.memo import PerObject

    calls: list[str] = []

    def derive(obj: dict[str, str]) -> str:
        calls.append(obj["name"])
        return obj["name"].upper()

    kept: PerObject[str] = PerObject()
    a, b = {"name": "a"}, {"name": "b"}
    assert kept.read([a, b], derive, "ring-1") == ["A", "B"]
    assert kept.read([b, a], derive, "ring-1") == ["B", "A"]
    assert calls == ["a", "b"]
    a2 = {"name": "a"}  # equal, but a new dict: the object changed
    assert kept.read([a2, b], derive, "ring-1") == ["A", "B"]
    assert calls == ["a", "b", "a"]
    assert kept.read([a2, b], derive, "ring-2") == ["A", "B"]  # another key ring
    assert calls == ["a", "b", "a", "a", "b"]
    assert kept.read([b], derive, "ring-2") == ["B"]
    assert kept.read([a2], derive, "ring-2") == ["A"]  # a2 was dropped with the last listing
    assert calls[-1] == "a" and len(calls) == 6
