"""The measured job types of the Gavel and Lucid tables, each with its graph profile.

Why: the simulator replays traces whose jobs are *named* (Gavel's "ResNet-50 (batch size 64)",
Lucid's ResNet18/CIFAR-10/batch 64/AMP), and the scheduler needs a
:class:`~horus.predictor.interface.GraphProfile` for each to ask the predictor about it. This
module hands out those profiles — computed once by the torch extractor from the reference zoo
and shipped in ``data/job_types.csv`` — so it works without torch.

Use::

    from horus.predictor.catalog import measured_job_types, job_type
    for jt in measured_job_types("gavel"):
        jt.source, jt.model, jt.batch_size, jt.amp, jt.profile
    jt = job_type("gavel", "ResNet-50 (batch size 64)")

``model`` is spelled exactly as the data spells it (Gavel: the full job-type string; Lucid:
the ``model`` column), so trace rows join on it directly.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import FEATURE_NAMES
from horus.predictor.tables import DATA_DIR


@dataclass(frozen=True)
class MeasuredJobType:
    """One job configuration that Gavel or Lucid measured."""

    source: str  # "gavel" or "lucid"
    model: str  # as the data spells it, e.g. "ResNet-50 (batch size 64)" or "ResNet18"
    batch_size: int
    amp: bool
    zoo: str  # the reference-zoo definition whose features stand in for it
    family: str
    profile: GraphProfile

    @property
    def key(self) -> tuple[str, str, int, bool]:
        return (self.source, self.model, self.batch_size, self.amp)


@lru_cache(maxsize=1)
def _load() -> tuple[MeasuredJobType, ...]:
    path = DATA_DIR / "job_types.csv"
    if not path.exists():
        raise ValidationError(
            f"{path} is missing; regenerate it with 'horus predictor build-tables' (needs torch)"
        )
    out = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            batch = int(row["batch_size_data"])
            amp = row["amp_data"] == "1"
            prof = GraphProfile(
                model=row["zoo"],
                batch_size=batch,
                features={k: float(row[k]) for k in FEATURE_NAMES},
                family=row["family"],
            )
            out.append(
                MeasuredJobType(
                    row["source"], row["model"], batch, amp, row["zoo"], row["family"], prof
                )
            )
    return tuple(out)


def measured_job_types(source: str | None = None) -> list[MeasuredJobType]:
    """Every measured job type, or those of one ``source`` ("gavel" or "lucid")."""
    rows = _load()
    if source is None:
        return list(rows)
    if source not in {"gavel", "lucid"}:
        raise ValidationError(f"unknown source {source!r}; use 'gavel' or 'lucid'")
    return [r for r in rows if r.source == source]


def job_type(
    source: str, model: str, batch_size: int | None = None, amp: bool = False
) -> MeasuredJobType:
    """The job type ``model`` of ``source`` (Gavel names carry their batch size already)."""
    for jt in measured_job_types(source):
        if (
            jt.model == model
            and (batch_size is None or jt.batch_size == batch_size)
            and jt.amp == amp
        ):
            return jt
    raise ValidationError(
        f"no measured {source} job type {model!r}"
        + (f" with batch size {batch_size}" if batch_size else "")
        + (" with AMP" if amp else "")
    )
