"""The live state kept up to date from what changed, instead of rebuilt from the whole cluster.

Why: the extender answers filter and prioritize from one live state per generation of its
watch-fed copy (:class:`~horus.operator.view.ClusterView`). Rebuilding it on every change —
every resident's request, shares and prediction, every GPU's counters — takes seconds on a
large cluster, and the first request after any pod or DLJob change would wait for it. Here only
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

The operator's pass keeps one too (:class:`~horus.operator.livesource.DeltaSource`): it
hands the update the profiles its admission resolved and the records it distrusts (a
rollback), and a job whose profile or trust changed is counted again as if its objects had.
The pass then places on a fork of the state, so what is kept here is the cluster's, never the
pass's decisions.

Device-plugin path only (no ResourceClaims or ResourceSlices). The DRA path keeps a full
build instead (:class:`~horus.operator.livesource.FullBuildCache`) for as long as nothing it is
built from changed.
"""

from __future__ import annotations

import bisect
from collections import ChainMap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horus.api.assignment import GpuAssignment
from horus.api.podassignment import read_pod_assignment
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.node.identities import Registry
from horus.operator.committed_shares import add_dljob_records, add_pod_group, pod_groups
from horus.operator.listing_changes import Change, HeldListing, Lookup, reindex, same_nodes
from horus.operator.livestate import LiveObjects
from horus.operator.node_gpus import gpu_nodes
from horus.operator.object_reads import annotations_of
from horus.operator.residents import (
    MOVING_SUFFIX,
    TERMINAL_POD_PHASES,
    LiveState,
    dljob_job_name,
    pod_job_name,
)
from horus.predictor.interface import GraphProfile, Predictor
from horus.scheduler import ClusterState

__all__ = [
    "FULL_FIRST",
    "FULL_KEYS",
    "FULL_LISTING",
    "FULL_NODES",
    "FULL_REFUSED",
    "Change",
    "LiveDelta",
]

#: Why an update built the whole state (:attr:`LiveDelta.full_reason`).
FULL_FIRST = "first"
FULL_REFUSED = "refused record"  # a share refused for lack of room: the order decides
FULL_KEYS = "key ring"
FULL_NODES = "nodes"
FULL_LISTING = "listing"  # a key twice, or unchanged objects listed in another order


