"""Training progress reported by the job to the node: ``report`` (the job's side,
standard library only), ``adapters`` (PyTorch loop, Lightning, Hugging Face Trainer),
``reader`` (the node's side, validating untrusted files), ``mount`` (the per-pod directory).

This package imports nothing of Horus, so it sits below every other layer and its files can be
copied into workload images."""

from horus.progress.report import ENV_DIR, FILE_NAME, FORMAT, ProgressReporter

__all__ = ["ENV_DIR", "FILE_NAME", "FORMAT", "ProgressReporter"]
