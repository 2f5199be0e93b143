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

Run-time corrections (moves and preemptions; run names in :mod:`horus.sim.config`): with ``+observed``
the node agent's pair measurements reach the scheduler when and as wrong as the agent makes
them (:mod:`horus.sim.observation`); with ``+migrate`` and ``+preempt`` the planners of
:mod:`horus.scheduler` run after each pass (rate-limited to ``pass_interval_s``) and what they
plan happens, at a cost (``MoveCosts``): a moved, preempted-and-resumed or preempting job
makes no progress for ``restart_s`` and redoes ``lost_progress_s``; a preempted job goes back
to the queue with its remaining work. Simplification: a moved job leaves its old GPUs and
weighs on its new ones from the moment the move is decided (in a cluster its old pod keeps
running until its checkpoint is written, and the new one starts after it); the job itself is
charged the whole stall. The corrections are in :mod:`horus.sim.corrections`.

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
from dataclasses import dataclass, field, replace

import numpy as np

from horus.common.errors import ValidationError
from horus.predictor.interface import Predictor
from horus.scheduler import (
    ClusterState,
    JobRequest,
    Scheduler,
    ScheduleResult,
    SchedulerSettings,
)
from horus.sim.config import (
    MAX_SIM_GPUS,
    OBSERVABLE_POLICIES,
    RunSpec,
    SimConfig,
    parse_run,
)
from horus.sim.corrections import Corrections
from horus.sim.groundtruth import GroundTruth
from horus.sim.observation import AgentObserver
from horus.sim.results import JobRecord, SimResult
from horus.sim.traces import TraceJob

__all__ = ["MAX_SIM_GPUS", "OBSERVABLE_POLICIES", "SimConfig", "Simulator", "parse_run"]


