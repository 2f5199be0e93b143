"""Ready adapters from training frameworks to :class:`~horus.progress.report.ProgressReporter`.

* a plain PyTorch loop: wrap the data loader, ``for batch in progress_batches(loader): ...``;
* PyTorch Lightning: ``Trainer(callbacks=[lightning_callback()])``;
* Hugging Face Transformers: ``Trainer(..., callbacks=[hf_callback()])``.

Frameworks are imported only when their adapter is asked for, so this module (and Horus) needs
none of them. The hook logic lives in plain classes (:class:`LightningHooks`,
:class:`HFHooks`); the factories mix them into the framework's own base class. Only the pod's
local process 0 writes (one file per pod; several processes would overwrite each other):
counts are then that process's samples, which is all a speed ratio needs.

Eval and checkpoint time is marked as a phase, so the agent does not read it as a slowdown.
Samples, not steps, are counted wherever the batch size is known: a job that changes its batch
size keeps a comparable speed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from horus.progress.report import ProgressReporter

T = TypeVar("T")


def batch_len(batch: object) -> int | None:
    """The number of samples in ``batch``: the first dimension of its first tensor-like
    (``shape``), found through tuples, lists and mappings; None when it cannot tell."""
    for _ in range(8):  # nested containers: (inputs, labels), {"input_ids": ...}
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except (TypeError, ValueError, IndexError):
                return None
        if isinstance(batch, Mapping):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, list | tuple):
            if not batch:
                return None
            if not hasattr(batch[0], "shape") and not isinstance(batch[0], list | tuple | Mapping):
                return len(batch)  # a plain list of samples
            batch = batch[0]
        else:
            return None
    return None


def progress_batches(batches: Iterable[T], reporter: ProgressReporter | None = None) -> Iterator[T]:
    """Yield ``batches`` and count one step (of :func:`batch_len` samples) each time the loop
    body comes back for the next one, i.e. after the step ran. The reporter is closed when the
    iteration ends (not when it is abandoned midway: call ``close()`` yourself then)."""
    rep = reporter if reporter is not None else ProgressReporter()
    for batch in batches:
        yield batch
        rep.step(samples=batch_len(batch))
    rep.close()


def _framework_class(modules: tuple[str, ...], name: str, missing: str) -> type:
    """``name`` from the first of ``modules`` that imports (imported only now)."""
    for module in modules:
        try:
            cls = getattr(importlib.import_module(module), name)
        except ImportError:
            continue
        if isinstance(cls, type):
            return cls
    raise ImportError(missing)


class LightningHooks:
    """The Lightning ``Callback`` hooks that report progress (see :func:`lightning_callback`)."""

    def __init__(self, reporter: ProgressReporter | None = None) -> None:
        super().__init__()
        self.reporter = reporter if reporter is not None else ProgressReporter()

    @staticmethod
    def _writes(trainer: Any) -> bool:
        return int(getattr(trainer, "local_rank", 0) or 0) == 0

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._writes(trainer):
            self.reporter.step(samples=batch_len(batch))

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._writes(trainer) and not getattr(trainer, "sanity_checking", False):
            self.reporter.begin_phase("eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._writes(trainer):
            self.reporter.end_phase()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._writes(trainer):
            self.reporter.close()


def lightning_callback(reporter: ProgressReporter | None = None) -> Any:
    """A PyTorch Lightning ``Callback`` reporting progress (``lightning`` or the older
    ``pytorch_lightning`` package, whichever is installed)."""
    base = _framework_class(
        ("lightning.pytorch", "pytorch_lightning"),
        "Callback",
        "lightning_callback needs PyTorch Lightning (pip install lightning)",
    )
    cls = type("HorusProgressCallback", (LightningHooks, base), {})
    return cls(reporter)


class HFHooks:
    """The Hugging Face ``TrainerCallback`` hooks that report progress (:func:`hf_callback`).

    Counts come from the trainer's state (``global_step``; samples as steps × the per-device
    batch size × gradient accumulation, the batch size read at every step so a changed one
    counts from then on). Evaluation and saving start right after a step whose ``control``
    asks for them; they are marked as phases until ``on_evaluate`` / ``on_save``."""

    def __init__(self, reporter: ProgressReporter | None = None) -> None:
        super().__init__()
        self.reporter = reporter if reporter is not None else ProgressReporter()
        self._step = 0

    @staticmethod
    def _writes(state: Any) -> bool:
        return bool(getattr(state, "is_local_process_zero", True))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._writes(state):
            return
        step = int(getattr(state, "global_step", 0) or 0)
        batch = getattr(state, "train_batch_size", None) or getattr(
            args, "per_device_train_batch_size", None
        )
        accumulation = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
        done = max(0, step - self._step)
        self._step = max(self._step, step)
        self.reporter.step(samples=done * int(batch) * accumulation if batch else None, steps=done)
        if getattr(control, "should_evaluate", False):
            self.reporter.begin_phase("eval")
        elif getattr(control, "should_save", False):
            self.reporter.begin_phase("checkpoint")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._writes(state):
            self.reporter.end_phase()
            if getattr(control, "should_save", False):
                self.reporter.begin_phase("checkpoint")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._writes(state):
            self.reporter.end_phase()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._writes(state):
            self.reporter.close()


def hf_callback(reporter: ProgressReporter | None = None) -> Any:
    """A Hugging Face ``transformers.TrainerCallback`` reporting progress."""
    base = _framework_class(
        ("transformers",), "TrainerCallback", "hf_callback needs Hugging Face Transformers"
    )
    cls = type("HorusProgressCallback", (HFHooks, base), {})
    return cls(reporter)
