"""The GPU identity registry: which node a GPU UUID belongs to, trusted on first registration.

A node describes its GPUs itself (its ResourceSlice on the DRA path, its
``horus.io/gpu-inventory`` annotation on the device-plugin path), and root on one node holds
that node's token. Without a record of whose GPU is whose, such a node could publish another
node's GPU UUIDs: claims pinned to a UUID would be allocated on its fake devices, and Horus'
view could not tell the honest node from the liar. The registry is that record:

* a ConfigMap (:data:`~horus.common.constants.GPU_IDENTITIES_CONFIGMAP`) in the release
  namespace; key = GPU UUID (a valid ConfigMap key), value = the node's name;
* written only by the operator (admission policy ``horus-gpu-identities-operator-only``): each
  UUID is recorded with the node that published it the first time the operator sees it and
  never re-assigned; the entries of a node whose Node object is gone are removed
  (:func:`released`), so a GPU moved to a new node registers there;
* read by admission (the policies on ResourceSlices and on the inventory annotation take it
  as their param: a node may not publish a UUID registered to another node) and by Horus' view
  (:func:`split_gpus`: such a device is ignored on the node that publishes it, and the node
  it is registered to stays).

A UUID two nodes publish before either is registered is recorded for neither (and neither
counts it) until only one publishes it. Trust on first registration has one limit, said in
``docs/dra.md``: a node that publishes a UUID before its real node ever did holds it.

Everything here is pure (plain dicts in, plain values out); the operator's writer is
:mod:`horus.operator.identities`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horus.api.inventory import GpuDevice

#: What a ConfigMap key may be (the apiserver's rule): a UUID that is not one cannot be
#: registered, and the policies refuse a slice or inventory that publishes it.
_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
#: A node name (DNS subdomain).
_NODE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def registrable(uuid: str) -> bool:
    """Whether ``uuid`` can be a registry key (a valid ConfigMap key)."""
    return bool(_KEY.fullmatch(uuid)) and uuid not in (".", "..")


@dataclass(frozen=True)
class Registry:
    """The registry as read: UUID → node, and what of the ConfigMap could not be read."""

    owners: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def owner(self, uuid: str) -> str | None:
        """The node ``uuid`` is registered to (None: not registered)."""
        return self.owners.get(uuid)


def parse_registry(configmap: Mapping[str, Any] | None) -> Registry:
    """The registry in ``configmap`` (the ConfigMap as the apiserver returns it, or None when
    it does not exist: empty). An entry that is no UUID → node pair is left out and named in
    ``problems`` (the operator never writes one; an admin's typo must not stop the rest)."""
    data = (configmap or {}).get("data")
    if not isinstance(data, Mapping):
        return Registry()
    owners: dict[str, str] = {}
    problems: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or not registrable(key):
            problems.append(f"GPU identity registry: key {str(key)[:80]!r} is not a GPU UUID")
        elif not isinstance(value, str) or not _NODE.fullmatch(value):
            problems.append(
                f"GPU identity registry: {key} is registered to {str(value)[:80]!r}, "
                "which is not a node name"
            )
        else:
            owners[key] = value
    return Registry(owners, tuple(problems))


@dataclass(frozen=True)
class Foreign:
    """A GPU a node publishes that it may not: why, in one sentence naming both nodes."""

    node: str
    uuid: str
    why: str


def split_gpus(
    registry: Registry | None, node: str, gpus: Sequence[GpuDevice]
) -> tuple[list[GpuDevice], list[Foreign]]:
    """``node``'s GPUs that are its own, and the ones registered to another node (which are
    ignored on ``node``). Without a registry every GPU is kept."""
    if registry is None:
        return list(gpus), []
    kept: list[GpuDevice] = []
    foreign: list[Foreign] = []
    for gpu in gpus:
        owner = registry.owner(gpu.uuid)
        if owner is not None and owner != node:
            foreign.append(
                Foreign(
                    node,
                    gpu.uuid,
                    f"node {node} publishes GPU {gpu.uuid} (index {gpu.index}), which is "
                    f"registered to node {owner}: ignored on {node}",
                )
            )
        else:
            kept.append(gpu)
    return kept, foreign


def contested(nodes: Mapping[str, Sequence[GpuDevice]]) -> dict[str, list[str]]:
    """UUID → the nodes (sorted) that publish it, for every UUID more than one node (or one
    node twice) publishes."""
    seen: dict[str, list[str]] = {}
    for name, gpus in nodes.items():
        for gpu in gpus:
            seen.setdefault(gpu.uuid, []).append(name)
    return {u: sorted(ns) for u, ns in seen.items() if len(ns) > 1}


@dataclass(frozen=True)
class Additions:
    """What the operator records now, and what it cannot record (one sentence each)."""

    entries: dict[str, str]
    problems: tuple[str, ...] = ()


def additions(registry: Registry, observed: Mapping[str, Iterable[str]]) -> Additions:
    """The entries to add for ``observed`` (node → the UUIDs it publishes now): each UUID not
    registered yet that exactly one node publishes, recorded to that node. A registered UUID
    is never re-assigned; one several nodes publish waits until one does; one that cannot be a
    ConfigMap key is not recorded (admission refuses publishing it)."""
    by_uuid: dict[str, set[str]] = {}
    for node, uuids in observed.items():
        for uuid in uuids:
            by_uuid.setdefault(uuid, set()).add(node)
    entries: dict[str, str] = {}
    problems: list[str] = []
    for uuid in sorted(by_uuid):
        nodes = sorted(by_uuid[uuid])
        if registry.owner(uuid) is not None:
            continue
        if not registrable(uuid):
            problems.append(
                f"node {nodes[0]} publishes GPU {uuid[:80]!r}, which cannot be registered (not "
                "a valid ConfigMap key)"
            )
        elif not all(_NODE.fullmatch(n) for n in nodes):
            continue
        elif len(nodes) > 1:
            problems.append(
                f"GPU {uuid} is published by nodes {', '.join(nodes)} and registered to none: "
                "not recorded (nor counted) until only one node publishes it"
            )
        else:
            entries[uuid] = nodes[0]
    return Additions(entries, tuple(problems))


def released(registry: Registry, nodes: Collection[str]) -> list[str]:
    """The UUIDs registered to a node that no longer exists (its Node object is gone: only a
    cluster admin or the cloud's node controller deletes one, never a node of another node),
    so a GPU that moves to a new node registers there. None while ``nodes`` is empty (a view
    that holds no node says nothing about which are gone)."""
    if not nodes:
        return []
    return sorted(u for u, n in registry.owners.items() if n not in nodes)


def merge_patch(
    configmap: Mapping[str, Any] | None,
    entries: Mapping[str, str],
    removed: Iterable[str] = (),
) -> dict[str, Any]:
    """A JSON merge patch adding ``entries`` to (and taking ``removed`` out of) the registry
    read as ``configmap``, made conditional on its ``resourceVersion`` (a concurrent writer's
    entries are never overwritten: the apiserver refuses the patch with a conflict, and the
    next round reads again)."""
    meta = (configmap or {}).get("metadata") or {}
    data: dict[str, str | None] = dict.fromkeys(removed)
    data.update(entries)
    patch: dict[str, Any] = {"data": dict(sorted(data.items()))}
    version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    if version:
        patch["metadata"] = {"resourceVersion": str(version)}
    return patch
