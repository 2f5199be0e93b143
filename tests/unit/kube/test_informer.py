"""The informer's bookkeeping (issue 27): what a relist, a watch event, our own write's answer
and an assumed Binding do to the copy. The watch itself is the Kubernetes client's; the
integration tests (tests/integration/operator/test_cluster_view.py) run it against a real
apiserver, with an expiry and a restart."""

from __future__ import annotations

from typing import Any

import pytest

from horus.kube.informer import Informer, newer
from kube_fakes import json_response

pytestmark = pytest.mark.unit


def _obj(name: str, rv: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}, **extra}


class _Lister:
    """A LIST answer the test sets (``version``: the list's resourceVersion; ``kind``: the
    list's own kind, such as ``NodeList``, which the apiserver sends and items lack)."""

    def __init__(self, kind: str | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self.version = 1
        self.kind = kind

    def __call__(self, **_: Any) -> Any:
        typed = {"kind": self.kind, "apiVersion": "v1"} if self.kind else {}
        meta = {"resourceVersion": str(self.version)}
        return json_response({**typed, "metadata": meta, "items": self.items})


def _informer(kind: str | None = None) -> tuple[Informer, _Lister, list[tuple[str, bool]]]:
    lister = _Lister(kind)
    seen: list[tuple[str, bool]] = []
    inf = Informer("t", lister, on_change=lambda key, _o, new: seen.append((key, new is None)))
    return inf, lister, seen


def test_a_relist_reports_what_vanished_and_appeared_while_unwatched() -> None:
    inf, lister, seen = _informer()
    lister.items, lister.version = [_obj("a", 5), _obj("b", 6)], 6
    inf.relist()
    assert inf.synced and {o["metadata"]["name"] for o in inf.items()} == {"a", "b"}
    seen.clear()
    lister.items, lister.version = [_obj("b", 6), _obj("c", 9)], 9
    inf.relist()
    assert {o["metadata"]["name"] for o in inf.items()} == {"b", "c"}
    assert sorted(seen) == [("ns/a", True), ("ns/c", False)]  # b unchanged: not reported
    assert inf.resource_version == "9" and inf.counts.lists == 2


def test_a_relist_keeps_each_objects_place_and_dict() -> None:
    """A relist (after a 410) changes the copy as watch events would: an unchanged object
    keeps its dict and its place, a changed one is replaced in its place, a gone one leaves,
    a new one goes to the end — so a reader that follows the copy's order sees only what
    changed, whatever order the LIST came in."""
    inf, lister, _ = _informer()
    lister.items, lister.version = [_obj("a", 1), _obj("b", 2), _obj("c", 3)], 3
    inf.relist()
    inf._apply({"type": "ADDED", "object": _obj("0", 4)})  # a watch adds at the end
    before = inf.items()
    assert [o["metadata"]["name"] for o in before] == ["a", "b", "c", "0"]
    lister.items = [_obj("0", 4), _obj("a", 1), _obj("c", 7), _obj("d", 8)]  # the list's order
    lister.version = 8
    inf.relist()
    after = inf.items()
    assert [o["metadata"]["name"] for o in after] == ["a", "c", "0", "d"]
    assert after[0] is before[0] and after[2] is before[3]  # unchanged: the same dicts
    assert after[1]["metadata"]["resourceVersion"] == "7"


def test_our_write_is_not_undone_by_an_older_event_or_list() -> None:
    inf, lister, _ = _informer()
    lister.items, lister.version = [_obj("a", 5, status={"phase": "Queued"})], 5
    inf.relist()
    inf.observe(_obj("a", 8, status={"phase": "Scheduled"}))  # our status write's answer
    inf._apply({"type": "MODIFIED", "object": _obj("a", 7, status={"phase": "Queued"})})
    assert inf.get("ns/a")["status"]["phase"] == "Scheduled"
    # A list whose snapshot is older than our write keeps our write, even of a new object.
    inf.observe(_obj("new", 10))
    lister.items, lister.version = [_obj("a", 7, status={"phase": "Queued"})], 7
    inf.relist()
    assert inf.get("ns/a")["status"]["phase"] == "Scheduled"
    assert inf.get("ns/new") is not None
    # A newer list wins, and one without the object deletes it.
    lister.items, lister.version = [_obj("a", 12, status={"phase": "Running"})], 12
    inf.relist()
    assert inf.get("ns/a")["status"]["phase"] == "Running" and inf.get("ns/new") is None


def test_an_assumed_binding_stays_until_the_watch_brings_a_newer_version() -> None:
    inf, lister, _ = _informer()
    lister.items, lister.version = [_obj("p", 5, spec={})], 5
    inf.relist()
    inf.assume("ns/p", lambda pod: {**pod, "spec": {"nodeName": "n1"}})
    assert inf.get("ns/p")["spec"]["nodeName"] == "n1"
    # The same version again (a late event of the create) does not undo it.
    inf._apply({"type": "MODIFIED", "object": _obj("p", 5, spec={})})
    assert inf.get("ns/p")["spec"]["nodeName"] == "n1"
    inf._apply({"type": "MODIFIED", "object": _obj("p", 6, spec={"nodeName": "n1"}, x=1)})
    assert inf.get("ns/p")["x"] == 1
    inf._apply({"type": "DELETED", "object": _obj("p", 7)})
    assert inf.get("ns/p") is None
    inf._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    assert inf.resource_version == "20" and len(inf) == 0


def test_the_projection_is_what_is_kept() -> None:
    lister = _Lister()
    lister.items = [_obj("a", 1, spec={"big": "x" * 1000})]
    inf = Informer("t", lister, project=lambda o: {"metadata": o["metadata"]})
    inf.relist()
    assert inf.get("ns/a") == {"metadata": lister.items[0]["metadata"]}


def test_versions_compare_as_etcd_revisions() -> None:
    assert newer("10", "9") and newer("9", "9") and not newer("9", "10")
    assert newer("x", "9") and newer("5", "")


def test_a_new_version_with_nothing_else_new_is_no_change() -> None:
    """A heartbeat the projection dropped moves only the version: readers keep what they
    built from the copy (generation) and hear of no change."""
    inf, lister, seen = _informer()
    lister.items, lister.version = [_obj("n", 5, status={"ok": True})], 5
    inf.relist()
    seen.clear()
    generation = inf.generation
    inf._apply({"type": "MODIFIED", "object": _obj("n", 6, status={"ok": True})})
    assert inf.generation == generation and not seen
    assert inf.get("ns/n")["metadata"]["resourceVersion"] == "6"  # the version is kept
    inf._apply({"type": "MODIFIED", "object": _obj("n", 7, status={"ok": False})})
    assert inf.generation == generation + 1 and seen == [("ns/n", False)]


def test_a_listed_object_looks_like_its_watch_events() -> None:
    """The apiserver leaves ``apiVersion`` and ``kind`` out of a list's items and sends them
    with every watch event: the listed copy gets them, or a node's first heartbeat after a
    list is a change every reader hears of (the extender rebuilt its whole live state for
    it, at 5,000 nodes seconds per request, issue 27)."""
    inf, lister, seen = _informer("NodeList")
    lister.items, lister.version = [_obj("n", 5, status={"ok": True})], 5
    inf.relist()
    assert inf.get("ns/n")["kind"] == "Node" and inf.get("ns/n")["apiVersion"] == "v1"
    seen.clear()
    generation = inf.generation
    event = {"apiVersion": "v1", "kind": "Node", **_obj("n", 6, status={"ok": True})}
    inf._apply({"type": "MODIFIED", "object": event})
    assert inf.generation == generation and not seen  # a heartbeat: no change
    # an item that says its own kind keeps it; a list without a kind changes nothing
    assert inf.get("ns/n")["metadata"]["resourceVersion"] == "6"
    plain, plain_lister, _ = _informer()
    plain_lister.items = [_obj("m", 1)]
    plain.relist()
    assert "kind" not in plain.get("ns/m")


class _Pager:
    """A LIST answered in pages of ``limit`` with continue tokens, as the apiserver pages."""

    def __init__(self, items: list[dict[str, Any]], version: int) -> None:
        self.items, self.version = items, version
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> Any:
        self.calls.append(kw)
        start = int(kw.get("_continue") or 0)
        page = self.items[start : start + kw["limit"]]
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if start + kw["limit"] < len(self.items):
            meta["continue"] = str(start + kw["limit"])
        return json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page}
        )