@dataclass
class _Running:
    rec: JobRecord
    request: JobRequest
    remaining: float  # solo-seconds of work left
    rate: float = 1.0
    #: Progress is counted from here (later than now while the job is stalled by a move).
    last: float = 0.0
    version: int = 0
    util: float = 0.0
    gpus: list[int] = field(default_factory=list)
    #: When it (re)started, and seconds it ran before that (preempted runs).
    since: float = 0.0
    ran_before: float = 0.0
    last_moved: float | None = None

    def progress_to(self, now: float) -> None:
        """Count the work done up to ``now`` (none while stalled)."""
        self.remaining -= self.rate * max(0.0, now - self.last)
        self.last = max(self.last, now)

    def elapsed(self, now: float) -> float:
        return self.ran_before + (now - self.since)


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
        self.spec: RunSpec = parse_run(policy)
        pair = truth.speed if self.spec.policy == "oracle" else None
        # each measured pair arrives with its signal's own error (observe_pair), which the
        # scheduler turns into that pair's margin
        self.scheduler = Scheduler(self.spec.policy, predictor, settings, pair_speed=pair)
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
        spec = sim.spec
        #: The node agent's measurements (+observed), or only its timing (oracle+migrate).
        model = replace(cfg.observation, error=spec.observe or cfg.observation.error)
        self.observer = AgentObserver(model, self.truth) if spec.observe or spec.migrate else None
        #: Preempted jobs back in the queue: their work left and the seconds they had run.
        self.suspended: dict[str, tuple[float, float]] = {}
        #: The simulated operator's passes: measurements in, then preemption and migration.
        self.corrections = Corrections(self) if self.observer or spec.preempt else None

    def loop(self) -> SimResult:
        n_total = len(self.arrivals)
        while self.ai < n_total or self.events:
            before = self._position()
            self._advance_to(self._next_time())
            changed, freed = self._complete_due()
            if freed and self.corrections is not None:
                self.corrections.gpus_freed()
            new = self._admit_arrivals()
            self._start(self._schedule(freed, new), changed)
            self._refresh_gpus(changed)
            reports = self.observer.due(self.now) if self.observer is not None else False
            if self.corrections is not None:
                moved = self.corrections.run_pass(bool(changed or new or reports))
                if moved:
                    self.corrections.gpus_freed()
                    # moves and evictions free capacity the queue may use at once
                    res = self.sched.schedule(self.st, self.queue, now=self.now, explain=False)
                    self._start(res, moved)
                    self._refresh_gpus(moved)
                    changed |= moved
            self._show_progress()
            self._check_progress(before, changed)
        return self._finish()

    def _position(self) -> tuple[object, ...]:
        """What the loop consumes: if none of it moves, the loop would spin."""
        obs = len(self.observer.timers) if self.observer is not None else 0
        due = self.corrections.due if self.corrections is not None else None
        return (self.ai, len(self.events), obs, due)

    # --- the clock ------------------------------------------------------------------------
    def _next_time(self) -> float:
        """The next arrival, completion or timer; an error when it is not a finite later
        time."""
        t_next = min(
            self.arrivals[self.ai].submit_time if self.ai < len(self.arrivals) else math.inf,
            self.events[0][0] if self.events else math.inf,
            self.observer.next_time() if self.observer is not None else math.inf,
            self.corrections.next_time() if self.corrections is not None else math.inf,
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
        events, now = self.events, self.now
        freed = False
        changed: set[int] = set()
        while events and events[0][0] <= now:
            _, _, name, version = heapq.heappop(events)
            r = self.running.get(name)
            if r is None or r.version != version:
                continue
            del self.running[name]
            if self.observer is not None:
                self.observer.gone(name)
            r.rec.finish = now
            changed.update(self.vacate(name))
            freed = True
            self.done += 1
        return changed, freed

    def vacate(self, name: str) -> list[int]:
        """Release ``name``'s shares; returns its GPUs (their utilisation is recounted by
        :meth:`_refresh`, those left empty are zeroed here)."""
        st = self.st
        gpus = st.gpus_of(name)
        st.release(name)
        for g in gpus:
            self.util_total -= self.gpu_util[g]
            self.gpu_util[g] = 0.0
        return gpus

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
                j.job_id, j.kind, j.num_gpus, j.submit_time, j.duration, priority=j.priority
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
        """Start the jobs a pass placed (their GPUs join ``changed``); a preempted job
        resumes with its work left, after a restart."""
        if res is None:
            return
        for p in res.placed:
            stall = self.cfg.costs.restart_s if p.job in self.suspended else 0.0
            changed.update(self.launch(p.job, stall))

    def launch(self, name: str, stall: float) -> list[int]:
        """Run ``name``, already placed in the state, from now (after ``stall`` seconds of
        restart); returns its GPUs."""
        st, now = self.st, self.now
        rec = self.records[name]
        if math.isnan(rec.start):
            rec.start = now
        gpus = st.gpus_of(name)
        placed = st.jobs[name]
        t = self.truth.by_kind[placed.request.kind]
        util = t.util if t.util is not None else placed.prediction.util_mean
        remaining, ran = self.suspended.pop(name, (rec.duration, 0.0))
        r = _Running(rec, placed.request, remaining, 1.0, now + stall, 0, util, gpus)
        r.since, r.ran_before = now, ran
        self.running[name] = r
        return gpus

    # --- speeds ---------------------------------------------------------------------------
    def _refresh_gpus(self, changed: set[int]) -> None:
        if changed:
            self._refresh({g for g in changed if self.st.residents[g]})
            self.busy = int(np.count_nonzero(self.st.njobs))

    def _refresh(self, gpus: set[int]) -> None:
        """New speeds for every job on ``gpus`` (and new completion events), then the
        utilisation of every GPU those jobs run on; the agent sees the new co-locations."""
        st, now = self.st, self.now
        touched: dict[str, _Running] = {}
        for g in gpus:
            for res in st.residents[g]:
                touched[res.job] = self.running[res.job]
        util_gpus: set[int] = set(gpus)
        obs = self.observer
        if self.corrections is not None:
            self.corrections.neighbours_changed(touched)
        for name, r in touched.items():
            r.progress_to(now)
            new_rate = self._rate_of(r)
            r.rate = new_rate
            self.seq += 1
            r.version = self.seq  # unique: a preempted job's old events never match its new run
            heapq.heappush(
                self.events,
                (r.last + max(r.remaining, 0.0) / new_rate, self.seq, name, r.version),
            )
            util_gpus.update(r.gpus)
            if obs is not None and r.gpus[0] in gpus:
                first = r.gpus[0]
                others = [x.kind for x in st.residents[first] if x.job != name]
                obs.place(name, r.request.kind, now, others)
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

    def _check_progress(self, before: tuple[object, ...], changed: set[int]) -> None:
        """Errors instead of a loop that spins or a job that can never start."""
        sim = self.sim
        if self._position() == before and not changed:
            # Neither an arrival, an event nor a timer was consumed: the next pass would be
            # this one again. Unreachable with checked inputs; kept so no input can spin it.
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
