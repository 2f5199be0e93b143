"""status.observed carries mean and peak of utilisation and memory, range-checked."""

from __future__ import annotations

import pytest

from horus.api.jobstatus import MeasuredPair, ObservedUsage, parse_dljob_status
from horus.common.errors import ValidationError


def test_observed_round_trip() -> None:
    raw = {"util": 30.0, "utilPeak": 50.0, "memoryMiB": 1200.0, "memoryMiBMean": 825.0}
    observed = parse_dljob_status({"observed": raw}).observed
    assert observed == ObservedUsage(
        util=30.0, memory_mib=1200.0, util_peak=50.0, memory_mib_mean=825.0
    )
    assert observed.to_json() == raw


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"utilPeak": 150}, r"status.observed.utilPeak: must be 0..100, got 150"),
        ({"memoryMiBMean": -1}, r"status.observed.memoryMiBMean: must be 0..1048576"),
        ({"utilMax": 1}, r"utilMax"),
    ],
)
def test_bad_observed(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_dljob_status({"observed": raw})


def test_observed_pairs_round_trip() -> None:
    pairs = [{"other": "bert@8", "gpuModel": "H100", "speed": 0.71, "samples": 12}]
    observed = parse_dljob_status({"observed": {"util": 30.0, "pairs": pairs}}).observed
    assert observed is not None
    assert observed.pairs == (MeasuredPair("bert@8", "H100", 0.71, 12),)
    assert observed.to_json() == {"util": 30.0, "pairs": pairs}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([{"other": "a@1", "gpuModel": "H100", "speed": 0.0, "samples": 3}], r"pairs\[0\].speed"),
        ([{"other": "a@1", "gpuModel": "H100", "speed": 0.5, "samples": 0}], r"samples"),
        ([{"other": "a@1", "gpuModel": "H100", "speed": 0.5}], r"pairs\[0\].samples"),
        ([{"other": "a@1", "gpuModel": "H100", "speed": 0.5, "samples": 3, "x": 1}], r"'x'|x"),
        ("bert", r"must be a list of at most 16"),
        ([{"other": "a@1", "gpuModel": "H", "speed": 0.5, "samples": 1}] * 17, r"at most 16"),
        (
            [{"other": "a@1", "gpuModel": "H", "speed": 0.5, "samples": 1, "error": 1.5}],
            r"pairs\[0\].error",
        ),
        (
            [{"other": "a@1", "gpuModel": "H", "speed": 0.5, "samples": 1, "source": "guess"}],
            r"pairs\[0\].source",
        ),
    ],
)
def test_bad_observed_pairs(pairs: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        parse_dljob_status({"observed": {"pairs": pairs}})


def test_observed_pairs_with_error_and_source_and_without() -> None:
    """Issue 26: an agent publishes each pair's error and source; entries from older agents
    (neither) still read, as None."""
    pairs = [
        {"other": "bert@8", "gpuModel": "H100", "speed": 0.71, "samples": 12},
        {
            "other": "r50@64",
            "gpuModel": "H100",
            "speed": 0.5,
            "samples": 9,
            "error": 0.02,
            "source": "progress",
        },
    ]
    observed = parse_dljob_status({"observed": {"pairs": pairs}}).observed
    assert observed is not None
    assert observed.pairs == (
        MeasuredPair("bert@8", "H100", 0.71, 12),
        MeasuredPair("r50@64", "H100", 0.5, 9, error=0.02, source="progress"),
    )
    assert observed.to_json() == {"pairs": pairs}
