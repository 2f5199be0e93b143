"""Pair speeds node agents measured (DLJob status.observed.pairs) reach the scheduler."""

from __future__ import annotations

from typing import Any

from opfixtures import dljob

from horus.api.dljob import parse_dljob
from horus.operator.reconcile import JobCtx, Reconciler
from horus.scheduler import Scheduler
from horus.scheduler.policies import get_policy


def _ctx(obj: dict[str, Any]) -> JobCtx:
    return JobCtx(obj, parse_dljob(obj), dict(obj.get("status") or {}))


def test_measured_pairs_become_observations_under_the_jobs_kind() -> None:
    rec: Any = Reconciler.__new__(Reconciler)
    rec.scheduler = Scheduler(get_policy("horus"))
    rec._uid_profiles = {}
    measured = dljob("a", phase="Running")
    measured["status"]["observed"] = {
        "util": 30.0,
        "pairs": [
            {"other": "bert@8", "gpuModel": "H100", "speed": 0.7, "samples": 5},
            {"other": "resnet50@64", "gpuModel": "A100", "speed": 0.9, "samples": 3},
        ],
    }
    plain = dljob("b", phase="Running")
    plain["status"]["observed"] = {"util": 10.0}
    ctxs = {"default/a": _ctx(measured), "default/b": _ctx(plain)}
    assert rec._observe_pairs(ctxs) == 2
    kind = "resnet50@64"  # the example profile's model@batch, as JobRequest names kinds
    assert rec.scheduler.observed_pairs == {
        (kind, "bert@8", "H100"): 0.7,
        (kind, "resnet50@64", "A100"): 0.9,
    }
    # a job the operator could not parse gives nothing (and does not stop the others)
    broken = dljob("c", phase="Running")
    assert rec._observe_pairs({"default/c": JobCtx(broken, None, {})}) == 0
