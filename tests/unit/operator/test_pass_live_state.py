"""Each pass says how it had its live state (issue 27): kept from the last pass, or built in
full and why — in the pass log and in ``horus_operator_live_state_builds_total`` — so a
cluster where every pass rebuilds (a node that keeps changing, a refused record) shows it."""

from __future__ import annotations

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.operator.livedelta import FULL_FIRST, FULL_NODES
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor


def _count(rec: Reconciler, how: str) -> float:
    value: float = rec.metrics.live_state_builds.labels(how=how)._value.get()
    return value


def test_a_pass_says_whether_its_live_state_was_kept_or_built_and_why() -> None:
    api = FakeJobApi([node("n1", gpus=4), node("n2", gpus=4)])
    rec = Reconciler(api, load_default_predictor(), KEY, workers=2)
    try:
        api.add_dljob(dljob("a", gpu={"mode": "explicit", "corePercent": 50, "memoryMiB": 8000}))
        assert rec.run_pass().live_state == f"full: {FULL_FIRST}"
        assert rec.run_pass().live_state == "kept"  # the job's record and pod: counted again
        assert rec.run_pass().live_state == "kept"
        assert "live" in rec.run_pass().timings
        api.nodes[1]["spec"]["unschedulable"] = True  # cordoned: the GPUs offered change
        assert rec.run_pass().live_state == f"full: {FULL_NODES}"
        assert rec.run_pass().live_state == "kept"
        assert _count(rec, f"full: {FULL_FIRST}") == 1
        assert _count(rec, f"full: {FULL_NODES}") == 1
        assert _count(rec, "kept") == 4
    finally:
        rec.close()
