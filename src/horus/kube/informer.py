"""A watch-fed local copy of one kind of API object, kept as client-go's Reflector keeps one.

Why: a placer that LISTs the whole cluster on every decision pays for it on the apiserver
(serialising every pod) and in its own latency; kube-scheduler and every client-go controller
list once, then follow a WATCH from the list's ``resourceVersion``. This module does the same
with the Kubernetes client's own :class:`kubernetes.watch.Watch` (the protocol is the
library's; what is here is the bookkeeping around it):

* **list once, then watch** from the list's ``resourceVersion`` with bookmarks, resuming from
  the last version seen whenever a watch ends (server timeout, dropped connection, an
  apiserver restart) — no LIST while the watch can resume;
* **relist on expiry** (HTTP 410 Gone: the version fell out of the apiserver's watch window),
  and compare the new list with the copy: objects that vanished meanwhile are reported deleted;
* **never go back in time**: an object is replaced only by a newer ``resourceVersion`` (etcd
  revisions are integers), so the answer of our own write, put in at once
  (:meth:`Informer.observe`), is not undone by a watch event older than it;
* **assumed** changes (:meth:`Informer.assume`): a write whose answer carries no object (a
  Binding) is applied to the copy at the object's current version, so the next reader sees
  it; the watch event of that write, newer, replaces it (kube-scheduler's assumed pods).

A copy may lag the apiserver by the watch's delivery time. Every caller that acts on it
writes with a precondition (``resourceVersion``, a pod's UID) or re-reads before a decision
that must not race, exactly as with a LIST that is a few milliseconds old.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from horus.api.raw import read_object

__all__ = ["LIST_PAGE_SIZE", "Informer", "InformerCounts", "newer", "object_key"]

#: Objects per LIST page (client-go's reflector pages by 500 too).
LIST_PAGE_SIZE = 500

log = logging.getLogger(__name__)

#: Called with (key, old, new) after each change; ``new`` None: deleted.
ChangeHandler = Callable[[str, "Mapping[str, Any] | None", "Mapping[str, Any] | None"], None]


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), str(meta.get("name") or "")
    return f"{ns}/{name}" if ns else name


def _rv(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _same_but_version(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two kept versions of an object differ in nothing but their resourceVersion
    (e.g. a node heartbeat, once the projection dropped its timestamps): readers that derive
    something from the copy need not rebuild it, and no change is reported."""
    if old.keys() != new.keys():
        return False
    for k, v in new.items():
        if k == "metadata" and isinstance(v, dict) and isinstance(old.get(k), dict):
            a, b = old[k], v
            if a.keys() != b.keys() or any(a[x] != b[x] for x in b if x != "resourceVersion"):
                return False
        elif old[k] != v:
            return False
    return True


def newer(candidate: str, current: str) -> bool:
    """Whether ``candidate`` is not older than ``current`` (etcd revisions are integers; a
    version that is not one — another storage — is taken as newer)."""
    if not current:
        return True
    try:
        return int(candidate) >= int(current)
    except ValueError:
        return True


@dataclass
class InformerCounts:
    """What an informer asked of the apiserver (for tests, metrics and the benchmarks)."""

    lists: int = 0
    watches: int = 0
    expired: int = 0  # watches that ended with 410 Gone (each followed by a relist)
    errors: int = 0
    events: int = 0


