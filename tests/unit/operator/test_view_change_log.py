"""The watch-fed view logs every change its informers apply, in order, for the extender's
live state (LiveDelta.update_changes), and says when the log cannot be followed."""

from __future__ import annotations

import json
from typing import Any

from horus.operator.livedelta import Change
from horus.operator.view import ClusterView


def _pod(name: str, version: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"horus.io/gpu-core": "20"}}}]
        },
        "status": {"phase": phase},
    }


class _Listed:
    """A LIST answer (read_object reads ``.data``)."""

    def __init__(self, items: list[dict[str, Any]], version: str) -> None:
        self.data = json.dumps({"items": items, "metadata": {"resourceVersion": version}}).encode()

    def release_conn(self) -> None:
        pass


def test_every_event_is_logged_in_order_and_a_relist_breaks_the_log() -> None:
    view = ClusterView(None, change_log=True)
    mark, changes = view.changes_since(None)
    assert changes is None  # no mark yet: the reader lists
    pods = view.pods
    pods._apply({"type": "ADDED", "object": _pod("a", "1")})
    pods._apply({"type": "ADDED", "object": _pod("b", "2")})
    pods._apply({"type": "MODIFIED", "object": _pod("a", "3", phase="Pending")})
    pods._apply({"type": "MODIFIED", "object": _pod("a", "3")})  # same version: no change
    # only the version moved (what the projection keeps is the same): no change, no entry
    pods._apply({"type": "MODIFIED", "object": _pod("b", "5")})
    pods._apply({"type": "DELETED", "object": _pod("b", "6")})
    mark2, changes = view.changes_since(mark)
    assert changes == [
        Change("pods", "ns/a", True, False),
        Change("pods", "ns/b", True, False),
        Change("pods", "ns/a", False, False),
        Change("pods", "ns/b", False, True),
    ]
    assert view.changes_since(mark2) == (mark2, [])
    # a LIST since the mark (a relist reorders the copy, telling only what changed): unknown
    pods._list_fn = lambda **kw: _Listed([_pod("c", "7"), _pod("a", "3")], "7")
    pods.relist()
    _, changes = view.changes_since(mark2)
    assert changes is None
    # a delete of an object the copy never held moves the generation without an entry
    mark3, _ = view.changes_since(None)
    pods._apply({"type": "DELETED", "object": _pod("zz", "8")})
    assert view.changes_since(mark3)[1] is None


def test_the_source_looks_up_what_it_lists() -> None:
    from horus.operator.extender.source import KubeClusterSource

    view = ClusterView(None, change_log=True)
    src = KubeClusterSource.__new__(KubeClusterSource)
    src.view = view
    view.pods._apply({"type": "ADDED", "object": _pod("a", "1")})
    view.pods._apply({"type": "ADDED", "object": _pod("done", "2", phase="Succeeded")})
    assert src.lookup("pods", "ns/a") is view.pods.get("ns/a")
    assert src.lookup("pods", "ns/done") is None  # finished: not in active_pods
    mark, _ = src.changes_since(None)
    view.pods._apply({"type": "DELETED", "object": _pod("a", "3")})
    assert src.changes_since(mark)[1] == [Change("pods", "ns/a", False, True)]


def test_without_the_log_nothing_is_kept_and_nothing_is_told() -> None:
    """The operator's view (no ``change_log``) keeps no entries; its reader always diffs."""
    view = ClusterView(None)
    mark, _ = view.changes_since(None)
    view.pods._apply({"type": "ADDED", "object": _pod("a", "1")})
    assert view.changes_since(mark)[1] is None
    assert view._log == []
