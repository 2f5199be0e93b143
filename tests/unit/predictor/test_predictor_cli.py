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
    assert "schemaVersion: 7 is not supported" in capsys.readouterr().err


def test_with_lucid_requires_output(capsys) -> None:
    assert main(["predictor", "train", "--with-lucid", "/nonexistent"]) == 2
    assert "non-commercial" in capsys.readouterr().err


def test_examples_are_valid_profiles() -> None:
    from horus.predictor.schema import load_profile

    examples = sorted((ROOT / "examples" / "profiles").glob("*.yaml"))
    assert examples, "examples/profiles/*.yaml missing"
    for path in examples:
        load_profile(path)


def test_predict_reads_a_dljob_manifest(capsys) -> None:
    """Inline profile, and a configMapRef profile whose ConfigMap is in the same file: the
    same prediction as from the profile files they were generated from."""
    for manifest, profile in (
        ("resnet50-train.yaml", "resnet50-bs64.yaml"),
        ("bert-finetune.yaml", "bert-base-bs16.yaml"),
    ):
        results = []
        for path in (ROOT / "examples" / manifest, ROOT / "examples" / "profiles" / profile):
            assert main(["predict", str(path), "--gpu", "H100", "--json"]) == 0
            results.append(yaml.safe_load(capsys.readouterr().out))
        assert results[0] == results[1], manifest


def test_predict_dljob_errors_name_the_fix(tmp_path: Path, capsys) -> None:
    job = yaml.safe_load_all((ROOT / "examples" / "bert-finetune.yaml").read_text())
    dljob = next(d for d in job if d and d.get("kind") == "DLJob")
    lonely = tmp_path / "ref-only.yaml"
    lonely.write_text(yaml.safe_dump(dljob))
    assert main(["predict", str(lonely)]) == 2
    err = capsys.readouterr().err
    assert "ConfigMap 'bert-base-profile'" in err and "kubectl get configmap" in err
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump_all([dljob, dljob]))
    assert main(["predict", str(two)]) == 2
    assert "holds 2 DLJobs" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**dljob, "spec": {**dljob["spec"], "replicas": 0}}))
    assert main(["predict", str(broken)]) == 2
    assert "replicas" in capsys.readouterr().err


def test_pair_speeds_on_a_gpu_the_pair_model_never_saw_are_flagged(
    profile_file: Path, capsys
) -> None:
    """The shipped pair head learned from K80/P100/V100 pairs: on an H100 it extrapolates."""
    from horus.predictor.model import load_default_predictor

    p = load_default_predictor()
    assert p.card["pair_gpus"] == ["K80", "P100", "V100"]
    assert p.pair_gpu_known("Tesla V100-SXM2-16GB") is True and p.pair_gpu_known("H100") is False
    argv = ["predict", str(profile_file), "--with", str(profile_file)]
    assert main([*argv, "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "LOW CONFIDENCE (sharing)" in out and "K80, P100, V100" in out
    assert main([*argv, "--gpu", "V100"]) == 0
    assert "LOW CONFIDENCE" not in capsys.readouterr().out
    assert main([*argv, "--gpu", "A100", "--json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["pair_low_confidence"] is True
