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
from horus.scheduler import ClusterState, JobRequest, Scheduler, SchedulerSettings
from horus.scheduler.policies import get_policy
from horus.sim.groundtruth import GroundTruth
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
class JobRecord:
    """What happened to one job."""

    job_id: str
    kind: str
    num_gpus: int
    submit: float
    duration: float
    start: float = math.nan
    finish: float = math.nan

    @property
    def jct(self) -> float:
        return self.finish - self.submit

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def mean_speed(self) -> float:
        run = self.finish - self.start
        return self.duration / run if run > 0 else 1.0


@dataclass
class SimResult:
    """Per-job records, the utilisation timeline and summary metrics of one run."""

    policy: str
    trace: str
    gpus: int
    records: list[JobRecord]
    timeline: list[tuple[float, float, float]] = field(default_factory=list)  # t, busy, util
    busy_integral: float = 0.0
    util_integral: float = 0.0
    wall_seconds: float = 0.0
    slow_threshold: float = 0.8
    util_source: str = "measured"
    rejected: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """Makespan, JCT mean/median/p95, mean queueing delay, busy fraction, summed util…"""
        recs = self.records
        jct = sorted(r.jct for r in recs)
        start = min(r.submit for r in recs)
        end = max(r.finish for r in recs)
        span = max(end - start, 1e-9)

        def pct(q: float) -> float:
            return jct[min(len(jct) - 1, int(q * len(jct)))]

        return {
            "jobs": float(len(recs)),
            "makespan_s": end - start,
            "jct_mean_s": sum(jct) / len(jct),
            "jct_median_s": pct(0.5),
            "jct_p95_s": pct(0.95),
            "queue_delay_mean_s": sum(r.wait for r in recs) / len(recs),
            "gpu_busy_fraction": self.busy_integral / (span * self.gpus),
            "summed_util_mean_pct": self.util_integral / (span * self.gpus),
            "jobs_slowed": float(sum(1 for r in recs if r.mean_speed < self.slow_threshold - 1e-9)),
            "wall_seconds": self.wall_seconds,
            "jobs_rejected": float(len(self.rejected)),
        }


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
        t0 = time.perf_counter()
        st, sched, truth, cfg = self.state, self.scheduler, self.truth, self.config
        queue = sched.new_queue(st)
        records: dict[str, JobRecord] = {}
        running: dict[str, _Running] = {}
        events: list[tuple[float, int, str, int]] = []
        seq = 0
        arrivals = self.trace
        ai = 0
        n_total = len(arrivals)
        done = 0
        now = arrivals[0].submit_time if arrivals else 0.0
        busy = 0
        gpu_util = [0.0] * st.gpu_count
        util_total = 0.0
        result = SimResult(
            self.policy, self.trace_name, cfg.gpus, [], slow_threshold=cfg.slow_threshold
        )
        horizon = (arrivals[-1].submit_time - now) if arrivals else 0.0
        sample_dt = max(horizon, 1.0) / max(cfg.timeline_points, 1)
        next_sample = now
        last_progress = -1
        util_known = all(t.util is not None for t in truth.types)
        result.util_source = "measured" if util_known else "predicted"
        speed = truth.speed
        #: horus+observed: jobs seen alone on a GPU, and the neighbour kinds of jobs not yet
        #: seen alone (reported once they are), as the agent's baseline requires.
        alone: set[str] = set()
        paired: dict[str, set[str]] = {}

        def report(kind: str, other: str) -> None:
            if self.observe == "util":  # the agent's proxy; nothing where it cannot be derived
                value = truth.util_ratio_speed(kind, other)
                if value is not None:
                    sched.observe_pair(kind, other, truth.gpu_model, value)
            else:
                sched.observe_pair(kind, other, truth.gpu_model, speed(kind, other))

        def rate_of(r: _Running) -> float:
            best = 1.0
            for g in r.gpus:
                s = 1.0
                for other in st.residents[g]:
                    if other.job != r.rec.job_id:
                        s *= speed(r.request.kind, other.kind)
                best = min(best, s)
            if not (math.isfinite(best) and best > 0):
                raise ValidationError(
                    f"ground truth {truth.source}: job {r.rec.job_id} ({r.request.kind}) would "
                    f"run at speed {best!r} next to its neighbours; a speed must be a finite "
                    "number above 0 (check the pair speeds of this ground truth)"
                )
            return best

        def refresh(gpus: set[int]) -> None:
            nonlocal seq, util_total
            touched: dict[str, _Running] = {}
            for g in gpus:
                for res in st.residents[g]:
                    touched[res.job] = running[res.job]
            util_gpus: set[int] = set(gpus)
            if self.observe:
                for g in gpus:
                    here = st.residents[g]
                    if len(here) == 1:  # a baseline: report what this job was paired with
                        alone.add(here[0].job)
                        for neighbour in paired.pop(here[0].job, ()):
                            report(here[0].kind, neighbour)
                    elif len(here) == 2:
                        for me, them in ((here[0], here[1]), (here[1], here[0])):
                            if me.job in alone:
                                report(me.kind, them.kind)
                            else:
                                paired.setdefault(me.job, set()).add(them.kind)
            for r in touched.values():
                r.remaining -= r.rate * (now - r.last)
                r.last = now
                new_rate = rate_of(r)
                r.rate = new_rate
                r.version += 1
                seq += 1
                heapq.heappush(
                    events, (now + max(r.remaining, 0.0) / new_rate, seq, r.rec.job_id, r.version)
                )
                util_gpus.update(r.gpus)
            for g in util_gpus:
                u = 0.0
                for res in st.residents[g]:
                    r2 = running[res.job]
                    u += r2.util * r2.rate
                u = min(100.0, u)
                util_total += u - gpu_util[g]
                gpu_util[g] = u

        while ai < n_total or events:
            t_next = min(
                arrivals[ai].submit_time if ai < n_total else math.inf,
                events[0][0] if events else math.inf,
            )
            if not math.isfinite(t_next) or t_next < now:
                raise ValidationError(
                    f"trace {self.trace_name}: the next event time is {t_next!r} at clock "
                    f"{now!r}; every arrival and completion time must be finite and ordered"
                )
            before = (ai, len(events))
            dt = t_next - now
            result.busy_integral += busy * dt
            result.util_integral += util_total * dt
            now = t_next
            if now >= next_sample:
                result.timeline.append((now, busy / cfg.gpus, util_total / cfg.gpus))
                next_sample = now + sample_dt
            freed = False
            changed: set[int] = set()
            while events and events[0][0] <= now:
                _, _, name, version = heapq.heappop(events)
                r = running.get(name)
                if r is None or r.version != version:
                    continue
                del running[name]
                alone.discard(name)
                paired.pop(name, None)
                r.rec.finish = now
                gpus = st.gpus_of(name)
                st.release(name)
                for g in gpus:
                    util_total -= gpu_util[g]
                    gpu_util[g] = 0.0
                changed.update(gpus)
                freed = True
                done += 1
            new: list[JobRequest] = []
            while ai < n_total and arrivals[ai].submit_time <= now:
                j = arrivals[ai]
                ai += 1
                req = self._request(j)
                why = sched.check_possible(st, req)
                if why is not None and cfg.drop_impossible:
                    result.rejected.append(f"{j.job_id}: {why}")
                    continue
                if why is not None:
                    raise ValidationError(f"trace {self.trace_name}: job {j.job_id} {why}")
                records[j.job_id] = JobRecord(
                    j.job_id, j.kind, j.num_gpus, j.submit_time, j.duration
                )
                queue.push(req)
                new.append(req)
            head = queue.head()
            # A full pass is needed when GPUs were freed, or when the head has just started
            # to starve and needs its reservation; otherwise only the new jobs can change
            # anything (an existing reservation still binds them).
            starving = (
                head is not None
                and now - head.submit_time > sched.settings.starvation_seconds
                and sched.reserved_for != head.name
            )
            if freed or starving:
                res = sched.schedule(st, queue, now=now, explain=False)
            elif new:
                res = sched.schedule(st, queue, now=now, explain=False, only={r.name for r in new})
            else:
                res = None
            if res is not None:
                for p in res.placed:
                    rec = records[p.job]
                    rec.start = now
                    gpus = st.gpus_of(p.job)
                    req = st.jobs[p.job].request
                    t = truth.by_kind[req.kind]
                    util = t.util if t.util is not None else st.jobs[p.job].prediction.util_mean
                    running[p.job] = _Running(rec, req, rec.duration, 1.0, now, 0, util, gpus)
                    changed.update(gpus)
            if changed:
                refresh({g for g in changed if st.residents[g]})
                busy = int(np.count_nonzero(st.njobs))
            if cfg.progress and n_total:
                pct = int(100 * done / n_total)
                if pct != last_progress:
                    last_progress = pct
                    bar = "#" * (pct // 4)
                    print(
                        f"\r{self.policy:>14} [{bar:<25}] {pct:3d}% {done}/{n_total} jobs",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
            if (ai, len(events)) == before and not changed:
                # Neither an arrival nor an event was consumed: the next pass would be this one
                # again. Unreachable with checked inputs; kept so no input can spin the loop.
                raise ValidationError(
                    f"trace {self.trace_name}: the simulation made no progress at t={now!r} "
                    f"(policy {self.policy}); an arrival or completion time is not comparable"
                )
            if not events and ai >= n_total and len(queue):
                stuck = queue.head()
                raise ValidationError(
                    f"trace {self.trace_name}: job {stuck.name if stuck else '?'} can never be placed "
                    f"under policy {self.policy} on an idle cluster"
                )
        if cfg.progress:
            print(file=sys.stderr)
        result.records = list(records.values())
        result.wall_seconds = time.perf_counter() - t0
        if result.timeline and result.timeline[-1][0] < now:
            result.timeline.append((now, busy / cfg.gpus, util_total / cfg.gpus))
        return result
