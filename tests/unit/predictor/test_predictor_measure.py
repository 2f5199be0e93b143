"""``horus predictor measure``: real training loops in real worker processes (on the CPU here),
with a stand-in for NVML, since this machine has no GPU; the NVML reader itself is checked
against a fake ``pynvml`` module with the calls the real one has."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from horus.cli import main
from horus.common.errors import ValidationError
from horus.predictor.measure import (
    PAIR_ROWS_FILE,
    RESULTS_FILE,
    TRAINING_ROWS_FILE,
    JobSpec,
    Measurer,
    MeasureSettings,
    NvmlSampler,
    Reading,
    load_results,
    pairs_of,
    parse_job,
    parse_jobs,
    proxy_summary,
)
from horus.predictor.userdata import load_extra_pair_rows, load_extra_rows

torch = pytest.importorskip("torch", reason="needs the [profile] extra (torch)")
pytestmark = pytest.mark.profile

SOLO_UTIL, PAIR_UTIL, MEM, IDLE_MEM = 80.0, 45.0, 1000.0, 500.0


def _workers() -> list[int]:
    """PIDs of this test's live worker processes (children running horus.predictor.workload)."""
    me, out = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and b"horus.predictor.workload" in cmd:
            out.append(int(d.name))
    return out


class FakeGpu:
    """Stands in for NVML on this GPU-less machine (same interface as NvmlSampler): a GPU
    named H100 on which a worker alone shows 80 % SM utilisation and two show 45 % each, each
    holding 1000 MiB over an idle 500 MiB. ``pid_offset`` makes it report PIDs the way NVML
    does inside a container (host PIDs, not the workers' own); ``per_process=False`` is a
    driver that lists no processes at all."""

    backend = "simulated"
    gpu_name: str | None = "H100"

    def __init__(self, pid_offset: int = 0, per_process: bool = True) -> None:
        self.offset, self.per_process = pid_offset, per_process
        self.reads: list[tuple[int, ...]] = []

    def pids(self) -> set[int]:
        return {p + self.offset for p in _workers()} if self.per_process else set()

    def read(self, pids: Sequence[int]) -> Reading:
        self.reads.append(tuple(pids))
        live = len(_workers())
        each = SOLO_UTIL if live == 1 else PAIR_UTIL
        known = [p for p in pids if p in self.pids()]
        return Reading(
            min(100.0, each * live),
            dict.fromkeys(known, each),
            dict.fromkeys(known, MEM),
            IDLE_MEM + MEM * live,
        )


JOBS = (JobSpec("ppo", 32), JobSpec("td3", 16))


def settings(out: Path, **kw: Any) -> MeasureSettings:
    base: dict[str, Any] = {
        "jobs": JOBS,
        "pairs": ((JOBS[0], JOBS[1]),),
        "out_dir": out,
        "device": "cpu",
        "window_s": 0.5,
        "warmup_steps": 1,
    }
    base.update(kw)
    return MeasureSettings(**base)


