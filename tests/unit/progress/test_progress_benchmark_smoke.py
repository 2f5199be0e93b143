"""benchmarks/progress_signal.py still runs against the code as it is: one short repeat, the
figures not judged beyond 'every pair got a progress reading' (the committed results are the
measurement). On a loaded machine B's processes start late (at load 6 only 6 of 8 pairs had a
reading after 6 s of sharing), so the run may wait up to 30 s more for a pair's first reading:
how long it takes is not what this test checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_progress_benchmark_runs_and_reads_every_pair(tmp_path: Path) -> None:
    out = tmp_path / "progress-signal.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "progress_signal.py"), "--repeats", "1",
         "--solo", "4", "--shared", "6", "--interval", "0.5", "--reading-wait", "30",
         "--out", str(out)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["progress"]["pairs"] == result["progress"]["of"] == 8
    assert all(r["true_speed"] is not None for r in result["rows"])
