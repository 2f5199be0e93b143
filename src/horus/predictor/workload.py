"""One zoo model's training loop on a real device, run as a child process of
``horus predictor measure`` (:mod:`horus.predictor.measure`).

Why a process of its own: two jobs sharing a GPU are two CUDA contexts, as two pods are
(time-sliced, or as MPS clients); two threads of one process would share one context and one
interpreter, which is not what the scheduler places.

The step is the one the profiler counts (:func:`horus.predictor.features.profile_module`):
the zoo entry's model with real weights, synthetic inputs of its shape (zeros for token inputs,
as the profiler uses), the sum of the float outputs as the loss, backward, and the entry's
optimizer; ``amp`` runs the forward under autocast (float16 on CUDA, bfloat16 on CPU). Each
step ends with a device synchronisation, as a loop that logs its loss does, so the host sees
when the GPU finished it.

Protocol, one JSON object per line: the job is ``argv[1]`` (:class:`WorkerJob` as JSON). The
worker builds the model, runs the warm-up steps and prints ``{"ready": pid}``. On the stdin
line ``go <seconds>`` it counts the steps it completes in that window and prints
``{"steps": n, "seconds": t, "torch_peak_mib": m}``; then it keeps stepping, so a neighbour's
window stays contended, until the line ``stop`` or the end of stdin. Errors go to stderr and
the exit status is non-zero.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Any

from horus.common.constants import ENV_MPS_ACTIVE_THREAD_PERCENTAGE, MIB


@dataclass(frozen=True)
class WorkerJob:
    """What one worker runs: zoo model, batch size, AMP, device, warm-up steps."""

    zoo: str
    batch_size: int
    amp: bool
    device: str
    warmup_steps: int
    cpu_threads: int = 1  # torch intra-op threads; only matters for --device cpu dry runs

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def build_step(job: WorkerJob) -> tuple[Callable[[], None], Callable[[], float]]:
    """The training step of ``job`` and a function giving torch's peak reserved memory (MiB)."""
    import torch

    from horus.predictor.features import scalar_loss
    from horus.predictor.zoo import zoo_entry

    entry = zoo_entry(job.zoo)
    dev = torch.device(job.device)
    if dev.type == "cpu":
        torch.set_num_threads(job.cpu_threads)
    model = entry.build().to(dev)
    model.train()
    shape = (job.batch_size, *entry.input_shape)
    if entry.input_dtype == "long":
        x = torch.zeros(shape, dtype=torch.long, device=dev)
    else:
        x = torch.randn(shape, device=dev)
    params = [p for p in model.parameters() if p.requires_grad]
    # Learning rates are tiny: the loss is a plain sum, and the run measures time, not learning.
    opt: Any
    if entry.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=1e-6, momentum=0.9)
    elif entry.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-6)
    else:
        opt = torch.optim.Adam(params, lr=1e-6)
    amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=job.amp):
            out = model(x)
        loss = scalar_loss(out)
        if loss is not None:
            loss.backward()
        opt.step()
        sync()

    def peak_mib() -> float:
        if dev.type == "cuda":
            return float(torch.cuda.max_memory_reserved(dev)) / MIB
        return 0.0

    return step, peak_mib


def _emit(out: IO[str], obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def run(job: WorkerJob, stdin: IO[str], stdout: IO[str]) -> int:
    """The worker's life: build, warm up, ready, measure one window, keep running until stop."""
    step, peak_mib = build_step(job)
    for _ in range(job.warmup_steps):
        step()
    windows: queue.Queue[float] = queue.Queue()
    stop = threading.Event()

    def read_commands() -> None:
        for line in stdin:
            word, _, arg = line.strip().partition(" ")
            if word == "go":
                windows.put(float(arg))
            elif word == "stop":
                break
        stop.set()
        windows.put(-1.0)  # wake a worker still waiting for "go"

    threading.Thread(target=read_commands, daemon=True).start()
    # what the MPS client will be limited to (None: the whole GPU), for measure.json
    _emit(
        stdout,
        {
            "ready": os.getpid(),
            "mps_thread_percent": os.environ.get(ENV_MPS_ACTIVE_THREAD_PERCENTAGE),
        },
    )
    seconds = windows.get()
    if seconds <= 0:
        return 0
    t0 = time.perf_counter()
    steps, last = 0, t0
    while True:
        step()
        now = time.perf_counter()
        if now - t0 <= seconds or steps == 0:  # a step longer than the window still counts once
            steps, last = steps + 1, now
        if now - t0 > seconds:
            break
    _emit(stdout, {"steps": steps, "seconds": last - t0, "torch_peak_mib": peak_mib()})
    while not stop.is_set():
        step()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m horus.predictor.workload '<job JSON>'", file=sys.stderr)
        return 2
    job = WorkerJob(**json.loads(args[0]))
    return run(job, sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
