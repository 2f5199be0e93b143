"""The example workload reports progress, and on a simulated GPU its steps take as long as the
simulated speed says (issue 26: the truth the agent's progress reading is checked against)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from horus.progress.reader import read_progress, write_simulated_speed

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "examples" / "workload" / "train.py"


def run(directory: Path | None, steps: int = 30) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("HORUS_PROGRESS_DIR", None)
    if directory is not None:
        env["HORUS_PROGRESS_DIR"] = str(directory)
    out = subprocess.run(
        [
            sys.executable,
            str(TRAIN),
            "--steps",
            str(steps),
            "--step-sleep",
            "0.04",
            "--report-seconds",
            "100",
            "--batch-size",
            "16",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    done: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return done


def test_the_workload_reports_progress_and_runs_at_the_simulated_speed(tmp_path: Path) -> None:
    real = run(tmp_path)  # a progress directory, no simulated speed: a real GPU
    rec = read_progress(tmp_path)
    assert rec is not None and (rec.steps, rec.samples, rec.phase) == (30, 480, "done")
    write_simulated_speed(tmp_path, 1.0)
    alone = run(tmp_path)
    write_simulated_speed(tmp_path, 0.5)
    shared = run(tmp_path)
    ratio = float(shared["steps_per_second"]) / float(alone["steps_per_second"])  # type: ignore[arg-type]
    assert 0.45 < ratio < 0.55, (alone, shared)
    assert float(real["steps_per_second"]) > 0  # type: ignore[arg-type]
