"""The pure placement core: cluster state, GPU scoring policies, queue. No Kubernetes imports,
so the operator, the scheduler extender and the simulator call it unchanged.

Public API (see ``docs/scheduler.md``)::

    state = ClusterState.from_inventory({"node-1": [GpuDevice(...), ...]})
    state.add_job(job_request, shares, prediction)        # what already runs
    sched = Scheduler(policy="horus", predictor=predictor)
    result = sched.schedule(state, [job_request, ...], now=time.time())
    result.placed   -> Placement (replicas → GpuShare: node, GPU index/UUID, core %, MiB)
    result.refused  -> Refusal (job, reason, code: RefusalCode)
    sched.evaluate(state, job_request, ["node-1", ...])  # {node: Placement | Refusal}, per node
    plan_migrations(sched, state, running_jobs, now)       # MigrationPlan: moves of running jobs
    plan_preemptions(sched, state, waiting, running_jobs)  # [Preemption]: victims + placement
"""

from horus.scheduler.estimates import published_pair_error
from horus.scheduler.migration import plan_migrations
from horus.scheduler.policies import POLICY_NAMES, Policy, get_policy
from horus.scheduler.preemption import plan_preemption, plan_preemptions
from horus.scheduler.queue import JobQueue
from horus.scheduler.scheduler import Scheduler
from horus.scheduler.state import ClusterState
from horus.scheduler.types import (
    GpuShare,
    GpuView,
    JobRequest,
    MigrationPlan,
    MigrationSettings,
    Move,
    MoveReason,
    Placement,
    Preemption,
    PreemptionSettings,
    Refusal,
    RefusalCode,
    ReplicaPlacement,
    RunningJob,
    ScheduleResult,
    SchedulerSettings,
    job_kind,
)

__all__ = [
    "POLICY_NAMES",
    "ClusterState",
    "GpuShare",
    "GpuView",
    "JobQueue",
    "JobRequest",
    "MigrationPlan",
    "MigrationSettings",
    "Move",
    "MoveReason",
    "Placement",
    "Policy",
    "Preemption",
    "PreemptionSettings",
    "Refusal",
    "RefusalCode",
    "ReplicaPlacement",
    "RunningJob",
    "ScheduleResult",
    "Scheduler",
    "SchedulerSettings",
    "get_policy",
    "job_kind",
    "plan_migrations",
    "plan_preemption",
    "plan_preemptions",
    "published_pair_error",
]
