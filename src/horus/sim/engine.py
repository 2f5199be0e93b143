"""The event-driven simulator: time jumps from event to event, never in fixed ticks.

Events are job arrivals and job completions. Between events every running job progresses at
a constant rate — its normalised speed given the jobs on its GPUs, taken from the measured
ground truth (:mod:`horus.sim.groundtruth`), the slowest of its GPUs for a gang (synchronous
training waits for the slowest replica). When a placement or a completion changes who shares
a GPU, only the jobs on the touched GPUs are advanced and get a new completion event (old
ones are invalidated by a version number), so a 100,000-job trace costs O(events × sharers).

After completions a full scheduling pass runs over the queue; after arrivals alone only the
new jobs are tried (nothing else changed, so the rest would fail exactly as before), unless
the head of the queue is old enough to trigger the starvation guard.

A run named ``horus+observed`` is ``horus`` fed back what the node agent measures
(``horus.agent.feedback.PairSpeeds``): a job's speed next to a neighbour's kind becomes known
once the job has run both *alone* on its GPU (the agent's baseline) and on a GPU holding
exactly it and that neighbour, in either order; it is then reported to the scheduler
(``Scheduler.observe_pair``), which uses it instead of its prediction from then on, with no
uncertainty margin. The reported value is the true speed — what the agent's utilisation ratio
gives in this model, where utilisation scales with speed — and no sampling time is needed, so
the run is an upper bound on what the agent's feedback gives. ``horus+observed-util`` reports
instead what that ratio would read given the GPU's measured utilisation in each pair (Lucid
only; :meth:`GroundTruth.util_ratio_speed`), which is lower than the true speed.

A job asking for more GPUs than one node has becomes ⌈n / gpus_per_node⌉ replicas of
``gpus_per_node`` GPUs (rounded up, as a multi-node gang); a job that can never fit the
cluster is an error naming it, raised before the run starts.

The loop always advances: every trace time is finite (:class:`~horus.sim.traces.TraceJob`
checks it), every job speed must be a finite positive number (a ground truth giving 0 or
NaN is named, not divided by), and an iteration that consumes neither an arrival nor an
event is an error rather than a spin — before these guards one NaN arrival time made
``horus sim`` run forever.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from horus.common.errors import ConfigError, ValidationError
from horus.predictor.interface import Predictor
from horus.scheduler import (
    ClusterState,
    JobRequest,
    Scheduler,
    ScheduleResult,
    SchedulerSettings,
)
from horus.scheduler.policies import get_policy
from horus.sim.groundtruth import GroundTruth
from horus.sim.results import JobRecord, SimResult
from horus.sim.traces import TraceJob

#: Suffix of a run whose scheduler is told measured pair speeds, as the node agent reports them
#: (``+observed``: the true speeds; ``+observed-util``: what the agent's utilisation-ratio proxy
#: would report, from the ground truth's pair utilisation — Lucid only).
OBSERVED_SUFFIX = "+observed"
OBSERVED_UTIL_SUFFIX = "+observed-util"
#: Policies that use pair speeds, so that feeding them measurements means something.
OBSERVABLE_POLICIES = ("horus",)
#: The largest simulated cluster (the arrays of the cluster state scale with it).
MAX_SIM_GPUS = 1_000_000


def parse_run(name: str) -> tuple[str, str | None]:
    """``"horus+observed"`` → (``"horus"``, ``"exact"``); ``"horus+observed-util"`` →
    (``"horus"``, ``"util"``); a plain policy name → (name, None).

    Unknown policies, or feedback on a policy that ignores pair speeds, are errors."""
    base, observe = name, None
    for suffix, mode in ((OBSERVED_UTIL_SUFFIX, "util"), (OBSERVED_SUFFIX, "exact")):
        if name.endswith(suffix):
            base, observe = name[: -len(suffix)], mode
            break
    get_policy(base)  # raises ConfigError listing the known names
    if observe and base not in OBSERVABLE_POLICIES:
        raise ConfigError(
            f"{name!r}: only {', '.join(OBSERVABLE_POLICIES)} uses pair speeds, so only "
            f"{', '.join(p + OBSERVED_SUFFIX for p in OBSERVABLE_POLICIES)} (or "
            f"{OBSERVED_UTIL_SUFFIX}) can learn from observed ones"
        )
    return base, observe


@dataclass(frozen=True)
class SimConfig:
    """How the simulated cluster looks and what the run records."""

    gpus: int = 1024
    gpus_per_node: int = 8
    #: Points kept for the utilisation-over-time plot.
    timeline_points: int = 1000
    #: A job counts as "slowed" when its mean speed is below this fraction of solo speed.
    slow_threshold: float = 0.8
    progress: bool = False
    #: Skip (and count in ``SimResult.rejected``) jobs that can never fit the cluster, e.g.
    #: whose predicted memory exceeds every GPU, instead of failing the run.
    drop_impossible: bool = False

    def __post_init__(self) -> None:
        if not (1 <= self.gpus <= MAX_SIM_GPUS and 1 <= self.gpus_per_node <= 1024):
            raise ValidationError(
                f"need 1..{MAX_SIM_GPUS} GPUs (--gpus) and 1..1024 GPUs per node "
                f"(--gpus-per-node), got {self.gpus}, {self.gpus_per_node}"
            )
        if not 1 <= self.timeline_points <= 1_000_000:
            raise ValidationError(f"timeline_points must be 1..1000000, got {self.timeline_points}")
        if not (math.isfinite(self.slow_threshold) and 0 < self.slow_threshold <= 1):
            raise ValidationError(f"slow_threshold must be in (0, 1], got {self.slow_threshold}")


@dataclass
class _Running:
    rec: JobRecord
    request: JobRequest
    remaining: float  # solo-seconds of work left
    rate: float = 1.0
    last: float = 0.0
    version: int = 0
    util: float = 0.0
    gpus: list[int] = field(default_factory=list)


class Simulator:
    """Runs one trace under one policy on a uniform cluster of ``truth``'s GPU model."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        truth: GroundTruth,
        policy: str,
        predictor: Predictor,
        config: SimConfig | None = None,
        settings: SchedulerSettings | None = None,
        trace_name: str = "trace",
    ) -> None:
        self.config = config or SimConfig()
        self.truth = truth
        self.trace = sorted(trace, key=lambda j: (j.submit_time, j.job_id))
        self.trace_name = trace_name
        cfg = self.config
        nodes = math.ceil(cfg.gpus / cfg.gpus_per_node)
        self.state = ClusterState.uniform(
            nodes, cfg.gpus_per_node, truth.gpu_model, truth.gpu_memory_mib
        )
        if nodes * cfg.gpus_per_node != cfg.gpus:  # last node smaller: mark extra GPUs unhealthy
            for i in range(cfg.gpus, nodes * cfg.gpus_per_node):
                self.state.set_health(f"node-{nodes - 1}", i % cfg.gpus_per_node, False)
        base, self.observe = parse_run(policy)
        if self.observe == "util" and not truth.pair_util:
            raise ConfigError(
                f"{policy!r} needs the GPU's measured utilisation in each pair, which the "
                f"{truth.source} ground truth does not have (Lucid's does); use horus+observed"
            )
        pair = truth.speed if base == "oracle" else None
        self.scheduler = Scheduler(base, predictor, settings, pair_speed=pair)
        self.policy = policy
        seen: set[str] = set()
        for j in self.trace:
            if j.job_id in seen:
                raise ValidationError(f"trace {trace_name}: job id {j.job_id} appears twice")
            seen.add(j.job_id)
            if j.kind not in truth.by_kind:
                raise ValidationError(
                    f"trace {trace_name}: job {j.job_id} has kind {j.kind!r}, unknown to the "
                    f"{truth.source} ground truth"
                )
            if j.num_gpus > cfg.gpus:
                raise ValidationError(
                    f"trace {trace_name}: job {j.job_id} needs {j.num_gpus} GPUs but the "
                    f"simulated cluster has {cfg.gpus}"
                )

    def _request(self, j: TraceJob) -> JobRequest:
        gpn = self.config.gpus_per_node
        if j.num_gpus <= gpn:
            replicas, per = 1, j.num_gpus
        else:
            replicas, per = math.ceil(j.num_gpus / gpn), gpn
        return JobRequest(
            name=j.job_id,
            profile=self.truth.profile(j.kind),
            kind=j.kind,
            replicas=replicas,
            gpus_per_replica=per,
            priority=j.priority,
            submit_time=j.submit_time,
        )

    def run(self) -> SimResult:
        """Simulate the whole trace; the result holds every job's record and the metrics."""
        return _Run(self).loop()