def test_solo_and_pair_runs_write_rows_training_reads(tmp_path: Path) -> None:
    gpu = FakeGpu()
    lines: list[str] = []
    counts = Measurer(settings(tmp_path), gpu).run(lines.append)
    assert counts == {"measured": 3, "already": 0, "failed": 0, "left": 0}, lines
    res = json.loads((tmp_path / RESULTS_FILE).read_text())
    assert res["gpu"] == "H100" and set(res["solo"]) == {"ppo:32", "td3:16"}
    for r in res["solo"].values():
        assert r["steps"] >= 1 and r["steps_per_s"] > 0
        assert r["util"] == SOLO_UTIL and r["memory_mib"] == MEM
    pair = res["pairs"]["ppo:32|td3:16"]
    for side, key in (("a", "ppo:32"), ("b", "td3:16")):
        s = pair[side]
        assert s["speed"] == pytest.approx(s["steps_per_s"] / res["solo"][key]["steps_per_s"])
        assert s["proxy_speed"] == pytest.approx(PAIR_UTIL / SOLO_UTIL)
    # the sampler was asked about the workers' NVML PIDs only: none for the idle reading
    # before a run, one during solo runs, two in the pair
    assert {len(p) for p in gpu.reads} == {0, 1, 2}
    assert {r["memory_source"] for r in res["solo"].values()} == {"process"}

    # rows from a simulated backend are refused by default, read with keep_simulated
    with pytest.raises(ValidationError, match="simulated"):
        load_extra_rows(tmp_path / TRAINING_ROWS_FILE)
    single = load_extra_rows(tmp_path / TRAINING_ROWS_FILE, keep_simulated=True)
    assert list(single.util) == [SOLO_UTIL, SOLO_UTIL] and list(single.memory_mib) == [MEM, MEM]
    pairs = load_extra_pair_rows(tmp_path / PAIR_ROWS_FILE, keep_simulated=True)
    assert len(pairs) == 2 and {p.group for p in pairs} == {"ppo", "td3"}
    assert sorted(p.speed for p in pairs) == sorted(round(pair[s]["speed"], 4) for s in ("a", "b"))
    from horus.predictor.zoo import profile_zoo

    ppo = profile_zoo("ppo", 32)
    a_row = next(p for p in pairs if p.group == "ppo")
    assert a_row.a["fwd_flops"] == ppo.features["fwd_flops"]

    # the same folder is a simulator ground truth (horus sim --truth measured:DIR)
    from horus.sim.groundtruth import load_truth

    truth = load_truth(f"measured:{tmp_path}")
    assert truth.gpu_model == "H100" and len(truth.kinds) == 2
    assert truth.speed("measured:ppo:32", "measured:td3:16") == min(1.0, pair["a"]["speed"])
    assert truth.profile("measured:ppo:32").features == ppo.features

    # a second run resumes: nothing is measured again
    before = (tmp_path / RESULTS_FILE).read_text()
    again = Measurer(settings(tmp_path), FakeGpu()).run(lines.append)
    assert again == {"measured": 0, "already": 3, "failed": 0, "left": 0}
    assert (tmp_path / RESULTS_FILE).read_text() == before
    assert proxy_summary(res)["estimate_mae"] == pytest.approx(
        sum(abs(PAIR_UTIL / SOLO_UTIL - pair[s]["speed"]) for s in ("a", "b")) / 2
    )


def test_pids_nvml_reports_from_another_namespace_are_matched_to_the_workers(
    tmp_path: Path,
) -> None:
    """Inside a container NVML names host PIDs: each worker is the process that appeared."""
    gpu = FakeGpu(pid_offset=100_000)
    s = settings(tmp_path, jobs=(JOBS[0],), pairs=((JOBS[0], JOBS[0]),))
    assert Measurer(s, gpu).run(lambda _: None)["measured"] == 2
    res = load_results(tmp_path / RESULTS_FILE)
    assert res["solo"]["ppo:32"]["memory_source"] == "process"
    assert res["solo"]["ppo:32"]["proc_util"] == SOLO_UTIL
    pair = res["pairs"]["ppo:32|ppo:32"]
    assert (
        pair["a"]["proxy_speed"] == pair["b"]["proxy_speed"] == pytest.approx(PAIR_UTIL / SOLO_UTIL)
    )
    assert all(p > 100_000 for r in gpu.reads for p in r)


def test_without_process_figures_memory_comes_from_the_device(tmp_path: Path) -> None:
    s = settings(tmp_path, jobs=(JOBS[0],), pairs=((JOBS[0], JOBS[0]),))
    assert Measurer(s, FakeGpu(per_process=False)).run(lambda _: None)["measured"] == 2
    res = load_results(tmp_path / RESULTS_FILE)
    solo = res["solo"]["ppo:32"]
    assert solo["memory_mib"] == MEM and solo["memory_source"] == "device"
    assert solo["proc_util"] is None and solo["util"] == SOLO_UTIL
    pair = res["pairs"]["ppo:32|ppo:32"]
    assert pair["a"]["proxy_speed"] is None and pair["a"]["speed"] > 0
    assert len(load_extra_rows(tmp_path / TRAINING_ROWS_FILE, keep_simulated=True).util) == 1


