"""The cluster as Horus' placers see it: one watch-fed copy, shared by every reader in a process.

Why: every operator pass used to LIST all pods, DLJobs and nodes, and every extender verb did
the same again — O(cluster) of apiserver work and latency per decision. A :class:`ClusterView`
lists each kind once and then follows its WATCH (:class:`horus.kube.informer.Informer`, the
client's own watch, relisting only when a watch expires), so in the steady state Horus makes
no LIST at all. The operator's pass reads its snapshot from here
(:class:`~horus.operator.jobapi.KubeJobApi` with a view), the extender answers filter and
prioritize from here, and the change handler nudges the reconcile loop only when something
that matters to placement changed.

What is kept:

* **pods that matter to Horus** in full — a Horus assignment, a DLJob's label or controller,
  a request of a Horus resource, ResourceClaims (the DRA path) — and every other pod only as
  its name, namespace, UID and version (a tenant pod holding a replica's name must still be
  seen; its spec is not needed, and 10,000 foreign pods then cost little memory);
* DLJobs, nodes, PriorityClasses; on the DRA path, ResourceClaims and ResourceSlices;

every object without ``metadata.managedFields`` (and a node without ``status.images``),
which no reader uses and which are often most of an object's size.

Readers get the stored dicts themselves (no copy per pass): they must not change them. The
reconcile pass copies what it edits (``JobCtx.status``), as it did with a listing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from horus.common import constants as c
from horus.kube.informer import Informer, wait_all_synced
from horus.operator.livedelta import Change
from horus.operator.residents import TERMINAL_POD_PHASES

__all__ = ["ClusterView", "lean", "node_projection", "pod_matters", "pod_projection"]

log = logging.getLogger(__name__)

_RESOURCES = (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)


def _asks_horus(spec: Mapping[str, Any]) -> bool:
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or []:
            res = (container or {}).get("resources") if isinstance(container, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("requests", "limits"):
                amounts = res.get(part)
                if isinstance(amounts, dict) and any(r in amounts for r in _RESOURCES):
                    return True
    return False


def pod_matters(pod: Mapping[str, Any]) -> bool:
    """Whether Horus reads more of ``pod`` than its name (see the module docstring)."""
    meta = pod.get("metadata") or {}
    if c.ANNOTATION_GPU_ASSIGNMENT in (meta.get("annotations") or {}):
        return True
    if c.LABEL_DLJOB_NAME in (meta.get("labels") or {}):
        return True
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == c.DLJOB_KIND:
            return True
    spec = pod.get("spec") or {}
    return bool(spec.get("resourceClaims")) or _asks_horus(spec)


def lean(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what no Horus reader looks at and the apiserver sends with every
    object: ``metadata.managedFields`` (often the largest part) and a node's
    ``status.images``."""
    meta, status = obj.get("metadata"), obj.get("status")
    drop_meta = isinstance(meta, dict) and "managedFields" in meta
    drop_images = isinstance(status, dict) and "images" in status
    if not drop_meta and not drop_images:
        return obj
    out = dict(obj)
    if isinstance(meta, dict) and drop_meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    if isinstance(status, dict) and drop_images:
        out["status"] = {k: v for k, v in status.items() if k != "images"}
    return out


