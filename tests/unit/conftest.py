"""Every operator pass in the unit tests checks its kept live state against a full build.

The operator keeps its live state from pass to pass (``horus.operator.livedelta``) and counts
again only what changed. Wrapping :meth:`LiveDelta.update` here, every pass of every unit test
that runs the operator's ``Reconciler`` (placements, moves, rollbacks, forged records,
reloaded models, ...) also builds the state from scratch with the same inputs and fails on
any difference — the differential test of ``test_livedelta.py`` over every scenario the suite
has, not only random ones. The DRA path's passes keep a full build while nothing changed
(:class:`FullBuildCache`); each time one is handed back it is compared with a fresh build the
same way. The extender's updates are checked by that test itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from horus.operator.livedelta import LiveDelta
from horus.operator.livesource import FullBuildCache
from horus.operator.livestate import build_live_state
from horus.operator.residents import LiveState
from live_snapshot import snapshot


@pytest.fixture(autouse=True)
def _operator_live_state_equals_a_full_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    update = LiveDelta.update

    def checked(self: LiveDelta, objs: Any, keys: Any, *args: Any, **kwargs: Any) -> LiveState:
        live = update(self, objs, keys, *args, **kwargs)
        if self.profile_of is None:  # the operator's (the pass's inputs)
            profiles, distrusted = self._profiles, self._distrusted
            want = build_live_state(
                objs.nodes,
                objs.pods,
                objs.dljobs,
                self.predictor,
                profiles,
                keys,
                distrusted,
                identities=objs.identities,
            )
            assert snapshot(live) == snapshot(want), "kept live state differs from a full build"
        return live

    kept_update = FullBuildCache.update

    def kept_checked(self: FullBuildCache, objs: Any, *args: Any) -> tuple[LiveState, bool]:
        live, same = kept_update(self, objs, *args)
        if same:  # handed back: what a full build of these inputs gives now
            claims, slices, predictor, keys, profiles, distrusted = args
            want = build_live_state(
                objs.nodes,
                objs.pods,
                objs.dljobs,
                predictor,
                profiles,
                keys,
                distrusted,
                claims,
                slices,
                objs.identities,
            )
            assert snapshot(live) == snapshot(want), "kept DRA live state differs from a build"
            assert live.overtaken == want.overtaken
        return live, same

    monkeypatch.setattr(LiveDelta, "update", checked)
    monkeypatch.setattr(FullBuildCache, "update", kept_checked)
    yield
