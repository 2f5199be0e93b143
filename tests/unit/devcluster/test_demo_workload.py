"""The jobs the demo submits (two waves, the hog first, the movable job last; zoo jobs) and the
real-node rewrite of them: pullable images, the workload's own jobs kept with their mounts,
hostPath checkpoints moved into the demo folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from horus.devcluster.demo_state import DemoOptions
from horus.devcluster.demo_workload import (
    EXAMPLES,
    HOG,
    LATE,
    PRIORITY_CLASSES,
    WAITING,
    on_real_nodes,
    workload,
    zoo_job,
)
from horus.devcluster.images import IMAGES, reference

ROOT = Path(__file__).resolve().parents[3]


def test_every_example_runs_the_local_workload_image(tmp_path: Path) -> None:
    options = DemoOptions.make(tmp_path / "demo", quick=True)
    options.directory.mkdir()
    first, late = workload(options)
    out = first + late
    assert first and late and all(p.name.startswith("real-") for p in out)
    image = reference(IMAGES["workload"].repository)
    movable = None
    for path in out:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "DLJob":
                continue
            spec = doc["spec"]["template"]["spec"]
            for c in spec["containers"]:
                assert c["image"] == image and c["imagePullPolicy"] == "Never"
            if doc["metadata"]["name"] == "resnet50-movable":
                movable = spec
    if movable is not None:  # the example that already runs the workload keeps its mounts
        assert "--checkpoint-seconds" in movable["containers"][0]["args"]
        host = Path(movable["volumes"][0]["hostPath"]["path"])
        assert host.is_dir() and options.directory in host.parents
        # the workload runs as uid 65532: an init container of the workload image (kept, as
        # root) hands it the folder
        (init,) = movable["initContainers"]
        assert init["image"] == image and init["command"][0] == "chown"
        assert init["volumeMounts"][0]["name"] == movable["volumes"][0]["name"]


def test_zoo_job_embeds_the_profile_without_its_envelope() -> None:
    job = zoo_job("x", EXAMPLES / "profiles" / "resnet50-b64.yaml", 2)
    profile = job["spec"]["profile"]
    assert "apiVersion" not in profile and "kind" not in profile
    assert profile["features"]["batch_size"] == 64 and job["spec"]["replicas"] == 2


def test_movable_zoo_job_checkpoints_like_the_movable_example() -> None:
    job = zoo_job("x", EXAMPLES / "profiles" / "resnet50-b64.yaml", 2, movable=True)
    migration = job["spec"]["migration"]
    assert migration["policy"] == "OnCheckpoint"
    assert migration["checkpointPath"] == "/checkpoints/x"
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][0] == "chown" and init["securityContext"]["runAsUser"] == 0
    mounts = {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {v["name"] for v in pod["volumes"]} == {"checkpoints"}
    assert "migration" not in zoo_job("y", EXAMPLES / "profiles" / "resnet50-b64.yaml", 1)["spec"]


def test_workload_waves_hog_first_by_priority_and_the_movable_job_last(tmp_path: Path) -> None:
    first, late = workload(DemoOptions.make(tmp_path, quick=True, kwok=True))
    assert [p.stem for p in late] == [LATE]
    assert first[0] == PRIORITY_CLASSES  # the classes the jobs name exist before them
    assert first[1].stem == HOG and first[-1].stem == WAITING
    assert LATE not in {p.stem for p in first}
    values = {
        d["metadata"]["name"]: d["value"] for d in yaml.safe_load_all(first[0].read_text()) if d
    }
    prio = []
    for path in first[1:]:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "DLJob"]
        prio.append(values.get(docs[0]["spec"].get("priorityClassName"), 0))
    assert prio == sorted(prio, reverse=True) and prio[0] == 1000 and prio[-1] == -1000


def test_on_real_nodes_the_checkpoint_owner_runs_the_workload_image(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    out = on_real_nodes(EXAMPLES / f"{LATE}.yaml", jobs, tmp_path)
    (doc,) = [d for d in yaml.safe_load_all(out.read_text()) if d]
    pod = doc["spec"]["template"]["spec"]
    workload = reference(IMAGES["workload"].repository)
    assert [c["image"] for c in pod["initContainers"] + pod["containers"]] == [workload] * 2
    (volume,) = pod["volumes"]
    where = Path(volume["hostPath"]["path"])
    assert where.is_dir() and tmp_path in where.parents  # demo-down removes it
    # a zoo job's illustrative container becomes the workload but keeps its checkpoint mount
    path = tmp_path / "zoo.yaml"
    path.write_text(
        yaml.safe_dump(zoo_job("z", EXAMPLES / "profiles" / "resnet50-b64.yaml", 1, movable=True))
    )
    (doc,) = [d for d in yaml.safe_load_all(on_real_nodes(path, jobs, tmp_path).read_text()) if d]
    (trainer,) = doc["spec"]["template"]["spec"]["containers"]
    assert trainer["image"] == workload and trainer["volumeMounts"][0]["name"] == "checkpoints"
