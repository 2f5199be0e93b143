"""Where a pass reads the cluster's live state from: one source per placement path.

Both sources give the state :func:`~horus.operator.livestate.build_live_state` would build
from the pass's listing, and keep it from pass to pass so a still cluster is not counted
again; they differ in what they list and how they keep it:

* **device plugin** (:class:`DeltaSource`): :class:`~horus.operator.livedelta.LiveDelta`
  counts again only the jobs whose objects, profile or trust changed;
* **DRA** (:class:`DraSource`): ResourceClaims and ResourceSlices are listed too, and one
  full build is handed back while nothing it was built from changed (:class:`FullBuildCache`);
  the commit path learns the pass's claims, overtaken claims and unhealthy GPUs from it.

Each reading is a fork of the state kept, so the pass places, moves and dry-runs on it
without touching what is kept: that stays the cluster's.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from horus.api.signing import KeyRing
from horus.node.identities import Registry
from horus.operator.claimcommit import ClaimPath
from horus.operator.jobapi import JobApi
from horus.operator.listing import Listing
from horus.operator.listing_changes import same_nodes
from horus.operator.livedelta import LiveDelta
from horus.operator.livestate import LiveObjects, build_live_state
from horus.operator.pass_state import JobCtx
from horus.operator.residents import LiveState
from horus.predictor.interface import GraphProfile, Predictor

__all__ = ["DeltaSource", "DraSource", "FullBuildCache", "LiveReading", "LiveSource"]


@dataclass
class LiveReading:
    """One pass's live state and how it was come by."""

    #: A fork of the state kept: the pass may place on it.
    live: LiveState
    #: ``"kept"``, or ``"full: <why>"`` (``PassReport.live_state``, the metric's label).
    how: str
    #: The residents new since the last reading when the rest is the last reading's (the
    #: session took those in already); None: take all of them in.
    fresh: tuple[str, ...] | None


class LiveSource(Protocol):
    """What the pass asks of its placement path's live state."""

    #: The GPU identity registry as last read (``horus.operator.identities``; the operator
    #: process sets it): a GPU a node publishes that is registered to another is left out.
    identities: Callable[[], Registry | None]

    def list_more(self, api: JobApi, snap: Listing) -> None:
        """List what this path's state is built from beside pods, DLJobs and nodes."""

    def read(
        self,
        snap: Listing,
        predictor: Predictor,
        keys: KeyRing,
        profiles: Mapping[str, GraphProfile],
        distrusted: Collection[str],
    ) -> LiveReading:
        """The live state of ``snap`` (``profiles`` and ``distrusted`` as
        :func:`build_live_state` takes them)."""

    def claims_taken(self, ctx: JobCtx) -> list[str]:
        """The names of ``ctx``'s replica claims held by claims Horus did not make for it."""

    def forget(self) -> None:
        """Keep nothing: the next reading is a full build."""


class DeltaSource:
    """The device-plugin path's live state: kept, counted again where something changed."""

    def __init__(self, predictor: Predictor) -> None:
        self.delta = LiveDelta(predictor)
        #: The GPU identity registry as last read (set by the operator process).
        self.identities: Callable[[], Registry | None] = lambda: None

    def list_more(self, api: JobApi, snap: Listing) -> None:
        return None  # pods, DLJobs and nodes are all it is built from

    def read(
        self,
        snap: Listing,
        predictor: Predictor,
        keys: KeyRing,
        profiles: Mapping[str, GraphProfile],
        distrusted: Collection[str],
    ) -> LiveReading:
        if self.delta.predictor is not predictor:  # residents sized by the new one
            self.delta = LiveDelta(predictor)
        builds = self.delta.full_builds
        objs = LiveObjects(snap.nodes, snap.pods, snap.dljobs, self.identities())
        kept = self.delta.update(objs, keys, profiles, distrusted)
        live = dataclasses.replace(kept, state=kept.state.fork())
        same = self.delta.full_builds == builds
        how = "kept" if same else f"full: {self.delta.full_reason}"
        return LiveReading(live, how, self.delta.added if same else None)

    def claims_taken(self, ctx: JobCtx) -> list[str]:
        return []

    def forget(self) -> None:
        self.delta = LiveDelta(self.delta.predictor)


