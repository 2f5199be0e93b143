"""``horus predict`` from a profile file (no torch needed) and its error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from horus.cli import main
from horus.predictor.catalog import job_type
from horus.predictor.schema import dump_profile

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "resnet50.yaml"
    dump_profile(job_type("gavel", "ResNet-50 (batch size 64)").profile, path)
    return path


def test_predict_prints_util_memory_and_intervals(profile_file: Path, capsys) -> None:
    assert main(["predict", str(profile_file), "--gpu", "A100"]) == 0
    out = capsys.readouterr().out
    assert "GPU utilisation" in out and "p90 upper" in out and "MiB" in out


def test_predict_pair_json(profile_file: Path, capsys) -> None:
    assert (
        main(["predict", str(profile_file), "--gpu", "V100", "--with", str(profile_file), "--json"])
        == 0
    )
    out = yaml.safe_load(capsys.readouterr().out)
    assert 0 < out["speed"] <= 1 and out["util_percent"] <= out["util_upper"]


def test_predict_unknown_gpu(profile_file: Path, capsys) -> None:
    assert main(["predict", str(profile_file), "--gpu", "Z9000"]) == 2
    assert "unknown GPU 'Z9000'" in capsys.readouterr().err


def test_predict_wrong_schema(tmp_path: Path, profile_file: Path, capsys) -> None:
    doc = yaml.safe_load(profile_file.read_text())
    doc["schemaVersion"] = 7
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["predict", str(bad)]) == 2
    assert "schemaVersion 7 is not supported" in capsys.readouterr().err


def test_with_lucid_requires_output(capsys) -> None:
    assert main(["predictor", "train", "--with-lucid", "/nonexistent"]) == 2
    assert "non-commercial" in capsys.readouterr().err


def test_examples_are_valid_profiles() -> None:
    from horus.predictor.schema import load_profile

    examples = sorted((ROOT / "examples" / "profiles").glob("*.yaml"))
    assert examples, "examples/profiles/*.yaml missing"
    for path in examples:
        load_profile(path)
