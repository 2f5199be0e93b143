"""What changed in a listing of pods and DLJobs since it was last seen.

Both :class:`~horus.operator.livedelta.LiveDelta` updates start here: from a whole listing
(:meth:`HeldListing.diff`: an object held since the last update is known by its identity,
so only new dicts are read) or from the watch's events (:meth:`HeldListing.replay`: a step
per change, none per object held). Either gives the keys that changed and each key's place
in the listing — what the full build's order is decided by — or None where only a full
build can tell (a key twice, unchanged objects listed in another order, a node changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from horus.common import constants as c
from horus.operator.livestate import LiveObjects
from horus.operator.object_reads import key_of, node_exclusion

__all__ = [
    "Change",
    "Found",
    "Held",
    "HeldListing",
    "Lookup",
    "node_facts",
    "reindex",
    "same_nodes",
]


class Change(NamedTuple):
    """One change of the watch-fed copy as its watch delivered it, in order (what
    :meth:`LiveDelta.update_changes` takes instead of reading the whole listing).

    ``kind``: the listing it belongs to (``"pods"``, ``"dljobs"``, ``"nodes"``; others are
    ignored); ``added``: the copy held nothing under ``key`` before (the object goes to the
    end of the listing); ``deleted``: it holds nothing now. Neither: replaced in its place.
    """

    kind: str
    key: str
    added: bool
    deleted: bool


#: The object a change's key holds now in the listing (None: not listed), by (kind, key).
Lookup = Callable[[str, str], Mapping[str, Any] | None]


#: What changed: (DLJobs by key in the listing's order, their changed keys, their places;
#: the same of the pods).
Found = tuple[
    dict[str, Mapping[str, Any]],
    list[str],
    dict[str, int],
    dict[str, Mapping[str, Any]],
    list[str],
    dict[str, int],
]


class Held(Protocol):
    """What the caller holds of one object: the object itself."""

    @property
    def obj(self) -> Mapping[str, Any]: ...


@dataclass
class HeldListing:
    """The listing as last seen (key → object, in the listing's order), and each key's
    place in it: a number that only grows along the listing, kept for an object replaced in
    its place, a new one for an object added at the end — what the full build's order is
    decided by (positions after a diff of the whole listing)."""

    dl_objs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    pod_objs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    dl_seq: dict[str, int] = field(default_factory=dict)
    pod_seq: dict[str, int] = field(default_factory=dict)
    next_seq: int = 0
    #: Places the last replay of the watch's events gave up or renewed, as they were.
    was_dl: dict[str, int] = field(default_factory=dict)
    was_pods: dict[str, int] = field(default_factory=dict)

    def diff(
        self,
        objs: LiveObjects,
        dl_held: Mapping[str, Held],
        dl_ids: Mapping[int, str],
        pod_held: Mapping[str, Held],
        pod_ids: Mapping[int, str],
        everything: bool = False,
    ) -> Found | None:
        """What changed between the listing held and ``objs`` (None: a key twice, or
        unchanged objects listed in another order — only the listing's order decides).
        ``dl_held``/``pod_held``: what the caller holds by key; ``dl_ids``/``pod_ids``: the
        id of each object it holds → its key."""
        dl_diff = _diff(objs.dljobs, dl_held, dl_ids)
        pod_diff = _diff(objs.pods, pod_held, pod_ids)
        if dl_diff is None or pod_diff is None:
            return None  # the same key twice: only the listing's order decides
        (dl_new, dl_changed), (pod_new, pod_changed) = dl_diff, pod_diff
        if not everything and not (
            _kept_order(list(self.dl_objs), dl_new, dl_changed)
            and _kept_order(list(self.pod_objs), pod_new, pod_changed)
        ):
            return None  # unchanged objects moved in the listing: the order decides ties
        dl_seq = dict(zip(dl_new, range(len(dl_new)), strict=True))  # no Python loop
        pod_seq = dict(zip(pod_new, range(len(pod_new)), strict=True))
        self.next_seq = max(len(dl_new), len(pod_new))
        return dl_new, dl_changed, dl_seq, pod_new, pod_changed, pod_seq

    def replay(
        self,
        changes: Sequence[Change],
        lookup: Lookup,
        dl_held: Mapping[str, Held],
        pod_held: Mapping[str, Held],
    ) -> Found | None:
        """:meth:`diff` from the watch's events: the listing held, changed in place (a step
        per change, none per object held). None where the events do not fit what is held,
        or a node changed."""
        # changed in place (no copy of the whole listing per change): where the events turn out
        # not to fit, the diff that follows finds the listing moved and builds in full
        dl_objs, pod_objs = self.dl_objs, self.pod_objs
        dl_seq, pod_seq = self.dl_seq, self.pod_seq
        nxt = self.next_seq
        touched: dict[str, dict[str, None]] = {"dljobs": {}, "pods": {}}
        #: Each place given up or given anew, as it was (what the ranks before the change
        #: are read from) — and the keys with a new place.
        was: dict[str, dict[str, int]] = {"dljobs": {}, "pods": {}}
        renewed: set[tuple[str, str]] = set()
        for ch in changes:
            if ch.kind == "nodes":
                return None  # the nodes decide the whole state: a full build
            if ch.kind not in touched:
                continue
            seq = pod_seq if ch.kind == "pods" else dl_seq
            if ch.deleted or ch.added:
                old_place = seq.pop(ch.key, None)
                if old_place is not None:
                    was[ch.kind].setdefault(ch.key, old_place)
            if ch.added:
                seq[ch.key], nxt = nxt, nxt + 1
                renewed.add((ch.kind, ch.key))
            touched[ch.kind][ch.key] = None
        self.was_dl, self.was_pods = was["dljobs"], was["pods"]
        out: list[tuple[dict[str, Mapping[str, Any]], list[str]]] = []
        for kind, objs, seq, held in (
            ("dljobs", dl_objs, dl_seq, dl_held),
            ("pods", pod_objs, pod_seq, pod_held),
        ):
            changed: list[str] = []
            appended: dict[str, Mapping[str, Any]] = {}
            for key in touched[kind]:
                obj = lookup(kind, key)
                if obj is None:  # deleted, or no longer listed (a finished pod)
                    objs.pop(key, None)
                    place = seq.pop(key, None)
                    if place is not None:
                        was[kind].setdefault(key, place)
                elif key not in seq:
                    return None  # listed again without being added: its place is unknown
                elif key in objs and (kind, key) not in renewed:
                    objs[key] = obj  # replaced in its place
                else:  # added: a place at the end
                    objs.pop(key, None)
                    appended[key] = obj
                part = held.get(key)
                if (part.obj if part is not None else None) is not obj:
                    changed.append(key)
            if appended:  # after every object held, in the order they were added
                tail = next(reversed(objs), None)
                ordered = sorted(appended, key=seq.__getitem__)
                if tail is not None and seq[tail] > seq[ordered[0]]:
                    return None
                for key in ordered:
                    objs[key] = appended[key]
            out.append((objs, changed))
        self.next_seq = nxt
        (dl_new, dl_changed), (pod_new, pod_changed) = out
        return dl_new, dl_changed, dl_seq, pod_new, pod_changed, pod_seq


def _diff(
    objs: Sequence[Mapping[str, Any]],
    held: Mapping[str, Held],
    ids: Mapping[int, str],
) -> tuple[dict[str, Mapping[str, Any]], list[str]] | None:
    """``objs`` by ``namespace/name``, and the keys whose object is new, replaced or gone
    (None: a key twice). An object held since the last update is known by its identity —
    ``ids`` maps the id of every held object (held, so no other object has that id) to its
    key — so only new objects are read (``key_of`` of every pod of a large cluster is not
    free)."""
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


def reindex(
    ids: dict[int, str],
    held: Mapping[str, Held],
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


def same_nodes(old: Sequence[Mapping[str, Any]] | None, new: Sequence[Mapping[str, Any]]) -> bool:
    """The same nodes in the same order, as far as the live state and its callers read them:
    each the same object, or one whose name, GPU inventory, memory unit and exclusion
    (:func:`node_exclusion`) are the same. A node stored anew for anything else — a renewed
    heartbeat, a label (a fresh kwok cluster's nodes gain ``beta.kubernetes.io/*`` labels one
    by one for minutes), another controller's annotation — is no change: with thousands of
    nodes one always has, and each used to rebuild the whole state."""
    return (
        old is not None
        and len(old) == len(new)
        and all(a is b or node_facts(a) == node_facts(b) for a, b in zip(old, new, strict=True))
    )


def node_facts(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a node the full build (``node_gpus.gpu_nodes``) and the extender's per-node
    memory units read."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ann = meta.get("annotations")
    ann = ann if isinstance(ann, Mapping) else {}
    return (
        meta.get("name"),
        ann.get(c.ANNOTATION_GPU_INVENTORY),
        ann.get(c.ANNOTATION_GPU_MEMORY_UNIT),
        node_exclusion(node),
    )
