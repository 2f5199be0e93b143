"""The simulator's benchmarks still run against the code as it is (issue 26 changed the
observation model and the run names under them): tiny sizes, figures not judged here except
that each prints what the issue asks for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from horus.sim.datasets import LUCID, missing

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.unit


def _run(args: list[str], timeout: int = 300) -> str:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.skipif(bool(missing(LUCID, "colocate_info.csv")), reason="no Lucid data")
def test_pair_signal_benchmark_prints_every_signal(tmp_path: Path) -> None:
    out = tmp_path / "pair-signal.json"
    text = _run(["benchmarks/pair_signal.py", "--seeds", "1", "--out", str(out)])
    got = json.loads(out.read_text())
    for block in ("lucid", "gavel_v100"):
        for sig in ("util-split", "util-overlap", "progress"):
            s = got[block][sig]
            assert {"bias", "sd", "mae", "p95_abs", "slowed_accuracy"} <= set(s)
    # the progress signal is far more accurate than either utilisation model
    assert got["lucid"]["progress"]["mae"] < got["lucid"]["util-overlap"]["mae"] / 3
    assert "progress noise sd per reading" in text


@pytest.mark.skipif(bool(missing(LUCID, "colocate_info.csv")), reason="no Lucid data")
def test_scheduler_benchmark_seeds_and_targets(tmp_path: Path) -> None:
    text = _run(
        [
            "benchmarks/scheduler.py",
            "--only",
            "policies",
            "--traces",
            "synthetic",
            "--jobs",
            "120",
            "--gpus",
            "16",
            "--seeds",
            "2",
            "--policies",
            "binpack,horus-predict-only,horus,oracle",
            "--results-dir",
            str(tmp_path),
        ]
    )
    doc = json.loads((tmp_path / "scheduler-policies-synthetic.json").read_text())
    assert doc["seeds"] == 2 and len(doc["per_seed"]) == 2
    h = doc["summary"]["horus"]
    assert len(h["jct_mean_over_oracle"]["values"]) == 2
    assert "jct_mean_over_binpack" in h and "jct_mean_over_predict_only" in h
    assert "horus mean JCT × oracle" in text and "worse than prediction alone in" in text
