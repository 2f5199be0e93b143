"""``--truth measured:DIR``: the simulator's physics from what ``horus predictor measure``
wrote (a hand-written measure.json here, in the format the harness writes; the harness itself
is tested in tests/unit/predictor/test_predictor_measure.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from horus.cli import main
from horus.common.errors import ValidationError
from horus.predictor.catalog import job_type
from horus.predictor.measure import RESULTS_FILE, RESULTS_FORMAT
from horus.sim.groundtruth import load_truth

pytestmark = pytest.mark.unit


def _solo(gavel_type: str, util: float, mem: float, rate: float) -> dict[str, Any]:
    p = job_type("gavel", gavel_type).profile
    return {
        "features": dict(p.features),
        "family": p.family,
        "util": util,
        "memory_mib": mem,
        "steps_per_s": rate,
        "proc_util": util,
        "torch_peak_mib": mem - 500,
    }


def _side(speed: float) -> dict[str, Any]:
    return {"speed": speed, "steps_per_s": speed * 10, "proc_util": None, "proxy_speed": None}


def write_results(folder: Path, **over: Any) -> Path:
    res: dict[str, Any] = {
        "format": RESULTS_FORMAT,
        "gpu": "NVIDIA H100 80GB HBM3",
        "backend": "nvml",
        "device": "cuda:0",
        "solo": {
            "resnet18-cifar:64": _solo("ResNet-18 (batch size 64)", 70.0, 3000.0, 30.0),
            "resnet50:64": _solo("ResNet-50 (batch size 64)", 95.0, 12000.0, 8.0),
            "lstm-lm:20": _solo("LM (batch size 20)", 40.0, 2000.0, 50.0),
        },
        "pairs": {
            "resnet18-cifar:64|resnet50:64": {"a": _side(0.45), "b": _side(0.7), "util": 99.0},
            "resnet18-cifar:64|resnet18-cifar:64": {"a": _side(0.5), "b": _side(0.6)},
            "lstm-lm:20|resnet50:64": {"a": _side(1.04), "b": _side(0.9), "util": 97.0},
        },
        "failed": {},
    }
    res.update(over)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS_FILE).write_text(json.dumps(res))
    return folder


def test_measured_truth_has_the_measured_speeds_and_profiles(tmp_path: Path) -> None:
    truth = load_truth(f"measured:{write_results(tmp_path)}")
    assert truth.gpu_model == "H100" and truth.gpu_memory_mib == 80 * 1024
    r18, r50, lm = (f"measured:{k}" for k in ("resnet18-cifar:64", "resnet50:64", "lstm-lm:20"))
    assert truth.speed(r18, r50) == 0.45 and truth.speed(r50, r18) == 0.7
    assert truth.speed(r18, r18) == pytest.approx(0.55)  # a job next to its copy: the mean
    assert truth.speed(lm, r50) == 1.0  # above 1 is noise, clipped as for Lucid and Gavel
    assert truth.is_measured(r50, lm) and not truth.is_measured(lm, r18)
    assert 0.05 <= truth.speed(lm, r18) <= 1.0  # unmeasured: the documented fallback
    assert truth.by_kind[r50].util == 95.0 and truth.by_kind[r50].memory_mib == 12000.0
    assert (
        truth.profile(r50).features
        == job_type("gavel", "ResNet-50 (batch size 64)").profile.features
    )
    assert truth.pair_util[(r50, r18)] == 99.0
    assert not truth.by_kind[r50].amp


def test_mixed_precision_is_read_from_the_stored_profile(tmp_path: Path) -> None:
    solo = _solo("ResNet-50 (batch size 64)", 90.0, 9000.0, 12.0)
    solo["features"]["amp"] = 1.0
    folder = write_results(tmp_path)
    res = json.loads((folder / RESULTS_FILE).read_text())
    res["solo"]["resnet50:64"] = solo
    (folder / RESULTS_FILE).write_text(json.dumps(res))
    assert load_truth(f"measured:{folder}").by_kind["measured:resnet50:64"].amp


def test_sim_runs_on_a_measured_truth(tmp_path: Path, capsys) -> None:
    folder = write_results(tmp_path / "h100")
    out = tmp_path / "res.json"
    argv = ["sim", "--truth", f"measured:{folder}", "--trace", "synthetic", "--jobs", "60"]
    argv += ["--gpus", "16", "--policy", "horus", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert "60 jobs on 16 GPUs" in capsys.readouterr().out
    assert data["jobs"] == 60 and data["truth"] == f"measured:{folder}"
    horus = data["policies"]["horus"]
    assert horus["jobs"] == 60 and horus["jobs_rejected"] == 0 and horus["makespan_s"] > 0


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"gpu": None}, "dry run on the CPU"),
        ({"pairs": {}}, "no measured pairs"),
        ({"gpu": "Z9000"}, "unknown GPU 'Z9000'"),
        ({"solo": {"ppo:8": {"util": 1.0}}}, "no complete 'features'"),
        ({"format": "v0"}, "move it away"),
    ],
)
def test_bad_measured_truth_is_named(tmp_path: Path, over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        load_truth(f"measured:{write_results(tmp_path, **over)}")


def test_missing_measurements_say_how_to_make_them(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="horus predictor measure"):
        load_truth(f"measured:{tmp_path / 'nothing'}")
    with pytest.raises(ValidationError, match="measured:DIR"):
        load_truth("h100")
