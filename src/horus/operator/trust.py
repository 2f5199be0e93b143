"""The trust steps every pass takes before it acts on a DLJob's record.

A record counts only if this operator signed it, and signed it last: a validly signed
record older than the job's pods, its claims or what this process signed since is a
rollback and is distrusted like an unsigned one; a record not trusted is restored from the
job's own objects or reset (:mod:`~horus.operator.restore`). While the signing key is
missing nothing is placed or deleted (the pass holds), and each unfinished job is told so
once per outage, and told again when the key is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common.clock import now_rfc3339
from horus.operator import status as st
from horus.operator.claimcommit import claim_epoch, claim_owner_uid
from horus.operator.guards import JobGuard
from horus.operator.object_reads import pods_epoch, record_epoch
from horus.operator.pass_state import JobCtx, PassReport
from horus.operator.pod_reads import PodFacts
from horus.operator.restore import restore
from horus.operator.writer import StatusWriter

__all__ = ["COND_SIGNING_KEY", "TERMINAL_PHASES", "TrustGate"]

log = logging.getLogger(__name__)

TERMINAL_PHASES = (c.DLJOB_PHASE_SUCCEEDED, c.DLJOB_PHASE_FAILED)
#: Condition on a job while placement is paused for want of a signing key (False).
COND_SIGNING_KEY = "SigningKey"


class TrustGate:
    """Which records a pass trusts, and what jobs are told while the signing key is away."""

    def __init__(
        self,
        writer: StatusWriter,
        pool: ThreadPoolExecutor,
        guard: JobGuard,
        is_leader: Callable[[], bool],
    ) -> None:
        self.writer = writer
        self.pool = pool
        self.guard = guard
        self.is_leader = is_leader

    def distrust_rollbacks(
        self,
        every: Mapping[str, JobCtx],
        ring: KeyRing,
        claims: Sequence[Mapping[str, Any]],
        facts: Mapping[int, PodFacts],
    ) -> None:
        """A validly signed record older than its pods (they carry the epoch they were bound
        in), than its claims on the DRA path (each carries the epoch it was made in) or than
        what this process signed last is a rollback: not trusted (restored)."""
        made_in: dict[str, int] = {}
        for claim in claims:
            epoch = claim_epoch(claim, ring)
            if epoch is not None:
                uid = claim_owner_uid(claim)
                made_in[uid] = max(made_in.get(uid, 0), epoch)
        for ctx in every.values():
            if not ctx.trusted or not (ctx.phase or ctx.status.get("placements")):
                continue
            floor = max(
                self.writer.highest_signed(ctx.uid),
                _pods_epoch([*ctx.pods.values(), *ctx.leaving], ring, facts),
                made_in.get(ctx.uid, 0),
            )
            if record_epoch(ctx.status) < floor:
                log.warning(
                    "DLJob %s: its record (epoch %d) is older than epoch %d its pods or this "
                    "operator signed: a rollback, not trusted",
                    ctx.key,
                    record_epoch(ctx.status),
                    floor,
                )
                ctx.trusted = False

    def tell_held(self, every: Mapping[str, JobCtx], why: str, report: PassReport) -> None:
        """No key to sign with: every unfinished job not told yet in this outage is told
        (Warning Event, condition ``SigningKey=False``)."""
        if not self.is_leader():
            return
        waiting = [
            x
            for x in every.values()
            if x.phase not in TERMINAL_PHASES and not _signing_condition(x, "False")
        ]
        for f in [
            self.pool.submit(self.guard.step, self._tell_held, x, why, report) for x in waiting
        ]:
            f.result()

    def _tell_held(self, ctx: JobCtx, why: str, report: PassReport) -> None:
        now = now_rfc3339()
        conds = st.set_condition(
            ctx.status.get("conditions") or [],
            COND_SIGNING_KEY,
            "False",
            "KeyUnavailable",
            why,
            now,
        )
        self.writer.patch(ctx, {"conditions": conds})
        report.count("status_writes")
        self.writer.event(ctx, "SigningKeyUnavailable", why, warning=True)

    def tell_resumed(self, every: Mapping[str, JobCtx], report: PassReport) -> None:
        """The key is back: the jobs told it was missing are told this too (``SigningKey``
        condition True, an Event)."""
        if not self.is_leader():
            return
        message = "the signing key is available again; placement resumed"

        def tell(ctx: JobCtx) -> None:
            conds = st.set_condition(
                ctx.status.get("conditions") or [],
                COND_SIGNING_KEY,
                "True",
                "KeyAvailable",
                message,
                now_rfc3339(),
            )
            self.writer.patch(ctx, {"conditions": conds})
            report.count("status_writes")
            self.writer.event(ctx, "SigningKeyAvailable", message)

        for f in [
            self.pool.submit(self.guard.step, tell, x)
            for x in every.values()
            if _signing_condition(x, "False")
        ]:
            f.result()

    def restore_untrusted(
        self,
        every: Mapping[str, JobCtx],
        report: PassReport,
        claims: Sequence[Mapping[str, Any]] = (),
    ) -> list[Future[None]]:
        """A record the operator did not sign takes no part in this pass: it is restored from
        the job's own pods (on the DRA path, with their claims), or reset so the job is
        admitted again (:mod:`restore`)."""
        if not self.is_leader():
            return []
        index = {
            (
                str((cl.get("metadata") or {}).get("namespace")),
                str((cl.get("metadata") or {}).get("name")),
            ): cl
            for cl in claims
        }
        return [
            self.pool.submit(self.guard.step, restore, x, self.writer, report, index)
            for x in every.values()
            if not x.trusted
        ]


def _signing_condition(ctx: JobCtx, status: str) -> bool:
    cond = st.condition(ctx.status.get("conditions") or [], COND_SIGNING_KEY)
    return cond is not None and cond.get("status") == status


def _pods_epoch(
    pods: Sequence[Mapping[str, Any]], ring: KeyRing, facts: Mapping[int, PodFacts]
) -> int:
    """:func:`pods_epoch` of ``pods``, from the pass's facts where it read the pod."""
    best = 0
    for pod in pods:
        f = facts.get(id(pod))
        best = max(best, f.epoch if f is not None and f.pod is pod else pods_epoch([pod], ring))
    return best
