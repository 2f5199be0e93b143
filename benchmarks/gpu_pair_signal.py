"""Two real trainings on one real GPU: what the agent's NVML reading says vs what the jobs did.

Issue 26 asks, where a GPU is lent, for two checks no simulated GPU can make:

* **NVML summing vs averaging.** ``nvmlDeviceGetProcessUtilization`` returns every per-process
  sample newer than the timestamp asked for — several per process in one agent cycle. The agent
  as of issue 24 *summed* them (``util += sm_util / 100``), the measuring harness averages them.
  This script records every raw sample and aggregates each agent-length cycle both ways.
* **Progress vs utilisation.** Each training process reports its own progress (steps, samples,
  its monotonic time) to a file, as ``horus.progress`` asks jobs to. The true pair speed of a job
  is its step rate beside the neighbour over its step rate alone; the utilisation signal is its
  NVML utilisation beside the neighbour over alone (``horus.agent.feedback``'s estimate).

Both under time-slicing (the default compute mode: two CUDA contexts take turns) and under MPS
(one server, kernels of both clients run at once), and under MPS with each client limited to half
the SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50``, what Horus's ``enforcement: mps`` sets for a
50 % share).

Three job kinds, all real PyTorch training steps (forward, backward, optimizer step):

* ``big``   a transformer encoder in bf16 autocast — keeps the SMs busy;
* ``small`` a small MLP at batch 64 — short kernels, launch-bound;
* ``io``    a ResNet-18 step followed by a host-side pause as long as the step (an input pipeline
            that keeps the GPU idle half of the time).

Run on a machine with a GPU, PyTorch and nvidia-ml-py (the device tool's machine has them)::

    python3 benchmarks/gpu_pair_signal.py --out benchmarks/results/gpu-pair-signal.json

``--chain`` runs the agent's own code on the GPU instead: the jobs report through
``horus.progress.ProgressReporter``; every cycle ``horus.progress.reader.read_progress`` and
``horus.agent.progress.ProgressSpeeds`` read them (given the context the agent takes from its pod
list) and NVML is read through ``horus.common.nvml.process_util_samples``/``mean_sm_util``; it
prints each pair's progress reading (± its error) and utilisation ratio beside the true speed
(``results/gpu-pair-signal-chain.json``)::

    python3 benchmarks/gpu_pair_signal.py --chain --cycle 3 --solo-seconds 15 \
        --pair-seconds 18 --modes timeslice,mps

On a machine without a GPU it says so and exits 2 (nothing to measure); ``--rescore FILE``
re-analyses a results file anywhere. ``HORUS_BENCH_DEVICE=cpu`` with a stand-in ``pynvml`` on
``PYTHONPATH`` dry-runs the harness (tiny models, meaningless figures). Figures go to
docs/agent.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

#: job name → its kind; ``big2`` is a second copy of ``big`` for a self-pair, whose two rates
#: should be equal: their difference is the noise of a progress reading.
JOBS = {"big": "big", "small": "small", "io": "io", "big2": "big"}
SOLO = ("big", "small", "io")  # big2's solo rate is big's (same model, same GPU)
PAIRS = (("big", "small"), ("big", "io"), ("small", "io"), ("big", "big2"))

# --------------------------------------------------------------------------- the training job


def job_main(kind: str, control: Path, progress: Path) -> None:
    """One training process: runs steps while ``control`` reads 'run', idles on 'pause', ends on
    'stop'; writes ``steps samples monotonic_seconds`` to ``progress`` (atomic replace) every
    ~0.2 s."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device(
        os.environ.get("HORUS_BENCH_DEVICE", "cuda")
    )  # cpu: a dry run of the harness
    tiny = dev.type == "cpu"  # the dry run only checks the harness: small models
    if kind == "big":
        d = 64 if tiny else 1024
        layer = nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True)
        model: nn.Module = nn.TransformerEncoder(layer, 1 if tiny else 6).to(dev)
        batch = 16
        x = torch.randn(batch, 16 if tiny else 512, d, device=dev)

        def loss_fn() -> Any:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(x).float().pow(2).mean()

    elif kind == "small":
        model = nn.Sequential(
            nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
        ).to(dev)
        batch = 64
        x = torch.randn(batch, 512, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)

        def loss_fn() -> Any:
            return nn.functional.cross_entropy(model(x), y)

    else:
        import torchvision

        model = torchvision.models.resnet18(num_classes=100).to(dev)
        batch = 64
        x = torch.randn(batch, 3, 16 if tiny else 112, 16 if tiny else 112, device=dev)
        y = torch.randint(0, 100, (batch,), device=dev)

        def loss_fn() -> Any:
            return nn.functional.cross_entropy(model(x), y)

    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    reporter = None
    if os.environ.get("HORUS_PROGRESS_DIR"):  # --chain: the job reports as Horus asks jobs to
        from horus.progress.report import ProgressReporter

        reporter = ProgressReporter(min_interval=1.0)
    steps = 0
    last_write = 0.0
    pause_s = 0.0

    def write() -> None:
        tmp = progress.with_suffix(".tmp")
        tmp.write_text(f"{steps} {steps * batch} {time.monotonic():.6f}\n")
        os.replace(tmp, progress)

    # warm-up (cuDNN autotune, allocator) and, for 'io', the pause as long as one solo step
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    if kind == "io":
        t0 = time.monotonic()
        for _ in range(20):
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
        sync()
        pause_s = (time.monotonic() - t0) / 20
    write()
    state = "pause"
    next_check = 0.0
    while True:
        now = time.monotonic()
        if now >= next_check:
            with contextlib.suppress(OSError):
                state = control.read_text().strip() or state
            next_check = now + 0.05
        if state == "stop":
            break
        if state != "run":
            time.sleep(0.02)
            continue
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        loss.item()  # a training loop's logging sync: the step is done when this returns
        steps += 1
        if reporter is not None:
            reporter.step(samples=batch)
        if pause_s:
            time.sleep(pause_s)
        if time.monotonic() - last_write > 0.2:
            write()
            last_write = time.monotonic()
    write()


