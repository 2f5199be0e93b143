"""Issue 26 on real kubelet nodes: two jobs share a simulated GPU and the whole chain — the
example workload writes progress into the directory the device plugin mounted, the agent reads
it, the pair speed reaches the DLJob's status.observed (and from there the operator's
scheduler) — is measured against the known truth, the speed the simulated GPU gives the job
(written by the agent into the pod's progress directory, read back here through the container).

Printed (and written to ``$HORUS_RESULTS_DIR/progress-signal-realnodes.json`` when set): the true
speed, the progress reading and its published error, the utilisation reading (the agent's
per-pod utilisation, from Prometheus, beside B over alone) and the seconds from B running to the
first progress reading in status (which includes the agent's feedback interval)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from realnode_support import apply, diagnose, pods_of, query, running, wait_for, workload_job

from horus.api.assignment import decode_assignment
from horus.common import constants as c
from horus.devcluster.chart import RealCluster

ARGS = ["--steps", "0", "--step-sleep", "0.05", "--report-seconds", "5"]
SPEED_FILE = "/var/run/horus/progress/simulated-speed.json"


def _place(pod: dict[str, Any]) -> tuple[str, int]:
    a = decode_assignment(pod["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
    return a.node, a.gpu_index


def _speed(rc: RealCluster, pod: str) -> float | None:
    out = rc.kube.kubectl(
        "exec", pod, "--", "python", "-c", f"print(open({SPEED_FILE!r}).read())", check=False
    )
    try:
        return float(json.loads(out.stdout)["speed"])
    except (ValueError, KeyError, TypeError):
        return None


def _progress_pair(rc: RealCluster, job: str) -> dict[str, Any] | None:
    obj = rc.kube.json("get", "dljob", job)
    pairs = ((obj.get("status") or {}).get("observed") or {}).get("pairs") or []
    return next((p for p in pairs if p.get("source") == "progress"), None)


def _util(prometheus: str, pod: str, seconds: int) -> float | None:
    got = query(
        prometheus,
        f'avg_over_time(horus_pod_observed_gpu_utilization_ratio{{pod="{pod}"}}[{seconds}s])',
    )
    return float(got[0]["value"][1]) if got else None


def test_two_jobs_share_a_gpu_and_progress_reads_the_true_speed(
    rc: RealCluster, prometheus: str
) -> None:
    names = ("prog-a1", "prog-a2", "prog-b")
    # both GPUs free: earlier tests' replicas gone (deleted with --wait=false). This test runs
    # before test_2, whose job keeps 60 % of both GPUs for the tests after it.
    wait_for(
        "the earlier tests' pods gone",
        lambda: not rc.kube.json("get", "pods", "-n", "default")["items"],
        180,
        diagnose(rc),
    )
    try:
        for name in names[:2]:
            apply(rc, workload_job(name, 1, 50, 8192, ARGS))
        firsts = wait_for(
            "the two solo jobs running",
            lambda: (
                (p := [pods_of(rc, n) for n in names[:2]])
                and all(len(x) == 1 and running(x[0]) for x in p)
                and [x[0] for x in p]
            ),
            180,
            diagnose(rc),
        )
        assert _place(firsts[0]) != _place(firsts[1]), "two jobs on one GPU while one was free"
        solo_started = time.monotonic()
        wait_for(
            "both solo jobs told their simulated speed (1.0)",
            lambda: all(_speed(rc, p["metadata"]["name"]) == 1.0 for p in firsts),
            90,
            diagnose(rc),
        )
        time.sleep(max(0.0, 40 - (time.monotonic() - solo_started)))  # solo windows
        solo_seconds = int(time.monotonic() - solo_started)
        apply(rc, workload_job(names[2], 1, 50, 8192, ARGS))
        (b,) = wait_for(
            "the third job running",
            lambda: (p := pods_of(rc, names[2])) and running(p[0]) and p,
            180,
            diagnose(rc),
        )
        b_running = time.monotonic()
        shared = [p for p in firsts if _place(p) == _place(b)]
        assert len(shared) == 1, "the third job should share a GPU with one of the first two"
        a = shared[0]["metadata"]["name"]
        job_a = shared[0]["metadata"]["labels"][c.LABEL_DLJOB_NAME]
        truth = wait_for(
            f"{a} told a simulated speed below 1 beside {b['metadata']['name']}",
            lambda: (s := _speed(rc, a)) is not None and s < 1.0 and s,
            90,
            diagnose(rc),
        )
        reading = wait_for(
            f"a progress-measured pair speed in DLJob {job_a}'s status",
            lambda: _progress_pair(rc, job_a),
            300,
            diagnose(rc),
        )
        first_seconds = time.monotonic() - b_running
        shared_seconds = int(time.monotonic() - b_running)
        truth = _speed(rc, a) or truth  # the truth at the time of the reading
        util_pair = _util(prometheus, a, max(10, shared_seconds - 10))
        util_solo = query(
            prometheus,
            f'avg_over_time(horus_pod_observed_gpu_utilization_ratio{{pod="{a}"}}'
            f"[{solo_seconds}s] offset {shared_seconds}s)",
        )
        util_reading = (
            util_pair / float(util_solo[0]["value"][1])
            if util_pair is not None and util_solo and float(util_solo[0]["value"][1]) > 0
            else None
        )
        figures = {
            "true_speed": truth,
            "progress": reading,
            "progress_error": round(reading["speed"] - truth, 4),
            "utilisation": None if util_reading is None else round(util_reading, 4),
            "utilisation_error": None if util_reading is None else round(util_reading - truth, 4),
            "seconds_to_first_progress_reading_in_status": round(first_seconds, 1),
        }
        print("progress pair on real nodes: " + json.dumps(figures))
        results = os.environ.get("HORUS_RESULTS_DIR")
        if results:
            out = Path(results) / "progress-signal-realnodes.json"
            out.write_text(json.dumps(figures, indent=2) + "\n")
        assert reading["gpuModel"] and reading["samples"] >= 3
        assert 0 < reading["error"] < 0.1
        assert abs(reading["speed"] - truth) <= 0.05, figures
    finally:
        for name in names:
            rc.kube.kubectl("delete", "dljob", name, "--wait=false", check=False)
        # test_2's job wants 60 % of both GPUs: leave them free
        wait_for(
            "this test's pods gone",
            lambda: not any(pods_of(rc, n) for n in names),
            120,
            diagnose(rc),
        )
