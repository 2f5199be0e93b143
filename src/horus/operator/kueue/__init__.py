"""Horus as Kueue's GPU placement check: the jobs people already run, placed as gangs.

Kueue keeps quota, fair sharing and preemption between queues; Horus keeps what only it
does. A ClusterQueue that names an AdmissionCheck of controller
``horus.io/gpu-placement`` (:data:`horus.common.constants.KUEUE_ADMISSION_CHECK_CONTROLLER`)
hands each of its Workloads, once Kueue has reserved quota for it, to this package:

1. :mod:`~horus.operator.kueue.workload` reads a Workload (pod sets, quota, Horus' check);
2. :mod:`~horus.operator.kueue.demand` turns each pod set into a gang request (share and
   profile from its pod template);
3. :mod:`~horus.operator.kueue.check` decides all pod sets together on the pass's cluster
   state — all or none — and answers the check: ``Ready`` with ``podSetUpdates`` that carry
   the chosen GPU slots (:mod:`~horus.operator.kueue.slots`), or ``Retry``/``Rejected`` with a
   sentence a person can read. Ready Workloads' slots count in every later pass's state
   until a pod's claim fills them;
4. :mod:`~horus.operator.kueue.gang_pods` gives each pod of an admitted Workload one free
   slot: the claim its admission named, pinned to the slot's GPU with the slot's share.

Kueue's own preemption or eviction resets the check (quota released), which releases the
slots; the claims go with their pods.
"""
