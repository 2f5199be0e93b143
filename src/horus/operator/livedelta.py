"""The live state kept up to date from what changed, instead of rebuilt from the whole cluster.

Why: the extender answers filter and prioritize from one live state per generation of its
watch-fed copy (:class:`~horus.operator.view.ClusterView`). Rebuilding it on every change —
every resident's request, shares and prediction, all 40,000 GPUs' counters at 5,000 nodes —
took seconds, and the first request after any pod or DLJob change waited for it. Here only
the jobs a change touches are released from a copy of the last state and counted again; the
rest is kept.

The answer must be the one :func:`~horus.operator.livestate.build_live_state` gives for the
same objects, to the bit (the differential test builds both). So:

* a changed object is found by identity: the view hands out the stored dicts themselves and
  replaces a dict when its object changes, so ``old is new`` means "unchanged";
* a changed node, a changed key ring or predictor, a duplicate key, or a state where one
  record was refused for lack of room (which record wins depends on the order of the whole
  listing) → the full build, counted in :attr:`LiveDelta.full_builds`;
* every contribution goes through the same functions the full build uses, one object at a
  time, and is put back in the full build's order: residents on each GPU (and the float sum
  of their utilisations, added in that order), the state's job order, ``problems`` and
  ``observed_pairs``.

Device-plugin path only (no ResourceClaims or ResourceSlices): that is what the extender
builds.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horus.api.assignment import GpuAssignment
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.operator.livestate import (
    MOVING_SUFFIX,
    TERMINAL_POD_PHASES,
    LiveObjects,
    LiveState,
    _add_dljob_records,
    _add_pod_group,
    _gpu_nodes,
    _pod_groups,
    dljob_job_name,
    pod_job_name,
)
from horus.operator.records import annotations_of, key_of
from horus.predictor.interface import GraphProfile, Predictor
from horus.scheduler import ClusterState

__all__ = ["LiveDelta"]

#: A pod's graph profile as the caller resolves it (None: none), keyed by the pod.
ProfileOf = Callable[[Mapping[str, Any]], GraphProfile | None]
_Member = tuple[Mapping[str, Any], GpuAssignment]


@dataclass
class _DLJobPart:
    obj: Mapping[str, Any]
    jname: str
    problems: list[str]
    pairs: list[tuple[str, str, str, float, float | None]]
    recorded: bool


@dataclass
class _PodPart:
    obj: Mapping[str, Any]
    #: The job the pod's share would count under (None: it carries no live assignment).
    candidate: str | None
    problems: list[str] = field(default_factory=list)
    member: _Member | None = None
    group: str | None = None


class LiveDelta:
    """One live state, brought up to date with :meth:`update` (see the module docstring)."""

    def __init__(self, predictor: Predictor | None, profile_of: ProfileOf) -> None:
        self.predictor = predictor
        self.profile_of = profile_of
        self.full_builds = 0
        self.updates = 0
        self._keys: KeyRing | None = None
        self._nodes: list[Mapping[str, Any]] | None = None
        self._base_excluded: dict[str, str] = {}
        self._base_problems: list[str] = []
        self._dl: dict[str, _DLJobPart] = {}
        self._pods: dict[str, _PodPart] = {}
        self._group_problems: dict[str, list[str]] = {}
        self._dl_keys: list[str] = []
        self._pod_keys: list[str] = []
        #: Indexes over the pods: object id → key (for the objects held), the job each pod's
        #: share would count under → pods, the group each counts in → pods, and the pods
        #: with something to say in ``problems``.
        self._dl_ids: dict[int, str] = {}
        self._pod_ids: dict[int, str] = {}
        self._by_candidate: dict[str, set[str]] = {}
        self._by_group: dict[str, set[str]] = {}
        self._with_problems: set[str] = set()
        #: The residents the last update counted again (the rest are the previous state's).
        self.added: tuple[str, ...] = ()
        self._live: LiveState | None = None
        self._conflicted = False

    @property
    def nodes_epoch(self) -> int:
        """Moves when the nodes changed (what per-node caches of the caller depend on)."""
        return self.full_builds

    def update(self, objs: LiveObjects, keys: KeyRing | None) -> LiveState:
        """The live state of ``objs`` (a new object; the previous one is left as it was)."""
        if (
            self._live is None
            or self._conflicted
            or keys != self._keys
            or not _same(self._nodes, objs.nodes)
        ):
            return self._full(objs, keys)
        self._nodes = list(objs.nodes)  # the same nodes; compare with these next time
        live = self._apply(objs, keys)
        if live is None or self._conflicted:  # a refusal here: the listing's order decides
            return self._full(objs, keys)
        self.updates += 1
        return live

    # --- the whole listing ------------------------------------------------------------------
    def _full(self, objs: LiveObjects, keys: KeyRing | None) -> LiveState:
        self.full_builds += 1
        self._keys, self._nodes = keys, list(objs.nodes)
        base = _gpu_nodes(objs.nodes)
        self._base_excluded, self._base_problems = dict(base.excluded_nodes), list(base.problems)
        self._dl, self._pods, self._group_problems = {}, {}, {}
        self._dl_ids, self._pod_ids = {}, {}
        self._by_candidate, self._by_group, self._with_problems = {}, {}, set()
        self._live = LiveState(state=base.state)
        live = self._apply(objs, keys, everything=True)
        assert live is not None
        return live

    # --- what changed -----------------------------------------------------------------------
    def _apply(
        self, objs: LiveObjects, keys: KeyRing | None, everything: bool = False
    ) -> LiveState | None:
        assert self._live is not None
        dl_diff = _diff(objs.dljobs, self._dl, self._dl_ids)
        pod_diff = _diff(objs.pods, self._pods, self._pod_ids)
        if dl_diff is None or pod_diff is None:
            return None  # the same key twice: only the listing's order decides
        (dl_new, dl_changed), (pod_new, pod_changed) = dl_diff, pod_diff
        if not everything and not (
            _kept_order(self._dl_keys, dl_new, dl_changed)
            and _kept_order(self._pod_keys, pod_new, pod_changed)
        ):
            return None  # unchanged objects moved in the listing: the order decides ties
        if not everything and not pod_changed and not dl_changed:
            return self._live
        self._dl_keys, self._pod_keys = list(dl_new), list(pod_new)
        _reindex(self._dl_ids, self._dl, dl_new, dl_changed)
        _reindex(self._pod_ids, self._pods, pod_new, pod_changed)
        affected: set[str] = set()
        for key in dl_changed:
            old = self._dl.get(key)
            if old is not None:
                affected.add(old.jname)
            if key in dl_new:
                affected.add(_dljob_name(dl_new[key]))
        for key in pod_changed:
            gone = self._pods.pop(key, None)
            if gone is not None:
                self._unindex(key, gone)
                if gone.candidate is not None:
                    affected.add(gone.candidate)
            if key in pod_new:
                part = _PodPart(pod_new[key], _candidate(pod_new[key], keys))
                self._pods[key] = part
                if part.candidate is not None:
                    affected.add(part.candidate)
                    self._by_candidate.setdefault(part.candidate, set()).add(key)
        old_live = self._live
        state = old_live.state if everything else old_live.state.fork()
        residents = dict(old_live.residents)
        touched: set[int] = set()
        for jname in affected:
            for name in (jname, jname + MOVING_SUFFIX):
                if name in state.jobs:
                    touched.update(state.jobs[name].gpus)
                    state.release(name)
                    residents.pop(name, None)
        scratch = LiveState(state=state)
        # (a) the DLJob records that changed, and those of the jobs whose pods changed (a
        # DLJob's record and its pods' shares go by one name: both were released)
        for key in [*dl_changed, *(j for j in affected if j in dl_new and j not in dl_changed)]:
            self._dl.pop(key, None)
            if key not in dl_new:
                continue
            scratch.problems, scratch.observed_pairs = [], []
            obj = dl_new[key]
            recorded = _add_dljob_records(scratch, [obj], self.predictor, {}, keys)
            jname = _dljob_name(obj)
            self._dl[key] = _DLJobPart(
                obj, jname, scratch.problems, scratch.observed_pairs, jname in recorded
            )
        recorded_now = {p.jname for p in self._dl.values() if p.recorded}
        # (b) every pod whose job is counted again: its group (and what it says) anew
        order = dict(zip(pod_new, range(len(pod_new)), strict=True))  # no Python loop
        members_of: dict[str, list[tuple[int, _Member]]] = {}
        for jname in affected:
            self._group_problems.pop(jname, None)
            for key in self._by_candidate.get(jname, ()):
                part = self._pods[key]
                self._unindex(key, part)
                scratch.problems = []
                groups = _pod_groups(scratch, [part.obj], recorded_now, keys)
                part.problems = scratch.problems
                if part.problems:
                    self._with_problems.add(key)
                for group, members in groups.items():
                    part.group, part.member = group, members[0]
                    self._by_group.setdefault(group, set()).add(key)
                    members_of.setdefault(group, []).append((order[key], members[0]))
        for ranked in members_of.values():
            ranked.sort(key=lambda m: m[0])
        # in the full build's order (a group where its first pod is): a refusal for lack of
        # room then names what the full build names
        for jname, ranked in sorted(members_of.items(), key=lambda kv: kv[1][0][0]):
            scratch.problems = []
            profile = self._known(jname, [m for _, m in ranked])
            _add_pod_group(scratch, jname, [m for _, m in ranked], self.predictor, profile)
            if scratch.problems:
                self._group_problems[jname] = scratch.problems
        added: list[str] = []
        for name in affected:
            for job in (name, name + MOVING_SUFFIX):
                if job in scratch.residents:
                    residents[job] = scratch.residents[job]
                    added.append(job)
                    touched.update(state.jobs[job].gpus)
        self.added = tuple(added)
        return self._settle(state, residents, touched, added, dl_new, order, everything)

    def _unindex(self, key: str, part: _PodPart) -> None:
        """Forget what ``part`` (pod ``key``) contributed to the indexes."""
        if part.group is not None:
            self._by_group.get(part.group, set()).discard(key)
        if part.candidate is not None and self._pods.get(key) is not part:
            self._by_candidate.get(part.candidate, set()).discard(key)
        self._with_problems.discard(key)
        part.group, part.member, part.problems = None, None, []

    def _known(self, jname: str, members: Sequence[_Member]) -> dict[str, GraphProfile]:
        """The caller's profiles of a plain pod's group (``pod_job_name`` keys, as the full
        build is given them)."""
        if len(members) != 1 or not jname.startswith("pod:"):
            return {}
        pod = members[0][0]
        meta = pod.get("metadata") or {}
        if jname != pod_job_name(str(meta.get("namespace") or "default"), str(meta.get("name"))):
            return {}
        profile = self.profile_of(pod)
        return {jname: profile} if profile is not None else {}

    # --- back into the full build's order ---------------------------------------------------
    def _settle(
        self,
        state: ClusterState,
        residents: dict[str, Any],
        touched: set[int],
        added: Sequence[str],
        dl_new: Mapping[str, Mapping[str, Any]],
        order: Mapping[str, int],
        everything: bool,
    ) -> LiveState:
        dl_pos = dict(zip(dl_new, range(len(dl_new)), strict=True))
        last = (2, 0, 0)

        def rank(job: str) -> tuple[int, int, int]:
            """Where the full build adds ``job``: records in the DLJobs' order (a move's
            old GPUs right after), then the pods' groups in their first pod's order."""
            base = job.removesuffix(MOVING_SUFFIX)
            record = self._dl.get(base)
            if record is not None and record.recorded:
                return (0, dl_pos[base], int(base != job))
            members = self._by_group.get(job)
            if members:
                return (1, min(order[k] for k in members), 0)
            return last

        ranks: dict[str, tuple[int, int, int]] = {}
        for g in touched:
            on = state.residents[g]
            for r in on:
                if r.job not in ranks:
                    ranks[r.job] = rank(r.job)
            on = sorted(on, key=lambda r: ranks[r.job])
            state.residents[g] = on  # a new list: the fork shares the old one
            total = 0.0
            for r in on:
                total += r.util
            state.util_sum[g] = total
        if everything:
            names = sorted(state.jobs, key=rank)
        else:  # the others kept their order: put each job added again in its place
            moved = set(added)
            names = [j for j in state.jobs if j not in moved]
            for job in sorted(added, key=rank):
                at = bisect.bisect_left(names, rank(job), key=rank)
                names.insert(at, job)
        state.jobs = dict(zip(names, map(state.jobs.__getitem__, names), strict=True))
        kept = (
            dict(zip(names, map(residents.__getitem__, names), strict=True))
            if residents.keys() == state.jobs.keys()  # every job counted is a resident
            else {k: residents[k] for k in names if k in residents}
        )
        live = LiveState(
            state=state,
            residents=kept,
            excluded_nodes=dict(self._base_excluded),
        )
        conflicted = False
        problems = list(self._base_problems)
        for key in dl_new:
            part = self._dl[key]
            problems += part.problems
            live.observed_pairs += part.pairs
            conflicted = conflicted or _refused(part.problems)
        for key in sorted(self._with_problems, key=order.__getitem__):
            problems += self._pods[key].problems
        for jname in sorted(self._group_problems, key=rank):
            problems += self._group_problems[jname]
            conflicted = conflicted or _refused(self._group_problems[jname])
        live.problems = problems
        self._conflicted = conflicted
        self._live = live
        return live


def _refused(problems: Sequence[str]) -> bool:
    """A record was refused for lack of room (:func:`livestate._add`): which one wins
    depends on the listing's order, so the next change rebuilds in full."""
    return any(": share not counted: " in p for p in problems)