def test_time_budget_stops_before_a_measurement_and_says_so(tmp_path: Path) -> None:
    ticks = iter(range(0, 10_000, 100))
    lines: list[str] = []
    m = Measurer(settings(tmp_path, time_budget_s=30), FakeGpu(), clock=lambda: next(ticks))
    counts = m.run(lines.append)
    assert counts["measured"] == 0 and counts["left"] == 3
    assert "time budget" in lines[-1] and "run again" in lines[-1]
    # a recorded failure is not "left": it is not retried until its entry is deleted
    m.results["failed"]["td3:16"] = "exited with status 1"
    (tmp_path / RESULTS_FILE).write_text(json.dumps(m.results))
    m = Measurer(settings(tmp_path, time_budget_s=30), FakeGpu(), clock=lambda: next(ticks))
    assert m.run(lines.append)["left"] == 2  # ppo:32 and the pair


def test_pair_without_its_solo_runs_is_skipped(tmp_path: Path) -> None:
    lines: list[str] = []
    s = settings(tmp_path, jobs=(), pairs=((JOBS[0], JOBS[1]),))
    assert Measurer(s, FakeGpu()).run(lines.append)["left"] == 1
    assert "solo run is missing" in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_worker_that_fails_is_recorded_with_its_error(tmp_path: Path) -> None:
    lines: list[str] = []
    s = settings(tmp_path, device="cuda:0", pairs=())
    counts = Measurer(s, FakeGpu()).run(lines.append)
    assert counts["failed"] == 2 and counts["measured"] == 0
    failed = load_results(tmp_path / RESULTS_FILE)["failed"]
    assert "exited with status" in failed["ppo:32"]
    assert "CUDA" in failed["ppo:32"] or "cuda" in failed["ppo:32"]  # the worker's own error
    # failures are not retried silently
    assert Measurer(s, FakeGpu()).run(lines.append)["already"] == 2


def test_a_results_file_from_another_gpu_is_refused(tmp_path: Path) -> None:
    Measurer(settings(tmp_path, jobs=(), pairs=()), FakeGpu()).run(lambda _: None)
    earlier = load_results(tmp_path / RESULTS_FILE)
    earlier.update(gpu="A100", solo={"ppo:32": {"steps_per_s": 1.0}})
    (tmp_path / RESULTS_FILE).write_text(json.dumps(earlier))
    with pytest.raises(ValidationError, match="'A100', this run is on 'H100'"):
        Measurer(settings(tmp_path), FakeGpu())


def test_dry_run_results_never_mix_with_gpu_rows(tmp_path: Path) -> None:
    from horus.predictor.measure import NoGpuSampler

    s = settings(tmp_path, jobs=(JOBS[0],), pairs=())
    assert Measurer(s, NoGpuSampler()).run(lambda _: None)["measured"] == 1
    with pytest.raises(ValidationError, match=r"cpu \(dry run\).*another --output"):
        Measurer(s, FakeGpu())


def test_a_gpu_the_predictor_does_not_know_is_refused_before_measuring(tmp_path: Path) -> None:
    gpu = FakeGpu()
    gpu.gpu_name = "Z9000"
    with pytest.raises(ValidationError, match="unknown GPU 'Z9000'"):
        Measurer(settings(tmp_path), gpu)
    assert not (tmp_path / RESULTS_FILE).exists()


