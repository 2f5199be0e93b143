"""The real-node demo's rewrite of the examples: pullable images, the workload's own jobs kept
with their mounts, hostPath checkpoints moved into the demo folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from horus.devcluster.demo import Demo, DemoOptions
from horus.devcluster.images import IMAGES, reference

ROOT = Path(__file__).resolve().parents[3]


def test_every_example_runs_the_local_workload_image(tmp_path: Path) -> None:
    demo = Demo(DemoOptions.make(tmp_path / "demo", quick=True))
    demo.directory.mkdir()
    first, late = demo.workload()
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
        assert host.is_dir() and demo.directory in host.parents
        # the workload runs as uid 65532: an init container of the workload image (kept, as
        # root) hands it the folder
        (init,) = movable["initContainers"]
        assert init["image"] == image and init["command"][0] == "chown"
        assert init["volumeMounts"][0]["name"] == movable["volumes"][0]["name"]
