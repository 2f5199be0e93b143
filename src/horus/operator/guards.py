"""One job's step in a pass, run so that its error never stops the other jobs.

A pass acts on many jobs at once, each step on a thread of the pass's pools. A conflict
(another writer got there first) is counted and left to the next pass; any other error is
told on that job alone (:meth:`~horus.operator.writer.StatusWriter.problem`) and the pass
goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from horus.kube.errors import Conflict
from horus.operator.commit import Committer
from horus.operator.jobapi import PodRejected
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.writer import StatusWriter
from horus.scheduler import Placement

__all__ = ["JobGuard"]

log = logging.getLogger(__name__)


class JobGuard:
    """Runs one job's step, its commit or its follow-up with the errors kept to that job."""

    def __init__(
        self, writer: StatusWriter, committer: Committer, is_leader: Callable[[], bool]
    ) -> None:
        self.writer = writer
        self.committer = committer
        self.is_leader = is_leader

    def step(self, fn: Callable[..., None], ctx: JobCtx, *args: Any) -> None:
        """Run one job's step; an error for one job never stops the others."""
        if not self.is_leader():
            return
        try:
            fn(ctx, *args)
        except Conflict as exc:
            for arg in args:
                if isinstance(arg, PassReport):
                    arg.count("conflicts")
            log.debug("%s", exc)
        except Exception as exc:
            self.writer.problem(ctx, f"{getattr(fn, '__name__', 'step').strip('_')} failed", exc)

    def commit(self, ctx: JobCtx, placement: Placement, report: PassReport) -> None:
        """Commit one placement the core made (``Committer.commit``)."""
        try:
            self.committer.commit(ctx, placement, report)
        except Conflict as exc:
            report.count("conflicts")
            log.info("%s", exc)
        except PodRejected as exc:
            self.step(self.committer.pod_rejected, ctx, exc, report)
        except Exception as exc:  # a bug or API outage for one job must not stop the others
            self.writer.problem(ctx, "committing its placement failed", exc)
            report.problems.append(f"commit of {ctx.key} failed")

    def follow(self, ctx: JobCtx, report: PassReport, placing: bool) -> None:
        """Finish a placed job's pods from its record (``Committer.follow``)."""
        try:
            self.committer.follow(ctx, report, placing)
        except Conflict as exc:
            report.count("conflicts")
            log.debug("%s", exc)
        except PodRejected as exc:
            self.step(self.committer.pod_rejected, ctx, exc, report)
        except Exception as exc:
            self.writer.problem(ctx, "following its pods failed", exc)
            report.problems.append(f"follow of {ctx.key} failed")