# --------------------------------------------------------------------------- NVML sampling


@dataclass
class Sampler:
    """Reads per-process SM utilisation like the agent (``horus.common.nvml.process_sm_util``)
    every ``cycle`` seconds, keeping every raw sample."""

    nv: Any
    handle: Any
    cycle: float
    raw: list[tuple[float, int, float, int]] = field(default_factory=list)  # t, pid, sm, driver ts
    cycles: list[tuple[float, dict[int, list[float]]]] = field(default_factory=list)
    device_util: list[tuple[float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _since: int = 0

    def _read(self) -> list[Any]:
        """Every per-process sample newer than the last one read (what
        ``horus.common.nvml.process_sm_util`` reads), kept raw with the driver's timestamps."""
        samples = list(self.nv.nvmlDeviceGetProcessUtilization(self.handle, self._since))
        for smp in samples:
            self._since = max(self._since, int(smp.timeStamp))
        return samples

    def start(self) -> threading.Thread:
        # start from "now": older samples belong to nothing measured here
        with contextlib.suppress(Exception):
            self._read()

        def loop() -> None:
            while not self._stop.wait(self.cycle):
                t = time.monotonic()
                try:
                    rates = self.nv.nvmlDeviceGetUtilizationRates(self.handle)
                    self.device_util.append((t, float(rates.gpu)))
                except Exception as exc:
                    self.errors.append(f"device util: {exc}")
                per_pid: dict[int, list[float]] = {}
                try:
                    for smp in self._read():
                        pid, sm = int(smp.pid), float(smp.smUtil)
                        per_pid.setdefault(pid, []).append(sm)
                        self.raw.append((t, pid, sm, int(smp.timeStamp)))
                except Exception as exc:  # NOT_FOUND: no sample newer than since
                    self.errors.append(f"process util: {type(exc).__name__}: {exc}")
                self.cycles.append((t, per_pid))

        th = threading.Thread(target=loop, daemon=True)
        th.start()
        return th

    def stop(self) -> None:
        self._stop.set()


def aggregate(
    cycles: list[tuple[float, dict[int, list[float]]]], pid: int, t0: float, t1: float
) -> dict[str, Any]:
    """A process's utilisation over the cycles that ended in [t0, t1], both ways: the agent's
    old sum of every sample in a cycle (clipped at 1.0 as a share can be no more), and the mean."""
    sums, means, counts = [], [], []
    for t, per_pid in cycles:
        if not (t0 < t <= t1):
            continue
        vals = per_pid.get(pid, [])
        counts.append(len(vals))
        sums.append(min(1.0, sum(v / 100.0 for v in vals)))
        means.append(sum(vals) / len(vals) / 100.0 if vals else 0.0)
    seen = sum(counts) > 0  # none at all: NVML does not attribute this process (MPS client)
    return {
        "cycles": len(counts),
        "samples_per_cycle": statistics.mean(counts) if counts else 0.0,
        "util_sum": statistics.mean(sums) if sums and seen else None,
        "util_mean": statistics.mean(means) if means and seen else None,
    }


def rescore(modes: list[dict[str, Any]]) -> None:
    """Scores every pair again from the stored solo and shared readings (``--rescore``: the
    analysis can change without another GPU run). A process NVML gave no sample for has no
    utilisation reading (not 0)."""
    for m in modes:
        for reading in [*m.get("solo", {}).values()] + [
            r[k] for p in m.get("pairs", []) for r in p["jobs"].values() for k in ("solo", "shared")
        ]:
            if not reading.get("samples_per_cycle"):
                reading["util_sum"] = reading["util_mean"] = None
        for p in m.get("pairs", []):
            a, b = p["pair"].split("+")
            shared = {k: r["shared"] for k, r in p["jobs"].items()}
            p.update(score_pair({k: r["solo"] for k, r in p["jobs"].items()}, shared, a, b))


# --------------------------------------------------------------------------- the experiment


@dataclass
class Job:
    kind: str
    proc: subprocess.Popen[bytes]
    control: Path
    progress: Path

    def set(self, state: str) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(state)
        os.replace(tmp, self.control)

    def read(self) -> tuple[int, float]:
        for _ in range(20):
            with contextlib.suppress(OSError, ValueError, IndexError):
                steps, _samples, t = self.progress.read_text().split()
                return int(steps), float(t)
            time.sleep(0.01)
        raise RuntimeError(f"{self.kind}: no progress file")


def start_jobs(
    work: Path, env: dict[str, str], label: str, names: tuple[str, ...] = tuple(JOBS)
) -> dict[str, Job]:
    jobs = {}
    for name in names:
        kind = JOBS[name]
        control, progress = work / f"{label}-{name}.ctl", work / f"{label}-{name}.progress"
        control.write_text("pause")
        job_env = dict(env)
        if env.get("HORUS_PROGRESS_DIR"):
            job_env["HORUS_PROGRESS_DIR"] = str(work / f"{label}-{name}.d")
            Path(job_env["HORUS_PROGRESS_DIR"]).mkdir()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--job", kind, str(control), str(progress)], env=job_env
        )
        jobs[name] = Job(name, proc, control, progress)
    deadline = time.monotonic() + 180
    while not all(j.progress.exists() for j in jobs.values()):
        if time.monotonic() > deadline or any(j.proc.poll() is not None for j in jobs.values()):
            raise RuntimeError(
                f"{label}: a job did not start: {[j.proc.poll() for j in jobs.values()]}"
            )
        time.sleep(0.2)
    return jobs


def stop_jobs(jobs: dict[str, Job]) -> None:
    for j in jobs.values():
        j.set("stop")
    for j in jobs.values():
        try:
            j.proc.wait(30)
        except subprocess.TimeoutExpired:
            j.proc.kill()


def run_phase(
    jobs: dict[str, Job], kinds: tuple[str, ...], seconds: float, ramp: float, sampler: Sampler
) -> dict[str, Any]:
    """Runs ``kinds`` together; returns each job's step rate (from its own progress) and NVML
    readings over [ramp, seconds]."""
    running = [jobs[k] for k in dict.fromkeys(kinds)]
    for j in running:
        j.set("run")
    time.sleep(ramp)
    start = {j.kind: j.read() for j in running}
    t0 = time.monotonic()
    time.sleep(seconds - ramp)
    end = {j.kind: j.read() for j in running}
    t1 = time.monotonic()
    for j in running:
        j.set("pause")
    time.sleep(0.5)
    out: dict[str, Any] = {}
    for j in running:
        (s0, m0), (s1, m1) = start[j.kind], end[j.kind]
        rate = (s1 - s0) / (m1 - m0) if m1 > m0 else 0.0
        out[j.kind] = {
            "steps": s1 - s0,
            "rate": rate,
            **aggregate(sampler.cycles, j.proc.pid, t0, t1),
        }
    return out


def run_chain_mode(
    mode: str,
    work: Path,
    nv: Any,
    handle: Any,
    gpu: str,
    cycle: float,
    solo_s: float,
    pair_s: float,
) -> dict[str, Any]:
    """The agent's own code on a real GPU: jobs report through ``horus.progress``; every
    ``cycle`` the agent's reader and ``horus.agent.progress.ProgressSpeeds`` read them (with the
    context the agent takes from its pod list: alone, or next to the one other pod), NVML
    through ``horus.common.nvml.process_util_samples``/``mean_sm_util``. The truth is each job's
    own step counter over the same phases."""
    from horus.agent.progress import Context, ProgressSpeeds
    from horus.common.nvml import mean_sm_util, process_util_samples
    from horus.progress.reader import read_progress

    env = dict(mode_env(mode, work), HORUS_PROGRESS_DIR="1")
    names = ("big", "small", "io")
    speeds = ProgressSpeeds()
    since = 0
    with contextlib.suppress(Exception):
        _, since = process_util_samples(nv, handle, 0)
    result: dict[str, Any] = {"mode": mode, "chain": True}
    with mps_daemon(mode, env):
        jobs = start_jobs(work, env, f"chain-{mode}", names)
        try:

            def phase(run: tuple[str, ...], seconds: float) -> dict[str, Any]:
                nonlocal since
                for n in run:
                    jobs[n].set("run")
                t_start = time.monotonic()
                time.sleep(cycle)  # the ramp: a cycle, as the agent's first read sees it
                for n in run:  # first read of the phase: the window's base
                    speeds.observe(
                        n,
                        read_progress(jobs[n].progress.with_suffix(".d")),
                        None,
                        JOBS[n],
                        time.time(),
                    )
                with contextlib.suppress(Exception):
                    _, since = process_util_samples(nv, handle, since)
                start = {n: jobs[n].read() for n in run}
                utils: dict[str, list[float]] = {n: [] for n in run}
                first: dict[str, float] = {}
                while time.monotonic() - t_start < seconds:
                    time.sleep(cycle)
                    try:
                        smp, since = process_util_samples(nv, handle, since)
                        per_pid = mean_sm_util(smp)
                    except Exception:
                        per_pid = {}
                    for n in run:
                        other = [o for o in run if o != n]
                        ctx = (
                            Context(gpu, 100, other[0], JOBS[other[0]])
                            if other
                            else Context(gpu, 100)
                        )
                        rec = read_progress(jobs[n].progress.with_suffix(".d"))
                        speeds.observe(n, rec, ctx, JOBS[n], time.time())
                        utils[n].append(
                            per_pid.get(jobs[n].proc.pid, 0.0) / 100.0 if per_pid else float("nan")
                        )
                        if other and n not in first and (JOBS[other[0]], gpu) in speeds.speeds(n):
                            first[n] = time.monotonic() - t_start
                end = {n: jobs[n].read() for n in run}
                for n in run:
                    jobs[n].set("pause")
                time.sleep(0.5)
                out = {}
                for n in run:
                    (s0, m0), (s1, m1) = start[n], end[n]
                    u = [x for x in utils[n] if x == x]
                    out[n] = {
                        "rate": (s1 - s0) / (m1 - m0) if m1 > m0 else 0.0,
                        "util": statistics.mean(u) if u else None,
                        "first_reading_s": first.get(n),
                    }
                return out

            solo = {n: phase((n,), solo_s)[n] for n in names}
            pairs = []
            for a, b in (("big", "small"), ("big", "io"), ("small", "io")):
                ph = phase((a, b), pair_s)
                rec: dict[str, Any] = {"pair": f"{a}+{b}", "jobs": {}}
                for me, other in ((a, b), (b, a)):
                    true = ph[me]["rate"] / solo[me]["rate"] if solo[me]["rate"] else None
                    reading = speeds.speeds(me).get((JOBS[other], gpu))
                    u_solo, u_pair = solo[me]["util"], ph[me]["util"]
                    rec["jobs"][me] = {
                        "true_speed": true,
                        "progress_speed": reading.speed if reading else None,
                        "progress_error": reading.error if reading else None,
                        "progress_windows": reading.samples if reading else 0,
                        "first_reading_s": ph[me]["first_reading_s"],
                        "util_ratio": u_pair / u_solo if u_solo and u_pair is not None else None,
                        "solo": solo[me],
                        "shared": ph[me],
                    }
                pairs.append(rec)
            result["pairs"] = pairs
        finally:
            stop_jobs(jobs)
    return result


def summarise_chain(modes: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'mode':9} {'pair':10} {'job':5} {'true':>6} {'progress±err':>14} {'util ratio':>10} {'1st read s':>10}"
    ]
    errs: dict[str, list[float]] = {}
    for m in modes:
        if "error" in m:
            lines.append(f"{m['mode']} failed: {m['error']}")
            continue
        for p in m.get("pairs", []):
            for job, r in p["jobs"].items():
                fr = r["first_reading_s"]
                t, ps, pe, u = (
                    r["true_speed"],
                    r["progress_speed"],
                    r["progress_error"],
                    r["util_ratio"],
                )
                prog = f"{ps:.3f}±{pe:.3f}" if ps is not None else "-"
                lines.append(
                    f"{m['mode']:9} {p['pair']:10} {job:5} {t:6.3f} {prog:>14} "
                    f"{(f'{u:.3f}' if u is not None else '-'):>10} "
                    f"{(f'{fr:.1f}' if fr else '-'):>10}"
                )
                if ps is not None and t is not None:
                    errs.setdefault(f"{m['mode']} progress", []).append(ps - t)
                if u is not None and t is not None:
                    errs.setdefault(f"{m['mode']} utilisation", []).append(u - t)
    for key, es in errs.items():
        lines.append(
            f"{key:22} bias {statistics.mean(es):+.3f}  MAE {statistics.mean(abs(e) for e in es):.3f}  "
            f"max |e| {max(abs(e) for e in es):.3f}  n={len(es)}"
        )
    return lines