def _dljob_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return dljob_job_name(str(meta.get("namespace", "default")), str(meta.get("name", "")))


def _candidate(pod: Mapping[str, Any], keys: KeyRing | None) -> str | None:
    """The job ``pod``'s share would count under (what ``_pod_groups`` groups it by)."""
    text = annotations_of(pod).get(c.ANNOTATION_GPU_ASSIGNMENT)
    if text is None or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
        return None
    read = read_pod_assignment(pod, keys)
    if read.assignment is not None and read.assignment.job is not None:
        return dljob_job_name(read.namespace, read.assignment.job)
    return pod_job_name(read.namespace, read.name)


def _diff(
    objs: Sequence[Mapping[str, Any]],
    held: Mapping[str, _DLJobPart] | Mapping[str, _PodPart],
    ids: Mapping[int, str],
) -> tuple[dict[str, Mapping[str, Any]], list[str]] | None:
    """``objs`` by ``namespace/name``, and the keys whose object is new, replaced or gone
    (None: a key twice). An object held since the last update is known by its identity —
    ``ids`` maps the id of every held object (held, so no other object has that id) to its
    key — so only new objects are read (``key_of`` on all of 5,000 nodes' pods costs
    milliseconds)."""
    found: list[str | None] = list(map(ids.get, map(id, objs)))
    fresh = [i for i, k in enumerate(found) if k is None]
    for i in fresh:
        found[i] = key_of(objs[i])
    out: dict[str, Mapping[str, Any]] = dict(zip(found, objs, strict=True))  # type: ignore[arg-type]
    if len(out) != len(objs):
        return None
    changed = [str(found[i]) for i in fresh]
    changed += [k for k in held.keys() - out.keys()]
    return out, changed


