"""``horus predictor measure``: run zoo models on this machine's GPU, alone and in pairs, and
write what they really used as training rows for the predictor.

Why: the shipped pair model learned from K80/P100/V100 pairs (Gavel) and is pessimistic and
poorly ranked on newer GPUs (``docs/predictor.md``); the only redistributable cure is pair
speeds measured on current GPUs. The sharing agent collects such rows from a cluster's own
pods; this harness collects them on one GPU machine without Kubernetes, and in the same run
checks the agent's pair-speed estimate (utilisation in the pair ÷ utilisation alone) against
true step rates, which the agent itself cannot see.

For every job (zoo model, batch size, AMP) it runs the training step of
:mod:`horus.predictor.workload` alone for a window and records steps/s, the GPU's utilisation
and the process's peak GPU memory (NVML, as the agent reads them); for every pair it runs both
jobs at once, as two processes on the same GPU, starting their windows together, and records
each job's speed (steps/s in the pair ÷ steps/s alone) beside the agent's utilisation-ratio
estimate of it. Results go to ``measure.json`` after every measurement, so a run that is
stopped (``--time-budget``, a killed session) resumes where it left off; ``training-rows.csv``
and ``pair-rows.csv`` are rewritten from it, in the columns ``horus predictor train
--extra-rows`` / ``--extra-pair-rows`` read. With ``--device cpu`` (no GPU) it is a dry run:
step rates and speeds go to ``measure.json``, and no rows are written, since nothing was
measured on a GPU.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from horus.common.constants import BACKEND_NVML, ENV_MPS_ACTIVE_THREAD_PERCENTAGE, MIB
from horus.common.errors import ValidationError
from horus.common.nvml import gpu_processes, process_sm_util
from horus.predictor.dataset import PAIR_ROW_COLUMNS, TRAINING_ROW_COLUMNS
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import FEATURE_NAMES
from horus.predictor.workload import WorkerJob

RESULTS_FILE = "measure.json"
TRAINING_ROWS_FILE = "training-rows.csv"
PAIR_ROWS_FILE = "pair-rows.csv"
RESULTS_FORMAT = "horus-measure/v1"
SHARING_TIME_SLICING, SHARING_MPS = "time-slicing", "mps"
SHARING_MODES = (SHARING_TIME_SLICING, SHARING_MPS)
MAX_WINDOW_S = 600.0
MAX_WARMUP_STEPS = 10_000
SAMPLE_INTERVAL_S = 0.2
TRAINING_PROVENANCE = [
    "backend",
    "sharing",
    "model",
    "family",
    "job",
    "steps_per_s",
    "torch_peak_mib",
]
PAIR_PROVENANCE = ["backend", "sharing", "model", "other_model", "job", "other", "proxy_speed"]


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class JobSpec:
    """One job configuration: zoo model, batch size, AMP."""

    zoo: str
    batch_size: int
    amp: bool = False

    @property
    def key(self) -> str:
        return f"{self.zoo}:{self.batch_size}" + ("+amp" if self.amp else "")


def parse_job(text: str) -> JobSpec:
    """``resnet50:64`` or ``bert-base:8+amp`` → :class:`JobSpec` (the zoo name is checked)."""
    from horus.predictor.zoo import zoo_entry

    spec = text.strip()
    amp = spec.endswith("+amp")
    spec = spec.removesuffix("+amp")
    name, sep, batch = spec.partition(":")
    if not sep or not name:
        raise ValidationError(
            f"job {text!r} must look like ZOO:BATCH or ZOO:BATCH+amp (e.g. resnet50:64, "
            "bert-base:8+amp); 'horus profile --list-zoo' lists the zoo"
        )
    try:
        size = int(batch)
    except ValueError:
        raise ValidationError(f"job {text!r}: batch size {batch!r} is not an integer") from None
    if size < 1:
        raise ValidationError(f"job {text!r}: batch size must be positive, got {size}")
    return JobSpec(zoo_entry(name).name, size, amp)


def parse_jobs(items: Sequence[str]) -> list[JobSpec]:
    """Jobs from ``--jobs`` items: ``ZOO:BATCH[+amp]``, or ``lucid`` / ``gavel`` for every
    configuration that data set measured (their zoo stand-ins); duplicates are dropped."""
    from horus.predictor.catalog import measured_job_types

    out: list[JobSpec] = []
    for item in items:
        for part in (p for p in item.split(",") if p.strip()):
            if part.strip() in ("lucid", "gavel"):
                out += [
                    JobSpec(jt.zoo, jt.batch_size, jt.amp)
                    for jt in measured_job_types(part.strip())
                ]
            else:
                out.append(parse_job(part))
    unique = list(dict.fromkeys(out))
    if not unique:
        raise ValidationError("no jobs: give --jobs ZOO:BATCH[+amp],… (or lucid / gavel)")
    return unique


def pairs_of(jobs: Sequence[JobSpec], mode: str, seed: int = 0) -> list[tuple[JobSpec, JobSpec]]:
    """The pairs to measure: ``all`` (every unordered pair, a job with a copy of itself
    included), ``none``, or ``sample:N`` (N of those, drawn with ``seed``)."""
    every = list(itertools.combinations_with_replacement(jobs, 2))
    if mode == "all":
        return every
    if mode == "none":
        return []
    if mode.startswith("sample:"):
        try:
            n = int(mode.partition(":")[2])
        except ValueError:
            n = -1
        if n < 1:
            raise ValidationError(f"--pairs {mode!r}: sample:N needs a positive N")
        return sorted(random.Random(seed).sample(every, min(n, len(every))), key=every.index)
    raise ValidationError(f"--pairs {mode!r}: use all, none or sample:N")


# --------------------------------------------------------------------------- GPU readings


@dataclass(frozen=True)
class Reading:
    """One look at the GPU: device utilisation (percent, None when unknown), and per process
    its SM utilisation (percent) and GPU memory (MiB), where the driver reports them."""

    gpu_util: float | None
    proc_util: Mapping[int, float] = field(default_factory=dict)
    proc_mem_mib: Mapping[int, float] = field(default_factory=dict)
    gpu_mem_mib: float | None = None  # memory used on the whole GPU


class GpuSampler(Protocol):
    """What the harness needs from the GPU; :class:`NvmlSampler` on a real one."""

    @property
    def backend(self) -> str: ...

    @property
    def gpu_name(self) -> str | None:
        """The GPU's model name, or None when there is no GPU (a dry run)."""
        ...

    def read(self, pids: Sequence[int]) -> Reading:
        """One reading; per-process figures only for ``pids`` (the workers' NVML PIDs)."""
        ...

    def pids(self) -> set[int]:
        """The PIDs of the compute processes on the GPU, as the driver reports them."""
        ...


