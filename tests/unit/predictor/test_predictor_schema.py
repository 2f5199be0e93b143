"""Profile files and GPU names: every bad input is an error that names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from horus.common.errors import ValidationError
from horus.predictor.gpus import gpu_spec, known_gpus
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import (
    FEATURE_NAMES,
    SCHEMA_VERSION,
    dump_profile,
    load_profile,
    profile_from_dict,
    thesis_features,
)


def _profile() -> GraphProfile:
    feats = dict.fromkeys(FEATURE_NAMES, 1.0)
    feats.update(batch_size=32, fwd_flops=1e9, bwd_flops=2e9, params=1e6)
    return GraphProfile("toy", 32, feats, family="toy")


def test_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    dump_profile(_profile(), path)
    loaded = load_profile(path)
    assert loaded == _profile()


def test_wrong_schema_version(tmp_path: Path) -> None:
    doc = yaml.safe_load(dump_profile(_profile()))
    doc["schemaVersion"] = SCHEMA_VERSION + 1
    with pytest.raises(ValidationError, match="schemaVersion: 2 is not supported"):
        profile_from_dict(doc)
    del doc["schemaVersion"]  # unset means 1, as in a DLJob's inline profile (one validator)
    assert profile_from_dict(doc).schema_version == SCHEMA_VERSION


def test_missing_fields() -> None:
    doc = yaml.safe_load(dump_profile(_profile()))
    del doc["features"]["fwd_flops"]
    with pytest.raises(ValidationError, match="features lack fwd_flops"):
        profile_from_dict(doc)
    del doc["batchSize"]
    with pytest.raises(ValidationError, match="needs batchSize alongside features"):
        profile_from_dict(doc)


def test_bad_values(tmp_path: Path) -> None:
    doc = yaml.safe_load(dump_profile(_profile()))
    doc["features"]["params"] = "many"
    with pytest.raises(ValidationError, match=r"features\.params: must be a number"):
        profile_from_dict(doc)
    for impossible in (-1, float("inf"), float("nan")):
        doc["features"]["params"] = impossible
        with pytest.raises(ValidationError, match=r"params: must be a finite number >= 0"):
            profile_from_dict(doc)
    doc["kind"] = "Pod"
    with pytest.raises(ValidationError, match="kind: must be GraphProfile, got 'Pod'"):
        profile_from_dict(doc)
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed")
    with pytest.raises(ValidationError, match="not valid JSON or YAML"):
        load_profile(bad)
    with pytest.raises(ValidationError, match=r"cannot read .*missing.yaml"):
        load_profile(tmp_path / "missing.yaml")


def test_thesis_feature_set() -> None:
    t = thesis_features(_profile().features)
    assert set(t) == {
        "fwd_flops",
        "params",
        "count_conv",
        "count_matmul",
        "count_elementwise",
        "count_other",
        "batch_size",
        "input_elems",
    }
    assert t["count_other"] == 5.0  # attention, norm, embedding, recurrent, pool


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("A100", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("k80", "K80"),
    ],
)
def test_gpu_aliases(name: str, canonical: str) -> None:
    assert gpu_spec(name).name == canonical


def test_unknown_gpu() -> None:
    with pytest.raises(ValidationError, match=r"unknown GPU 'Voodoo5'.*A100-80GB"):
        gpu_spec("Voodoo5")
    assert "H100" in known_gpus()
