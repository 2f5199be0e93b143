"""Training data the user brings: the agent's observed rows and a ``--with-lucid`` folder.

``horus predictor train --extra-rows`` / ``--extra-pair-rows`` read the CSV files the sharing
agent writes in the user's cluster, and ``--with-lucid`` a copy of Lucid's CSVs. These files
come from outside, so every one is read bounded (:data:`MAX_ROWS_FILE_BYTES`), every column
checked present, every number finite and in range, and every error names the file, the line
and the value: a broken file trains nothing rather than something wrong. Rows the agent wrote
on a simulated node are the predictor's own output, so they are dropped unless asked for.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from horus.common.constants import BACKEND_SIMULATED
from horus.predictor.dataset import SingleTable, row_features
from horus.predictor.gpus import GpuSpec, gpu_spec
from horus.predictor.schema import FEATURE_NAMES

_log = logging.getLogger(__name__)


def check_lucid_dir(lucid_dir: Path) -> None:
    """Refuse a ``--with-lucid`` folder whose CSVs are not Lucid's, before any training:
    each file read bounded, every column present, every number finite and in range, every
    job type one the catalog knows (errors name the file and line)."""
    from horus.common.errors import ValidationError
    from horus.predictor.catalog import job_type

    def known(model: str | None, batch: float, amp: float, where: str) -> None:
        try:
            job_type("lucid", str(model), int(batch), amp == 1)
        except (ValidationError, KeyError, ValueError) as exc:
            raise ValidationError(f"{where}: {exc}") from None

    single = lucid_dir / "single_data.csv"
    need = ("model", "batchsize", "amp", "gpu_util", "gmem")
    for i, r in _csv_rows(single, "Lucid data", need):
        where = f"{single}:{i}"
        batch = _row_number(r["batchsize"], where, "batchsize", 1, 1 << 20)
        amp = _row_number(r["amp"], where, "amp", 0, 1)
        _row_number(r["gpu_util"], where, "gpu_util", 0, 100)
        _row_number(r["gmem"], where, "gmem", 0, _MAX_MEMORY_MIB)
        known(r["model"], batch, amp, where)
    pairs = lucid_dir / "colocate_info.csv"
    pair_need = tuple(f"{k}{n}" for n in (1, 2) for k in ("model", "batchsize", "amp", "speed"))
    for i, r in _csv_rows(pairs, "Lucid data", pair_need):
        where = f"{pairs}:{i}"
        for n in (1, 2):
            batch = _row_number(r[f"batchsize{n}"], where, f"batchsize{n}", 1, 1 << 20)
            amp = _row_number(r[f"amp{n}"], where, f"amp{n}", 0, 1)
            _row_number(r[f"speed{n}"], where, f"speed{n}", 0, 2)
            known(r[f"model{n}"], batch, amp, where)


def _simulated(row: Mapping[str, str | None]) -> bool:
    """A row the agent wrote on a simulated node (``backend=simulated``): the predictor's own
    output plus noise, not a measurement."""
    return (row.get("backend") or "").strip() == BACKEND_SIMULATED


class _SimulatedRows:
    """Counts the rows of one file that came from simulated GPUs and, unless they are to be
    kept, drops them: a production model trained on them would learn its own predictions."""

    def __init__(self, path: Path, keep: bool) -> None:
        self.path, self.keep, self.total, self.dropped = path, keep, 0, 0

    def drop(self, row: Mapping[str, str | None]) -> bool:
        self.total += 1
        if self.keep or not _simulated(row):
            return False
        self.dropped += 1
        return True

    def check(self, what: str) -> None:
        """Refuse a file whose every row is simulated; say how many rows a partial one lost."""
        from horus.common.errors import ValidationError

        if not self.dropped:
            return
        if self.dropped == self.total:
            raise ValidationError(
                f"{self.path}: all {self.total} {what} come from simulated GPUs "
                f"(backend={BACKEND_SIMULATED}); they are the predictor's own output, not "
                "measurements, so training on them teaches it nothing. Use the rows of nodes "
                "with real GPUs, or pass --keep-simulated to train on them anyway (tests, demos)"
            )
        _log.warning(
            "%s: dropped %d of %d %s from simulated GPUs (backend=%s); --keep-simulated keeps them",
            self.path,
            self.dropped,
            self.total,
            what,
            BACKEND_SIMULATED,
        )


#: Largest observed-rows file read (the agent appends a row of ~60 numbers per finished pod).
MAX_ROWS_FILE_BYTES = 256 << 20


def _csv_rows(path: Path, what: str, need: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of a CSV file the user gives: size and UTF-8 checked before parsing
    (:func:`horus.common.documents.read_text_file`), every ``need`` column present in the
    header and filled in every row, malformed CSV named with its line."""
    from horus.common.documents import read_text_file
    from horus.common.errors import ValidationError

    text = read_text_file(path, f"{what} {path}", max_bytes=MAX_ROWS_FILE_BYTES)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [k for k in need if k not in header]
        if missing:
            shown = ", ".join(missing[:6]) + (
                f" and {len(missing) - 6} more" if len(missing) > 6 else ""
            )
            raise ValidationError(
                f"{path}: missing columns {shown} (the agent's --training-rows/--pair-rows "
                "files have them all)"
            )
        for i, r in enumerate(reader, start=2):
            if None in r or any(r.get(k) is None for k in need):
                raise ValidationError(
                    f"{path}:{i}: has {len(r) - (None in r)} fields where the header names "
                    f"{len(header)}; is the line cut short or does it hold extra commas?"
                )
            yield i, r
    except csv.Error as exc:
        raise ValidationError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None


