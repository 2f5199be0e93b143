"""benchmarks/kueue_gang_start.py still imports against the code as it is (its helpers come
from src/ and from the test folders it puts on ``sys.path``) and builds the two modes' JobSets
as its docstring says; the benchmark itself needs a cluster, Kueue and JobSet (run by hand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("kgs", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
claim = {"metadata": {"ownerReferences": [{"name": "p-0"}]},
         "status": {"allocation": {"devices": {"results": [{"pool": "n", "device": "gpu-1"}]}}}}
print(json.dumps({
    "horus": m.jobset("j", "horus"), "plain": m.jobset("j", "plain"),
    "started": [m.started({"status": s}) for s in
                ({}, {"phase": "Pending"}, {"phase": "Succeeded"}, {"startTime": "t"})],
    "allocated": m.allocated_on(claim), "unallocated": m.allocated_on({"metadata": {}}),
}))
"""


def test_kueue_gang_start_benchmark_imports_and_builds_both_modes() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "benchmarks" / "kueue_gang_start.py")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode in ("horus", "plain"):
        job = got[mode]["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert (job["parallelism"], job["completions"]) == (4, 4)
        assert got[mode]["metadata"]["namespace"] == mode
    horus = got["horus"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert horus["spec"]["containers"][0]["resources"]["limits"] == {
        "horus.io/gpu-core": "40",
        "horus.io/gpu-memory": "64",
    }
    assert "horus.io/graph-profile" in horus["metadata"]["annotations"]
    plain = got["plain"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert plain["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "share-40"}]
    assert got["started"] == [False, False, True, True]
    assert got["allocated"] == ["p-0", "n/gpu-1"]
    assert got["unallocated"] is None
