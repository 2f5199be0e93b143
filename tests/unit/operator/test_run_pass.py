"""Whole reconcile passes on an in-memory API: admission → placement → pods → Running, and
what happens when the API or the objects misbehave. The same pass runs on the real apiserver
in tests/integration/operator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import FakeJobApi
from opfixtures import KEY, dljob, node

from horus.common import constants as c
from horus.operator.object_reads import dljob_record_trusted, pod_assignment_trusted
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor

PREDICTOR = load_default_predictor()


def auto_job(name: str, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    obj = dljob(name, replicas=replicas, gpu={"mode": "auto"})
    obj["spec"]["profile"] = {
        "model": "resnet50",
        "batchSize": 64,
        "features": _features(),
    }
    obj["spec"]["template"]["spec"].update(spec)
    return obj


def _features() -> dict[str, float]:
    import yaml
    from opfixtures import ROOT

    doc = yaml.safe_load((ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text())
    return dict(doc["features"])


@pytest.fixture
def api() -> FakeJobApi:
    return FakeJobApi([node("n1", gpus=2), node("n2", gpus=2)])


@pytest.fixture
def rec(api: FakeJobApi) -> Iterator[Reconciler]:
    r = Reconciler(api, PREDICTOR, KEY, workers=4, progress_deadline=30.0)
    yield r
    r.close()


def _phase(api: FakeJobApi, name: str) -> str | None:
    return (api.job(name).get("status") or {}).get("phase")


def test_a_job_is_admitted_placed_bound_and_runs(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("train", replicas=2))
    report = rec.run_pass()
    assert (report.placed, report.pods_created, report.pods_bound) == (1, 2, 2)
    job = api.job("train")
    assert job["status"]["phase"] == c.DLJOB_PHASE_SCHEDULED
    assert dljob_record_trusted(job, KEY)  # the record is signed
    assert len(job["status"]["placements"]) == 2 and job["status"]["predicted"]["utilMean"] > 0
    assert api.dry_runs == 1  # the template was dry-run once, before the share was committed
    pods = list(api.pods.values())
    assert all(pod_assignment_trusted(p, KEY) for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} <= {"n1", "n2"}
    api.run_bound_pods()
    rec.run_pass()
    assert _phase(api, "train") == c.DLJOB_PHASE_RUNNING
    api.run_bound_pods("Succeeded")
    rec.run_pass()
    assert _phase(api, "train") == c.DLJOB_PHASE_SUCCEEDED
    rec.writer.drain()
    # no life-cycle Events by default (tests/unit/operator/test_writes_per_job.py): the
    # conditions say where it went and when it ran
    assert not {"Scheduled", "Running", "Succeeded"} & set(api.reasons("train"))
    conds = {cd["type"]: cd for cd in api.job("train")["status"]["conditions"]}
    assert conds["Scheduled"]["message"].startswith("placed by policy")
    assert conds["Finished"]["status"] == "True"


def test_passes_are_idempotent(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("a"))
    rec.run_pass()
    before = (api.status_writes, len(api.pods))
    report = rec.run_pass()
    assert (report.placed, report.pods_created, report.status_writes) == (0, 0, 0)
    assert (api.status_writes, len(api.pods)) == before


def test_a_crash_between_record_and_pod_is_finished_from_the_record(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(auto_job("a"))
    api.fail_create_once["a-0"] = RuntimeError("connection reset")
    rec.run_pass()
    assert api.job("a")["status"]["placements"] and not api.pods
    report = rec.run_pass()  # the next pass: finished, not placed again
    assert (report.placed, report.pods_created, report.pods_bound) == (0, 1, 1)
    rec.writer.drain()
    assert "ReconcileError" in api.reasons("a")


def test_a_template_the_apiserver_refuses_fails_before_any_share(
    api: FakeJobApi, rec: Reconciler
) -> None:
    bad = auto_job("bad")
    bad["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_Label"
    api.add_dljob(bad)
    api.add_dljob(auto_job("prio", priorityClassName="gold"))  # the template's: refused
    rec.run_pass()
    for name in ("bad", "prio"):
        status = api.job(name)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
        assert "placements" not in status
    assert "Not_A_Label" in api.job("bad")["status"]["message"]
    assert "spec.priorityClassName" in api.job("prio")["status"]["message"]
    assert not api.pods


def test_forged_records_are_reset_or_restored(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("run"))
    rec.run_pass()
    api.run_bound_pods()
    rec.run_pass()
    assert _phase(api, "run") == c.DLJOB_PHASE_RUNNING
    api.job("run")["status"]["phase"] = "Failed"  # someone else's write: the signature breaks
    rec.run_pass()
    status = api.job("run")["status"]
    assert (status["phase"], status["reason"]) == ("Running", "StatusRestored")
    assert len(api.pods) == 1  # the forged Failed deleted nothing
    forged = auto_job("ghost")
    forged["status"] = {
        "phase": "Scheduled",
        "placements": [
            {
                "replica": 0,
                "pod": "ghost-0",
                "node": "n1",
                "gpuUUID": "GPU-x",
                "gpuIndex": 0,
                "corePercent": 100,
                "memoryMiB": 1024,
            }
        ],
    }
    api.add_dljob(forged)
    rec.run_pass()
    assert "placements" not in api.job("ghost")["status"]  # reset, not made into a pod
    assert "ghost-0" not in {p["metadata"]["name"] for p in api.pods.values()}
    rec.run_pass()  # admitted and placed by the operator itself
    assert dljob_record_trusted(api.job("ghost"), KEY)
    assert api.job("ghost")["status"]["placements"][0]["gpuUUID"] != "GPU-x"


def test_no_node_matching_the_template_says_why(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("picky", nodeSelector={"gpu": "b200"}))
    rec.run_pass()
    status = api.job("picky")["status"]
    assert (status["phase"], status["reason"]) == ("Queued", "NoMatchingNode")
    assert "2 nodes: nodeSelector gpu=b200 does not match" in status["message"]
    api.nodes[1]["metadata"]["labels"] = {"gpu": "b200"}
    rec.run_pass()
    assert {p["node"] for p in api.job("picky")["status"]["placements"]} == {"n2"}


def test_a_stale_write_is_a_conflict_retried_next_pass(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("a"))
    real = api.patch_dljob_status

    def racing(namespace: str, name: str, body: Any) -> Any:
        api.job(name)["metadata"]["resourceVersion"] += "0"  # another writer got there first
        api.patch_dljob_status = real  # type: ignore[method-assign]
        return real(namespace, name, body)

    api.patch_dljob_status = racing  # type: ignore[method-assign]
    report = rec.run_pass()
    assert report.conflicts == 1 and not api.pods
    rec.run_pass()
    assert api.job("a")["status"]["phase"] == c.DLJOB_PHASE_SCHEDULED and len(api.pods) == 1


def test_a_placed_job_that_never_starts_gives_its_share_back(
    api: FakeJobApi, rec: Reconciler
) -> None:
    api.add_dljob(auto_job("stuck"))
    rec.run_pass()
    pod = next(iter(api.pods.values()))
    pod["status"]["containerStatuses"] = [
        {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}
    ]
    api.job("stuck")["status"]["scheduledTime"] = "2020-01-01T00:00:00Z"  # long ago (unsigned)
    rec.run_pass()
    status = api.job("stuck")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "ReplicaStuck")
    assert "ImagePullBackOff" in status["message"]
    rec.run_pass()  # a failed job's pods are deleted: the share is free again
    assert not api.pods


def test_a_job_no_gpu_fits_does_not_block_the_queue(api: FakeJobApi, rec: Reconciler) -> None:
    api.add_dljob(auto_job("huge", replicas=8))  # 8 GPUs on a 4-GPU cluster
    time.sleep(0.01)
    api.add_dljob(auto_job("small"))
    rec.run_pass()
    assert api.job("huge")["status"]["reason"] == "NeverFits"
    assert api.job("small")["status"]["phase"] == c.DLJOB_PHASE_SCHEDULED