def node_projection(node: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a node: :func:`lean`, and its conditions without their heartbeat
    timestamps — so a node whose status only renewed its heartbeat is the same node to every
    reader (the informer then reports no change and the extender keeps its live state)."""
    out = lean(node)
    status = out.get("status")
    if not isinstance(status, dict) or not isinstance(status.get("conditions"), list):
        return out
    conds = status["conditions"]
    quiet = [
        {k: v for k, v in cd.items() if k != "lastHeartbeatTime"} if isinstance(cd, dict) else cd
        for cd in conds
    ]
    return {**out, "status": {**status, "conditions": quiet}}


def pod_projection(pod: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a pod: all of it (:func:`lean`) when it matters, else its identity."""
    if pod_matters(pod):
        return lean(pod)
    meta = pod.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    phase = (pod.get("status") or {}).get("phase")
    return {"metadata": keep, "status": {"phase": phase}} if phase else {"metadata": keep}


class ClusterView:
    """The informers of one process (see the module docstring).

    ``on_change(kind, key, old, new)`` hears every change (``new`` None: deleted), from the
    informer's thread. ``claims``: also keep ResourceClaims and ResourceSlices (the DRA
    path);
    ``priority_classes``: keep PriorityClasses (not started when False). ``change_log``: keep
    the log of changes :meth:`changes_since` reads (the extender; the operator's pass does not
    read it, and it would hold up to :data:`~horus.common.constants.VIEW_CHANGE_LOG_MAX`
    entries for nothing).
    """

    def __init__(
        self,
        api_client: Any,
        on_change: Callable[[str, str, Mapping[str, Any] | None, Mapping[str, Any] | None], None]
        | None = None,
        claims: bool = False,
        watch_seconds: int = 300,
        priority_classes: bool = True,
        change_log: bool = False,
    ) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(api_client)
        custom: Any = client.CustomObjectsApi(api_client)
        scheduling: Any = client.SchedulingV1Api(api_client)
        self.on_change = on_change
        #: Every change in the order the informers told it (the extender's live state is
        #: brought up to date from these, not from a diff of the whole copy); entries before
        #: ``_log_base`` were dropped (:data:`~horus.common.constants.VIEW_CHANGE_LOG_MAX`).
        self._log: list[Change] = []
        self._log_base = 0
        self._log_lock = threading.Lock()
        self.change_log = change_log

        def tell(kind: str) -> Any:
            def handler(
                key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
            ) -> None:
                if self.change_log:
                    with self._log_lock:
                        self._log.append(Change(kind, key, old is None, new is None))
                        if len(self._log) > c.VIEW_CHANGE_LOG_MAX:
                            drop = len(self._log) // 2
                            del self._log[:drop]
                            self._log_base += drop
                if self.on_change is not None:
                    self.on_change(kind, key, old, new)

            return handler

        def make(kind: str, fn: Callable[..., Any], **kw: Any) -> Informer:
            kw.setdefault("project", lean)
            return Informer(kind, fn, on_change=tell(kind), watch_seconds=watch_seconds, **kw)

        self.pods = make(
            "pods", lambda **kw: core.list_pod_for_all_namespaces(**kw), project=pod_projection
        )
        self.dljobs = make(
            "dljobs",
            lambda **kw: custom.list_cluster_custom_object(
                c.API_GROUP, c.API_VERSION, c.DLJOB_PLURAL, **kw
            ),
            missing_ok=True,  # the extender runs without the CRD (plain pods only)
        )
        self.nodes = make("nodes", lambda **kw: core.list_node(**kw), project=node_projection)
        self.priority_classes = make(
            "priorityclasses", lambda **kw: scheduling.list_priority_class(**kw)
        )
        self.informers = [self.pods, self.dljobs, self.nodes]
        if priority_classes:  # the operator's admission reads them; the extender does not
            self.informers.append(self.priority_classes)
        self.claims: Informer | None = None
        self.slices: Informer | None = None
        if claims:
            resource: Any = client.ResourceV1Api(api_client)
            self.claims = make(
                "resourceclaims",
                lambda **kw: resource.list_resource_claim_for_all_namespaces(**kw),
                missing_ok=True,
            )
            self.slices = make(
                "resourceslices", lambda **kw: resource.list_resource_slice(**kw), missing_ok=True
            )
            self.informers += [self.claims, self.slices]

    def start(self, timeout: float = 60.0) -> bool:
        """Start every informer; whether all had their first LIST within ``timeout``."""
        for informer in self.informers:
            informer.start()
        return self.wait_synced(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return wait_all_synced(self.informers, timeout)

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.informers)

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    @property
    def generation(self) -> tuple[int, ...]:
        """Moves whenever any kept object changed."""
        return tuple(i.generation for i in self.informers)

    def change_mark(self) -> tuple[int, int, int]:
        """Where the change log is now: (entries so far, the informers' generations summed,
        their LISTs summed). The entry count is read first: an informer bumps its generation
        before it tells the change, so a change under way shows as a generation without
        its entry."""
        with self._log_lock:
            pos = self._log_base + len(self._log)
        fed = self._fed()
        return (pos, sum(i.generation for i in fed), sum(i.counts.lists for i in fed))

    def changes_since(
        self, mark: tuple[int, int, int] | None
    ) -> tuple[tuple[int, int, int], list[Change] | None]:
        """The mark now and the changes since ``mark``, in order — or None where they may
        not be all: no mark, entries dropped, a LIST since (a relist reorders the copy and
        tells only what changed), or generations that moved by other than one per entry
        (a relist, a change under way at either mark, a delete of an object not held); always
        None without ``change_log``."""
        now = self.change_mark()
        if (
            not self.change_log
            or mark is None
            or mark[2] != now[2]
            or now[1] - mark[1] != now[0] - mark[0]
        ):
            return now, None
        with self._log_lock:
            if mark[0] < self._log_base:
                return now, None
            return now, self._log[mark[0] - self._log_base : now[0] - self._log_base]

    def _fed(self) -> list[Informer]:
        """Every informer whose changes the log holds (each tells through it)."""
        out = [self.pods, self.dljobs, self.nodes, self.priority_classes]
        return out + [i for i in (self.claims, self.slices) if i is not None]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per informer: LISTs, WATCHes, expiries, errors and events so far."""
        return {i.name: dict(vars(i.counts)) for i in self.informers}

    def active_pods(self) -> list[dict[str, Any]]:
        """Pods not Succeeded or Failed (what the extender counts)."""
        return [p for p in self.pods.items() if _active(p)]

    def active_pod(self, key: str) -> dict[str, Any] | None:
        """The pod under ``key`` if :meth:`active_pods` lists it, else None."""
        pod = self.pods.get(key)
        return pod if pod is not None and _active(pod) else None


def _active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
