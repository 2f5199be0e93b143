"""Moving a running job and preempting one, on the in-memory API: the record first, then the
old pods, and every later pass finishes it — never two pods per replica, nothing lost."""

from __future__ import annotations

from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, node
from test_run_pass import PREDICTOR, auto_job

from horus.api.inventory import simulated_gpu_uuid
from horus.common import constants as c
from horus.operator.livestate import build_live_state
from horus.operator.moves import preempt, start_move
from horus.operator.object_reads import dljob_record_trusted
from horus.operator.pass_state import PassReport
from horus.operator.reconcile import Reconciler
from horus.predictor.interface import ResourcePrediction
from horus.scheduler import GpuShare, Placement, ReplicaPlacement


def movable(name: str, **kw: Any) -> dict[str, Any]:
    job = auto_job(name, **kw)
    job["spec"]["migration"] = {"policy": "OnCheckpoint", "checkpointPath": "/ckpt"}
    return job


@pytest.fixture
def api() -> FakeJobApi:
    a = FakeJobApi([node("n1", gpus=2), node("n2", gpus=2)])
    a.graceful = True
    return a


@pytest.fixture
def rec(api: FakeJobApi) -> Any:
    r = Reconciler(api, PREDICTOR, KEY, workers=4)
    yield r
    r.close()


def _running(api: FakeJobApi, rec: Reconciler, name: str) -> None:
    rec.run_pass()
    api.run_bound_pods()
    rec.run_pass()
    assert api.job(name)["status"]["phase"] == c.DLJOB_PHASE_RUNNING


def _to(node_name: str, index: int, core: int = 50) -> Placement:
    share = GpuShare(node_name, index, simulated_gpu_uuid(node_name, index), core, 8000)
    return Placement(
        job="default/m",
        replicas=(ReplicaPlacement(0, node_name, (share,)),),
        prediction=ResourcePrediction(50.0, 60.0, 8000.0, 9000.0),
        policy="horus",
        predicted_speed=1.0,
        predicted_gain=0.4,
    )


def _ctx(rec: Reconciler, api: FakeJobApi, name: str) -> Any:
    from horus.operator.listing import Listing

    snap = Listing(api.list_pods(), api.list_dljobs(), api.list_nodes())
    return rec._contexts(snap)[f"default/{name}"]


def test_a_move_records_first_then_finishes_from_the_record(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(movable("m"))
    _running(api, rec, "m")
    old = dict(api.job("m")["status"]["placements"][0])
    target = ("n2", 1) if old["node"] == "n1" else ("n1", 1)
    report = PassReport()
    start_move(
        _ctx(rec, api, "m"), _to(*target), "measured 0.41x next to x", api, rec.writer, report
    )
    status = api.job("m")["status"]
    assert dljob_record_trusted(api.job("m"), KEY)
    assert status["phase"] == "Scheduled" and status["reason"] == "Migrating"
    assert status["migration"]["from"] == [old] and status["migrations"]["count"] == 1
    assert (status["placements"][0]["node"], status["placements"][0]["gpuIndex"]) == target
    (pod,) = api.pods.values()
    assert pod["metadata"].get("deletionTimestamp")  # the old pod got SIGTERM, still stopping
    # both the GPU it leaves and the one it goes to count while the old pod stops
    live = build_live_state(api.list_nodes(), api.list_pods(), api.list_dljobs(), keys=KEY)
    held = {g.uuid for g in live.state.views() if g.core_used_percent}
    assert {old["gpuUUID"], simulated_gpu_uuid(*target)} <= held
    rec.run_pass()  # the name is still taken: no second pod
    assert len(api.pods) == 1 and api.job("m")["status"].get("migration")
    api.finish_deletions()
    rec.run_pass()  # the recorded pod is created and bound; the move closes
    (pod,) = api.pods.values()
    assert pod["spec"]["nodeName"] == target[0] and not pod["metadata"].get("deletionTimestamp")
    assert "migration" not in api.job("m")["status"]
    api.run_bound_pods()
    rec.run_pass()
    assert api.job("m")["status"]["phase"] == c.DLJOB_PHASE_RUNNING
    rec.writer.drain()
    assert "Migrated" in api.reasons("m")


def test_a_crash_before_the_old_pod_was_deleted_is_finished(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(movable("m"))
    _running(api, rec, "m")
    ctx = _ctx(rec, api, "m")
    target = ("n2", 1) if ctx.status["placements"][0]["node"] == "n1" else ("n1", 1)
    api.delete_pod = lambda namespace, name, uid="": None  # type: ignore[method-assign]  # killed -9
    start_move(ctx, _to(*target), "x", api, rec.writer, PassReport())
    del api.delete_pod  # the next leader's API works
    assert not next(iter(api.pods.values()))["metadata"].get("deletionTimestamp")
    assert api.job("m")["status"]["migration"]
    rec.run_pass()  # sees a pod on other GPUs than its record: deletes it
    assert next(iter(api.pods.values()))["metadata"].get("deletionTimestamp")
    api.finish_deletions()
    rec.run_pass()
    assert len(api.pods) == 1 and next(iter(api.pods.values()))["spec"]["nodeName"] == target[0]


def test_a_preempted_job_goes_back_to_the_queue_and_its_pods_stop(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(movable("low"))
    _running(api, rec, "low")
    preempt(_ctx(rec, api, "low"), "default/high", api, rec.writer, PassReport())
    status = api.job("low")["status"]
    assert (status["phase"], status["reason"]) == ("Queued", "Preempted")
    assert "placements" not in status and status["migrations"]["preemptions"] == 1
    assert all(p["metadata"].get("deletionTimestamp") for p in api.pods.values())
    api.finish_deletions()
    rec.run_pass()  # placed again (its prediction kept)
    assert api.job("low")["status"]["phase"] == "Scheduled" and len(api.pods) == 1


def test_a_preemption_cut_short_by_a_crash_still_stops_the_pods(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(movable("low"))
    _running(api, rec, "low")
    ctx = _ctx(rec, api, "low")
    api.delete_pod = lambda namespace, name, uid="": None  # type: ignore[method-assign]  # crash: no delete
    preempt(ctx, "default/high", api, rec.writer, PassReport())
    del api.delete_pod
    assert not next(iter(api.pods.values()))["metadata"].get("deletionTimestamp")
    rec.run_pass()  # a queued job with running pods: they go
    assert next(iter(api.pods.values()))["metadata"].get("deletionTimestamp")
