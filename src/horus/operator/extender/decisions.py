"""The extender's decisions: per-node verdicts for filter/prioritize, and the bind verb
(its steps: :mod:`horus.operator.extender.binding`).

Every decision starts from the live cluster (:mod:`horus.operator.livestate`: node
inventories, DLJob placements and pods' signed assignments) and goes through the same
:class:`~horus.operator.placement_rules.PlacementSession` as the operator's, so the two placers score
a GPU by one rule. Each candidate node gets a real per-node answer from the core
(:meth:`horus.scheduler.Scheduler.evaluate`: prefilter once, decide per node). Binds are
serialised in-process and re-checked after the assignment is written (another placer may
have raced us); a lost race rolls the annotation back and reports an error, and the
scheduler retries.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from horus.api.resources import node_memory_unit_mib
from horus.api.signing import KeyRing
from horus.common import constants as c
from horus.common import heap
from horus.common.errors import HorusError, ValidationError
from horus.operator.extender import binding
from horus.operator.extender.demand import cached_profile, pod_demand
from horus.operator.extender.settings import MAX_EXTENDER_PRIORITY, NO_INVENTORY, REASON_PREFIX
from horus.operator.extender.source import ClusterSource
from horus.operator.extender.wire import BindingArgs, ExtenderArgs
from horus.operator.livedelta import Change, LiveDelta
from horus.operator.livestate import LiveObjects, build_live_state
from horus.operator.placement_rules import PlacementSession
from horus.operator.residents import LiveState, pod_job_name
from horus.predictor.interface import GraphProfile, Predictor
from horus.predictor.schema import graph_profile
from horus.scheduler import JobRequest, Placement, Refusal, SchedulerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeVerdict:
    """One candidate node for one pod: placeable (with its best placement) or why not."""

    node: str
    placement: Placement | None = None
    reason: str | None = None
    #: True when waiting or preempting cannot help (the pod can never fit this node).
    unresolvable: bool = False

    @property
    def score(self) -> int:
        """0..10: the predicted rise in summed normalised speed on the node's best GPU × 10."""
        if self.placement is None:
            return 0
        gain = self.placement.predicted_gain
        if not math.isfinite(gain):
            return 0
        return max(0, min(MAX_EXTENDER_PRIORITY, round(gain * MAX_EXTENDER_PRIORITY)))


#: Pods whose verdicts are kept for their prioritize call (the newest; each expires after the
#: extender's ``cache_seconds`` too).
VERDICT_CACHE_PODS = 4

#: Incremental updates of the live state between two full collections (heap.settle), which
#: collect the garbage cycles a freeze (heap.keep) kept. The request after such an update
#: waits for the collection, whose cost grows with the cluster, so it is rare: run more
#: often it shows in the 99th percentile of the requests after a change, while the updates
#: in between leave few or no cycles for it to find.
SETTLE_EVERY_UPDATES = 1024


