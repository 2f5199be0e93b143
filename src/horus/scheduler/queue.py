"""The pending-job queue: priorities, FIFO within a priority, kept sorted incrementally.

Sorting a queue of thousands of jobs on every scheduling pass would dominate the
simulator's run time, so the queue keeps its order as jobs come and go (``bisect``). The
order key comes from the policy (``horus-original`` orders by predicted utilisation, the rest
by priority then submit time); a sequence number makes equal keys FIFO and the order total.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

from horus.common.errors import ValidationError
from horus.scheduler.types import JobRequest

QueueKey = Callable[[JobRequest], tuple[float, ...]]


class JobQueue:
    """Pending jobs in scheduling order. Names are unique; pushing a name twice is an error."""

    def __init__(self, key: QueueKey) -> None:
        self._key = key
        self._order: list[tuple[tuple[float, ...], int, str]] = []
        self._jobs: dict[str, tuple[JobRequest, tuple[tuple[float, ...], int, str]]] = {}
        self._seq = 0

    def push(self, job: JobRequest) -> None:
        if job.name in self._jobs:
            raise ValidationError(f"job {job.name} is already queued")
        entry = (self._key(job), self._seq, job.name)
        self._seq += 1
        bisect.insort(self._order, entry)
        self._jobs[job.name] = (job, entry)

    def remove(self, name: str) -> JobRequest:
        try:
            job, entry = self._jobs.pop(name)
        except KeyError:
            raise ValidationError(f"job {name} is not in the queue") from None
        i = bisect.bisect_left(self._order, entry)
        del self._order[i]
        return job

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[JobRequest]:
        """Jobs in order (a snapshot: the queue may change while iterating)."""
        jobs = self._jobs
        order = list(self._order)  # a cheap pointer copy; jobs are looked up lazily
        return (jobs[name][0] for _, _, name in order if name in jobs)

    def jobs(self, names: Iterable[str]) -> list[JobRequest]:
        """The queued jobs among ``names`` (unordered)."""
        return [self._jobs[n][0] for n in names if n in self._jobs]

    def key_of(self, job: JobRequest) -> tuple[tuple[float, ...], int, str]:
        """The position of a queued job in the order (for sorting a subset)."""
        return self._jobs[job.name][1]

    def head(self) -> JobRequest | None:
        return self._jobs[self._order[0][2]][0] if self._order else None
