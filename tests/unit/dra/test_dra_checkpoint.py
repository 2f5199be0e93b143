"""The prepared-claims checkpoint survives a restart and distrusts a damaged file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from horus.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice

CLAIM = PreparedClaim(
    "ml",
    "c1",
    "uid-1",
    (PreparedDevice(("gpu",), "node-1", "gpu-0", ("horus.io/gpu=uid-1",), "s-1"),),
)


def test_a_new_instance_reads_what_the_last_one_wrote(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "checkpoint.json"
    Checkpoint(path).put(CLAIM)
    again = Checkpoint(path)
    assert again.get("uid-1") == CLAIM
    assert again.remove("uid-1") is True
    assert again.remove("uid-1") is False
    assert Checkpoint(path).uids() == []
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]  # no temp files


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"version": 99, "claims": {}}),
        json.dumps({"version": 1, "claims": []}),
        json.dumps({"version": 1, "claims": {"uid-1": {"namespace": "ml"}}}),
        json.dumps({"version": 1, "claims": {"uid-2": CLAIM.to_json()}}),  # key != uid
        json.dumps(
            {
                "version": 1,
                "claims": {"uid-1": {**CLAIM.to_json(), "devices": [{"cdiDeviceIDs": "x"}]}},
            }
        ),
    ],
)
def test_a_damaged_checkpoint_is_ignored_not_fatal(tmp_path: Path, text: str) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(text)
    cp = Checkpoint(path)
    assert cp.uids() == []
    cp.put(CLAIM)  # and it is replaced by a good one
    assert Checkpoint(path).get("uid-1") == CLAIM


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    path.mkdir()  # the rename onto it fails (even for root)
    (path / "keep").write_text("x")
    with pytest.raises(OSError):
        cp.put(CLAIM)
    assert cp.get("uid-1") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]  # temp removed