def test_nvml_sampler_reads_only_the_workers() -> None:
    class FakeNvml:  # the pynvml calls NvmlSampler makes, with pynvml's return shapes
        def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
            return f"gpu{i}"

        def nvmlDeviceGetName(self, h: str) -> bytes:
            return b"NVIDIA H100 80GB HBM3"

        def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
            return SimpleNamespace(gpu=93, memory=40)

        def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
            return [SimpleNamespace(pid=p, usedGpuMemory=2 * 1024**3) for p in (11, 12, 99)]

        def nvmlDeviceGetProcessUtilization(self, h: str, last: int) -> list[Any]:
            return [
                SimpleNamespace(pid=11, smUtil=40, timeStamp=last + 1),
                SimpleNamespace(pid=11, smUtil=60, timeStamp=last + 2),
                SimpleNamespace(pid=99, smUtil=5, timeStamp=last + 3),
            ]

    s = NvmlSampler(0, nvml=FakeNvml())
    assert s.gpu_name == "NVIDIA H100 80GB HBM3"
    r = s.read([11, 12])
    assert r.gpu_util == 93 and dict(r.proc_util) == {11: 50.0}
    assert dict(r.proc_mem_mib) == {11: 2048.0, 12: 2048.0}

    class MpsNvml(FakeNvml):  # --sharing mps: the workers are listed as MPS clients
        def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
            return [SimpleNamespace(pid=98, usedGpuMemory=32 * 1024**2)]  # the MPS server

        def nvmlDeviceGetMPSComputeRunningProcesses(self, h: str) -> list[Any]:
            return [SimpleNamespace(pid=p, usedGpuMemory=1024**3) for p in (11, 12)]

    s = NvmlSampler(0, nvml=MpsNvml())
    assert s.pids() == {11, 12}  # not the server, so a new worker matches its client process
    assert dict(s.read([11, 12]).proc_mem_mib) == {11: 1024.0, 12: 1024.0}


def test_bad_input_is_named() -> None:
    with pytest.raises(ValidationError, match="ZOO:BATCH"):
        parse_job("resnet50")
    with pytest.raises(ValidationError, match="not an integer"):
        parse_job("resnet50:big")
    with pytest.raises(ValidationError, match="positive"):
        parse_job("resnet50:0")
    with pytest.raises(ValidationError, match="unknown zoo model"):
        parse_job("resnet51:8")
    assert parse_job("bert-base:8+amp") == JobSpec("bert-base", 8, True)
    assert len(parse_jobs(["ppo:8,ppo:8", "td3:4"])) == 2
    assert {j.zoo for j in parse_jobs(["lucid"])} >= {"resnet18-cifar", "bert-base", "pointnet"}
    with pytest.raises(ValidationError, match="all, none or sample:N"):
        pairs_of(list(JOBS), "some")
    with pytest.raises(ValidationError, match="positive N"):
        pairs_of(list(JOBS), "sample:0")
    assert len(pairs_of(list(JOBS), "all")) == 3 and pairs_of(list(JOBS), "none") == []
    assert len(pairs_of(list(JOBS), "sample:2", seed=1)) == 2
    for kw, msg in (
        ({"window_s": 0}, "--window"),
        ({"window_s": 601}, "--window"),
        ({"warmup_steps": -1}, "--warmup"),
        ({"time_budget_s": -5}, "--time-budget"),
        ({"device": "gpu0"}, "cpu, cuda or cuda:N"),
    ):
        with pytest.raises(ValidationError, match=msg):
            settings(Path("/nonexistent"), **kw)


def test_a_foreign_results_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / RESULTS_FILE).write_text('{"format": "other"}')
    with pytest.raises(ValidationError, match="move it away"):
        load_results(tmp_path / RESULTS_FILE)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_without_a_gpu_says_to_use_cpu(tmp_path: Path, capsys) -> None:
    assert main(["predictor", "measure", "--jobs", "ppo:8", "-o", str(tmp_path)]) == 2
    assert "--device cpu for a dry run" in capsys.readouterr().err