def _row_number(text: str | None, where: str, name: str, lo: float, hi: float) -> float:
    """One numeric cell ``name`` of line ``where``: finite and within ``lo``..``hi``."""
    from horus.common.errors import ValidationError

    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValidationError(f"{where}: {name} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValidationError(f"{where}: {name} must be finite, got {text!r}")
    if not lo <= value <= hi:
        raise ValidationError(f"{where}: {name} must be from {lo:g} to {hi:g}, got {text!r}")
    return value


#: Features are counts, bytes and FLOPs of one step (the profile schema's bound).
_MAX_FEATURE = 1e30
#: A GPU has at most 1 TiB of memory (the assignment's bound).
_MAX_MEMORY_MIB = float(1 << 20)

TRAINING_ROW_COLUMNS = ["gpu", "util", "memory_mib", *FEATURE_NAMES]
"""Columns ``horus predictor train --extra-rows`` needs (other columns are provenance and
ignored): the GPU, the job's mean utilisation (percent) and peak memory (MiB) there, and its
graph-profile features."""


def load_extra_rows(path: Path, *, keep_simulated: bool = False) -> SingleTable:
    """Rows observed in the user's cluster: profile features, ``gpu``, ``util``, ``memory_mib``.

    The sharing agent writes these; any profile feature missing from a row is an error naming it.
    Rows whose ``backend`` column says ``simulated`` are dropped unless ``keep_simulated``
    (a file of nothing else is an error).
    """
    from horus.common.errors import ValidationError

    rows, util, mem, fam, src = [], [], [], [], []
    simulated = _SimulatedRows(path, keep_simulated)
    for i, r in _csv_rows(path, "extra rows", TRAINING_ROW_COLUMNS):
        if simulated.drop(r):
            continue
        where = f"{path}:{i}"
        feats = {k: _row_number(r[k], where, k, 0.0, _MAX_FEATURE) for k in FEATURE_NAMES}
        u = _row_number(r["util"], where, "util", 0.0, 100.0) if r["util"] else math.nan
        m = (
            _row_number(r["memory_mib"], where, "memory_mib", 0.0, _MAX_MEMORY_MIB)
            if r["memory_mib"]
            else math.nan
        )
        try:
            gpu = gpu_spec(r["gpu"])
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc}") from None
        rows.append(row_features(feats, gpu))
        util.append(u)
        mem.append(m)
        fam.append(r.get("family") or r.get("model") or "observed")
        src.append("observed")
    simulated.check("rows")
    return SingleTable(rows, np.array(util), np.array(mem), fam, src)


# --- observed pair rows (the sharing agent's measured pair speeds) ----------------------------

PAIR_ROW_FEATURES_A = [f"a_{k}" for k in FEATURE_NAMES]
PAIR_ROW_FEATURES_B = [f"b_{k}" for k in FEATURE_NAMES]
PAIR_ROW_COLUMNS = ["gpu", "speed", *PAIR_ROW_FEATURES_A, *PAIR_ROW_FEATURES_B]
"""Columns ``horus predictor train --extra-pair-rows`` needs (other columns are provenance and
ignored): ``speed`` is job A's normalised speed (throughput next to B ÷ throughput alone) on
``gpu``; ``a_<feature>`` / ``b_<feature>`` are the two jobs' graph-profile features."""
MAX_PAIR_ROW_SPEED = 2.0
"""Measured normalised speeds a little above 1 are noise (Lucid's reach 1.5); above 2 a row is
not a speed at all and is refused."""


@dataclass(frozen=True)
class ObservedPair:
    """One measured pair speed: job A (features ``a``) next to job B (``b``) on ``gpu``."""

    a: dict[str, float]
    b: dict[str, float]
    gpu: GpuSpec
    speed: float
    group: str
    """Held-out group for cross-validation: job A's model name, or ``observed``."""


def load_extra_pair_rows(path: Path, *, keep_simulated: bool = False) -> list[ObservedPair]:
    """Pair speeds observed in the user's cluster (the agent's ``--pair-rows`` CSV).

    Every :data:`PAIR_ROW_COLUMNS` column must be present; a row with a missing or non-numeric
    value, a speed outside (0, 2] or a GPU the predictor does not know is an error naming the
    file, the line and the value, so a broken file trains nothing rather than something wrong.
    Rows from simulated GPUs are dropped as in :func:`load_extra_rows`.
    """
    from horus.common.errors import ValidationError

    simulated = _SimulatedRows(path, keep_simulated)
    out: list[ObservedPair] = []
    for i, r in _csv_rows(path, "extra pair rows", PAIR_ROW_COLUMNS):
        if simulated.drop(r):
            continue
        where = f"{path}:{i}"
        values: dict[str, float] = {
            k: _row_number(r.get(k), where, k, 0.0, _MAX_FEATURE)
            for k in (*PAIR_ROW_FEATURES_A, *PAIR_ROW_FEATURES_B)
        }
        speed = _row_number(r.get("speed"), where, "speed", -math.inf, math.inf)
        if not 0.0 < speed <= MAX_PAIR_ROW_SPEED:
            raise ValidationError(
                f"{where}: speed must be in (0, {MAX_PAIR_ROW_SPEED:g}] (throughput next to "
                f"the other job / throughput alone), got {speed:g}"
            )
        try:
            gpu = gpu_spec(r.get("gpu") or "")
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc}") from None
        out.append(
            ObservedPair(
                a={k: values[f"a_{k}"] for k in FEATURE_NAMES},
                b={k: values[f"b_{k}"] for k in FEATURE_NAMES},
                gpu=gpu,
                speed=speed,
                group=r.get("model") or "observed",
            )
        )
    simulated.check("pair rows")
    return out