def mode_env(mode: str, work: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if mode.startswith("mps"):
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(work / "mps-pipe")
        env["CUDA_MPS_LOG_DIRECTORY"] = str(work / "mps-log")
    if mode == "mps50":
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "50"
    return env


@contextlib.contextmanager
def mps_daemon(mode: str, env: dict[str, str]) -> Iterator[None]:
    """An MPS control daemon for the MPS modes (jobs started inside are its clients)."""
    if not mode.startswith("mps"):
        yield
        return
    mps_control(env, None)
    time.sleep(1)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            mps_control(env, "quit")
        time.sleep(1)


def mps_control(env: dict[str, str], command: str | None) -> str:
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        raise RuntimeError("nvidia-cuda-mps-control not on PATH")
    Path(env["CUDA_MPS_PIPE_DIRECTORY"]).mkdir(parents=True, exist_ok=True)
    Path(env["CUDA_MPS_LOG_DIRECTORY"]).mkdir(parents=True, exist_ok=True)
    if command is None:
        r = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True, timeout=30)
    else:
        r = subprocess.run(
            [exe], input=command + "\n", env=env, capture_output=True, text=True, timeout=30
        )
    if r.returncode != 0:
        raise RuntimeError(f"mps-control {command or '-d'}: rc {r.returncode} {r.stderr.strip()}")
    return r.stdout.strip()