def _pod_profile(pod: Mapping[str, Any]) -> GraphProfile | None:
    """An assigned pod's graph profile, parsed through the cache (None: none or unreadable):
    what sizes a resident plain pod."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    text = ann.get(c.ANNOTATION_GRAPH_PROFILE)
    if not text or c.ANNOTATION_GPU_ASSIGNMENT not in ann:
        return None
    try:
        return graph_profile(cached_profile(text))
    except ValidationError:
        return None


def _node_units(nodes: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """Each node's MiB per ``horus.io/gpu-memory`` unit, and why a node's is unreadable."""
    units: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    for n in nodes:
        meta = n.get("metadata") or {}
        name = str(meta.get("name") or "")
        try:
            units[name] = node_memory_unit_mib(meta.get("annotations"), f"node {name}")
        except ValidationError as exc:
            unreadable.setdefault(name, str(exc))
    return units, unreadable


class Extender:
    """The three verbs over a :class:`ClusterSource`, independent of HTTP."""

    def __init__(
        self,
        source: ClusterSource,
        predictor: Predictor,
        key: KeyRing | Callable[[], KeyRing],
        policy: str = "horus",
        scheduler_settings: SchedulerSettings | None = None,
        cache_seconds: float = 2.0,
        verify_binds: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self._key = key
        self.policy = policy
        self.scheduler_settings = scheduler_settings or SchedulerSettings()
        #: The scheduling core with the operator's rules (unknown residents, measured pairs,
        #: the prediction record); one per extender, its caches kept between requests.
        self.session = PlacementSession(policy, predictor, self.scheduler_settings)
        self._session_lock = threading.Lock()
        self.cache_seconds = cache_seconds
        self.verify_binds = verify_binds
        self._clock = clock
        self._bind_lock = threading.Lock()
        self._warned_unmanaged = False
        self._cache_lock = threading.Lock()
        self._cache: dict[tuple[str, ...], tuple[float, dict[str, NodeVerdict]]] = {}
        #: The live state of the source's last generation, with each node's memory unit:
        #: rebuilt only when the watch-fed copy changed, not per request (see _live).
        self._state_lock = threading.Lock()
        self._state: tuple[object, LiveState, dict[str, int]] | None = None
        #: The live state the session last took residents and measured pairs from.
        self._observed: LiveState | None = None
        #: Keeps the shared live state, counting again only what changed.
        self._delta = LiveDelta(self.predictor, _pod_profile)
        #: Each node's MiB per memory unit and the nodes whose unit is unreadable, for the
        #: delta's current nodes.
        self._units: tuple[dict[str, int], dict[str, str]] | None = None
        #: The last update: the state it started from, the one it made, and the residents
        #: it counted again (the session then takes in only those).
        self._step: tuple[LiveState | None, LiveState, tuple[str, ...]] | None = None
        #: Where the source's change feed stood at the last update (``changes_since``).
        self._mark: object = None
        #: Set once the shared live state was built (``/readyz``; see :meth:`warm_up`).
        self.ready = threading.Event()
        self.ready.set()

    def warm_up(self) -> threading.Thread:
        """Build the shared live state now, in a thread, and be not ready until it is built.

        The first build verifies every resident's signature and sizes every job: on a large
        cluster it takes longer than the kube-scheduler's ``httpTimeout`` (10 s in the shipped
        config; the first sample of ``benchmarks/results/extender-memory.json`` is one such
        build), so the first pod asked after a start would fail its scheduling attempt. Started before the server, the
        build overlaps the view's sync and the probes: ``/readyz`` answers 503 until it is
        done (a Service then sends nothing here), and a request that comes anyway waits for
        the same build instead of starting another. A failed build only logs: requests
        build as they always did."""
        self.ready.clear()

        def build() -> None:
            try:
                self._live("")
            except Exception:
                log.exception("extender: building the live state ahead of requests failed")
            finally:
                self.ready.set()

        thread = threading.Thread(target=build, name="horus-extender-warm-up", daemon=True)
        thread.start()
        return thread

    def set_predictor(self, predictor: Predictor) -> None:
        """Place with ``predictor`` from the next request on (a reloaded artifact); filter
        results computed with the old one are not reused."""
        with self._cache_lock, self._session_lock:
            self.session.set_predictor(predictor)
            self._cache.clear()
            self._observed = None  # the new session has seen no residents yet
        with self._state_lock:
            self._state = None  # residents were sized with the old model
            self._delta = LiveDelta(predictor, _pod_profile)
            self._mark = None

    @property
    def predictor(self) -> Predictor:
        return self.session.predictor

    # --- helpers ----------------------------------------------------------------------------
    def keys(self) -> KeyRing:
        """The key ring now: signs with its private key, verifies with every published public
        key (a callable, e.g. :class:`~horus.operator.assignment_key.AssignmentKeySource`, is
        asked every time, so a rotated key is used without a restart)."""
        return self._key() if callable(self._key) else self._key

    def _live(
        self, exclude: str, objs: LiveObjects | None = None
    ) -> tuple[LiveState, dict[str, int]]:
        """The live state without ``exclude``'s own share, and each node's MiB per memory unit.

        Without ``objs`` it comes from the source's copy, built once per generation of that
        copy and shared by every request until it changes (``evaluate`` only reads it); a pod
        that is itself a resident (a retried bind) gets a build of its own."""
        if objs is not None:
            return self._live_of(exclude, objs)
        generation = self.source.generation()
        if generation is None:
            return self._live_of(exclude, self.source.list_objects())
        feed = getattr(self.source, "changes_since", None)
        with self._state_lock:
            cached = self._state
            changes = None
            if feed is not None:  # the watch's changes: the state follows them, no diff
                mark, changes = feed(self._mark)
                generation = (generation, mark) if mark is not None else generation
            if cached is None or cached[0] != generation:
                # Read after the generation: a change in between only makes the next
                # request rebuild once more, never serve an older copy under a newer tag.
                live, units = self._updated(changes)
                cached = self._state = (generation, live, units)
                if feed is not None:
                    self._mark = mark
        if exclude in cached[1].residents:
            return self._live_of(exclude, self.source.list_objects())
        return cached[1], cached[2]

    def _updated(self, changes: Sequence[Change] | None) -> tuple[LiveState, dict[str, int]]:
        """The shared live state brought up to date (:class:`LiveDelta`: only what changed
        is counted again; the same answer as :meth:`_live_of`): from ``changes`` where the
        source tells them (its watch's events), else from a diff of its whole listing."""
        delta = self._delta
        epoch, before = delta.nodes_epoch, self._state[1] if self._state is not None else None
        listed: list[LiveObjects] = []

        def listing() -> LiveObjects:
            if not listed:
                listed.append(self.source.list_objects())
            return listed[0]

        lookup = getattr(self.source, "lookup", None)
        if changes is not None and lookup is not None:
            live = delta.update_changes(changes, lookup, listing, self.keys())
        else:
            live = delta.update(listing(), self.keys())
        self._step = (before, live, delta.added) if delta.nodes_epoch == epoch else None
        if self._units is None or epoch != delta.nodes_epoch:
            self._units = _node_units(listing().nodes)
        units, unreadable = self._units
        for name, why in unreadable.items():
            live.excluded_nodes.setdefault(name, why)
        # The copy and this state live until the next change: keep the collector's full
        # collections off them, or one lands on a request now and then. After a full build
        # (and every so often) that is one full collection; after a small update, a freeze.
        if delta.nodes_epoch != epoch or delta.updates % SETTLE_EVERY_UPDATES == 0:
            heap.settle()
            # What the old state and the collection freed goes back — beside the request, not
            # in it: a trim of a large heap takes up to a few hundred milliseconds.
            heap.release_beside()
        else:
            heap.keep()
        return live, units

    def _live_of(self, exclude: str, objs: LiveObjects) -> tuple[LiveState, dict[str, int]]:
        live = self._build(objs)
        if exclude in live.residents:  # the pod's own earlier assignment (a retried bind)
            live.state.release(exclude)
            del live.residents[exclude]
        units, unreadable = _node_units(objs.nodes)
        for name, why in unreadable.items():
            live.excluded_nodes.setdefault(name, why)
        return live, units

    def _build(self, objs: LiveObjects) -> LiveState:
        """:func:`build_live_state`, with the pods' profiles parsed through the cache."""
        profiles: dict[str, GraphProfile] = {}
        for pod in objs.pods:
            profile = _pod_profile(pod)
            if profile is not None:
                meta = pod.get("metadata") or {}
                ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
                profiles[pod_job_name(ns, name)] = profile
        # Only signed records count: a forged pod assignment or DLJob record holds nothing.
        return build_live_state(
            objs.nodes, objs.pods, objs.dljobs, self.predictor, profiles=profiles, keys=self.keys()
        )

    @staticmethod
    def _in_mib(job: JobRequest, unit_mib: int) -> JobRequest:
        """``job`` with its ``horus.io/gpu-memory`` quantity read in the node's units (MiB)."""
        if job.memory_mib is None or unit_mib == 1:
            return job
        return replace(job, memory_mib=job.memory_mib * unit_mib)

    def evaluate(self, pod: Mapping[str, Any], node_names: Sequence[str]) -> dict[str, NodeVerdict]:
        """A verdict for every candidate node (cached briefly for the prioritize call)."""
        meta = pod.get("metadata") or {}
        cache_key = (
            str(meta.get("uid") or ""),
            str(meta.get("namespace") or "default"),
            str(meta.get("name") or ""),
            str(meta.get("resourceVersion") or ""),
            *node_names,
        )
        now = self._clock()
        if self.cache_seconds > 0 and cache_key[0]:
            with self._cache_lock:
                hit = self._cache.get(cache_key)
                if hit is not None and now - hit[0] <= self.cache_seconds:
                    return hit[1]
        verdicts = self._evaluate(pod, node_names)
        if self.cache_seconds > 0 and cache_key[0]:
            with self._cache_lock:
                # The newest few only: kube-scheduler asks filter then prioritize for one pod
                # at a time, and a burst of pods would otherwise keep a verdict per node of
                # every pod of the last seconds alive — for the collector to walk, often.
                fresh = [(k, v) for k, v in self._cache.items() if now - v[0] <= self.cache_seconds]
                self._cache = dict(fresh[-(VERDICT_CACHE_PODS - 1) :])
                self._cache[cache_key] = (now, verdicts)
        return verdicts

    def _evaluate(
        self, pod: Mapping[str, Any], node_names: Sequence[str]
    ) -> dict[str, NodeVerdict]:
        demand = pod_demand(pod)
        if not demand.interested:
            # Not Horus' pod: kube-scheduler sends only pods that request Horus resources
            # (managedResources), so this is a misconfigured scheduler. Answer neutrally —
            # every node passes, score 0, without reading the cluster — rather than refuse:
            # with ignorable: false a refusal would hold every ordinary pod Pending. Binding
            # it is refused (bind).
            self._warn_unmanaged(pod.get("metadata") or {})
            return {n: NodeVerdict(n) for n in node_names}
        if demand.request is None:
            reason = demand.problem or f"{REASON_PREFIX}pod cannot be placed"
            return {n: NodeVerdict(n, reason=reason, unresolvable=True) for n in node_names}
        live, units = self._live(demand.request.name)
        out: dict[str, NodeVerdict] = {}
        known = live.state.node_set
        # Nodes with the same gpu-memory unit read the pod's quantity alike: one core call each.
        by_unit: dict[int, list[str]] = {}
        for name in node_names:
            if name not in known or name in live.excluded_nodes:
                why = live.excluded_nodes.get(name)
                out[name] = (
                    NodeVerdict(name, reason=f"{REASON_PREFIX}{why}")
                    if why
                    else NodeVerdict(name, reason=NO_INVENTORY, unresolvable=True)
                )
            else:
                by_unit.setdefault(units.get(name, 1), []).append(name)
        for unit, names in by_unit.items():
            job = self._in_mib(demand.request, unit)
            try:
                results = self._decide(live, job, names)
            except HorusError as exc:  # e.g. the predictor rejects the profile
                for name in names:
                    out[name] = NodeVerdict(name, reason=f"{REASON_PREFIX}{exc}", unresolvable=True)
                continue
            for name, result in results.items():
                out[name] = (
                    NodeVerdict(name, placement=result)
                    if isinstance(result, Placement)
                    else NodeVerdict(
                        name,
                        reason=f"{REASON_PREFIX}{result.reason}",
                        unresolvable=not result.code.resolvable,
                    )
                )
        return {n: out[n] for n in node_names}

    def _warn_unmanaged(self, meta: Mapping[str, Any]) -> None:
        """Say once that the scheduler sends pods the extender has no say over."""
        if not self._warned_unmanaged:
            self._warned_unmanaged = True
            log.warning(
                "kube-scheduler sent pod %s/%s, which requests no Horus resource: its extender "
                "configuration lacks managedResources (manifests/scheduler); answering neutrally",
                meta.get("namespace"),
                meta.get("name"),
            )

    def _decide(
        self, live: LiveState, job: JobRequest, nodes: Sequence[str]
    ) -> dict[str, Placement | Refusal]:
        """The core's per-node answer, with the session's rules and this cluster's residents
        and measured pairs."""
        with self._session_lock:
            if live is not self._observed:  # a shared live state is taken in once
                step = self._step
                if (
                    step is not None
                    and step[0] is not None
                    and step[0] is self._observed
                    and step[1] is live
                ):
                    self.session.observe(live, step[2])  # what the update counted again
                else:
                    self.session.observe(live)
                self._observed = live
            self.session.remember(job)
            return self.session.scheduler.evaluate(live.state, job, nodes)

    # --- verbs ------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """``ExtenderFilterResult`` for ``args``."""
        try:
            verdicts = self.evaluate(args.pod, args.node_names)
        except Exception as exc:  # the cluster could not be read: tell the scheduler
            log.warning("filter %s/%s failed: %s", args.namespace, args.name, exc)
            return {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": f"horus extender: {exc}",
            }
        passed = [n for n in args.node_names if verdicts[n].reason is None]
        failed = {
            n: v.reason for n, v in verdicts.items() if v.reason is not None and not v.unresolvable
        }
        unresolvable = {
            n: v.reason for n, v in verdicts.items() if v.reason is not None and v.unresolvable
        }
        result: dict[str, Any] = {
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if args.nodes is None:
            result["Nodes"] = None
            result["NodeNames"] = passed
        else:
            keep = set(passed)
            items = [n for n in args.nodes if n["metadata"]["name"] in keep]
            result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": items}
            result["NodeNames"] = None
        log.debug(
            "filter %s/%s: %d of %d nodes pass",
            args.namespace,
            args.name,
            len(passed),
            len(args.node_names),
        )
        return result

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """``HostPriorityList`` for ``args`` (0 for nodes that cannot take the pod)."""
        try:
            verdicts = self.evaluate(args.pod, args.node_names)
        except Exception as exc:
            log.warning("prioritize %s/%s failed: %s", args.namespace, args.name, exc)
            return [{"Host": n, "Score": 0} for n in args.node_names]
        return [{"Host": n, "Score": verdicts[n].score} for n in args.node_names]

    def bind(self, args: BindingArgs) -> dict[str, str]:
        """``ExtenderBindingResult``: assignment first, then the Binding."""
        where = f"pod {args.pod_namespace}/{args.pod_name}"
        try:
            with self._bind_lock:
                binding.bind_pod(self, args, where)
        except Exception as exc:
            log.warning("bind %s to %s failed: %s", where, args.node, exc)
            return {"Error": f"horus extender: bind {where} to {args.node}: {exc}"}
        return {"Error": ""}
