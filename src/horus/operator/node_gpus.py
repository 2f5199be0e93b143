"""The GPUs a live state offers: each node's inventory, or on the DRA path its ResourceSlices.

A node that is NotReady, unschedulable or being deleted contributes none
(:func:`horus.operator.object_reads.node_exclusion`). With the GPU identity registry, a GPU
registered to another node is left out on the node that publishes it; a UUID that several
nodes publish and none is registered to counts on none of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from horus.api.inventory import GpuDevice, decode_inventory
from horus.common import constants as c
from horus.common.errors import ValidationError
from horus.node.claim_checks import slice_gpus
from horus.node.identities import Registry, contested, split_gpus
from horus.operator.object_reads import (
    annotations_of,
    meta_of,
    node_exclusion,
)
from horus.operator.residents import LiveState
from horus.scheduler import ClusterState

__all__ = ["gpu_nodes", "slices_by_node"]


def slices_by_node(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The Horus driver's ResourceSlices grouped by ``spec.nodeName`` (one pass over them)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("driver") == c.DRA_DRIVER_NAME:
            out.setdefault(str(spec.get("nodeName") or ""), []).append(item)
    return out


def gpu_nodes(
    nodes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]] | None = None,
    identities: Registry | None = None,
) -> LiveState:
    """The GPUs of the nodes that may receive work (see :func:`node_exclusion`): from the
    inventory annotation, or on the DRA path from the node's ResourceSlices.

    With the GPU identity registry (``identities``, :mod:`horus.node.identities`), a GPU a
    node publishes that is registered to another node is ignored on the node that publishes
    it (a problem names both); the node it is registered to keeps it. A UUID that several
    nodes publish and none is registered to is ignored on all of them (:func:`_tolerant_state`):
    no node leaves the view because another repeats its GPUs."""
    live_nodes: dict[str, list[GpuDevice]] = {}
    excluded: dict[str, str] = {}
    problems: list[str] = list(identities.problems) if identities is not None else []
    grouped = slices_by_node(slices) if slices is not None else None
    for node in nodes:
        name = str(meta_of(node).get("name", ""))
        if grouped is not None:
            gpus = slice_gpus(grouped.get(name, []), name) if name else []
            if not gpus:
                continue
            why = node_exclusion(node)
            if why is not None:
                excluded[name] = why
            else:
                kept = _own_gpus(identities, name, gpus, excluded, problems)
                if name not in excluded:
                    live_nodes[name] = kept
            continue
        text = annotations_of(node).get(c.ANNOTATION_GPU_INVENTORY)
        if not name or text is None:
            continue
        why = node_exclusion(node)
        if why is not None:
            excluded[name] = why
            continue
        try:
            gpus = decode_inventory(text, f"node {name} {c.ANNOTATION_GPU_INVENTORY}")
        except ValidationError as exc:
            excluded[name] = f"unreadable GPU inventory: {exc}"
            problems.append(str(exc))
            continue
        kept = _own_gpus(identities, name, gpus, excluded, problems)
        if name not in excluded:
            live_nodes[name] = kept
    live_nodes = dict(sorted(live_nodes.items()))
    try:
        state = ClusterState.from_inventory(live_nodes)
    except ValidationError as exc:  # e.g. a UUID on two nodes: leave it out on each
        problems.append(f"cluster inventory is inconsistent: {exc}")
        state = _tolerant_state(live_nodes, excluded, problems)
    return LiveState(state=state, excluded_nodes=excluded, problems=problems)


def _own_gpus(
    identities: Registry | None,
    node: str,
    gpus: list[GpuDevice],
    excluded: dict[str, str],
    problems: list[str],
) -> list[GpuDevice]:
    """``node``'s GPUs less those registered to another node (each named in ``problems``);
    a node left with none is excluded, saying why."""
    kept, foreign = split_gpus(identities, node, gpus)
    problems.extend(f.why for f in foreign)
    if foreign and not kept:
        excluded[node] = "every GPU it publishes is registered to another node"
    return kept


def _tolerant_state(
    nodes: dict[str, list[GpuDevice]], excluded: dict[str, str], problems: list[str]
) -> ClusterState:
    """The state without the GPUs whose UUID more than one node (or one node twice) publishes:
    which of them is the GPU's is not known (none is registered: :func:`_own_gpus` took out
    those that are), so the GPU is counted on none of them, and every node keeps the rest."""
    repeated = contested(nodes)
    for uuid, where in sorted(repeated.items()):
        problems.append(
            f"GPU {uuid} is published by nodes {', '.join(where)}: left out on each until "
            "one node alone publishes it"
        )
    good: dict[str, list[GpuDevice]] = {}
    for name, gpus in nodes.items():
        kept = [g for g in gpus if g.uuid not in repeated]
        if kept or not gpus:
            good[name] = kept
        else:
            excluded[name] = "its GPU UUIDs repeat those of another node"
    return ClusterState.from_inventory(good)