def test_a_list_comes_in_pages_and_is_kept_whole() -> None:
    """At 10,000 DLJobs one unpaged LIST of a loaded apiserver ran past its 60 s (504) again
    and again: the informer pages its LISTs, as client-go's reflector does."""
    pager = _Pager([_obj(f"p{i}", 10 + i) for i in range(7)], version=40)
    inf = Informer("t", pager, page_size=3)
    inf.relist()
    assert [c.get("_continue") for c in pager.calls] == [None, "3", "6"]
    assert all(c["limit"] == 3 for c in pager.calls)
    assert sorted(o["metadata"]["name"] for o in inf.items()) == [f"p{i}" for i in range(7)]
    assert inf.resource_version == "40" and inf.synced and inf.counts.lists == 1
    assert all(o["kind"] == "Pod" for o in inf.items())
    with pytest.raises(ValueError):
        Informer("t", pager, page_size=0)


def test_an_expired_continue_token_starts_the_list_over() -> None:
    class Expired(Exception):
        status = 410

    pager = _Pager([_obj(f"p{i}", 10 + i) for i in range(4)], version=40)
    fail = {"left": 1}

    def flaky(**kw: Any) -> Any:
        if kw.get("_continue") and fail["left"]:
            fail["left"] -= 1
            raise Expired("the continue token expired")
        return pager(**kw)

    inf = Informer("t", flaky, page_size=2, retry_seconds=0.01)
    inf._follow = lambda: inf._stop.wait(0.05)  # type: ignore[method-assign]  # no watch here
    inf.start()
    try:
        assert inf.wait_synced(5.0)
    finally:
        inf.stop()
    assert len(inf.items()) == 4 and inf.counts.expired == 1 and inf.counts.lists == 2


class _NotServed(Exception):
    status = 404


def test_a_resource_not_served_is_empty_and_says_so_until_a_list_succeeds() -> None:
    """``served`` tells a CRD that is not installed (404) from one with no objects: Horus'
    Kueue check logs the first and waits for Kueue, and reads the second as no Workloads."""

    def not_served(**_: Any) -> Any:
        raise _NotServed("404 Not Found")

    inf = Informer("crd", not_served, missing_ok=True)
    assert inf.served is None
    inf.start()
    try:
        assert inf.wait_synced(10)
        assert inf.served is False and inf.items() == []
    finally:
        inf.stop()
    lister = _Lister()
    later = Informer("crd", lister, missing_ok=True)
    later.relist()  # installed: an empty list is served, not missing
    assert later.served is True and later.items() == []