def _reindex(
    ids: dict[int, str],
    held: Mapping[str, _DLJobPart] | Mapping[str, _PodPart],
    new: Mapping[str, Mapping[str, Any]],
    changed: Sequence[str],
) -> None:
    """``ids`` after ``changed``: the replaced and gone objects out, the new ones in."""
    for key in changed:
        old = held.get(key)
        if old is not None:
            ids.pop(id(old.obj), None)
        if key in new:
            ids[id(new[key])] = key


def _kept_order(old: Sequence[str], new: Mapping[str, Any], changed: Sequence[str]) -> bool:
    """Whether the objects that did not change are listed in the same order as before (the
    watch-fed view keeps an object's place while it changes; a plain list need not)."""
    moved = set(changed)
    return [k for k in old if k not in moved] == [k for k in new if k not in moved]


def _same(old: Sequence[Mapping[str, Any]] | None, new: Sequence[Mapping[str, Any]]) -> bool:
    """The same nodes in the same order: each the same object, or one that differs only in
    its ``resourceVersion`` (the view stores a node anew when its status renewed only what
    its projection drops, such as a heartbeat — with 5,000 nodes one always has)."""
    return (
        old is not None
        and len(old) == len(new)
        and all(a is b or _unversioned(a) == _unversioned(b) for a, b in zip(old, new, strict=True))
    )


def _unversioned(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    meta = (
        {k: v for k, v in meta.items() if k != "resourceVersion"}
        if isinstance(meta, dict)
        else meta
    )
    return {**obj, "metadata": meta}
