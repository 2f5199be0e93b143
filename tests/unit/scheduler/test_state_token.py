"""Caches keyed by a cluster state must not survive into another state that reuses its id()."""

from __future__ import annotations

from horus.scheduler import ClusterState


def test_every_state_and_copy_has_its_own_token() -> None:
    tokens = set()
    for _ in range(50):
        state = ClusterState.uniform(1, 2, "H100", 81920)
        tokens.add(state.token)
        tokens.add(state.copy().token)
        del state  # its id() may be reused by the next one; its token never is
    assert len(tokens) == 100


def test_copies_share_the_layout_token_but_new_states_do_not() -> None:
    a = ClusterState.uniform(1, 2, "H100", 81920)
    b = ClusterState.uniform(1, 2, "H100", 81920)
    assert a.copy().layout_token == a.layout_token
    assert b.layout_token != a.layout_token
