"""Pick up a new predictor artifact without a restart (the operator and the extender).

Why: the online-learning loop ends with ``kubectl create configmap … model.json.gz`` and a
``helm upgrade``; the kubelet then swaps the mounted file (a new ``..data`` symlink target)
within a minute, but a process that read its model once at start keeps placing with the old
one until someone remembers a ``rollout restart``. So the file is checked every
``reload_seconds``: when its identity (device, inode, size, mtime — ``os.stat`` follows the
ConfigMap's symlinks) changes, it is loaded again. A file that no longer loads (removed,
truncated, not an artifact) is logged once with its reason and the running model is kept:
a bad upload never leaves the scheduler without a model, and nothing already placed moves.
Jobs keep the prediction recorded when they were admitted (``status.predicted``); only new
decisions use the new model.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from horus.common.errors import HorusError
from horus.predictor.interface import Predictor

log = logging.getLogger("horus.operator.model_reload")

FileIdentity = tuple[int, int, int, int]


def file_identity(path: Path) -> FileIdentity | None:
    """(device, inode, size, mtime ns) of ``path`` after symlinks; None if it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PredictorReloader:
    """Loads ``path`` again when it changes; see the module docstring.

    ``current`` is the model already running (loaded from ``path``). :meth:`check` returns a
    new predictor when the file changed and loads as a different model version, else None.
    ``on_result`` (if given) hears ``"reloaded"`` or ``"failed"`` for each load attempt.
    """

    def __init__(
        self,
        path: Path,
        current: Predictor,
        load: Callable[[str], Predictor] | None = None,
        on_result: Callable[[str, Predictor], None] | None = None,
    ) -> None:
        self.path = path
        self.current = current
        self._identity = file_identity(path)
        self._load = load
        self._on_result = on_result
        self._failed: str | None = None

    def check(self) -> Predictor | None:
        identity = file_identity(self.path)
        if identity is None:
            self._fail(f"{self.path} cannot be read")
            return None
        if identity == self._identity:
            return None
        self._identity = identity
        try:
            new = self._loader()(str(self.path))
        except HorusError as exc:  # the loaders' own messages name the file and the problem
            self._fail(str(exc))
            return None
        except Exception as exc:  # anything else: still never drop the running model
            self._fail(f"{self.path}: {type(exc).__name__}: {exc}")
            return None
        self._failed = None
        if new.version == self.current.version:
            return None  # the same model written again (e.g. a ConfigMap re-applied)
        log.info(
            "predictor %s replaced by %s from %s: new decisions use it",
            self.current.version,
            new.version,
            self.path,
        )
        self.current = new
        if self._on_result is not None:
            self._on_result("reloaded", new)
        return new

    def _loader(self) -> Callable[[str], Predictor]:
        if self._load is None:
            from horus.predictor import load_predictor

            self._load = load_predictor
        return self._load

    def _fail(self, reason: str) -> None:
        if reason == self._failed:
            return  # said once per distinct reason, not every interval
        self._failed = reason
        log.error(
            "predictor file changed but cannot be used (%s); still placing with %s",
            reason,
            self.current.version,
        )
        if self._on_result is not None:
            self._on_result("failed", self.current)


class ReloadThread:
    """Calls ``reloader.check`` every ``interval`` seconds and hands a new model to
    ``apply``, in a daemon thread (the extender swaps it in directly; the operator posts it
    to its event loop)."""

    def __init__(
        self, reloader: PredictorReloader, interval: float, apply: Callable[[Predictor], object]
    ) -> None:
        self.reloader, self.interval, self.apply = reloader, interval, apply
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="horus-model-reload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                new = self.reloader.check()
                if new is not None:
                    self.apply(new)
            except Exception:  # never let the watcher die silently
                log.exception("reloading the predictor failed")
