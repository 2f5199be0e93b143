"""While a pass places jobs, Scheduled → Running status writes wait (bounded), placements first."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from opfixtures import dljob, pod, share

from horus.api.assignment import GpuAssignment
from horus.api.inventory import simulated_gpu_uuid
from horus.operator.reconcile import (
    RUNNING_SYNC_DEFER_SECONDS,
    JobCtx,
    PassReport,
    Reconciler,
)


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _setup(scheduled_ago: float) -> tuple[Any, JobCtx, list[dict[str, Any]]]:
    writes: list[dict[str, Any]] = []
    rec: Any = Reconciler.__new__(Reconciler)
    rec.is_leader = lambda: True
    rec.patch_status = lambda ctx, fields, precondition: writes.append(dict(fields))
    rec.event = lambda *a, **k: None
    obj = dljob("train", [share("n1", 0)], phase="Scheduled")
    obj["status"]["scheduledTime"] = _rfc3339(time.time() - scheduled_ago)
    ctx = JobCtx(obj, None, dict(obj["status"]))
    a = GpuAssignment("n1", simulated_gpu_uuid("n1", 0), 0, 50, 10000, "default/train", 0)
    running = pod("train-0", a, phase="Running", job="train", replica=0)
    running["metadata"]["ownerReferences"] = [{"uid": "uid-train"}]
    ctx.pods[0] = running
    return rec, ctx, writes


def test_running_write_waits_while_placing_and_happens_after() -> None:
    rec, ctx, writes = _setup(scheduled_ago=1.0)
    report = PassReport()
    rec._sync_status(ctx, report, placing=True)
    assert writes == [] and report.deferred == 1
    rec._sync_status(ctx, report, placing=False)  # the next pass, nothing being placed
    assert [w["phase"] for w in writes] == ["Running"]


def test_running_write_is_not_held_back_for_long() -> None:
    rec, ctx, writes = _setup(scheduled_ago=RUNNING_SYNC_DEFER_SECONDS + 5)
    report = PassReport()
    rec._sync_status(ctx, report, placing=True)
    assert [w["phase"] for w in writes] == ["Running"] and report.deferred == 0
