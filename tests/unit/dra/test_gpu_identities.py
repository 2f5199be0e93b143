"""The GPU identity registry (horus.node.identities): read, who owns a UUID, what to record, and
Horus' view keeping the honest node when another node publishes its GPUs."""

from __future__ import annotations

from typing import Any

from horus.api.inventory import GpuDevice, encode_inventory
from horus.common import constants as c
from horus.dra.slices import build_slice_spec
from horus.node.identities import (
    Registry,
    additions,
    merge_patch,
    parse_registry,
    registrable,
    split_gpus,
)
from horus.operator.livestate import build_live_state

A0, A1, B0, B1 = "GPU-aaaa-0", "GPU-aaaa-1", "GPU-bbbb-0", "GPU-bbbb-1"


def _gpus(*uuids: str) -> list[GpuDevice]:
    return [GpuDevice(i, u, "H100", 81920) for i, u in enumerate(uuids)]


def _node(name: str, inventory: list[GpuDevice] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if inventory is not None:
        meta["annotations"] = {c.ANNOTATION_GPU_INVENTORY: encode_inventory(inventory)}
    return {
        "metadata": meta,
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _slice(node: str, gpus: list[GpuDevice]) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-s"}, "spec": build_slice_spec(node, gpus, 1)}


def test_parse_keeps_good_entries_and_names_bad_ones() -> None:
    reg = parse_registry(
        {"data": {A0: "node-a", "bad key/": "node-a", B0: "Not_A_Node", B1: "node-b"}}
    )
    assert reg.owners == {A0: "node-a", B1: "node-b"}
    assert len(reg.problems) == 2
    assert any("bad key/" in p for p in reg.problems)
    assert any(B0 in p and "not a node name" in p for p in reg.problems)
    assert parse_registry(None).owners == {}
    assert parse_registry({"metadata": {}}).owners == {}


def test_registrable_is_the_configmap_key_rule() -> None:
    assert registrable("GPU-8a7f0c1e-1234-5678-9abc-def012345678")
    assert not registrable("GPU/1") and not registrable("") and not registrable("..")
    assert not registrable("x" * 254)


def test_first_registration_wins_and_is_never_reassigned() -> None:
    reg = Registry({A0: "node-a"})
    got = additions(reg, {"node-a": [A0, A1], "node-b": [A0, B0]})
    # A0 stays node-a's although node-b now publishes it; the new ones go to their one node
    assert got.entries == {A1: "node-a", B0: "node-b"}
    assert got.problems == ()


def test_a_uuid_two_nodes_publish_first_is_recorded_for_neither() -> None:
    got = additions(Registry(), {"node-a": [A0], "node-b": [A0, B0]})
    assert got.entries == {B0: "node-b"}
    assert len(got.problems) == 1 and "node-a, node-b" in got.problems[0]


def test_an_unregistrable_uuid_is_not_recorded() -> None:
    got = additions(Registry(), {"node-a": ["GPU/../x", A0]})
    assert got.entries == {A0: "node-a"}
    assert "cannot be registered" in got.problems[0]


def test_merge_patch_is_conditional_on_the_version_read() -> None:
    patch = merge_patch({"metadata": {"resourceVersion": "42"}, "data": {}}, {B0: "b", A0: "a"})
    assert patch == {"data": {A0: "a", B0: "b"}, "metadata": {"resourceVersion": "42"}}
    assert merge_patch(None, {A0: "a"}) == {"data": {A0: "a"}}


def test_split_ignores_only_another_nodes_gpus() -> None:
    reg = Registry({B0: "node-b", A0: "node-a"})
    kept, foreign = split_gpus(reg, "node-a", _gpus(A0, B0, A1))
    assert [g.uuid for g in kept] == [A0, A1]
    assert [f.uuid for f in foreign] == [B0]
    assert "registered to node node-b" in foreign[0].why and "node node-a" in foreign[0].why
    assert split_gpus(None, "node-a", _gpus(B0))[0] == _gpus(B0)


def test_the_view_keeps_the_honest_node_when_another_publishes_its_gpus_dra() -> None:
    # node-a (first by name) publishes node-b's GPU beside its own
    nodes = [_node("node-a"), _node("node-b")]
    slices = [_slice("node-a", _gpus(A0, B0)), _slice("node-b", _gpus(B0, B1))]
    reg = Registry({A0: "node-a", B0: "node-b", B1: "node-b"})
    live = build_live_state(nodes, [], [], slices=slices, identities=reg)
    st = live.state
    assert st.node_names == ["node-a", "node-b"]
    assert sorted(str(u) for u in st.gpu_uuid) == sorted([A0, B0, B1])
    assert st.gpu_id("node-b", 0) is not None and st.gpu_id("node-b", 1) is not None
    assert str(st.gpu_uuid[st.gpu_id("node-b", 0)]) == B0
    assert any("node node-a publishes GPU GPU-bbbb-0" in p for p in live.problems)
    assert "node-b" not in live.excluded_nodes


def test_the_view_keeps_the_honest_node_on_the_inventory_path() -> None:
    nodes = [_node("node-a", _gpus(B0)), _node("node-b", _gpus(B0, B1))]
    reg = Registry({B0: "node-b", B1: "node-b"})
    live = build_live_state(nodes, [], [], identities=reg)
    assert live.state.node_names == ["node-b"]
    assert live.excluded_nodes["node-a"] == "every GPU it publishes is registered to another node"
    assert any("registered to node node-b" in p for p in live.problems)


def test_unregistered_repeats_are_left_out_on_each_node_but_no_node_is_dropped() -> None:
    nodes = [_node("node-a", _gpus(A0, B0)), _node("node-b", _gpus(B0, B1))]
    live = build_live_state(nodes, [], [])
    st = live.state
    assert st.node_names == ["node-a", "node-b"]
    assert sorted(str(u) for u in st.gpu_uuid) == sorted([A0, B1])
    assert any("GPU-bbbb-0 is published by nodes node-a, node-b" in p for p in live.problems)


def test_registry_problems_reach_the_view() -> None:
    reg = parse_registry({"data": {"bad key/": "node-a"}})
    live = build_live_state([_node("node-a", _gpus(A0))], [], [], identities=reg)
    assert any("bad key/" in p for p in live.problems)


def test_the_operators_kept_state_takes_the_registry_and_rebuilds_when_it_changes() -> None:
    """The device-plugin path keeps its live state between passes (LiveDelta): a registry
    handed with the listing leaves the liar's GPU out, and a new registry is a full build."""
    from horus.operator.livedelta import LiveDelta
    from horus.operator.livestate import LiveObjects

    nodes = [_node("node-a", _gpus(A0, B0)), _node("node-b", _gpus(B0, B1))]
    delta = LiveDelta(None)  # type: ignore[arg-type]
    none = delta.update(LiveObjects(nodes, [], []), None)
    assert sorted(str(u) for u in none.state.gpu_uuid) == sorted([A0, B1])  # B0 contested
    reg = Registry({A0: "node-a", B0: "node-b", B1: "node-b"})
    builds = delta.full_builds
    live = delta.update(LiveObjects(nodes, [], [], reg), None)
    assert delta.full_builds == builds + 1
    st = live.state
    assert str(st.gpu_uuid[st.gpu_id("node-b", 0)]) == B0
    assert sorted(str(u) for u in st.gpu_uuid) == sorted([A0, B0, B1])
    same = delta.update(LiveObjects(nodes, [], [], Registry(dict(reg.owners))), None)
    assert delta.full_builds == builds + 1 and same.state.gpu_count == 3  # equal: kept
