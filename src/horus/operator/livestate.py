"""The scheduler's :class:`~horus.scheduler.ClusterState`, rebuilt from the live API objects.

Why rebuild every time instead of keeping state in memory: the operator may be killed at any
instant, a second replica may take over, and the scheduler extender places plain pods behind
our back. The only truth that survives all of that is what the apiserver holds, so every
scheduling pass starts from it:

* **GPUs** — nodes carrying ``horus.io/gpu-inventory`` (on the DRA path: the GPUs the Horus
  driver's ResourceSlice of the node publishes); a node that is NotReady,
  unschedulable or being deleted contributes no GPUs, and Unhealthy GPUs are kept but marked
  unhealthy (the scheduler never places on them, yet shares already there are still counted).
* **Shares already committed**, from two sources, de-duplicated:

  (a) each DLJob's ``status.placements`` — the *durable* record, written before its pods
      exist, so a share is counted even when the operator died before creating the pods;
  (b) every non-terminal pod with a ``horus.io/gpu-assignment`` annotation — plain pods placed
      by the scheduler extender, and the pods of DLJobs that no longer have a live record
      (the job was deleted, or already finished while some pods still run).

  A DLJob pod whose job has live placements is *not* counted again (dedup by job); plain
  pods are keyed by pod.

  (c) on the DRA path, every allocated ResourceClaim of the ``gpu.horus.io``
      driver — the kube-scheduler's allocation (``status.allocation``, which tenants cannot
      write: device, ``consumedCapacity``) — unless Horus made it for a DLJob whose record
      was counted in (a), on that record's GPUs (its signed text,
      :func:`horus.operator.claimcount.claim_owner`; never an ``ownerReferences`` entry, which
      a tenant writes). So claims Horus did not make (a tenant's, a plain pod's template
      claim) count. A claim Horus cannot read as a share counts as the whole of each GPU it
      names and overtakes nobody (:func:`horus.operator.claimcount.claim_holding`). A
      readable claim that does not fit beside the records overtook a decision whose own claim
      was not allocated yet and none of whose pods runs: that DLJob's record is taken out of
      the state (its allocated claims count instead) and named in
      :attr:`LiveState.overtaken`, so the operator re-places the job — the kube-scheduler
      never over-commits, Horus must not either. A decision with a running pod is kept
      (:attr:`LiveState.held_over`) and the claim counted up to each GPU's capacity;
  (d) on the DRA path, every claim Horus made for a plain pod's converted ``horus.io/gpu-*``
      request (:mod:`horus.operator.plain_pod_claims`; :func:`made_for_pod`, while that pod waits)
      that is not allocated yet: Horus' decision, pinned to one GPU with the share, counted
      like a record (and, like one, named in :attr:`LiveState.overtaken` when an allocated
      claim takes its capacity first).

  A pod whose signature does not verify (any more) but that the node's device plugin has
  allocated (``horus.io/gpu-allocated``, which only the node identity may write) is still
  counted, with the share it claims: it verified when it was allocated, its containers hold
  the GPU, and losing or revoking a key must never un-count a share in use. A pod
  that was never allocated holds nothing and is not counted (a replay of a signed pod).

Each rule has its module: the GPUs :mod:`horus.operator.node_gpus`, (a) and (b)
:mod:`horus.operator.committed_shares`, (c) and (d) :mod:`horus.operator.allocated_claims`, the
result a :class:`~horus.operator.residents.LiveState`. Everything here is a pure function of
lists of plain ``dict`` objects (the apiserver's JSON, camelCase), so it is unit-tested without a
cluster; the placers fetch them. The scheduler extender uses the same module.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from horus.api.signing import KeyRing
from horus.node.identities import Registry
from horus.operator.allocated_claims import add_claims, running_jobs
from horus.operator.claimcount import waiting_pods
from horus.operator.committed_shares import add_dljob_records, add_pod_group, pod_groups
from horus.operator.node_gpus import gpu_nodes
from horus.operator.object_reads import meta_of
from horus.operator.residents import LiveState, dljob_job_name
from horus.predictor.interface import GraphProfile, Predictor
from horus.scheduler import ClusterState

__all__ = ["LiveObjects", "build_cluster_state", "build_live_state"]


def build_live_state(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    dljobs: Iterable[Mapping[str, Any]],
    predictor: Predictor | None = None,
    profiles: Mapping[str, GraphProfile] | None = None,
    keys: KeyRing | None = None,
    distrusted: Collection[str] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    slices: Iterable[Mapping[str, Any]] | None = None,
    identities: Registry | None = None,
) -> LiveState:
    """Build the live cluster state (see the module docstring for the rules).

    ``claims``: the cluster's ResourceClaims on the DRA path (rule (c)); none elsewhere.
    ``slices``: on the DRA path, the ResourceSlices the GPUs are read from (the Horus
    driver's, one per node: :func:`horus.node.claim_checks.slice_gpus`) instead of the node
    inventory annotation, which only the device plugin writes; None elsewhere.
    ``identities``: the GPU identity registry (:func:`~horus.operator.node_gpus.gpu_nodes`);
    None counts every GPU a node publishes as its own (tests, tools).

    ``distrusted``: DLJobs (``ns/name``) whose record the caller does not trust although it
    is signed (a rollback): counted from their pods, as an unsigned record is.

    With ``keys``, only signed records count: a DLJob placement record whose signature does
    not verify is ignored (its job's pods are counted instead, from their own signed
    assignments), and so is a pod whose assignment signature does not verify — the device
    plugin refuses such a pod any GPU, so it holds none. Without ``keys`` (tests, tools)
    every record is taken at its word.

    ``predictor`` sizes a resident that carries no prediction but whose profile is known;
    without one, such a resident is assumed to use exactly its share. ``profiles`` maps
    DLJob names (``ns/name``) to profiles resolved elsewhere (e.g. from a ConfigMap), used for
    DLJobs with a ``configMapRef`` profile so pair speeds can still be predicted.
    Records that cannot be counted are listed in :attr:`LiveState.problems`, never raised:
    one bad object must not stop the whole cluster from being scheduled.
    """
    live = gpu_nodes(nodes, slices, identities)
    pods = list(pods)
    known = dict(profiles or {})
    recorded = add_dljob_records(live, dljobs, predictor, known, keys, distrusted)
    dra = slices is not None
    for jname, members in pod_groups(live, pods, recorded, keys, dra).items():
        add_pod_group(live, jname, members, predictor, known)
    if claims:
        uids = {
            dljob_job_name(
                str(meta_of(o).get("namespace", "default")), str(meta_of(o).get("name"))
            ): str(meta_of(o).get("uid", ""))
            for o in dljobs
        }
        by_name = {j: uids.get(j, "") for j in recorded}
        running = running_jobs(pods, by_name)
        add_claims(live, claims, by_name, waiting_pods(pods), running, keys)
    return live


def build_cluster_state(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    dljobs: Iterable[Mapping[str, Any]],
    predictor: Predictor | None = None,
) -> ClusterState:
    """Just the :class:`ClusterState` of :func:`build_live_state`."""
    return build_live_state(nodes, pods, dljobs, predictor).state


@dataclass(frozen=True)
class LiveObjects:
    """One consistent-enough listing of what :func:`build_live_state` needs (raw JSON dicts)."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    dljobs: list[dict[str, Any]]
    #: The GPU identity registry as the operator last read it
    #: (:func:`~horus.operator.node_gpus.gpu_nodes`); None: no registry (tests, tools, the
    #: extender), every GPU a node publishes counts as its own.
    identities: Registry | None = None
