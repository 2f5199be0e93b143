"""What ``horus predictor measure`` runs: job configurations (zoo model, batch size, AMP) and
the pairs of them to run together, parsed from ``--jobs`` and ``--pairs``."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from horus.common.errors import ValidationError


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


def pair_key(a: JobSpec, b: JobSpec) -> str:
    return f"{a.key}|{b.key}"