def run_mode(
    mode: str, work: Path, sampler: Sampler, solo_s: float, pair_s: float, ramp: float
) -> dict[str, Any]:
    env = mode_env(mode, work)
    result: dict[str, Any] = {"mode": mode}
    with mps_daemon(mode, env):
        jobs = start_jobs(work, env, mode)
        try:
            result["pids"] = {k: j.proc.pid for k, j in jobs.items()}
            solo = {k: run_phase(jobs, (k,), solo_s, ramp, sampler)[k] for k in SOLO}
            solo["big2"] = solo["big"]
            result["solo"] = solo
            pairs = []
            for a, b in PAIRS:
                phase = run_phase(jobs, (a, b), pair_s, ramp, sampler)
                pairs.append(score_pair(solo, phase, a, b))
            result["pairs"] = pairs
        finally:
            stop_jobs(jobs)
    return result


def score_pair(solo: dict[str, Any], phase: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    out: dict[str, Any] = {"pair": f"{a}+{b}", "jobs": {}}
    for me in (a, b):
        s, p = solo[me], phase[me]
        true = p["rate"] / s["rate"] if s["rate"] else None
        rec = {"true_speed": true, "solo": s, "shared": p}
        for agg in ("util_sum", "util_mean"):
            if s[agg] and p[agg] is not None:
                est = p[agg] / s[agg]
                rec[f"{agg}_ratio"] = est
                rec[f"{agg}_error"] = est - true if true is not None else None
        out["jobs"][me] = rec
    ra, rb = phase[a]["rate"], phase[b]["rate"]
    if JOBS[a] == JOBS[b] and ra + rb > 0:  # a self-pair: both should run at one speed
        out["self_pair_rel_diff"] = abs(ra - rb) / ((ra + rb) / 2)
    return out


def summarise(modes: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'mode':6} {'pair':10} {'job':5} {'solo step/s':>11} {'true speed':>10} "
        f"{'util solo':>9} {'util pair':>9} {'ratio(mean)':>11} {'ratio(sum)':>10} {'samples/cycle':>13}"
    ]
    for m in modes:
        if "error" in m:
            lines.append(f"{m['mode']:6} failed: {m['error']}")
            continue
        for p in m["pairs"]:
            for kind, r in p["jobs"].items():

                def f(v: Any, w: int, d: int = 3) -> str:
                    return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"

                lines.append(
                    f"{m['mode']:6} {p['pair']:10} {kind:5} {f(r['solo']['rate'], 11, 1)} "
                    f"{f(r['true_speed'], 10)} {f(r['solo']['util_mean'], 9)} "
                    f"{f(r['shared']['util_mean'], 9)} {f(r.get('util_mean_ratio'), 11)} "
                    f"{f(r.get('util_sum_ratio'), 10)} {f(r['shared']['samples_per_cycle'], 13, 1)}"
                )
    for m in modes:
        for p in m.get("pairs", []):
            if "self_pair_rel_diff" in p:
                lines.append(
                    f"{m['mode']:6} self-pair {p['pair']}: rates differ by {p['self_pair_rel_diff']:.3f}"
                )
    errs: dict[str, list[float]] = {}
    for m in modes:
        for p in m.get("pairs", []):
            for r in p["jobs"].values():
                for agg in ("util_sum", "util_mean"):
                    e = r.get(f"{agg}_error")
                    if e is not None:
                        errs.setdefault(f"{m['mode']} {agg}", []).append(e)
    for key, es in errs.items():
        lines.append(
            f"{key:20} bias {statistics.mean(es):+.3f}  MAE {statistics.mean(abs(e) for e in es):.3f}  n={len(es)}"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--job", nargs=3, metavar=("KIND", "CONTROL", "PROGRESS"), help=argparse.SUPPRESS
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gpu-pair-signal.json")
    ap.add_argument("--cycle", type=float, default=5.0, help="agent sampling cycle, seconds")
    ap.add_argument("--solo-seconds", type=float, default=15.0)
    ap.add_argument("--pair-seconds", type=float, default=20.0)
    ap.add_argument("--modes", default="timeslice,mps,mps50")
    ap.add_argument("--rescore", type=Path, help="score a results file again (no GPU needed)")
    ap.add_argument(
        "--chain",
        action="store_true",
        help="the agent's own progress and NVML code on the GPU (writes *-chain.json)",
    )
    args = ap.parse_args()
    if args.rescore:
        result = json.loads(args.rescore.read_text())
        rescore(result["modes"])
        print("\n".join(summarise(result["modes"])))
        args.rescore.write_text(json.dumps(result, indent=1) + "\n")
        return 0
    if args.job:
        job_main(args.job[0], Path(args.job[1]), Path(args.job[2]))
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:
        print(f"no GPU to measure on ({exc}); this benchmark needs an NVIDIA GPU", file=sys.stderr)
        return 2
    name = pynvml.nvmlDeviceGetName(handle)
    info: dict[str, Any] = {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "driver": str(pynvml.nvmlSystemGetDriverVersion()),
        "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
        "cycle_s": args.cycle,
        "solo_s": args.solo_seconds,
        "pair_s": args.pair_seconds,
        "compute_mode": int(pynvml.nvmlDeviceGetComputeMode(handle)),
    }
    print(json.dumps(info), flush=True)
    if args.chain:
        out = args.out.with_name(args.out.stem + "-chain.json")
        chain: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as tmp:
            for mode in args.modes.split(","):
                t = time.monotonic()
                try:
                    chain.append(
                        run_chain_mode(
                            mode,
                            Path(tmp),
                            pynvml,
                            handle,
                            info["gpu"],
                            args.cycle,
                            args.solo_seconds,
                            args.pair_seconds,
                        )
                    )
                except Exception as exc:
                    chain.append({"mode": mode, "error": f"{type(exc).__name__}: {exc}"})
                print(f"mode {mode}: {time.monotonic() - t:.0f} s", flush=True)
                print("\n".join(summarise_chain(chain[-1:])), flush=True)
                out.write_text(json.dumps({"info": info, "modes": chain}, indent=1) + "\n")
        print("\n".join(summarise_chain(chain)))
        print(f"wrote {out}")
        return 0
    sampler = Sampler(pynvml, handle, args.cycle)
    sampler.start()
    modes = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            t = time.monotonic()
            try:
                modes.append(
                    run_mode(
                        mode, Path(tmp), sampler, args.solo_seconds, args.pair_seconds, args.cycle
                    )
                )
            except Exception as exc:
                modes.append({"mode": mode, "error": f"{type(exc).__name__}: {exc}"})
            print(f"mode {mode}: {time.monotonic() - t:.0f} s", flush=True)
            for line in summarise(modes[-1:]):
                print(line, flush=True)
            write(args.out, info, modes, sampler)  # kept even if a later mode runs out of time
    sampler.stop()
    print("\n".join(summarise(modes)))
    write(args.out, info, modes, sampler)
    print(f"wrote {args.out}")
    return 0


def write(out: Path, info: dict[str, Any], modes: list[dict[str, Any]], sampler: Sampler) -> None:
    raw_counts: dict[int, int] = {}
    for _, pid, _, _ in sampler.raw:
        raw_counts[pid] = raw_counts.get(pid, 0) + 1
    # an excerpt for the record: the first cycles in which some process had several samples
    excerpt: list[dict[str, Any]] = []
    for t, per_pid in sampler.cycles:
        if any(len(v) > 1 for v in per_pid.values()) and len(excerpt) < 6:
            excerpt.append(
                {"t": t, "samples": [r for r in sampler.raw if r[0] == t and r[1] in per_pid]}
            )
    result = {
        "info": info,
        "modes": modes,
        "sampler_errors": sorted(set(sampler.errors))[:20],
        "raw_samples": len(sampler.raw),
        "raw_samples_per_pid": raw_counts,
        "multi_sample_cycles_excerpt": excerpt,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    raw = {"raw": sampler.raw, "device_util": sampler.device_util, "cycles": sampler.cycles}
    out.with_name(out.stem + "-raw.json").write_text(json.dumps(raw) + "\n")


if __name__ == "__main__":
    sys.exit(main())
