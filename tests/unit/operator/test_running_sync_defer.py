"""While a pass places jobs, Scheduled → Running status writes wait (bounded), placements first."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, pod, share

from horus.api.assignment import GpuAssignment
from horus.api.inventory import simulated_gpu_uuid
from horus.operator.commit import RUNNING_SYNC_DEFER_SECONDS, Committer
from horus.operator.metrics import OperatorMetrics
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.writer import StatusWriter


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _setup(scheduled_ago: float) -> tuple[Committer, JobCtx, FakeJobApi]:
    api = FakeJobApi()
    obj = dljob("train", [share("n1", 0)], phase="Scheduled")
    obj["status"]["scheduledTime"] = _rfc3339(time.time() - scheduled_ago)
    obj = api.add_dljob(obj)
    ctx = JobCtx(obj, None, dict(obj["status"]))
    a = GpuAssignment("n1", simulated_gpu_uuid("n1", 0), 0, 50, 10000, "train", 0)
    running = pod("train-0", a, phase="Running", job="train", replica=0)
    running["metadata"]["ownerReferences"] = [{"uid": "uid-train"}]
    ctx.pods[0] = running
    writer = StatusWriter(api, lambda: KEY, OperatorMetrics(), "test")
    pool = ThreadPoolExecutor(max_workers=2)
    return Committer(api, writer, lambda: True, dict, pool, 300.0), ctx, api


def _phases(api: FakeJobApi) -> Any:
    return api.job("train")["status"]["phase"]


def test_running_write_waits_while_placing_and_happens_after() -> None:
    committer, ctx, api = _setup(scheduled_ago=1.0)
    report = PassReport()
    committer.sync_status(ctx, report, placing=True)
    assert api.status_writes == 0 and report.deferred == 1
    committer.sync_status(ctx, report, placing=False)  # the next pass, nothing being placed
    assert api.status_writes == 1 and _phases(api) == "Running"


def test_running_write_is_not_held_back_for_long() -> None:
    committer, ctx, api = _setup(scheduled_ago=RUNNING_SYNC_DEFER_SECONDS + 5)
    report = PassReport()
    committer.sync_status(ctx, report, placing=True)
    assert _phases(api) == "Running" and report.deferred == 0