class Informer:
    """One resource's LIST+WATCH copy, kept in a background thread.

    ``list_fn`` is a client list function (``CoreV1Api.list_node``, a lambda over
    ``CustomObjectsApi.list_cluster_custom_object``): it is called with ``_preload_content``,
    ``limit`` and ``_continue`` (a LIST, in pages of ``page_size``), or ``resource_version``,
    ``watch`` and ``timeout_seconds`` (the WATCH) keyword arguments. ``project``
    turns each object into what is kept (a smaller dict for objects the caller only needs to
    know exist); ``on_change`` hears every change, from the thread that saw it.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Any],
        *,
        project: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        on_change: ChangeHandler | None = None,
        watch_seconds: int = 300,
        retry_seconds: float = 1.0,
        missing_ok: bool = False,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._project = project
        self.on_change = on_change
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        #: A resource the apiserver does not serve (404: a CRD not installed) is empty.
        self.missing_ok = missing_ok
        #: Whether the last LIST found the resource served: None before the first, False
        #: while it answers 404 (``missing_ok``), True once a LIST succeeded.
        self.served: bool | None = None
        if not 1 <= page_size <= 100_000:
            raise ValueError(f"page_size must be 1..100000, not {page_size}")
        self.page_size = page_size
        self.counts = InformerCounts()
        self.resource_version = ""
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None
        #: Bumped on every change: readers that derive something from the copy (the
        #: extender's live state) rebuild it only when this moved.
        self.generation = 0

    # --- reading --------------------------------------------------------------------------
    def items(self) -> list[dict[str, Any]]:
        """Every object now (the stored dicts themselves: read them, never change them)."""
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def synced(self) -> bool:
        """The first LIST is in (before that the copy is empty, not the cluster)."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # --- writing (our own writes' answers) ------------------------------------------------
    def observe(self, obj: Mapping[str, Any]) -> None:
        """Put in the object an apiserver write answered with (unless the copy is newer)."""
        if isinstance(obj, dict) and (obj.get("metadata") or {}).get("name"):
            self._put(obj, check_newer=True)

    def assume(self, key: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Apply a write whose answer has no object (a Binding) to the copy, at the object's
        present version: its watch event, newer, replaces it."""
        with self._lock:
            old = self._items.get(key)
            if old is None:
                return
            new = change(old)
            self._items[key] = new
            self.generation += 1
        self._tell(key, old, new)

    # --- the thread -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()

    def _run(self) -> None:
        need_list = True
        delay = self.retry_seconds
        while not self._stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self._follow()
                delay = self.retry_seconds
            except Exception as exc:
                status = getattr(exc, "status", None)
                if status == 410:  # expired: the window moved past our version
                    self.counts.expired += 1
                    need_list = True
                    log.info("%s: watch expired (410); relisting", self.name)
                    continue
                if status == 404 and self.missing_ok:
                    self.served = False
                    self._replace([], "")  # not served (yet): empty, look again later
                    need_list = True
                    self._stop.wait(30.0)
                    continue
                self.counts.errors += 1
                # Resume the watch from the last version (a relist only if that expired);
                # a failed first LIST is simply retried.
                log.warning("%s: watch failed (%s); retrying in %.0fs", self.name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)

    def relist(self) -> None:
        """LIST everything, in pages, and make the copy equal to it (reporting what changed).

        Pages of :attr:`page_size` (``limit`` and ``continue``), as client-go's reflector
        pages its LISTs: on a large, loaded cluster one unpaged LIST does not finish within
        the apiserver's 60 s and fails with 504 again and again, so an extender started then
        never syncs. Every page after the first is served
        from the first one's snapshot; a continue token that expired meanwhile is a 410,
        which starts the LIST over (:meth:`_run`). Each page is projected as it comes, so
        the raw objects of one page, not of the whole cluster, are held at a time."""
        self.counts.lists += 1
        kept: list[dict[str, Any]] = []
        token: str | None = None
        version = ""
        while True:
            kw: dict[str, Any] = {"_preload_content": False, "limit": self.page_size}
            if token:
                kw["_continue"] = token
            body = read_object(self._list_fn(**kw))
            kept += [
                self._kept(_typed(i, body)) for i in body.get("items") or [] if isinstance(i, dict)
            ]
            meta = body.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue") or None
            if not isinstance(token, str):
                break
        self.served = True
        self._replace(kept, version)

    def _replace(self, kept: list[dict[str, Any]], version: str) -> None:
        """Make the copy the projected objects ``kept`` of a LIST at ``version``."""
        fresh = {object_key(o): o for o in kept}
        changes: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        with self._lock:
            for key, gone in self._items.items():
                if key not in fresh:
                    if version and not newer(version, _rv(gone)):
                        fresh[key] = gone  # written by us after the list's snapshot
                    else:
                        changes.append((key, gone, None))
            for key, obj in fresh.items():
                old = self._items.get(key)
                if (
                    old is not None
                    and old is not obj
                    and (_rv(obj) == _rv(old) or not newer(_rv(obj), _rv(old)))
                ):
                    fresh[key] = old  # the same version (kept by identity), or ours is newer
                elif old is None or _rv(old) != _rv(obj):
                    changes.append((key, old, obj))
            # Each object kept keeps its place and a new one goes to the end, as watch
            # events leave them: a reader that follows the copy by its order (LiveDelta: an
            # unchanged object moved means the listing's order changed) then sees a relist
            # as the changes it brought, not as a reordered cluster, which it rebuilds in
            # full (slow on a large cluster: docs/results/operator.md).
            ordered = {key: fresh[key] for key in self._items if key in fresh}
            ordered.update(fresh)  # the new keys, in the list's order, after the rest
            self._items = ordered
            self.resource_version = version
            self.generation += 1
        self._synced.set()
        for key, old, new in changes:
            self._tell(key, old, new)

    def _follow(self) -> None:
        """One WATCH from :attr:`resource_version` until the server ends it."""
        from kubernetes import watch as _watch

        watch: Any = _watch  # the client is untyped
        self.counts.watches += 1
        w = self._watch = watch.Watch()

        # A plain function: the client then hands each event's object over as the decoded
        # dict (no model deserialisation, which costs more than the rest of the event).
        def raw_list(**kwargs: Any) -> Any:
            return self._list_fn(**kwargs)

        try:
            for event in w.stream(
                raw_list,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_seconds,
                _request_timeout=(10, self.watch_seconds + 30),
            ):
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            self._watch = None

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return
        version = _rv(obj)
        if version:
            self.resource_version = version
        self.counts.events += 1
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            key = object_key(obj)
            with self._lock:
                old = self._items.pop(key, None)
                self.generation += 1
            if old is not None:
                self._tell(key, old, None)
            return
        if kind in ("ADDED", "MODIFIED"):
            self._put(obj, check_newer=True)

    def _kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._project(obj) if self._project is not None else obj

    def _put(self, obj: dict[str, Any], check_newer: bool) -> None:
        key = object_key(obj)
        kept = self._kept(obj)
        with self._lock:
            old = self._items.get(key)
            # Same version: the same object (ours may carry an assumed change on top).
            if old is not None and (
                _rv(old) == _rv(kept) or (check_newer and not newer(_rv(kept), _rv(old)))
            ):
                return
            self._items[key] = kept
            if old is not None and _same_but_version(old, kept):
                return  # only its version moved (a heartbeat the projection dropped)
            self.generation += 1
        self._tell(key, old, kept)

    def _tell(self, key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(key, old, new)
        except Exception:  # a listener's bug must not stop the copy
            log.exception("%s: change handler failed for %s", self.name, key)


def _typed(item: dict[str, Any], listing: Mapping[str, Any]) -> dict[str, Any]:
    """A listed object with the ``apiVersion`` and ``kind`` a watch event's object carries.

    The apiserver leaves them out of a list's items (the list says them once: ``NodeList``)
    but sends them with every watch event and write answer, so without this the first event
    of an object after a list differs from the listed copy in those two keys alone — for a
    node whose status only renewed its heartbeat, a change every reader hears of. On a large
    cluster that makes the extender rebuild its whole live state on almost every request
    for a node-status period after each start or relist."""
    kind, version = listing.get("kind"), listing.get("apiVersion")
    if "kind" in item or not isinstance(kind, str) or not kind.endswith("List"):
        return item
    return {"apiVersion": version, "kind": kind[: -len("List")], **item}


def wait_all_synced(informers: list[Informer], timeout: float) -> bool:
    """Whether every informer had its first LIST within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in informers)
