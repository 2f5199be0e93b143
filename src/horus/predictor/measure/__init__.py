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

The package, one module per part: :mod:`~horus.predictor.measure.jobs` (what to run),
:mod:`~horus.predictor.measure.gpu` (NVML readings, MPS state),
:mod:`~horus.predictor.measure.worker` (the measuring processes),
:mod:`~horus.predictor.measure.harness` (the run) and :mod:`~horus.predictor.measure.results`
(``measure.json`` and the rows).
"""

from __future__ import annotations

from horus.predictor.measure.gpu import (
    SHARING_MODES,
    SHARING_MPS,
    SHARING_TIME_SLICING,
    GpuSampler,
    NoGpuSampler,
    NvmlSampler,
    Reading,
    check_mps_daemon,
    gpu_index,
    mps_daemon_answers,
)
from horus.predictor.measure.harness import Measurer, MeasureSettings
from horus.predictor.measure.jobs import JobSpec, pair_key, pairs_of, parse_job, parse_jobs
from horus.predictor.measure.results import (
    PAIR_ROWS_FILE,
    RESULTS_FILE,
    RESULTS_FORMAT,
    TRAINING_ROWS_FILE,
    load_results,
    proxy_summary,
    solo_profile,
    write_rows,
)
from horus.predictor.measure.worker import WorkerFailed

__all__ = [
    "PAIR_ROWS_FILE",
    "RESULTS_FILE",
    "RESULTS_FORMAT",
    "SHARING_MODES",
    "SHARING_MPS",
    "SHARING_TIME_SLICING",
    "TRAINING_ROWS_FILE",
    "GpuSampler",
    "JobSpec",
    "MeasureSettings",
    "Measurer",
    "NoGpuSampler",
    "NvmlSampler",
    "Reading",
    "WorkerFailed",
    "check_mps_daemon",
    "gpu_index",
    "load_results",
    "mps_daemon_answers",
    "pair_key",
    "pairs_of",
    "parse_job",
    "parse_jobs",
    "proxy_summary",
    "solo_profile",
    "write_rows",
]