def test_cli_dry_run_on_cpu_writes_no_rows(tmp_path: Path, capsys) -> None:
    argv = ["predictor", "measure", "--jobs", "ppo:8", "--pairs", "none", "--device", "cpu"]
    assert main([*argv, "--window", "0.3", "--warmup", "1", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "1 measured" in out
    assert load_results(tmp_path / RESULTS_FILE)["solo"]["ppo:8"]["steps_per_s"] > 0
    assert not (tmp_path / TRAINING_ROWS_FILE).exists()


def _has_cuda_and_nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return bool(pynvml.nvmlDeviceGetCount()) and bool(torch.cuda.is_available())
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda_and_nvml(), reason="no NVIDIA GPU on this machine")
def test_on_a_real_gpu_rows_load_and_speeds_are_plausible(tmp_path: Path) -> None:
    s = settings(tmp_path, device="cuda:0", window_s=5.0, warmup_steps=5)
    sampler = NvmlSampler(0)
    counts = Measurer(s, sampler).run(print)
    assert counts["measured"] == 3 and counts["failed"] == 0
    single = load_extra_rows(tmp_path / TRAINING_ROWS_FILE)
    assert all(0 < u <= 100 for u in single.util) and all(m > 0 for m in single.memory_mib)
    pairs = load_extra_pair_rows(tmp_path / PAIR_ROWS_FILE)
    assert len(pairs) == 2 and all(0.05 < p.speed <= 1.3 for p in pairs)
    print(proxy_summary(load_results(tmp_path / RESULTS_FILE)))


def test_mps_share_reaches_the_workers_and_folders_keep_one_sharing_mode(tmp_path: Path) -> None:
    s = settings(tmp_path, jobs=(JOBS[0],), pairs=())
    # MPS needs a GPU, which this machine lacks; the workers run on the CPU, and what is
    # checked is that each is started with the share and that the folder records it
    object.__setattr__(s, "sharing", "mps")
    object.__setattr__(s, "mps_thread_percent", 50)
    assert Measurer(s, FakeGpu()).run(lambda _: None)["measured"] == 1
    res = load_results(tmp_path / RESULTS_FILE)
    assert res["sharing"] == "mps" and res["mps_thread_percent"] == 50
    assert res["solo"]["ppo:32"]["mps_thread_percent"] == "50"  # as the worker saw it
    with (tmp_path / TRAINING_ROWS_FILE).open() as fh:
        assert next(csv.DictReader(fh))["sharing"] == "mps"
    with pytest.raises(ValidationError, match="another --output folder per sharing mode"):
        Measurer(settings(tmp_path, jobs=(JOBS[0],), pairs=()), FakeGpu())


def test_mps_settings_and_daemon_check_name_the_problem(tmp_path: Path, monkeypatch) -> None:
    from horus.predictor.measure import check_mps_daemon

    for kw, msg in (
        ({"sharing": "mig"}, "time-slicing or mps"),
        ({"sharing": "mps", "device": "cpu"}, "needs a GPU"),
        ({"mps_thread_percent": 50}, "needs --sharing mps"),
        ({"sharing": "mps", "device": "cuda:0", "mps_thread_percent": 0}, "1..100"),
    ):
        with pytest.raises(ValidationError, match=msg):
            settings(tmp_path, **kw)
    # a stand-in for the NVIDIA binary: answers get_server_list with the status in $FAKE_RC
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-cuda-mps-control"
    fake.write_text('#!/bin/sh\n/bin/cat > /dev/null\nexit "${FAKE_RC:-0}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    check_mps_daemon("mps")
    # a running daemon would make plain time-slicing workers its clients: refused
    with pytest.raises(ValidationError, match=r"MPS control daemon is running.*--sharing mps"):
        check_mps_daemon("time-slicing")
    monkeypatch.setenv("FAKE_RC", "1")
    with pytest.raises(ValidationError, match="no MPS control daemon answers"):
        check_mps_daemon("mps")
    check_mps_daemon("time-slicing")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ValidationError, match="needs nvidia-cuda-mps-control on PATH"):
        check_mps_daemon("mps")
    check_mps_daemon("time-slicing")  # no MPS tools at all: nothing can intercept the workers
