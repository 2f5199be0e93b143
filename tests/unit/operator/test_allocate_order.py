"""The bind gate: on a node with a real kubelet, no two pods asking the same amount of either
Horus resource await Allocate at a time (horus.operator.allocate_order says why); kwok and
unversioned nodes are never gated."""

from __future__ import annotations

import json
import threading
from typing import Any

from horus.common import constants as c
from horus.operator.allocate_order import BindGate, horus_requests

REAL = {"metadata": {"name": "real"}, "status": {"nodeInfo": {"kubeletVersion": "v1.37.2"}}}
KWOK = {
    "metadata": {
        "name": "kwok",
        "annotations": {c.KWOK_NODE_ANNOTATION: c.KWOK_NODE_ANNOTATION_VALUE},
    },
    "status": {"nodeInfo": {"kubeletVersion": "kwok"}},
}
BARE = {"metadata": {"name": "bare"}}


def pod(
    name: str,
    node: str | None = None,
    core: int = 45,
    mem: int = 33,
    allocated: tuple[str, ...] = (),
    phase: str = "Pending",
) -> dict[str, Any]:
    amounts = {c.RESOURCE_GPU_CORE: str(core), c.RESOURCE_GPU_MEMORY: str(mem)}
    ann = {c.ANNOTATION_GPU_ALLOCATED: json.dumps({r: "t" for r in allocated})} if allocated else {}
    return {
        "metadata": {"name": name, "annotations": ann},
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "c", "resources": {"requests": amounts, "limits": amounts}}],
        },
        "status": {"phase": phase},
    }


def test_twin_waits_until_the_first_is_allocated() -> None:
    gate = BindGate([pod("a", "real")], [REAL])
    assert not gate.claim("real", pod("b"))  # same requests, "a" not allocated yet
    assert gate.claim("real", pod("c", core=30, mem=20))  # both amounts differ: no ambiguity
    both = (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
    gate = BindGate([pod("a", "real", allocated=both)], [REAL])
    assert gate.claim("real", pod("b"))
    half = BindGate([pod("a", "real", allocated=(c.RESOURCE_GPU_CORE,))], [REAL])
    assert not half.claim("real", pod("b"))  # its memory Allocate is still to come


def test_twins_sharing_either_amount_wait() -> None:
    """Equal core % and different memory (or the reverse): the kubelet's gpu-core Allocate
    could pick either pod, so the second waits (issue 25, "Twins")."""
    gate = BindGate([pod("a", "real", core=40, mem=64)], [REAL])
    assert not gate.claim("real", pod("b", core=40, mem=32))  # same core, other memory
    assert not gate.claim("real", pod("c", core=30, mem=64))  # same memory, other core
    assert gate.claim("real", pod("d", core=30, mem=32))
    assert not gate.claim("real", pod("e", core=30, mem=16))  # now "d" holds core 30
    # once "a" had its core Allocate only its memory amount still waits
    part = BindGate([pod("a", "real", core=40, mem=64, allocated=(c.RESOURCE_GPU_CORE,))], [REAL])
    assert part.claim("real", pod("b", core=40, mem=32))
    assert not part.claim("real", pod("c", core=30, mem=64))
    # another real node is not held back by this one's pods
    other = {"metadata": {"name": "real2"}, "status": REAL["status"]}
    assert BindGate([pod("a", "real", core=40)], [REAL, other]).claim("real2", pod("f", core=40))
    # the same quantity however it is written
    same = pod("g", core=40, mem=64)
    same["spec"]["containers"][0]["resources"]["requests"][c.RESOURCE_GPU_MEMORY] = "64"
    assert not BindGate([pod("a", "real", core=10, mem=64)], [REAL]).claim("real", same)
    kilo = BindGate([pod("a", "real", core=10, mem=1000)], [REAL])
    big = pod("h", core=20, mem=1000)
    for kind in ("requests", "limits"):
        big["spec"]["containers"][0]["resources"][kind][c.RESOURCE_GPU_MEMORY] = "1k"
    assert not kilo.claim("real", big)  # "1k" is the apiserver's canonical form of 1000


def test_finished_or_leaving_pods_do_not_hold_the_gate() -> None:
    leaving = pod("a", "real")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gate = BindGate([pod("f", "real", phase="Failed"), leaving], [REAL])
    assert gate.claim("real", pod("b"))


def test_claims_within_one_pass_exclude_each_other_across_threads() -> None:
    gate = BindGate([], [REAL])
    wins: list[bool] = []
    threads = [
        threading.Thread(target=lambda i=i: wins.append(gate.claim("real", pod(f"r{i}"))))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]


def test_kwok_and_unversioned_nodes_and_plain_pods_are_never_gated() -> None:
    gate = BindGate([pod("a", "kwok"), pod("b", "bare")], [KWOK, BARE, REAL])
    assert gate.claim("kwok", pod("x")) and gate.claim("kwok", pod("y"))
    assert gate.claim("bare", pod("z"))
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    assert horus_requests(plain) is None
    assert gate.claim("real", plain) and gate.claim("real", plain)


def test_a_pass_report_counts_deferred_binds() -> None:
    from horus.operator.pass_state import PassReport

    report = PassReport()
    report.count("binds_deferred")
    assert report.binds_deferred == 1
