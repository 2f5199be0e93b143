"""The measuring run: one measurement at a time (each job alone, then each pair as two
processes on the same GPU, their windows started together), saving after each so a stopped
run resumes, within an optional time budget."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from horus.common.constants import ENV_MPS_ACTIVE_THREAD_PERCENTAGE
from horus.common.errors import ValidationError
from horus.common.nvml import busy_share_scale
from horus.predictor.measure.gpu import (
    SHARING_MODES,
    SHARING_MPS,
    SHARING_TIME_SLICING,
    GpuSampler,
    Window,
)
from horus.predictor.measure.jobs import JobSpec, pair_key
from horus.predictor.measure.results import RESULTS_FILE, load_results, save_results, write_rows
from horus.predictor.measure.worker import Worker, WorkerFailed
from horus.predictor.workload import WorkerJob

MAX_WINDOW_S = 600.0
MAX_WARMUP_STEPS = 10_000
SAMPLE_INTERVAL_S = 0.2


@dataclass(frozen=True)
class MeasureSettings:
    """One ``horus predictor measure`` run (see the CLI for each field's meaning)."""

    jobs: tuple[JobSpec, ...]
    pairs: tuple[tuple[JobSpec, JobSpec], ...]
    out_dir: Path
    device: str = "cuda:0"
    window_s: float = 15.0
    warmup_steps: int = 10
    time_budget_s: float = 0.0  # 0 = no limit
    startup_timeout_s: float = 300.0
    sharing: str = SHARING_TIME_SLICING  # or SHARING_MPS: workers are clients of a running daemon
    mps_thread_percent: int | None = None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of every worker

    def __post_init__(self) -> None:
        if not 0 < self.window_s <= MAX_WINDOW_S:
            raise ValidationError(
                f"--window must be in (0, {MAX_WINDOW_S:g}] seconds, got {self.window_s:g}"
            )
        if not 0 <= self.warmup_steps <= MAX_WARMUP_STEPS:
            raise ValidationError(
                f"--warmup must be in [0, {MAX_WARMUP_STEPS}] steps, got {self.warmup_steps}"
            )
        if self.time_budget_s < 0:
            raise ValidationError(
                f"--time-budget must be ≥ 0 (0 = none), got {self.time_budget_s:g}"
            )
        if self.device != "cpu" and not (
            self.device == "cuda" or (self.device.startswith("cuda:") and self.device[5:].isdigit())
        ):
            raise ValidationError(f"--device {self.device!r}: use cpu, cuda or cuda:N")
        if self.sharing not in SHARING_MODES:
            raise ValidationError(f"--sharing {self.sharing!r}: use {' or '.join(SHARING_MODES)}")
        if self.sharing == SHARING_MPS and self.device == "cpu":
            raise ValidationError("--sharing mps needs a GPU (--device cuda:N)")
        if self.mps_thread_percent is not None and (
            self.sharing != SHARING_MPS or not 1 <= self.mps_thread_percent <= 100
        ):
            raise ValidationError(
                "--mps-thread-percent must be 1..100 and needs --sharing mps, got "
                f"{self.mps_thread_percent} with --sharing {self.sharing}"
            )


class Measurer:
    """Runs the measurements of ``settings`` one at a time, saving after each."""

    def __init__(
        self,
        settings: MeasureSettings,
        sampler: GpuSampler,
        *,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.s = settings
        self.sampler = sampler
        self.clock = clock
        self.env = dict(os.environ if env is None else env)
        self.results_path = settings.out_dir / RESULTS_FILE
        self.results = load_results(self.results_path)
        gpu = sampler.gpu_name
        if gpu is not None:
            from horus.predictor.gpus import gpu_spec

            gpu_spec(gpu)  # rows on a GPU the predictor does not know could not be trained on
        known = self.results.get("gpu")
        measured = any(self.results[k] for k in ("solo", "pairs", "failed"))
        if measured and known != gpu:
            raise ValidationError(
                f"{self.results_path} holds measurements on {known or 'cpu (dry run)'!r}, this "
                f"run is on {gpu or 'cpu (dry run)'!r}; use another --output folder per GPU model"
            )
        mode = (settings.sharing, settings.mps_thread_percent)
        was = (
            self.results.get("sharing", SHARING_TIME_SLICING),
            self.results.get("mps_thread_percent"),
        )
        if measured and was != mode:
            raise ValidationError(
                f"{self.results_path} holds measurements with sharing {was[0]} (thread percent "
                f"{was[1]}), this run asks for {mode[0]} ({mode[1]}); use another --output "
                "folder per sharing mode"
            )
        self.results.update(
            gpu=gpu,
            backend=sampler.backend,
            device=settings.device,
            sharing=settings.sharing,
            mps_thread_percent=settings.mps_thread_percent,
        )
        if settings.mps_thread_percent is not None:
            self.env[ENV_MPS_ACTIVE_THREAD_PERCENTAGE] = str(settings.mps_thread_percent)

    def _job(self, spec: JobSpec) -> WorkerJob:
        return WorkerJob(spec.zoo, spec.batch_size, spec.amp, self.s.device, self.s.warmup_steps)

    def _start(self, workers: list[Worker], spec: JobSpec, log_path: Path) -> None:
        """Start one worker and wait until it is ready, then learn the PID NVML reports for it.

        In a container NVML reports host PIDs, which the worker's own PID is not; so workers
        start one at a time, and a worker whose PID NVML does not list is the one compute
        process that appeared on the GPU since the previous worker was ready (none or several:
        unknown, and its per-process figures stay empty)."""
        before = self.sampler.pids()
        w = Worker(self._job(spec), log_path, self.env)
        workers.append(w)
        ready = w.expect("ready", self.s.startup_timeout_s)
        w.pid, w.mps_thread_percent = int(ready["ready"]), ready.get("mps_thread_percent")
        now = self.sampler.pids()
        if w.pid in now:
            w.nvml_pid = w.pid
        else:
            new = now - before - {x.nvml_pid for x in workers}
            w.nvml_pid = new.pop() if len(new) == 1 else None

    def _run(self, specs: Sequence[JobSpec], tag: str) -> tuple[list[dict[str, Any]], Window]:
        """Start one worker per spec, run their windows together, return reports + readings."""
        logs = self.s.out_dir / "logs"
        name = "__".join(sp.key for sp in specs).replace(":", "_").replace("+", "_")
        workers: list[Worker] = []
        try:
            idle = self.sampler.read([]).gpu_mem_mib
            for i, sp in enumerate(specs):
                self._start(workers, sp, logs / f"{tag}-{name}-{i}.log")
            pids = [w.nvml_pid for w in workers if w.nvml_pid is not None]
            self.sampler.read(pids)  # discard what came before the window
            window = Window(idle_mem=idle)
            for w in workers:
                w.send(f"go {self.s.window_s}")
            reports: list[dict[str, Any] | None] = [None] * len(workers)
            box: queue.Queue[tuple[int, dict[str, Any] | WorkerFailed]] = queue.Queue()

            def wait(i: int, w: Worker) -> None:
                try:
                    box.put((i, w.expect("steps", self.s.window_s + self.s.startup_timeout_s)))
                except WorkerFailed as exc:
                    box.put((i, exc))

            for i, w in enumerate(workers):
                threading.Thread(target=wait, args=(i, w), daemon=True).start()
            pending = len(workers)
            while pending:
                try:
                    i, msg = box.get(timeout=SAMPLE_INTERVAL_S)
                except queue.Empty:
                    with contextlib.suppress(Exception):
                        window.add(self.sampler.read(pids))
                    continue
                if isinstance(msg, WorkerFailed):
                    raise msg
                reports[i] = msg
                pending -= 1
            return [
                {**r, "pid": w.pid, "nvml_pid": w.nvml_pid, "mps": w.mps_thread_percent}
                for r, w in zip(reports, workers, strict=True)
                if r
            ], window
        finally:
            for w in workers:
                w.close()

    def _solo(self, spec: JobSpec) -> dict[str, Any]:
        from horus.predictor.zoo import profile_zoo

        profile = profile_zoo(spec.zoo, spec.batch_size, amp=spec.amp)
        [rep], window = self._run([spec], "solo")
        pid = rep["nvml_pid"]
        memory, source = window.mem_of(pid), "process"
        if memory is None and window.gpu_mem_peak is not None and window.idle_mem is not None:
            # NVML could not name the worker's process: the GPU's use above its idle level
            memory, source = window.gpu_mem_peak - window.idle_mem, "device"
        return {
            "features": dict(profile.features),
            "family": profile.family,
            "steps_per_s": rep["steps"] / rep["seconds"],
            "steps": rep["steps"],
            "seconds": rep["seconds"],
            "util": window.util(),
            "proc_util": window.util_of(pid),
            "memory_mib": memory,
            "memory_source": source if memory is not None else None,
            "torch_peak_mib": rep["torch_peak_mib"],
            "mps_thread_percent": rep["mps"],
        }

    def _pair(self, a: JobSpec, b: JobSpec) -> dict[str, Any]:
        (ra, rb), window = self._run([a, b], "pair")
        solo = self.results["solo"]
        out: dict[str, Any] = {"util": window.util()}
        # as the agent reads a pod in a pair: its share of the GPU's busy time
        procs = [window.util_of(r["nvml_pid"]) for r in (ra, rb)]
        scale = busy_share_scale(sum(u or 0.0 for u in procs), window.util())
        for (side, spec, rep), raw in zip((("a", a, ra), ("b", b, rb)), procs, strict=True):
            alone = solo[spec.key]
            rate = rep["steps"] / rep["seconds"]
            u_pair = raw * scale if raw is not None else None
            u_alone = alone.get("proc_util") or alone["util"]
            out[side] = {
                "steps_per_s": rate,
                "speed": rate / alone["steps_per_s"],
                "proc_util": raw,
                "busy_share": u_pair,
                # the agent's estimate: its utilisation next to the neighbour / alone
                "proxy_speed": (u_pair / u_alone) if u_pair is not None and u_alone else None,
                "memory_mib": window.mem_of(rep["nvml_pid"]),
                "mps_thread_percent": rep["mps"],
            }
        return out

    def _todo(self) -> Iterator[tuple[str, str, Callable[[], dict[str, Any]]]]:
        for spec in self.s.jobs:
            yield "solo", spec.key, lambda spec=spec: self._solo(spec)  # type: ignore[misc]
        for a, b in self.s.pairs:
            yield "pairs", pair_key(a, b), lambda a=a, b=b: self._pair(a, b)  # type: ignore[misc]

    def run(self, progress: Callable[[str], None] = print) -> dict[str, int]:
        """Measure what is not in ``measure.json`` yet; returns counts (done/skipped/failed/left)."""
        self.s.out_dir.mkdir(parents=True, exist_ok=True)
        start = self.clock()
        counts = {"measured": 0, "already": 0, "failed": 0, "left": 0}
        longest = {"solo": 0.0, "pairs": 0.0}
        todo = list(self._todo())
        for n, (kind, key, measure) in enumerate(todo, start=1):
            if key in self.results[kind] or key in self.results["failed"]:
                counts["already"] += 1
                continue
            if kind == "pairs" and any(k not in self.results["solo"] for k in key.split("|")):
                progress(f"[{n}/{len(todo)}] {key}: skipped, a job's solo run is missing")
                counts["left"] += 1
                continue
            guess = longest[kind] or (self.s.window_s + 60.0)
            if self.s.time_budget_s and self.clock() - start + guess > self.s.time_budget_s:
                counts["left"] = sum(
                    1
                    for k2, key2, _ in todo[n - 1 :]
                    if key2 not in self.results[k2] and key2 not in self.results["failed"]
                )
                progress(f"time budget reached; {counts['left']} left: run again to go on")
                break
            t0 = self.clock()
            try:
                self.results[kind][key] = measure()
                counts["measured"] += 1
                progress(f"[{n}/{len(todo)}] {key}: {_describe(kind, self.results[kind][key])}")
            except WorkerFailed as exc:
                self.results["failed"][key] = str(exc)
                counts["failed"] += 1
                progress(f"[{n}/{len(todo)}] {key}: FAILED {exc}")
            longest[kind] = max(longest[kind], self.clock() - t0)
            save_results(self.results_path, self.results)
            write_rows(self.results, self.s.out_dir)
        return counts


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _describe(kind: str, r: Mapping[str, Any]) -> str:
    if kind == "solo":
        return (
            f"{r['steps_per_s']:.2f} steps/s, util {_fmt(r['util'], '.0f')} %, "
            f"memory {_fmt(r['memory_mib'], '.0f')} MiB"
        )
    a, b = r["a"], r["b"]
    return (
        f"speeds {a['speed']:.3f} / {b['speed']:.3f} "
        f"(agent's estimate {_fmt(a['proxy_speed'], '.3f')} / {_fmt(b['proxy_speed'], '.3f')})"
    )
