"""A small training loop for DLJob examples on the local cluster's real nodes.

It prints, as JSON lines on stdout (``kubectl logs``):

* ``{"event": "share", ...}`` once, first: the GPU share this container received, exactly as
  the Horus device plugin handed it over (the ``HORUS_*``, ``CUDA_*`` and
  ``NVIDIA_VISIBLE_DEVICES`` variables), whether the MPS pipe directory is mounted and which
  GPU UUIDs are mounted under /var/run/nvidia-container-devices (volume-mount grants);
* ``{"event": "progress", "step": ..., "steps_per_second": ...}`` every ``--report-seconds``;
* ``{"event": "done", ...}`` at the end (``--steps`` reached, or SIGTERM).

**Progress for the node agent.** Where Horus mounted a progress directory (``$HORUS_PROGRESS_DIR``)
the loop reports every step and its samples through ``horus.progress.report`` (copied into the
image as ``horus_progress.py``), and marks checkpoint writing as a phase: the node agent
measures this job's speed alone and next to each neighbour from it (docs/agent.md).

**Simulated GPUs (SIMULATION ONLY).** There is no GPU here, so sharing one cannot slow this
loop by itself. On the dev cluster's simulated GPUs the node agent writes the speed its
simulation gives this pod (1 alone, less when sharing) into the progress directory; the loop
then makes each step take ``--step-sleep / speed`` seconds in all, so the job slows exactly as
the simulation says, and what the agent reads back from progress can be checked against that
known truth (``benchmarks/progress_signal.py``). On a real GPU there is no such file and the
loop runs as it is.

**Checkpoints.** When ``$HORUS_CHECKPOINT_PATH`` is set (a DLJob with
``spec.migration.policy: OnCheckpoint`` gets it, on a volume that outlives the pod), the loop
resumes from ``<path>/checkpoint.json`` if it is there (``{"event": "resumed", "step": ...}``),
writes it every ``--checkpoint-seconds`` and once more on SIGTERM before it exits — which is
how Horus moves a running job to better GPUs without losing its progress. The file is
written to a temporary name and renamed, so a kill in the middle never leaves half of one.

The "model" is logistic regression by mini-batch SGD on synthetic data, in plain Python: there
is no GPU here, so it stands in for a framework's training step without needing one. A short
sleep per step (``--step-sleep``) keeps many replicas on a small machine from starving it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time

try:  # in the repository (and wherever Horus is installed)
    from horus.progress.report import ProgressReporter, simulated_speed
except ImportError:  # the workload image: the same file, copied beside this one
    from horus_progress import ProgressReporter, simulated_speed  # type: ignore[no-redef]

SHARE_PREFIXES = ("HORUS_", "CUDA_", "NVIDIA_VISIBLE_DEVICES")
# Where the NVIDIA container toolkit reads a volume-mount device list (one entry per GPU UUID).
DEVICE_MOUNT_ROOT = "/var/run/nvidia-container-devices"


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "time": round(time.time(), 3), **fields}), flush=True)


def mounted(path: str) -> bool:
    """Whether ``path`` is a mount point of this container (from /proc/self/mountinfo, which
    names mounts by their resolved path: /var/run/x is listed as /run/x where /var/run links
    to /run)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as fh:
            return any(line.split()[4] in (path, real) for line in fh if len(line.split()) > 4)
    except OSError:
        return False


def share() -> dict[str, object]:
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(SHARE_PREFIXES)}
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
    return {
        "env": env,
        "mps_pipe_directory": pipe,
        "mps_pipe_mounted": bool(pipe) and mounted(pipe),
        # the GPUs granted by mounts (device plugin gpu_access=volume-mounts), each a mount
        "device_mounts": sorted(
            name
            for name in (os.listdir(DEVICE_MOUNT_ROOT) if os.path.isdir(DEVICE_MOUNT_ROOT) else [])
            if mounted(os.path.join(DEVICE_MOUNT_ROOT, name))
        ),
    }


def load_checkpoint(path: str) -> dict[str, object] | None:
    """The last checkpoint under ``path`` (None when there is none or it cannot be read)."""
    try:
        with open(os.path.join(path, "checkpoint.json")) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("step"), int) else None


