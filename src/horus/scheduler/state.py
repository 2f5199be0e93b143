"""Cluster state: nodes → GPUs → the job shares on each, kept as flat numpy arrays.

Why arrays: a placement decision on a 1,000-node × 8-GPU cluster must take well under 5 ms,
so every policy scores all GPUs with a handful of vectorised operations instead of a Python
loop per GPU. GPUs are numbered globally in node order (node 0's GPUs first), so the GPUs of
one node are contiguous. Each GPU also carries a *signature*: the sorted tuple of job kinds
running on it, interned to a small integer. Interference scores depend only on (new job kind,
signature), so they are computed once per distinct signature, not once per GPU.

The operator rebuilds a state from Kubernetes objects with :meth:`ClusterState.from_inventory`
and :meth:`ClusterState.add_job`; the simulator keeps one state and applies/releases placements.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from horus.api.inventory import GpuDevice
from horus.common.constants import GPU_CORE_UNITS_PER_GPU
from horus.common.errors import ValidationError
from horus.predictor.interface import ResourcePrediction
from horus.scheduler.types import GpuShare, GpuView, JobRequest, Placement

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class _Resident:
    """One job share on one GPU (internal bookkeeping)."""

    job: str
    kind: str
    core: int
    memory: int
    util: float


@dataclass
class _PlacedJob:
    request: JobRequest
    prediction: ResourcePrediction
    gpus: list[int]


_STATE_TOKENS = itertools.count(1)


class ClusterState:
    """Mutable state of a GPU cluster as the scheduler sees it.

    Build it with :meth:`from_inventory` (node name → list of :class:`GpuDevice`), then record
    what already runs with :meth:`add_job` (from ``horus.io/gpu-assignment`` annotations) or
    :meth:`apply` (a :class:`Placement` the scheduler returned). :meth:`release` frees a job.
    """

    def __init__(self, nodes: Mapping[str, Sequence[GpuDevice]]) -> None:
        #: Unique per instance (copies get their own). Caches keyed by a state use this, not
        #: ``id()``: Python reuses the id of a freed object, which would hand a new state the
        #: cached tables of an old one.
        self.token = next(_STATE_TOKENS)
        #: Identifies the GPU layout (nodes, models, memory sizes), which copies share.
        self.layout_token = self.token
        self.node_names: list[str] = []
        node_of: list[int] = []
        self.gpu_index: list[int] = []
        self.gpu_uuid: list[str] = []
        self.gpu_model: list[str] = []
        mem: list[int] = []
        healthy: list[bool] = []
        self._by_ref: dict[tuple[str, int], int] = {}
        self._by_uuid: dict[str, int] = {}
        for n, (node, gpus) in enumerate(nodes.items()):
            if not node:
                raise ValidationError("node name must not be empty")
            self.node_names.append(node)
            for gpu in sorted(gpus, key=lambda d: d.index):
                g = len(self.gpu_index)
                if (node, gpu.index) in self._by_ref:
                    raise ValidationError(f"node {node}: duplicate GPU index {gpu.index}")
                if gpu.uuid in self._by_uuid:
                    raise ValidationError(f"node {node}: GPU UUID {gpu.uuid} is not unique")
                self._by_ref[(node, gpu.index)] = g
                self._by_uuid[gpu.uuid] = g
                node_of.append(n)
                self.gpu_index.append(gpu.index)
                self.gpu_uuid.append(gpu.uuid)
                self.gpu_model.append(gpu.model)
                mem.append(gpu.memory_mib)
                healthy.append(gpu.healthy)
        #: The nodes this state offers GPUs on (for membership tests).
        self.node_set: frozenset[str] = frozenset(self.node_names)
        self._node_ids = {node: n for n, node in enumerate(self.node_names)}
        self.models: list[str] = sorted(set(self.gpu_model))
        model_id = {m: i for i, m in enumerate(self.models)}
        n_gpus = len(self.gpu_index)
        self.node_of: IntArray = np.array(node_of, dtype=np.int64)
        self.model_of: IntArray = np.array([model_id[m] for m in self.gpu_model], dtype=np.int64)
        self.mem_total: IntArray = np.array(mem, dtype=np.int64)
        self.healthy: BoolArray = np.array(healthy, dtype=np.bool_)
        self.mem_used: IntArray = np.zeros(n_gpus, dtype=np.int64)
        self.core_used: IntArray = np.zeros(n_gpus, dtype=np.int64)
        self.util_sum: FloatArray = np.zeros(n_gpus, dtype=np.float64)
        self.njobs: IntArray = np.zeros(n_gpus, dtype=np.int64)
        self.sig_id: IntArray = np.zeros(n_gpus, dtype=np.int64)
        self.residents: list[list[_Resident]] = [[] for _ in range(n_gpus)]
        self.signatures: list[tuple[str, ...]] = [()]
        self._sig_ids: dict[tuple[str, ...], int] = {(): 0}
        #: Job kind → ids of the signatures holding it (lets a measured pair invalidate only
        #: the cached gains it concerns).
        self.kind_sigs: dict[str, set[int]] = {}
        self.jobs: dict[str, _PlacedJob] = {}
        #: Bumped on every change; lets callers cache per-state work.
        self.version = 0

    # --- construction -------------------------------------------------------------------
    @classmethod
    def from_inventory(cls, nodes: Mapping[str, Sequence[GpuDevice]]) -> ClusterState:
        """A state with the given nodes and GPUs and nothing running yet."""
        return cls(nodes)

    @classmethod
    def uniform(
        cls, nodes: int, gpus_per_node: int, model: str, memory_mib: int, prefix: str = "node"
    ) -> ClusterState:
        """``nodes`` identical nodes named ``{prefix}-{i}`` (simulator and benchmarks)."""
        from horus.api.inventory import simulated_gpu_uuid

        if nodes < 1 or gpus_per_node < 1:
            raise ValidationError(
                f"a cluster needs >= 1 node and >= 1 GPU per node, got {nodes}×{gpus_per_node}"
            )
        inv = {}
        for i in range(nodes):
            name = f"{prefix}-{i}"
            inv[name] = [
                GpuDevice(j, simulated_gpu_uuid(name, j), model, memory_mib)
                for j in range(gpus_per_node)
            ]
        return cls(inv)

    # --- queries --------------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return len(self.gpu_index)

    @property
    def largest_gpu_mib(self) -> int:
        """The memory of the cluster's largest GPU (0 without GPUs): what a refusal for a job
        too big for every GPU quotes."""
        return int(self.mem_total.max(initial=0))

    @property
    def node_bounds(self) -> IntArray:
        """Node n's GPUs are ``node_bounds[n]:node_bounds[n + 1]`` (GPUs are numbered in node
        order). Worked out once per layout: copies and forks share it, the layout never
        changes."""
        bounds: IntArray | None = self.__dict__.get("_node_bounds")
        if bounds is None:
            bounds = np.searchsorted(self.node_of, np.arange(len(self.node_names) + 1))
            self.__dict__["_node_bounds"] = bounds
        return bounds

    def label(self, g: int) -> str:
        """``node/gpu-i`` for global GPU number ``g``."""
        return f"{self.node_names[int(self.node_of[g])]}/gpu-{self.gpu_index[g]}"

    def node_index(self, node: str) -> int:
        """The number of ``node`` in :attr:`node_names` (what :attr:`node_of` holds); -1
        when the state has no such node."""
        return self._node_ids.get(node, -1)

    def gpu_id(self, node: str, index: int) -> int:
        try:
            return self._by_ref[(node, index)]
        except KeyError:
            raise ValidationError(f"no GPU {index} on node {node} in the cluster state") from None

    def view(self, g: int) -> GpuView:
        """A snapshot of global GPU ``g``."""
        return GpuView(
            node=self.node_names[int(self.node_of[g])],
            index=self.gpu_index[g],
            uuid=self.gpu_uuid[g],
            model=self.gpu_model[g],
            memory_mib=int(self.mem_total[g]),
            healthy=bool(self.healthy[g]),
            memory_used_mib=int(self.mem_used[g]),
            core_used_percent=int(self.core_used[g]),
            util_sum=float(self.util_sum[g]),
            jobs=tuple(r.job for r in self.residents[g]),
        )

    def views(self) -> list[GpuView]:
        return [self.view(g) for g in range(self.gpu_count)]

    def gpus_of(self, job: str) -> list[int]:
        return list(self.jobs[job].gpus)

    def shares_of(self, job: str) -> tuple[GpuShare, ...]:
        """The GPU shares ``job`` holds, in the order it was given them (a
        :class:`ValidationError` when it holds none)."""
        placed = self.jobs.get(job)
        if placed is None:
            raise ValidationError(f"job {job} is not placed in the cluster state")
        out = []
        for g in placed.gpus:
            r = next(r for r in self.residents[g] if r.job == job)
            node = self.node_names[int(self.node_of[g])]
            out.append(GpuShare(node, self.gpu_index[g], self.gpu_uuid[g], r.core, r.memory))
        return tuple(out)

    def copy(self) -> ClusterState:
        """An independent copy (for dry runs: ``scheduler.schedule(state.copy(), …)``)."""
        new = ClusterState.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        new.token = next(_STATE_TOKENS)
        for name in ("mem_used", "core_used", "util_sum", "njobs", "sig_id", "healthy"):
            setattr(new, name, getattr(self, name).copy())
        new.residents = [list(r) for r in self.residents]
        new.signatures = list(self.signatures)
        new._sig_ids = dict(self._sig_ids)
        new.kind_sigs = {k: set(v) for k, v in self.kind_sigs.items()}
        new.jobs = {
            k: _PlacedJob(v.request, v.prediction, list(v.gpus)) for k, v in self.jobs.items()
        }
        return new

    def fork(self) -> ClusterState:
        """An independent copy that shares each GPU's list of residents and each job's
        record with this state: :meth:`add_job` and :meth:`release` replace a GPU's list
        and a job's record rather than edit them, so neither state sees the other's
        changes. What it saves: on a large cluster :meth:`copy` spends most of its time
        copying one small list per GPU and every job's record, and the extender's live state
        is forked on every change of the cluster. A caller that reorders a GPU's
        residents must assign a new list, not sort the shared one."""
        new = ClusterState.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        new.token = next(_STATE_TOKENS)
        for name in ("mem_used", "core_used", "util_sum", "njobs", "sig_id", "healthy"):
            setattr(new, name, getattr(self, name).copy())
        new.residents = list(self.residents)
        new.signatures = list(self.signatures)
        new._sig_ids = self._sig_ids.copy()
        new.kind_sigs = {k: set(v) for k, v in self.kind_sigs.items()}
        # .copy(), not dict(): after releases the dict has deleted entries, which dict()
        # copies entry by entry and .copy() clones in one step (2.4 vs 0.3 ms at 24,000)
        new.jobs = self.jobs.copy()
        return new

    def set_health(self, node: str, index: int, healthy: bool) -> None:
        self.healthy[self.gpu_id(node, index)] = healthy
        self.version += 1

    # --- mutation -------------------------------------------------------------------------
    def signature_id(self, sig: tuple[str, ...]) -> int:
        sid = self._sig_ids.get(sig)
        if sid is None:
            sid = len(self.signatures)
            self._sig_ids[sig] = sid
            self.signatures.append(sig)
            for kind in set(sig):
                self.kind_sigs.setdefault(kind, set()).add(sid)
        return sid

    def _refresh_sig(self, g: int) -> None:
        self.sig_id[g] = self.signature_id(tuple(sorted(r.kind for r in self.residents[g])))

    def add_job(
        self,
        job: JobRequest,
        shares: Iterable[GpuShare],
        prediction: ResourcePrediction,
    ) -> None:
        """Record that ``job`` runs with ``shares`` (e.g. rebuilt from pod annotations).

        Raises :class:`ValidationError` naming the GPU when a share does not exist, the job
        is already recorded, or the share would push a GPU past its core or memory capacity.
        """
        if job.name in self.jobs:
            raise ValidationError(f"job {job.name} is already placed in the cluster state")
        gpus: list[int] = []
        shares = list(shares)
        for s in shares:
            g = self._by_uuid.get(s.gpu_uuid) if s.gpu_uuid else None
            if g is None:
                g = self.gpu_id(s.node, s.gpu_index)
            if g in gpus:
                raise ValidationError(f"job {job.name}: GPU {self.label(g)} assigned twice")
            if self.core_used[g] + s.core_percent > GPU_CORE_UNITS_PER_GPU:
                raise ValidationError(
                    f"job {job.name}: {self.label(g)} would be at "
                    f"{self.core_used[g] + s.core_percent}% core (max 100)"
                )
            if self.mem_used[g] + s.memory_mib > self.mem_total[g]:
                raise ValidationError(
                    f"job {job.name}: {self.label(g)} would use "
                    f"{self.mem_used[g] + s.memory_mib} MiB of {self.mem_total[g]} MiB"
                )
            gpus.append(g)
        for s, g in zip(shares, gpus, strict=True):
            # A new list, not an append: a fork() shares the old one (see fork).
            self.residents[g] = [
                *self.residents[g],
                _Resident(job.name, job.kind, s.core_percent, s.memory_mib, prediction.util_mean),
            ]
            self.mem_used[g] += s.memory_mib
            self.core_used[g] += s.core_percent
            self.util_sum[g] += prediction.util_mean
            self.njobs[g] += 1
            self._refresh_sig(g)
        self.jobs[job.name] = _PlacedJob(job, prediction, gpus)
        self.version += 1

    def apply(self, job: JobRequest, placement: Placement) -> None:
        """Record a placement the scheduler returned for ``job``."""
        self.add_job(job, placement.shares, placement.prediction)

    def release(self, job: str) -> JobRequest:
        """Free every share of ``job``; returns its request. Unknown jobs are an error."""
        placed = self.jobs.pop(job, None)
        if placed is None:
            raise ValidationError(f"job {job} is not placed in the cluster state")
        for g in placed.gpus:
            keep = [r for r in self.residents[g] if r.job != job]
            for r in self.residents[g]:
                if r.job == job:
                    self.mem_used[g] -= r.memory
                    self.core_used[g] -= r.core
                    self.util_sum[g] -= r.util
                    self.njobs[g] -= 1
            self.residents[g] = keep
            if not keep:
                self.util_sum[g] = 0.0
            self._refresh_sig(g)
        self.version += 1
        return placed.request


class NodeSubset(ClusterState):
    """The GPUs of some nodes of a state, read-only: what :meth:`Scheduler.evaluate
    <horus.scheduler.Scheduler.evaluate>` scores for the scheduler extender's candidate nodes
    instead of every GPU of the cluster. kube-scheduler sends an extender only a share of a
    large cluster's nodes (``percentageOfNodesToScore``), so judging every GPU of the cluster
    per pod (needs, filters, scores, per-node counts) for the candidates' GPUs alone is work
    that grows with the cluster, not with the candidates
    (``benchmarks/results/extender-filter.json``).

    Its GPUs are numbered from 0 in the whole state's order (each node's together and in
    order; :attr:`gpus` holds their numbers in the whole state), so a policy that judges each
    GPU by its own figures (``Policy.per_gpu``) scores them as it does in the whole state and
    each node's best GPU is the same. Shared with the whole state, not copied: ``token`` and
    the signatures with their ids (the policies' signature tables, cached by token, serve
    both — nothing indexed by GPU may be cached under a subset's token), the GPU models and
    their ids, and ``jobs`` (what the scheduler reads residents' profiles from; their GPUs
    are numbered in the whole state). :attr:`largest_gpu_mib` is the whole cluster's, as a
    refusal quotes it. Nothing may change it: the mutators raise.
    """

    def __init__(self, whole: ClusterState, nodes: Sequence[int]) -> None:
        """The GPUs of ``nodes`` (node numbers in ``whole``; taken in order, once each)."""
        # Not ClusterState.__init__: nothing is built from an inventory, every field is the
        # whole state's or a gather of it.
        self.whole = whole
        picked = np.unique(np.asarray(nodes, dtype=np.int64))
        bounds = whole.node_bounds
        starts, counts = bounds[picked], bounds[picked + 1] - bounds[picked]
        total = int(counts.sum())
        # each picked node's GPU numbers, in order: a run of consecutive numbers per node
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        gpus: IntArray = np.asarray(offsets + np.arange(total), dtype=np.int64)
        #: Each GPU's number in :attr:`whole`.
        self.gpus = gpus
        listed = gpus.tolist()
        self.token = whole.token
        self.layout_token = next(_STATE_TOKENS)
        self.version = whole.version
        self.node_names = [whole.node_names[n] for n in picked.tolist()]
        self.node_set = frozenset(self.node_names)
        self._node_ids = {node: n for n, node in enumerate(self.node_names)}
        self.node_of = np.repeat(np.arange(len(picked), dtype=np.int64), counts)
        self.gpu_index = list(map(whole.gpu_index.__getitem__, listed))
        self.gpu_uuid = list(map(whole.gpu_uuid.__getitem__, listed))
        self.gpu_model = list(map(whole.gpu_model.__getitem__, listed))
        self.residents = list(map(whole.residents.__getitem__, listed))
        self.models = whole.models
        self.signatures = whole.signatures
        self._sig_ids = whole._sig_ids
        self.kind_sigs = whole.kind_sigs
        self.jobs = whole.jobs
        for name in ("model_of", "mem_total", "healthy", "mem_used", "core_used", "util_sum"):
            setattr(self, name, getattr(whole, name)[gpus])
        self.njobs = whole.njobs[gpus]
        self.sig_id = whole.sig_id[gpus]

    @property
    def largest_gpu_mib(self) -> int:
        return self.whole.largest_gpu_mib

    def gpu_id(self, node: str, index: int) -> int:
        """The number here of GPU ``index`` on ``node`` (a :class:`ValidationError` when the
        subset does not hold it)."""
        g = self.whole.gpu_id(node, index)
        at = int(np.searchsorted(self.gpus, g))
        if at >= len(self.gpus) or int(self.gpus[at]) != g:
            raise ValidationError(f"no GPU {index} on node {node} in this subset of the state")
        return at

    def gpus_of(self, job: str) -> list[int]:
        """Not here: a job's GPUs are numbered in the whole state (``whole.gpus_of``)."""
        _read_only()

    def shares_of(self, job: str) -> tuple[GpuShare, ...]:
        return self.whole.shares_of(job)

    def copy(self) -> ClusterState:
        _read_only()

    def fork(self) -> ClusterState:
        _read_only()

    def set_health(self, node: str, index: int, healthy: bool) -> None:
        _read_only()

    def signature_id(self, sig: tuple[str, ...]) -> int:
        _read_only()

    def add_job(
        self, job: JobRequest, shares: Iterable[GpuShare], prediction: ResourcePrediction
    ) -> None:
        _read_only()

    def release(self, job: str) -> JobRequest:
        _read_only()


def _read_only() -> NoReturn:
    raise TypeError("a NodeSubset is a read-only view of some nodes of a state")