class _Run:
    """One simulation in progress: the clock, the queue, what runs, the completion events and
    the utilisation integrals. Each method is one step of the event loop (:meth:`loop`)."""

    def __init__(self, sim: Simulator) -> None:
        self.t0 = time.perf_counter()
        self.sim, self.st, self.sched = sim, sim.state, sim.scheduler
        self.truth, self.cfg = sim.truth, sim.config
        self.speed = sim.truth.speed
        self.queue = self.sched.new_queue(self.st)
        self.records: dict[str, JobRecord] = {}
        self.running: dict[str, _Running] = {}
        #: (completion time, sequence, job, version): stale once the job's version moved on.
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = 0
        self.arrivals = sim.trace
        self.ai = 0
        self.done = 0
        self.now = self.arrivals[0].submit_time if self.arrivals else 0.0
        self.busy = 0
        self.gpu_util = [0.0] * self.st.gpu_count
        self.util_total = 0.0
        cfg = self.cfg
        self.result = SimResult(
            sim.policy, sim.trace_name, cfg.gpus, [], slow_threshold=cfg.slow_threshold
        )
        horizon = (self.arrivals[-1].submit_time - self.now) if self.arrivals else 0.0
        self.sample_dt = max(horizon, 1.0) / max(cfg.timeline_points, 1)
        self.next_sample = self.now
        self.last_progress = -1
        util_known = all(t.util is not None for t in self.truth.types)
        self.result.util_source = "measured" if util_known else "predicted"
        #: horus+observed: jobs seen alone on a GPU, and the neighbour kinds of jobs not yet
        #: seen alone (reported once they are), as the agent's baseline requires.
        self.alone: set[str] = set()
        self.paired: dict[str, set[str]] = {}

    def loop(self) -> SimResult:
        n_total = len(self.arrivals)
        while self.ai < n_total or self.events:
            before = (self.ai, len(self.events))
            self._advance_to(self._next_time())
            changed, freed = self._complete_due()
            new = self._admit_arrivals()
            self._start(self._schedule(freed, new), changed)
            if changed:
                self._refresh({g for g in changed if self.st.residents[g]})
                self.busy = int(np.count_nonzero(self.st.njobs))
            self._show_progress()
            self._check_progress(before, changed)
        return self._finish()

    # --- the clock ------------------------------------------------------------------------
    def _next_time(self) -> float:
        """The next arrival or completion; an error when it is not a finite later time."""
        t_next = min(
            self.arrivals[self.ai].submit_time if self.ai < len(self.arrivals) else math.inf,
            self.events[0][0] if self.events else math.inf,
        )
        if not math.isfinite(t_next) or t_next < self.now:
            raise ValidationError(
                f"trace {self.sim.trace_name}: the next event time is {t_next!r} at clock "
                f"{self.now!r}; every arrival and completion time must be finite and ordered"
            )
        return t_next

    def _advance_to(self, t_next: float) -> None:
        """Integrate busy GPUs and utilisation up to ``t_next`` and sample the timeline."""
        result, cfg = self.result, self.cfg
        dt = t_next - self.now
        result.busy_integral += self.busy * dt
        result.util_integral += self.util_total * dt
        self.now = t_next
        if self.now >= self.next_sample:
            result.timeline.append((self.now, self.busy / cfg.gpus, self.util_total / cfg.gpus))
            self.next_sample = self.now + self.sample_dt

    # --- jobs leave, arrive, start --------------------------------------------------------
    def _complete_due(self) -> tuple[set[int], bool]:
        """Finish every job whose completion is due; (GPUs they freed, whether any did)."""
        st, events, now = self.st, self.events, self.now
        freed = False
        changed: set[int] = set()
        while events and events[0][0] <= now:
            _, _, name, version = heapq.heappop(events)
            r = self.running.get(name)
            if r is None or r.version != version:
                continue
            del self.running[name]
            self.alone.discard(name)
            self.paired.pop(name, None)
            r.rec.finish = now
            gpus = st.gpus_of(name)
            st.release(name)
            for g in gpus:
                self.util_total -= self.gpu_util[g]
                self.gpu_util[g] = 0.0
            changed.update(gpus)
            freed = True
            self.done += 1
        return changed, freed

    def _admit_arrivals(self) -> list[JobRequest]:
        """Queue every job that has arrived (one that can never fit is dropped or an error)."""
        sim, cfg, arrivals = self.sim, self.cfg, self.arrivals
        new: list[JobRequest] = []
        while self.ai < len(arrivals) and arrivals[self.ai].submit_time <= self.now:
            j = arrivals[self.ai]
            self.ai += 1
            req = sim._request(j)
            why = self.sched.check_possible(self.st, req)
            if why is not None and cfg.drop_impossible:
                self.result.rejected.append(f"{j.job_id}: {why}")
                continue
            if why is not None:
                raise ValidationError(f"trace {sim.trace_name}: job {j.job_id} {why}")
            self.records[j.job_id] = JobRecord(
                j.job_id, j.kind, j.num_gpus, j.submit_time, j.duration
            )
            self.queue.push(req)
            new.append(req)
        return new

    def _schedule(self, freed: bool, new: list[JobRequest]) -> ScheduleResult | None:
        """A full pass when GPUs were freed, or when the head of the queue has just started
        to starve and needs its reservation; otherwise only the new jobs can change anything
        (an existing reservation still binds them)."""
        sched, st, now = self.sched, self.st, self.now
        head = self.queue.head()
        starving = (
            head is not None
            and now - head.submit_time > sched.settings.starvation_seconds
            and sched.reserved_for != head.name
        )
        if freed or starving:
            return sched.schedule(st, self.queue, now=now, explain=False)
        if new:
            only = {r.name for r in new}
            return sched.schedule(st, self.queue, now=now, explain=False, only=only)
        return None

    def _start(self, res: ScheduleResult | None, changed: set[int]) -> None:
        """Start the jobs a pass placed (their GPUs join ``changed``)."""
        if res is None:
            return
        st = self.st
        for p in res.placed:
            rec = self.records[p.job]
            rec.start = self.now
            gpus = st.gpus_of(p.job)
            req = st.jobs[p.job].request
            t = self.truth.by_kind[req.kind]
            util = t.util if t.util is not None else st.jobs[p.job].prediction.util_mean
            self.running[p.job] = _Running(rec, req, rec.duration, 1.0, self.now, 0, util, gpus)
            changed.update(gpus)

    # --- speeds ---------------------------------------------------------------------------
    def _refresh(self, gpus: set[int]) -> None:
        """New speeds for every job on ``gpus`` (and new completion events), then the
        utilisation of every GPU those jobs run on."""
        st, now = self.st, self.now
        touched: dict[str, _Running] = {}
        for g in gpus:
            for res in st.residents[g]:
                touched[res.job] = self.running[res.job]
        util_gpus: set[int] = set(gpus)
        if self.sim.observe:
            self._observe(gpus)
        for r in touched.values():
            r.remaining -= r.rate * (now - r.last)
            r.last = now
            new_rate = self._rate_of(r)
            r.rate = new_rate
            r.version += 1
            self.seq += 1
            heapq.heappush(
                self.events,
                (now + max(r.remaining, 0.0) / new_rate, self.seq, r.rec.job_id, r.version),
            )
            util_gpus.update(r.gpus)
        for g in util_gpus:
            u = 0.0
            for res in st.residents[g]:
                r2 = self.running[res.job]
                u += r2.util * r2.rate
            u = min(100.0, u)
            self.util_total += u - self.gpu_util[g]
            self.gpu_util[g] = u

    def _rate_of(self, r: _Running) -> float:
        """A job's speed: on each GPU the product of its pair speeds, the slowest GPU's."""
        best = 1.0
        for g in r.gpus:
            s = 1.0
            for other in self.st.residents[g]:
                if other.job != r.rec.job_id:
                    s *= self.speed(r.request.kind, other.kind)
            best = min(best, s)
        if not (math.isfinite(best) and best > 0):
            raise ValidationError(
                f"ground truth {self.truth.source}: job {r.rec.job_id} ({r.request.kind}) "
                f"would run at speed {best!r} next to its neighbours; a speed must be a finite "
                "number above 0 (check the pair speeds of this ground truth)"
            )
        return best

    def _observe(self, gpus: set[int]) -> None:
        """``+observed``: what the node agent would now know about pairs on ``gpus``."""
        for g in gpus:
            here = self.st.residents[g]
            if len(here) == 1:  # a baseline: report what this job was paired with
                self.alone.add(here[0].job)
                for neighbour in self.paired.pop(here[0].job, ()):
                    self._report(here[0].kind, neighbour)
            elif len(here) == 2:
                for me, them in ((here[0], here[1]), (here[1], here[0])):
                    if me.job in self.alone:
                        self._report(me.kind, them.kind)
                    else:
                        self.paired.setdefault(me.job, set()).add(them.kind)

    def _report(self, kind: str, other: str) -> None:
        truth = self.truth
        if self.sim.observe == "util":  # the agent's proxy; nothing where it cannot be derived
            value = truth.util_ratio_speed(kind, other)
            if value is not None:
                self.sched.observe_pair(kind, other, truth.gpu_model, value)
        else:
            self.sched.observe_pair(kind, other, truth.gpu_model, self.speed(kind, other))

    # --- progress and the end -------------------------------------------------------------
    def _show_progress(self) -> None:
        n_total = len(self.arrivals)
        if not (self.cfg.progress and n_total):
            return
        pct = int(100 * self.done / n_total)
        if pct != self.last_progress:
            self.last_progress = pct
            bar = "#" * (pct // 4)
            print(
                f"\r{self.sim.policy:>14} [{bar:<25}] {pct:3d}% {self.done}/{n_total} jobs",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def _check_progress(self, before: tuple[int, int], changed: set[int]) -> None:
        """Errors instead of a loop that spins or a job that can never start."""
        sim = self.sim
        if (self.ai, len(self.events)) == before and not changed:
            # Neither an arrival nor an event was consumed: the next pass would be this one
            # again. Unreachable with checked inputs; kept so no input can spin the loop.
            raise ValidationError(
                f"trace {sim.trace_name}: the simulation made no progress at t={self.now!r} "
                f"(policy {sim.policy}); an arrival or completion time is not comparable"
            )
        if not self.events and self.ai >= len(self.arrivals) and len(self.queue):
            stuck = self.queue.head()
            raise ValidationError(
                f"trace {sim.trace_name}: job {stuck.name if stuck else '?'} can never be "
                f"placed under policy {sim.policy} on an idle cluster"
            )

    def _finish(self) -> SimResult:
        result, cfg = self.result, self.cfg
        if cfg.progress:
            print(file=sys.stderr)
        result.records = list(self.records.values())
        result.wall_seconds = time.perf_counter() - self.t0
        if result.timeline and result.timeline[-1][0] < self.now:
            result.timeline.append((self.now, self.busy / cfg.gpus, self.util_total / cfg.gpus))
        return result