def save_checkpoint(path: str, state: dict[str, object]) -> None:
    """Write ``state`` atomically: a temporary file in the same folder, then a rename."""
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".checkpoint.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(path, "checkpoint.json"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="logreg", help="a label for the logs")
    ap.add_argument("--steps", type=int, default=0, help="steps to run (0: until SIGTERM)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--report-seconds", type=float, default=5.0)
    ap.add_argument("--step-sleep", type=float, default=0.005, help="seconds to yield per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=30.0,
        help="write a checkpoint this often when $HORUS_CHECKPOINT_PATH is set (and on SIGTERM)",
    )
    args = ap.parse_args(argv)
    if args.steps < 0 or args.batch_size < 1 or not 1 <= args.features <= 4096:
        ap.error("--steps >= 0, --batch-size >= 1 and 1 <= --features <= 4096")

    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    emit("share", model=args.model, pod=os.environ.get("HORUS_POD_NAME", ""), **share())

    rng = random.Random(args.seed)
    truth = [rng.uniform(-1, 1) for _ in range(args.features)]
    weights = [0.0] * args.features
    lr, step, loss = 0.1, 0, 0.0
    ckpt_dir = os.environ.get("HORUS_CHECKPOINT_PATH", "")
    saved = load_checkpoint(ckpt_dir) if ckpt_dir else None
    if saved is not None and len(saved.get("weights") or []) == args.features:
        step, weights = int(saved["step"]), [float(w) for w in saved["weights"]]  # type: ignore[union-attr]
        rng.seed(f"{args.seed}:{step}")
        emit("resumed", step=step, pod=os.environ.get("HORUS_POD_NAME", ""))
    started = last = last_ckpt = time.monotonic()
    last_step = step
    progress = ProgressReporter()  # no-op without $HORUS_PROGRESS_DIR
    speed, speed_read = simulated_speed(), time.monotonic()
    sim_next = time.monotonic()
    while not stop and (args.steps == 0 or step < args.steps):
        step_started = time.monotonic()
        grad = [0.0] * args.features
        loss = 0.0
        for _ in range(args.batch_size):
            x = [rng.gauss(0, 1) for _ in range(args.features)]
            y = 1.0 if sum(a * b for a, b in zip(truth, x)) > 0 else 0.0
            z = max(-30.0, min(30.0, sum(a * b for a, b in zip(weights, x))))
            p = 1 / (1 + math.exp(-z))
            loss -= y * math.log(p + 1e-12) + (1 - y) * math.log(1 - p + 1e-12)
            for i, xi in enumerate(x):
                grad[i] += (p - y) * xi
        weights = [w - lr * g / args.batch_size for w, g in zip(weights, grad)]
        step += 1
        progress.step(samples=args.batch_size)
        now = time.monotonic()
        if now - last >= args.report_seconds:
            emit(
                "progress",
                step=step,
                steps_per_second=round((step - last_step) / (now - last), 2),
                loss=round(loss / args.batch_size, 4),
            )
            last, last_step = now, step
        if ckpt_dir and now - last_ckpt >= args.checkpoint_seconds:
            with progress.phase("checkpoint"):
                save_checkpoint(ckpt_dir, {"step": step, "weights": weights})
            last_ckpt = now
        if now - speed_read >= 1.0:
            speed, speed_read = simulated_speed(), now
        if speed is not None and args.step_sleep > 0:
            # SIMULATION ONLY: the step takes step_sleep / speed seconds in all, on a fixed
            # schedule (each sleep's overshoot is taken from the next, not added to the rate;
            # a loop more than a step behind starts a new schedule)
            sim_next = max(sim_next, step_started - args.step_sleep) + args.step_sleep / speed
            time.sleep(max(0.0, sim_next - time.monotonic()))
        elif args.step_sleep > 0:
            time.sleep(args.step_sleep)
    if ckpt_dir:
        with progress.phase("checkpoint"):
            save_checkpoint(ckpt_dir, {"step": step, "weights": weights})
        emit("checkpoint", step=step, path=ckpt_dir)
    progress.close()
    elapsed = time.monotonic() - started
    emit(
        "done",
        steps=step,
        steps_per_second=round(step / elapsed, 2) if elapsed else 0.0,
        loss=round(loss / args.batch_size, 4),
        stopped=stop,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