#: A plain pod's graph profile as the caller resolves it (None: none), keyed by the pod. The
#: operator passes none (it resolves profiles by job, its admission's); the extender reads
#: each pod's annotation.
ProfileOf = Callable[[Mapping[str, Any]], GraphProfile | None]
_Member = tuple[Mapping[str, Any], GpuAssignment]
#: Where the full build adds a job (see :meth:`LiveDelta._rank`); _LAST: no place known.
_Rank = tuple[int, int, int]
_LAST: _Rank = (2, 0, 0)


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

    def __init__(self, predictor: Predictor | None, profile_of: ProfileOf | None = None) -> None:
        self.predictor = predictor
        self.profile_of = profile_of
        self.full_builds = 0
        self.updates = 0
        #: Why the last full build was made (empty before any): what an operator's pass log
        #: and metrics say, so a cluster where every update ends in a full build shows why.
        self.full_reason = ""
        self._keys: KeyRing | None = None
        self._nodes: list[Mapping[str, Any]] | None = None
        self._identities: Registry | None = None
        self._base_excluded: dict[str, str] = {}
        self._base_problems: list[str] = []
        self._dl: dict[str, _DLJobPart] = {}
        self._pods: dict[str, _PodPart] = {}
        self._group_problems: dict[str, list[str]] = {}
        #: The listing as last seen, and each key's place in it.
        self._held = HeldListing()
        #: The DLJob records that count (the jobs whose pods group under them).
        self._recorded: set[str] = set()
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
        #: What the caller resolved beside the objects (``build_live_state``'s ``profiles``
        #: and ``distrusted``), as of the last update.
        self._profiles: dict[str, GraphProfile] = {}
        self._distrusted: frozenset[str] = frozenset()

    @property
    def nodes_epoch(self) -> int:
        """Moves when the nodes changed (what per-node caches of the caller depend on)."""
        return self.full_builds

    def update(
        self,
        objs: LiveObjects,
        keys: KeyRing | None,
        profiles: Mapping[str, GraphProfile] | None = None,
        distrusted: Collection[str] = (),
    ) -> LiveState:
        """The live state of ``objs`` (a new object; the previous one is left as it was).

        ``profiles`` and ``distrusted`` as :func:`build_live_state` takes them: a job whose
        entry in either changed since the last update is counted again."""
        also = self._inputs(profiles, distrusted)
        why = (
            FULL_FIRST
            if self._live is None
            else FULL_KEYS
            if keys != self._keys
            else FULL_NODES
            if not same_nodes(self._nodes, objs.nodes) or objs.identities != self._identities
            else ""
        )
        if why:
            return self._full(objs, keys, why)
        self._nodes = list(objs.nodes)  # the same nodes; compare with these next time
        found = self._held.diff(objs, self._dl, self._dl_ids, self._pods, self._pod_ids)
        if found is None:
            return self._full(objs, keys, FULL_LISTING)
        held = self._live
        if self._conflicted and (found[1] or found[4] or also):
            # a record refused for lack of room: which one wins depends on the whole
            # listing's order, so any change builds in full — but no change keeps the full
            # build made for this very listing (else a still cluster with one such GPU
            # rebuilds on every request and pass, each a whole build)
            return self._full(objs, keys, FULL_REFUSED)
        live = self._apply(*found, keys, also=also)
        if live is None or (self._conflicted and live is not held):
            return self._full(objs, keys, FULL_REFUSED)  # a refusal here: the order decides
        self.updates += 1
        return live

    def update_changes(
        self,
        changes: Sequence[Change] | None,
        lookup: Lookup,
        listing: Callable[[], LiveObjects],
        keys: KeyRing | None,
    ) -> LiveState:
        """The live state after ``changes`` (the watch's events since the last update, in
        order; each key's object now from ``lookup``), without reading the whole listing —
        the work is that of the changes, not of the cluster. ``changes`` None (not known: a
        relist, a gap in the feed), a node among them, or a change that does not fit what
        is held (an object back in the listing without being added): :meth:`update` with
        ``listing()``, which finds what changed itself."""
        if changes is None or self._live is None or self._conflicted or keys != self._keys:
            return self.update(listing(), keys)
        found = self._held.replay(changes, lookup, self._dl, self._pods)
        live = None if found is None else self._apply(*found, keys, fast=True)
        if live is not None and self._conflicted:
            # a refusal made by this update: the events were taken in, so only a full build
            # of the listing gives the order's answer (a held conflicted state is always one)
            return self._full(listing(), keys, FULL_REFUSED)
        if live is None:
            return self.update(listing(), keys)
        self.updates += 1
        return live

    def _inputs(
        self, profiles: Mapping[str, GraphProfile] | None, distrusted: Collection[str]
    ) -> set[str]:
        """Take in the caller's profiles and distrusted records; the jobs whose entry in
        either changed (they must be counted again)."""
        new_profiles = dict(profiles or {})
        new_distrusted = frozenset(distrusted)
        changed = set(new_distrusted.symmetric_difference(self._distrusted))
        old = self._profiles
        if new_profiles != old:  # one C-level comparison when nothing changed
            changed.update(
                k for k in old.keys() | new_profiles.keys() if old.get(k) != new_profiles.get(k)
            )
        self._profiles, self._distrusted = new_profiles, new_distrusted
        return changed

    # --- the whole listing ------------------------------------------------------------------
    def _full(self, objs: LiveObjects, keys: KeyRing | None, why: str) -> LiveState:
        self.full_builds += 1
        self.full_reason = why
        self._keys, self._nodes = keys, list(objs.nodes)
        self._identities = objs.identities
        base = gpu_nodes(objs.nodes, None, objs.identities)
        self._base_excluded, self._base_problems = dict(base.excluded_nodes), list(base.problems)
        self._dl, self._pods, self._group_problems = {}, {}, {}
        self._dl_ids, self._pod_ids = {}, {}
        self._by_candidate, self._by_group, self._with_problems = {}, {}, set()
        self._recorded = set()
        self._held.dl_objs, self._held.pod_objs = {}, {}
        self._live = LiveState(state=base.state)
        found = self._held.diff(objs, self._dl, self._dl_ids, self._pods, self._pod_ids, True)
        live = None if found is None else self._apply(*found, keys, everything=True)
        assert live is not None
        return live

    def _apply(
        self,
        dl_new: dict[str, Mapping[str, Any]],
        dl_changed: list[str],
        dl_seq: dict[str, int],
        pod_new: dict[str, Mapping[str, Any]],
        pod_changed: list[str],
        pod_seq: dict[str, int],
        keys: KeyRing | None,
        everything: bool = False,
        fast: bool = False,
        also: Collection[str] = (),
    ) -> LiveState | None:
        """``also``: jobs to count again although none of their objects changed (their
        profile or trust did)."""
        assert self._live is not None
        if not everything and not pod_changed and not dl_changed and not also:
            self._held.dl_objs, self._held.pod_objs = dl_new, pod_new
            self._held.dl_seq, self._held.pod_seq = dl_seq, pod_seq
            return self._live
        affected: set[str] = set(also)
        for key in dl_changed:
            old = self._dl.get(key)
            if old is not None:
                affected.add(old.jname)
            if key in dl_new:
                affected.add(_dljob_name(dl_new[key]))
        new_parts: dict[str, _PodPart] = {}
        for key in pod_changed:
            gone = self._pods.get(key)
            if gone is not None and gone.candidate is not None:
                affected.add(gone.candidate)
            if key in pod_new:
                part = new_parts[key] = _PodPart(pod_new[key], _candidate(pod_new[key], keys))
                if part.candidate is not None:
                    affected.add(part.candidate)
        # each affected job's rank before the change (in the places held until now)
        old_ranks = (
            {
                j: self._rank(
                    j,
                    ChainMap(self._held.was_dl, self._held.dl_seq),
                    ChainMap(self._held.was_pods, self._held.pod_seq),
                )
                for a in affected
                for j in (a, a + MOVING_SUFFIX)
            }
            if fast
            else {}
        )
        self._held.dl_objs, self._held.pod_objs = dl_new, pod_new
        self._held.dl_seq, self._held.pod_seq = dl_seq, pod_seq
        order = pod_seq
        reindex(self._dl_ids, self._dl, dl_new, dl_changed)
        reindex(self._pod_ids, self._pods, pod_new, pod_changed)
        for key in pod_changed:
            gone = self._pods.pop(key, None)
            if gone is not None:
                self._unindex(key, gone)
            fresh = new_parts.get(key)
            if fresh is not None:
                self._pods[key] = fresh
                if fresh.candidate is not None:
                    self._by_candidate.setdefault(fresh.candidate, set()).add(key)
        old_live = self._live
        if not everything and not affected and not dl_changed:
            # Only pods that count under no job changed (a pending pod created, updated or
            # deleted — most of a busy cluster's events): the full build skips such pods,
            # so the live state is the one held, and nothing is forked or copied.
            self.added = ()
            return old_live
        state = old_live.state if everything else old_live.state.fork()
        # .copy(), not dict(): it clones a dict with deleted entries in one step, where
        # dict() inserts entry by entry
        residents = old_live.residents.copy()
        touched: set[int] = set()
        released: list[str] = []
        for jname in affected:
            for name in (jname, jname + MOVING_SUFFIX):
                if name in state.jobs:
                    touched.update(state.jobs[name].gpus)
                    state.release(name)
                    residents.pop(name, None)
                    released.append(name)
        scratch = LiveState(state=state)
        # (a) the DLJob records that changed, and those of the jobs whose pods changed (a
        # DLJob's record and its pods' shares go by one name: both were released)
        for key in [*dl_changed, *(j for j in affected if j in dl_new and j not in dl_changed)]:
            gone_part = self._dl.pop(key, None)
            if gone_part is not None:
                self._recorded.discard(gone_part.jname)
            if key not in dl_new:
                continue
            scratch.problems, scratch.observed_pairs = [], []
            obj = dl_new[key]
            recorded = add_dljob_records(
                scratch, [obj], self.predictor, self._profiles, keys, self._distrusted
            )
            jname = _dljob_name(obj)
            self._dl[key] = _DLJobPart(
                obj, jname, scratch.problems, scratch.observed_pairs, jname in recorded
            )
            if jname in recorded:
                self._recorded.add(jname)
        recorded_now = self._recorded
        # (b) every pod whose job is counted again: its group (and what it says) anew
        members_of: dict[str, list[tuple[int, _Member]]] = {}
        for jname in affected:
            self._group_problems.pop(jname, None)
            for key in self._by_candidate.get(jname, ()):
                part = self._pods[key]
                self._unindex(key, part)
                scratch.problems = []
                groups = pod_groups(scratch, [part.obj], recorded_now, keys)
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
            add_pod_group(scratch, jname, [m for _, m in ranked], self.predictor, profile)
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
        kept_order = (
            self._in_place(old_live, state, residents, released, added, old_ranks, dl_seq, order)
            if fast
            else None
        )
        return self._settle(
            state, residents, touched, added, dl_new, dl_seq, order, everything, kept_order
        )

    def _rank(self, job: str, dl_seq: Mapping[str, int], order: Mapping[str, int]) -> _Rank:
        """Where the full build adds ``job``: records in the DLJobs' order (a move's old
        GPUs right after), then the pods' groups in their first pod's order."""
        base = job.removesuffix(MOVING_SUFFIX)
        record = self._dl.get(base)
        if record is not None and record.recorded:
            return (0, dl_seq[base], int(base != job))
        members = self._by_group.get(job)
        if members:
            return (1, min(order[k] for k in members), 0)
        return _LAST

    def _in_place(
        self,
        old_live: LiveState,
        state: ClusterState,
        residents: Mapping[str, Any],
        released: Sequence[str],
        added: Sequence[str],
        old_ranks: Mapping[str, _Rank],
        dl_seq: Mapping[str, int],
        order: Mapping[str, int],
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The jobs and residents in the full build's order without sorting all of them:
        the previous state's order (C-level dict copies) with the jobs gone taken out and
        each job counted again put back in its old place — right when its rank did not
        move (places are numbers that only grow, kept for unchanged objects, so every other
        job's rank is as before) — and new jobs at the end when they rank after every
        other. None: a rank moved; :meth:`_settle` sorts them in."""
        jobs = old_live.state.jobs.copy()  # .copy(): see _apply
        kept = old_live.residents.copy()
        again = set(added)
        for name in released:
            if name not in again:
                jobs.pop(name, None)
                kept.pop(name, None)
        new: list[tuple[_Rank, str]] = []
        for name in added:
            rank = self._rank(name, dl_seq, order)
            if rank == _LAST:
                return None
            if name in jobs:
                if old_ranks.get(name) != rank or name not in kept:
                    return None  # moved, or not a resident before: sort them in
            else:
                new.append((rank, name))
        if new:
            new.sort()
            tail = next(reversed(jobs), None)
            if tail is not None and self._rank(tail, dl_seq, order) >= new[0][0]:
                return None
        for name in added:
            if name in jobs:
                jobs[name] = state.jobs[name]
        for _, name in new:
            jobs[name] = state.jobs[name]
        # the same jobs as the state's: it holds every job not released, and of those released
        # exactly the ones added again (and the new ones), all of which ``jobs`` holds
        if len(jobs) != len(state.jobs) or any(
            (name in state.jobs) != (name in again) for name in released
        ):
            return None
        for name in added:
            kept[name] = residents[name]
        for _, name in new:
            kept[name] = residents[name]
        return jobs, kept

    def _unindex(self, key: str, part: _PodPart) -> None:
        """Forget what ``part`` (pod ``key``) contributed to the indexes."""
        if part.group is not None:
            self._by_group.get(part.group, set()).discard(key)
        if part.candidate is not None and self._pods.get(key) is not part:
            self._by_candidate.get(part.candidate, set()).discard(key)
        self._with_problems.discard(key)
        part.group, part.member, part.problems = None, None, []

    def _known(self, jname: str, members: Sequence[_Member]) -> dict[str, GraphProfile]:
        """The caller's profile of a group: the one it passed for the job by name, or a plain
        pod's from ``profile_of`` where it has one (``pod_job_name`` keys, as the full build
        is given them)."""
        if jname in self._profiles:
            return {jname: self._profiles[jname]}
        if len(members) != 1 or not jname.startswith("pod:"):
            return {}
        pod = members[0][0]
        meta = pod.get("metadata") or {}
        if jname != pod_job_name(str(meta.get("namespace") or "default"), str(meta.get("name"))):
            return {}
        profile = self.profile_of(pod) if self.profile_of is not None else None
        return {jname: profile} if profile is not None else {}

    # --- back into the full build's order ---------------------------------------------------
    def _settle(
        self,
        state: ClusterState,
        residents: dict[str, Any],
        touched: set[int],
        added: Sequence[str],
        dl_new: Mapping[str, Mapping[str, Any]],
        dl_seq: Mapping[str, int],
        order: Mapping[str, int],
        everything: bool,
        in_place: tuple[dict[str, Any], dict[str, Any]] | None,
    ) -> LiveState:
        ranks: dict[str, _Rank] = {}

        def rank(job: str) -> _Rank:
            return self._rank(job, dl_seq, order)

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
        if in_place is not None:
            state.jobs, kept = in_place
        else:
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
    """A record was refused for lack of room (:func:`~horus.operator.residents.add_resident`):
    which one wins depends on the listing's order, so the next change rebuilds in full."""
    return any(": share not counted: " in p for p in problems)


def _dljob_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return dljob_job_name(str(meta.get("namespace", "default")), str(meta.get("name", "")))


def _candidate(pod: Mapping[str, Any], keys: KeyRing | None) -> str | None:
    """The job ``pod``'s share would count under (what ``pod_groups`` groups it by)."""
    text = annotations_of(pod).get(c.ANNOTATION_GPU_ASSIGNMENT)
    if text is None or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
        return None
    read = read_pod_assignment(pod, keys)
    if read.assignment is not None and read.assignment.job is not None:
        return dljob_job_name(read.namespace, read.assignment.job)
    return pod_job_name(read.namespace, read.name)