class NoGpuSampler:
    """``--device cpu``: nothing to read."""

    backend = "none"
    gpu_name: str | None = None

    def read(self, pids: Sequence[int]) -> Reading:
        return Reading(None)

    def pids(self) -> set[int]:
        return set()


class NvmlSampler:
    """Reads GPU ``index`` through NVML (``nvidia-ml-py``) with the agent's process readers
    (``horus.common.nvml``): device utilisation, per-process memory (compute processes and MPS
    clients) and per-process SM utilisation (where the driver supports it)."""

    backend = BACKEND_NVML

    def __init__(self, index: int, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                raise ValidationError(
                    "measuring on a GPU needs nvidia-ml-py (pip install nvidia-ml-py)"
                ) from None
            nvml = pynvml
            try:
                nvml.nvmlInit()
            except Exception as exc:
                raise ValidationError(
                    f"NVML did not initialise ({exc}); is the NVIDIA driver installed? "
                    "Use --device cpu for a dry run without a GPU"
                ) from None
        self._nvml = nvml
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            raise ValidationError(f"NVML has no GPU {index}: {exc}") from None
        name = nvml.nvmlDeviceGetName(self._handle)
        self._name = name.decode() if isinstance(name, bytes) else str(name)
        self._last_seen = 0

    @property
    def gpu_name(self) -> str | None:
        return self._name

    def pids(self) -> set[int]:
        """The compute processes; once MPS clients are listed, only those: the MPS server that
        starts with the first client is never a worker, and would make its match ambiguous."""
        procs = gpu_processes(self._nvml, self._handle)
        return {p.pid for p in procs if p.mps_client} or {p.pid for p in procs}

    def read(self, pids: Sequence[int]) -> Reading:
        nv, h = self._nvml, self._handle
        wanted = set(pids)
        gpu_util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        gpu_mem: float | None = None
        with contextlib.suppress(Exception):
            gpu_mem = float(nv.nvmlDeviceGetMemoryInfo(h).used) / MIB
        mem = {
            p.pid: p.used_bytes / MIB
            for p in gpu_processes(nv, h)
            if p.used_bytes is not None and p.pid in wanted
        }
        util: dict[int, list[float]] = {}
        with contextlib.suppress(Exception):  # unsupported, or no sample since the last call
            samples, self._last_seen = process_sm_util(nv, h, self._last_seen)
            for pid, sm_util in samples:
                if pid in wanted:
                    util.setdefault(pid, []).append(sm_util)
        return Reading(gpu_util, {p: sum(v) / len(v) for p, v in util.items()}, mem, gpu_mem)


@dataclass
class _Window:
    """Readings taken while the workers' windows ran, summarised."""

    gpu_util: list[float] = field(default_factory=list)
    proc_util: dict[int, list[float]] = field(default_factory=dict)
    mem_peak: dict[int, float] = field(default_factory=dict)
    gpu_mem_peak: float | None = None
    idle_mem: float | None = None  # GPU memory used before the workers started

    def add(self, r: Reading) -> None:
        if r.gpu_util is not None:
            self.gpu_util.append(r.gpu_util)
        if r.gpu_mem_mib is not None:
            self.gpu_mem_peak = max(self.gpu_mem_peak or 0.0, r.gpu_mem_mib)
        for pid, u in r.proc_util.items():
            self.proc_util.setdefault(pid, []).append(u)
        for pid, m in r.proc_mem_mib.items():
            self.mem_peak[pid] = max(self.mem_peak.get(pid, 0.0), m)

    def util(self) -> float | None:
        return sum(self.gpu_util) / len(self.gpu_util) if self.gpu_util else None

    def util_of(self, pid: int | None) -> float | None:
        v = self.proc_util.get(pid) if pid is not None else None
        return sum(v) / len(v) if v else None

    def mem_of(self, pid: int | None) -> float | None:
        return self.mem_peak.get(pid) if pid is not None else None


# --------------------------------------------------------------------------- workers


class WorkerFailed(Exception):
    """A worker died or did not answer; the message carries the end of its stderr."""


class _Worker:
    def __init__(self, job: WorkerJob, log_path: Path, env: Mapping[str, str]) -> None:
        self.job = job
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "horus.predictor.workload", job.to_json()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=dict(env),
            start_new_session=True,
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        self.pid = 0
        self.nvml_pid: int | None = None  # the PID the driver reports (see Measurer._start)
        self.mps_thread_percent: str | None = None  # as the worker saw it in its environment

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            with contextlib.suppress(ValueError):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def _tail(self) -> str:
        self._log.flush()
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text().strip().splitlines()
            if lines:
                return " | ".join(lines[-3:])
        return "no output"

    def expect(self, key: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerFailed(
                    f"{self.job.zoo}:{self.job.batch_size} gave no {key!r} within {timeout:.0f} s "
                    f"(log {self.log_path}: {self._tail()})"
                ) from None
            if msg is None:
                code = self.proc.wait()
                raise WorkerFailed(
                    f"{self.job.zoo}:{self.job.batch_size} exited with status {code} before "
                    f"{key!r} ({self._tail()})"
                )
            if key in msg:
                return msg

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        self.send("stop")
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self._log.close()


# --------------------------------------------------------------------------- the harness


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


def mps_daemon_answers(binary: str = "nvidia-cuda-mps-control") -> bool | None:
    """Whether an MPS control daemon answers ``get_server_list`` (through the
    ``CUDA_MPS_PIPE_DIRECTORY`` of this process, which the workers inherit); None when the
    binary is not on PATH."""
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        rc = subprocess.run(
            [path], input="get_server_list\n", capture_output=True, text=True, timeout=10
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return False
    return rc == 0


def check_mps_daemon(sharing: str, binary: str = "nvidia-cuda-mps-control") -> None:
    """Refuse a sharing mode the machine's MPS state contradicts, before anything runs.

    ``--sharing mps`` needs a daemon: the workers run as its clients, as Horus pods do. Plain
    time-slicing needs there to be *none*: while a control daemon runs, every CUDA process that
    can reach it becomes its client on its own, so the rows would be MPS measurements filed as
    time-slicing."""
    answers = mps_daemon_answers(binary)
    if sharing == SHARING_MPS and answers is None:
        raise ValidationError(
            f"--sharing mps needs {binary} on PATH (the NVIDIA driver's MPS tools)"
        )
    if sharing == SHARING_MPS and not answers:
        raise ValidationError(
            "--sharing mps: no MPS control daemon answers; start one first "
            f"({binary} -d, with the same CUDA_MPS_PIPE_DIRECTORY as this shell)"
        )
    if sharing == SHARING_TIME_SLICING and answers:
        raise ValidationError(
            "an MPS control daemon is running, so every worker would become its client and "
            "the rows would be MPS measurements filed as time-slicing; stop it "
            f"(echo quit | {binary}) or measure with --sharing mps"
        )


def gpu_index(device: str) -> int:
    """The NVML index of ``--device`` (cuda → 0, cuda:N → N)."""
    return int(device[5:]) if device.startswith("cuda:") else 0


#: Largest measure.json read (a full zoo with every pair is a few MB).
MAX_RESULTS_BYTES = 256 << 20


def load_results(path: Path) -> dict[str, Any]:
    """``measure.json`` of an earlier run (to resume), or a fresh one."""
    if not path.exists():
        return {"format": RESULTS_FORMAT, "solo": {}, "pairs": {}, "failed": {}}
    from horus.common.documents import load_json, read_text_file

    try:  # bounded (size, UTF-8, nesting): the folder may be anyone's
        data = load_json(
            read_text_file(path, max_bytes=MAX_RESULTS_BYTES),
            str(path),
            max_bytes=MAX_RESULTS_BYTES,
        )
    except ValidationError as exc:
        raise ValidationError(
            f"{path} is not a measure.json this tool wrote ({exc}); move it away to start over"
        ) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ValidationError(
            f"{path}: format is {data.get('format') if isinstance(data, dict) else None!r}, "
            f"expected {RESULTS_FORMAT!r}; move it away to start over"
        )
    for section in ("solo", "pairs", "failed"):
        entries = data.setdefault(section, {})
        objects = section != "failed"  # failed: job (or pair) -> its error text
        if not isinstance(entries, dict) or (
            objects and not all(isinstance(v, dict) for v in entries.values())
        ):
            raise ValidationError(
                f"{path}: '{section}' must map each job (or pair) to an object; this file was "
                "not written by 'horus predictor measure' (or was edited): move it away"
            )
    return data


def _save(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def pair_key(a: JobSpec, b: JobSpec) -> str:
    return f"{a.key}|{b.key}"


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

    def _start(self, workers: list[_Worker], spec: JobSpec, log_path: Path) -> None:
        """Start one worker and wait until it is ready, then learn the PID NVML reports for it.

        In a container NVML reports host PIDs, which the worker's own PID is not; so workers
        start one at a time, and a worker whose PID NVML does not list is the one compute
        process that appeared on the GPU since the previous worker was ready (none or several:
        unknown, and its per-process figures stay empty)."""
        before = self.sampler.pids()
        w = _Worker(self._job(spec), log_path, self.env)
        workers.append(w)
        ready = w.expect("ready", self.s.startup_timeout_s)
        w.pid, w.mps_thread_percent = int(ready["ready"]), ready.get("mps_thread_percent")
        now = self.sampler.pids()
        if w.pid in now:
            w.nvml_pid = w.pid
        else:
            new = now - before - {x.nvml_pid for x in workers}
            w.nvml_pid = new.pop() if len(new) == 1 else None

    def _run(self, specs: Sequence[JobSpec], tag: str) -> tuple[list[dict[str, Any]], _Window]:
        """Start one worker per spec, run their windows together, return reports + readings."""
        logs = self.s.out_dir / "logs"
        name = "__".join(sp.key for sp in specs).replace(":", "_").replace("+", "_")
        workers: list[_Worker] = []
        try:
            idle = self.sampler.read([]).gpu_mem_mib
            for i, sp in enumerate(specs):
                self._start(workers, sp, logs / f"{tag}-{name}-{i}.log")
            pids = [w.nvml_pid for w in workers if w.nvml_pid is not None]
            self.sampler.read(pids)  # discard what came before the window
            window = _Window(idle_mem=idle)
            for w in workers:
                w.send(f"go {self.s.window_s}")
            reports: list[dict[str, Any] | None] = [None] * len(workers)
            box: queue.Queue[tuple[int, dict[str, Any] | WorkerFailed]] = queue.Queue()

            def wait(i: int, w: _Worker) -> None:
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
        for side, spec, rep in (("a", a, ra), ("b", b, rb)):
            alone = solo[spec.key]
            rate = rep["steps"] / rep["seconds"]
            u_pair = window.util_of(rep["nvml_pid"])
            u_alone = alone.get("proc_util") or alone["util"]
            out[side] = {
                "steps_per_s": rate,
                "speed": rate / alone["steps_per_s"],
                "proc_util": u_pair,
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
            _save(self.results_path, self.results)
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


# --------------------------------------------------------------------------- rows


def write_rows(results: Mapping[str, Any], out_dir: Path) -> tuple[int, int]:
    """Rewrite ``training-rows.csv`` and ``pair-rows.csv`` from ``results``; (rows, pair rows).

    Nothing is written without a GPU (a dry run) or for readings NVML did not give."""
    gpu = results.get("gpu")
    if not gpu:
        return 0, 0
    from horus.predictor.gpus import gpu_spec

    gpu_spec(gpu)  # an unknown GPU is an error here, not when training reads the rows

    def profile(key: str) -> GraphProfile:
        return solo_profile(key, results["solo"][key])

    backend = results.get("backend", "")
    sharing = results.get("sharing", SHARING_TIME_SLICING)
    rows = []
    for key, r in sorted(results["solo"].items()):
        if r.get("util") is None or r.get("memory_mib") is None:
            continue
        p = profile(key)
        row: dict[str, Any] = {"gpu": gpu, "util": round(r["util"], 3)}
        row["memory_mib"] = round(r["memory_mib"], 1)
        row.update({k: p.features[k] for k in FEATURE_NAMES})
        row.update(
            backend=backend,
            sharing=sharing,
            model=p.model,
            family=p.family,
            job=key,
            steps_per_s=round(r["steps_per_s"], 4),
            torch_peak_mib=round(r["torch_peak_mib"], 1),
        )
        rows.append(row)
    pair_rows = []
    for key, r in sorted(results["pairs"].items()):
        ka, kb = key.split("|")
        # both orders are rows; a job next to a copy of itself gives two measurements too
        for (me, other), side in (((ka, kb), "a"), ((kb, ka), "b")):
            pa, pb = profile(me), profile(other)
            speed = r[side]["speed"]
            row = {"gpu": gpu, "speed": round(min(speed, 2.0), 4)}
            row.update({f"a_{k}": pa.features[k] for k in FEATURE_NAMES})
            row.update({f"b_{k}": pb.features[k] for k in FEATURE_NAMES})
            proxy = r[side]["proxy_speed"]
            row.update(
                backend=backend,
                sharing=sharing,
                model=pa.model,
                other_model=pb.model,
                job=me,
                other=other,
                proxy_speed="" if proxy is None else round(proxy, 4),
            )
            pair_rows.append(row)
    _write_csv(out_dir / TRAINING_ROWS_FILE, [*TRAINING_ROW_COLUMNS, *TRAINING_PROVENANCE], rows)
    _write_csv(out_dir / PAIR_ROWS_FILE, [*PAIR_ROW_COLUMNS, *PAIR_PROVENANCE], pair_rows)
    return len(rows), len(pair_rows)


def solo_profile(key: str, entry: Mapping[str, Any]) -> GraphProfile:
    """The graph profile a solo entry of ``measure.json`` stores (what the extractor said about
    the job when it was measured), so rows and the simulator need no torch later."""
    j = parse_job(key)
    try:
        features = {k: float(entry["features"][k]) for k in FEATURE_NAMES}
        bad = [k for k, v in features.items() if not (math.isfinite(v) and v >= 0)]
        if bad:
            raise ValueError(f"{', '.join(bad)} not a finite number >= 0")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(
            f"{RESULTS_FILE}: solo entry {key!r} has no complete 'features' ({exc}); "
            "measure it again (move the entry away)"
        ) from None
    return GraphProfile(j.zoo, j.batch_size, features, str(entry.get("family", j.zoo)))


def _write_csv(path: Path, columns: list[str], rows: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def proxy_summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """How far the agent's utilisation-ratio estimate is from the true pair speeds."""
    errs = [
        (s["proxy_speed"] - s["speed"])
        for r in results["pairs"].values()
        for s in (r["a"], r["b"])
        if s.get("proxy_speed") is not None
    ]
    if not errs:
        return {"pairs_with_estimate": 0}
    return {
        "pairs_with_estimate": len(errs),
        "estimate_bias": sum(errs) / len(errs),
        "estimate_mae": sum(abs(e) for e in errs) / len(errs),
    }
