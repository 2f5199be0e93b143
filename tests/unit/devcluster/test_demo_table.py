"""The demo's live table and its stop rule, on hand-made API objects (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.devcluster.demo import (
    EXAMPLES,
    UNPLACEABLE,
    WAITING,
    DemoOptions,
    render_table,
    settled,
    zoo_job,
)


def _job(name: str, phase: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "status": {
            "phase": phase,
            "reason": reason,
            "message": message,
            "predicted": {"utilMean": 88.4, "memoryMiBUpper": 8330.2},
        },
    }


def _pod(job: str, replica: int, node: str, gpu: int, core: int, mem: int) -> dict[str, Any]:
    assignment = {
        "node": node,
        "gpuUUID": f"GPU-{node}-{gpu}",
        "gpuIndex": gpu,
        "corePercent": core,
        "memoryMiB": mem,
        "job": job,
        "replica": replica,
    }
    return {
        "metadata": {
            "name": f"{job}-{replica}",
            "namespace": "default",
            "labels": {c.LABEL_DLJOB_NAME: job},
            "annotations": {c.ANNOTATION_GPU_ASSIGNMENT: json.dumps(assignment)},
        }
    }


def test_table_shows_placements_predictions_and_reasons() -> None:
    jobs = [
        _job("resnet", "Running", "AllReplicasRunning"),
        _job(WAITING, "Queued", "core", "no GPU with 100% core free"),
    ]
    pods = [
        _pod("resnet", 1, "gpu-node-0001", 3, 45, 8331),
        _pod("resnet", 0, "gpu-node-0000", 2, 45, 8331),
    ]
    lines = render_table(jobs, pods).splitlines()
    assert lines[0].split()[:2] == ["DLJOB", "PHASE"]
    resnet = next(line for line in lines if line.startswith("resnet"))
    assert "88%" in resnet and "8330" in resnet
    assert "n0000/2 45% 8331, n0001/3 45% 8331" in resnet  # replicas in order
    assert "AllReplicasRunning" not in resnet  # running jobs need no reason
    waiting = next(line for line in lines if line.startswith(WAITING))
    assert "Queued" in waiting and waiting.rstrip().endswith("no GPU with 100% core free")


def test_garbled_assignment_is_skipped_not_fatal() -> None:
    pod = _pod("resnet", 0, "gpu-node-0000", 0, 45, 8331)
    pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT] = '{"node": 3}'
    assert "n0000" not in render_table([_job("resnet", "Scheduled")], [pod])


def test_settled_waits_for_every_job_but_the_refused_and_the_queued_gang() -> None:
    assert not settled([])
    running = _job("a", "Running")
    assert settled([running, _job(UNPLACEABLE, "Failed", "NeverFits")])
    assert settled([running, _job(WAITING, "Queued", "core")])
    assert not settled([running, _job(WAITING, "Queued")])  # no reason yet
    assert not settled([running, _job("b", "Scheduled")])
    assert settled([running, _job("hog", "Failed", "PodDeleted")])


def test_zoo_job_embeds_the_profile_without_its_envelope() -> None:
    job = zoo_job("x", EXAMPLES / "profiles" / "resnet50-b64.yaml", 2)
    profile = job["spec"]["profile"]
    assert "apiVersion" not in profile and "kind" not in profile
    assert profile["features"]["batch_size"] == 64 and job["spec"]["replicas"] == 2


def test_quick_options_are_smaller(tmp_path: Path) -> None:
    full, quick = DemoOptions.make(tmp_path, False), DemoOptions.make(tmp_path, True)
    assert quick.nodes * quick.gpus_per_node < full.nodes * full.gpus_per_node
    assert DemoOptions.make(tmp_path, True, nodes=3, watch_seconds=None).nodes == 3
