"""Simulated GPU nodes look exactly as the device plugin will publish real ones."""

from __future__ import annotations

import json

import pytest

from horus.api.inventory import decode_inventory
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.devcluster.nodes import NodeSpec, node_manifest


def test_node_manifest_capacity_and_inventory() -> None:
    node = node_manifest("gpu-node-0007", NodeSpec(count=1, gpus_per_node=8, gpu_model="H100"))
    meta = node["metadata"]
    assert meta["annotations"][c.KWOK_NODE_ANNOTATION] == "fake"
    assert meta["labels"][c.LABEL_GPU_MODEL] == "H100"
    cap = node["status"]["capacity"]
    assert cap[c.RESOURCE_GPU_CORE] == "800"
    assert cap[c.RESOURCE_GPU_MEMORY] == str(8 * 81920)
    gpus = decode_inventory(meta["annotations"][c.ANNOTATION_GPU_INVENTORY])
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.uuid for g in gpus}) == 8
    assert json.loads(meta["annotations"][c.ANNOTATION_GPU_INVENTORY])[0]["memoryMiB"] == 81920


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "--count must be between 1 and 5000"),
        ({"count": 1, "gpus_per_node": 0}, "--gpus-per-node must be between 1 and 16"),
        ({"count": 1, "gpu_memory_mib": 10}, "--gpu-memory-mib must be between"),
        ({"count": 1, "gpu_model": "H 100!"}, "--gpu-model must be letters"),
    ],
)
def test_bad_node_specs(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        NodeSpec(**kwargs)  # type: ignore[arg-type]
