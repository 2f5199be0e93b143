"""The gpu-inventory annotation round-trips and rejects malformed values with clear errors."""

from __future__ import annotations

import pytest

from horus.api.inventory import GpuDevice, decode_inventory, encode_inventory, simulated_gpu_uuid
from horus.common.errors import ValidationError


def test_round_trip() -> None:
    gpus = [GpuDevice(i, simulated_gpu_uuid("n1", i), "H100", 81920) for i in range(2)]
    assert decode_inventory(encode_inventory(gpus)) == gpus


def test_uuids_are_stable_and_unique() -> None:
    assert simulated_gpu_uuid("n1", 0) == simulated_gpu_uuid("n1", 0)
    assert len({simulated_gpu_uuid(f"n{i}", j) for i in range(20) for j in range(8)}) == 160


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "node-a: not valid JSON"),
        ('{"index": 0}', "must be a JSON list"),
        ("[3]", r"node-a\[0\]: must be an object"),
        ('[{"index": 0, "uuid": "u", "model": "m"}]', r"node-a\[0\]\.memoryMiB: required"),
        (
            '[{"index": "0", "uuid": "u", "model": "m", "memoryMiB": 1}]',
            r"node-a\[0\]\.index: must be an integer",
        ),
        (
            '[{"index": 0, "uuid": "u", "model": "m", "memoryMiB": -5}]',
            r"node-a\[0\]\.memoryMiB: must be 1\.\.1048576, got -5",
        ),
        ('[{"index": 0, "uuid": "", "model": "m", "memoryMiB": 5}]', r"\.uuid: must not be empty"),
        ('[{"index": 0, "uuid": 7, "model": "m", "memoryMiB": 5}]', r"\.uuid: must be a string"),
        (
            '[{"index": 0, "uuid": "u", "model": "m", "memoryMiB": 5, "health": "meh"}]',
            r"node-a\[0\]\.health: must be one of",
        ),
        (
            '[{"index": 0, "uuid": "a", "model": "m", "memoryMiB": 5},'
            ' {"index": 0, "uuid": "b", "model": "m", "memoryMiB": 5}]',
            "duplicate GPU index",
        ),
    ],
)
def test_bad_inventories(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        decode_inventory(text, where="node-a")


def test_unknown_fields_from_a_newer_plugin_are_ignored() -> None:
    text = '[{"index": 1, "uuid": "u", "model": "H100", "memoryMiB": 5, "migProfile": "1g"}]'
    assert decode_inventory(text) == [GpuDevice(1, "u", "H100", 5)]
