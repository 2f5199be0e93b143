"""The gpu-assignment and predicted pod annotations round-trip and reject malformed values."""

from __future__ import annotations

import json

import pytest

from horus.api.assignment import (
    GpuAssignment,
    PredictedUsage,
    decode_assignment,
    decode_predicted,
    encode_assignment,
    encode_predicted,
)
from horus.common.errors import ValidationError


def test_assignment_round_trip() -> None:
    a = GpuAssignment("gpu-node-3", "GPU-abc", 2, 40, 12288, job="resnet50-train", replica=1)
    text = encode_assignment(a)
    assert json.loads(text) == {
        "node": "gpu-node-3",
        "gpuUUID": "GPU-abc",
        "gpuIndex": 2,
        "corePercent": 40,
        "memoryMiB": 12288,
        "job": "resnet50-train",
        "replica": 1,
    }
    assert " " not in text
    assert decode_assignment(text) == a


def test_plain_pod_assignment_has_no_job() -> None:
    a = GpuAssignment("n", "GPU-1", 0, 100, 1)
    assert "job" not in json.loads(encode_assignment(a))
    assert decode_assignment(encode_assignment(a)) == a


_GOOD = {"node": "n", "gpuUUID": "G", "gpuIndex": 0, "corePercent": 50, "memoryMiB": 1024}


def _with(**changes: object) -> str:
    return json.dumps({**_GOOD, **changes})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "pod ns/p: not valid JSON"),
        ("[]", "pod ns/p: must be an object, got list"),
        (json.dumps({"node": "n"}), "pod ns/p.gpuUUID: required"),
        (_with(corePercent=0), "pod ns/p.corePercent: must be 1..100, got 0"),
        (_with(corePercent=101), "pod ns/p.corePercent: must be 1..100, got 101"),
        (_with(corePercent="50"), "pod ns/p.corePercent: must be an integer, got string"),
        (_with(memoryMiB=0), "pod ns/p.memoryMiB: must be 1..1048576, got 0"),
        (_with(memoryMiB=2_000_000), "pod ns/p.memoryMiB: must be 1..1048576"),
        (_with(gpuIndex=-1), "pod ns/p.gpuIndex: must be 0..1023, got -1"),
        (_with(node=""), "pod ns/p.node: must not be empty"),
        (_with(job="j"), "pod ns/p: job and replica must be given together"),
        (_with(replica=0), "pod ns/p: job and replica must be given together"),
        (_with(job="j", replica=-1), "pod ns/p.replica: must be 0..1023, got -1"),
        (_with(gpu=1), "pod ns/p.gpu: unknown field"),
    ],
)
def test_bad_assignment(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        decode_assignment(text, "pod ns/p")
    assert message in str(info.value)


def test_constructor_validates_too() -> None:
    with pytest.raises(ValidationError, match=r"gpu-assignment.corePercent: must be 1..100"):
        GpuAssignment("n", "G", 0, 150, 1)


def test_predicted_round_trip() -> None:
    p = PredictedUsage(38.5, 47.0, 9800.0, 11000.0, "gbr-1")
    assert json.loads(encode_predicted(p)) == {
        "utilMean": 38.5,
        "utilUpper": 47.0,
        "memoryMiBMean": 9800.0,
        "memoryMiBUpper": 11000.0,
        "modelVersion": "gbr-1",
    }
    assert decode_predicted(encode_predicted(p)) == p
    q = PredictedUsage(1, 2, 3, 4, "v", low_confidence=True, quantile=0.9)
    assert decode_predicted(encode_predicted(q)) == q
    r = PredictedUsage(1, 2, 3, 4, "v", pair_low_confidence=True)
    assert json.loads(encode_predicted(r))["pairLowConfidence"] is True
    assert decode_predicted(encode_predicted(r)) == r


_PRED = {
    "utilMean": 40,
    "utilUpper": 50,
    "memoryMiBMean": 100,
    "memoryMiBUpper": 200,
    "modelVersion": "v",
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"utilMean": 101, "utilUpper": 102}, "pod p.utilMean: must be 0..100, got 101"),
        ({"utilUpper": 30}, "pod p.utilUpper: must be >= utilMean (40), got 30"),
        ({"memoryMiBUpper": 50}, "pod p.memoryMiBUpper: must be >= memoryMiBMean (100), got 50"),
        ({"memoryMiBMean": -1}, "pod p.memoryMiBMean: must be 0..1048576, got -1"),
        ({"modelVersion": ""}, "pod p.modelVersion: must not be empty"),
        ({"modelVersion": 3}, "pod p.modelVersion: must be a string"),
        ({"lowConfidence": "yes"}, "pod p.lowConfidence: must be true or false"),
        ({"pairLowConfidence": 1}, "pod p.pairLowConfidence: must be true or false"),
        ({"quantile": 1}, "pod p.quantile: must be between 0 and 1"),
        ({"utilMean": "high"}, "pod p.utilMean: must be a number, got string"),
        ({"extra": 1}, "pod p.extra: unknown field"),
    ],
)
def test_bad_predicted(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        decode_predicted(json.dumps({**_PRED, **changes}), "pod p")
    assert message in str(info.value)
    with pytest.raises(ValidationError, match="pod p: not valid JSON"):
        decode_predicted("nope", "pod p")
