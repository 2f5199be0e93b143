"""The demo's live table and its stop rule, on hand-made API objects (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.devcluster.demo_state import DemoOptions
from horus.devcluster.demo_table import (
    decided,
    moved_jobs,
    moves_done,
    render_table,
    settled,
)
from horus.devcluster.demo_workload import UNPLACEABLE, WAITING


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


def test_quick_options_are_smaller(tmp_path: Path) -> None:
    full, quick = DemoOptions.make(tmp_path, False), DemoOptions.make(tmp_path, True)
    assert quick.nodes * quick.gpus_per_node < full.nodes * full.gpus_per_node
    assert DemoOptions.make(tmp_path, True, nodes=3, watch_seconds=None).nodes == 3


def _moved(job: dict[str, Any], count: int, moving: bool = False) -> dict[str, Any]:
    job["status"]["migrations"] = {
        "count": count,
        "lastFrom": "gpu-node-0001/gpu-1",
        "lastTo": "gpu-node-0000/gpu-0",
        "lastTime": "2026-01-02T03:04:05Z",
    }
    if moving:
        job["status"]["migration"] = {"from": [], "startedTime": "2026-01-02T03:04:05Z"}
    return job


def test_table_counts_moves_and_says_where_a_job_came_from() -> None:
    jobs = [
        _moved(_job("movable", "Running", "AllReplicasRunning"), 1),
        _moved(_job("moving", "Scheduled", "Migrating", "moving from a to b"), 1, moving=True),
        _job("still", "Running"),
    ]
    lines = render_table(jobs, []).splitlines()
    assert lines[0].split()[:3] == ["DLJOB", "PHASE", "MOVES"]
    movable = next(line for line in lines if line.startswith("movable"))
    assert movable.split()[2] == "1"
    assert movable.rstrip().endswith("moved from gpu-node-0001/gpu-1 to gpu-node-0000/gpu-0")
    moving = next(line for line in lines if line.startswith("moving"))
    assert "Migrating: moving from a to b" in moving
    assert next(line for line in lines if line.startswith("still")).split()[2] == "0"


def test_a_move_is_done_once_counted_and_none_is_under_way() -> None:
    assert not moves_done([_job("a", "Running")])
    assert not moves_done([_moved(_job("a", "Scheduled"), 1, moving=True)])
    done = [_moved(_job("a", "Running"), 1), _job("b", "Running")]
    assert moves_done(done)
    ((when, text),) = moved_jobs(done)
    assert when == 1767323045.0
    assert text == "a: gpu-node-0001/gpu-1 → gpu-node-0000/gpu-0"


def test_decided_is_placed_finished_or_queued_with_a_reason() -> None:
    assert decided(_job("a", "Scheduled")) and decided(_job("a", "Failed"))
    assert decided(_job("a", "Queued", "InsufficientGPUCore"))
    assert not decided(_job("a", "Queued")) and not decided(_job("a", "Pending"))
    assert not decided({"metadata": {"name": "new"}})


def test_table_shows_the_measured_pair_speed_beside_the_predicted_one() -> None:
    """Issue 26: the demo shows each job's measured pair speed (a progress reading first) next
    to what the predictor expected of that pair."""
    job = _job("resnet", "Running")
    job["status"]["observed"] = {
        "pairs": [
            {"other": "bert@16", "gpuModel": "H100", "speed": 0.7, "samples": 9,
             "error": 0.192, "source": "utilisation"},
            {"other": "bert@16", "gpuModel": "A100", "speed": 0.62, "samples": 4,
             "error": 0.013, "source": "progress"},
        ]
    }  # fmt: skip
    seen: list[tuple[str, str]] = []

    def predict(j: dict[str, Any], other: str, gpu: str) -> float:
        seen.append((other, gpu))
        return 0.8

    line = next(x for x in render_table([job], [], predict).splitlines() if x.startswith("resnet"))
    assert "0.62±0.01 progress by bert@16 (0.80)" in line and seen == [("bert@16", "A100")]
    assert "MEASURED PAIR" in render_table([job], []).splitlines()[0]
    assert " - " in next(
        x for x in render_table([_job("new", "Running")], []).splitlines() if x.startswith("new")
    )


def test_pair_predictor_predicts_between_the_jobs_kinds() -> None:
    import yaml

    from horus.devcluster.demo_table import pair_predictor
    from horus.predictor import load_default_predictor

    root = Path(__file__).resolve().parents[3] / "examples"
    jobs = [yaml.safe_load((root / f).read_text()) for f in ("resnet50-train.yaml", "lstm-lm.yaml")]
    predict = pair_predictor(jobs, load_default_predictor())
    other = "lstm-lm@" + str(jobs[1]["spec"]["profile"]["batchSize"])
    speed = predict(jobs[0], other, "H100")
    assert speed is not None and 0.0 < speed <= 1.0
    assert predict(jobs[0], "nobody@1", "H100") is None