class DraSource:
    """The DRA path's live state: one full build, kept while nothing it is built from
    changed; its claims, overtaken claims and unhealthy GPUs handed to the commit path."""

    def __init__(self, claim_path: ClaimPath) -> None:
        self.claim_path = claim_path
        self.build = FullBuildCache()
        #: The GPU identity registry as last read (set by the operator process).
        self.identities: Callable[[], Registry | None] = lambda: None

    def list_more(self, api: JobApi, snap: Listing) -> None:
        snap.claims = api.list_resource_claims()
        snap.slices = api.list_resource_slices()

    def read(
        self,
        snap: Listing,
        predictor: Predictor,
        keys: KeyRing,
        profiles: Mapping[str, GraphProfile],
        distrusted: Collection[str],
    ) -> LiveReading:
        objs = LiveObjects(snap.nodes, snap.pods, snap.dljobs, self.identities())
        held, same = self.build.update(
            objs, snap.claims, snap.slices or [], predictor, keys, profiles, distrusted
        )
        live = dataclasses.replace(held, state=held.state.fork())
        st_ = live.state
        unhealthy = (str(u) for u, ok in zip(st_.gpu_uuid, st_.healthy, strict=True) if not ok)
        self.claim_path.set_pass(
            snap.claims, live.overtaken, unhealthy, live.held_over, live.overtaken_on
        )
        # the same state: the session took all of it in already
        return LiveReading(live, "kept" if same else "full: dra", () if same else None)

    def claims_taken(self, ctx: JobCtx) -> list[str]:
        return self.claim_path.taken(ctx, ctx.job.spec.replicas) if ctx.job is not None else []

    def forget(self) -> None:
        self.build = FullBuildCache()


class FullBuildCache:
    """The DRA path's live state: one full build, handed back while nothing it was built
    from changed.

    :class:`LiveDelta` does not take ResourceClaims or ResourceSlices (rule (c) of
    :mod:`~horus.operator.livestate`, and the DRA path's GPUs), so without this the DRA
    path's pass builds the whole state on every pass — in a still cluster too, where every
    pass finds what the last one did. A pass whose listings are the very objects of the last
    build (the view hands out the same dict for an unchanged object; nodes are compared as
    :class:`LiveDelta` compares them), with the same predictor, key ring, profiles and
    distrusted records, gets that build back. Any change builds in full.
    """

    def __init__(self) -> None:
        self.full_builds = 0
        self._live: LiveState | None = None
        self._nodes: list[Mapping[str, Any]] | None = None
        self._listed: tuple[Sequence[Mapping[str, Any]], ...] = ()
        self._inputs: tuple[Any, ...] = ()

    def update(
        self,
        objs: LiveObjects,
        claims: Sequence[Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
        predictor: Predictor | None,
        keys: KeyRing | None,
        profiles: Mapping[str, GraphProfile],
        distrusted: Collection[str],
    ) -> tuple[LiveState, bool]:
        """The live state of these inputs (never to be changed by the caller: it may be
        handed back), and whether it is the one held (True) or built now (False)."""
        listed: tuple[Sequence[Mapping[str, Any]], ...] = (
            list(objs.pods),
            list(objs.dljobs),
            list(claims),
            list(slices),
        )
        inputs = (keys, dict(profiles), frozenset(distrusted), objs.identities)
        if (
            self._live is not None
            and self._inputs[0] is predictor
            and self._inputs[1:] == inputs
            and same_nodes(self._nodes, objs.nodes)
            and all(_identical(a, b) for a, b in zip(self._listed, listed, strict=True))
        ):
            self._listed = listed  # the same objects; drop nothing, hold these
            return self._live, True
        pods, dljobs, claims, slices = listed
        self._live = build_live_state(
            objs.nodes,
            pods,
            dljobs,
            predictor,
            profiles,
            keys,
            distrusted,
            claims,
            slices,
            objs.identities,
        )
        self.full_builds += 1
        self._nodes, self._listed = list(objs.nodes), listed
        self._inputs = (predictor, *inputs)
        return self._live, False


def _identical(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> bool:
    """The same objects (not equal ones: the very dicts) in the same order."""
    return len(old) == len(new) and all(map(operator.is_, old, new))
