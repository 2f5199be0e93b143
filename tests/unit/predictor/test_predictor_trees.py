"""Exported trees predict exactly what scikit-learn predicts, and survive a JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from horus.predictor.trees import TreeEnsemble


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error"])
def test_export_matches_sklearn(loss: str) -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    y = x[:, 0] * 3 + np.sin(x[:, 1]) + (x[:, 2] > 0) * 2 + rng.normal(scale=0.1, size=400)
    est = GradientBoostingRegressor(
        loss=loss, n_estimators=40, max_depth=4, min_samples_leaf=20, random_state=0
    ).fit(x, y)
    trees = TreeEnsemble.from_sklearn(est)
    test = rng.normal(size=(300, 6))
    np.testing.assert_allclose(trees.predict(test), est.predict(test), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        trees.predict(test, chunk=7), est.predict(test), rtol=1e-10, atol=1e-10
    )
    again = TreeEnsemble.from_json(json.loads(json.dumps(trees.to_json())))
    np.testing.assert_array_equal(again.predict(test), trees.predict(test))


@pytest.mark.parametrize("depth", [2, 4, 5])
def test_single_row_fast_path_is_bit_identical(depth: int) -> None:
    """``predict_one`` / ``JointEnsembles`` (packed-bits lookup at depth <= 4, level walk
    above) give exactly the batched result, and a joint walk equals separate walks."""
    from sklearn.ensemble import GradientBoostingRegressor

    from horus.predictor.trees import JointEnsembles

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 5))
    ens = [
        TreeEnsemble.from_sklearn(
            GradientBoostingRegressor(n_estimators=15, max_depth=depth, random_state=s).fit(
                x, x[:, s] * 2 + x[:, 4] ** 2
            )
        )
        for s in (0, 1)
    ]
    joint = JointEnsembles((ens[0], ens[1]))
    test = rng.normal(size=(50, 5))
    batched = [e.predict(test) for e in ens]
    for i, row in enumerate(test):
        assert [ens[0].predict_one(row), ens[1].predict_one(row)] == [b[i] for b in batched]
        assert joint.predict_one(row) == [b[i] for b in batched]


def test_forest_export_and_blend() -> None:
    """A random forest exports to the same arrays; a blend predicts the weighted sum."""
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 4))
    y = x[:, 0] - 2 * (x[:, 1] > 0.3) + rng.normal(scale=0.1, size=300)
    rf = RandomForestRegressor(n_estimators=12, max_depth=6, random_state=0).fit(x, y)
    gb = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0).fit(x, y)
    trf, tgb = TreeEnsemble.from_sklearn(rf), TreeEnsemble.from_sklearn(gb)
    test = rng.normal(size=(200, 4))
    np.testing.assert_allclose(trf.predict(test), rf.predict(test), rtol=1e-10, atol=1e-10)
    both = TreeEnsemble.blend([(tgb, 0.5), (trf, 0.5)])
    want = 0.5 * gb.predict(test) + 0.5 * rf.predict(test)
    np.testing.assert_allclose(both.predict(test), want, rtol=1e-10, atol=1e-10)
    assert [both.predict_one(r) for r in test] == both.predict(test).tolist()
    again = TreeEnsemble.from_json(json.loads(json.dumps(both.to_json())))
    np.testing.assert_array_equal(again.predict(test), both.predict(test))


def test_extra_trees_export() -> None:
    """The pair head's learner (ExtraTrees) exports exactly, like the random forest."""
    from sklearn.ensemble import ExtraTreesRegressor

    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 4))
    y = x[:, 0] * x[:, 2] + (x[:, 1] > 0) + rng.normal(scale=0.1, size=300)
    et = ExtraTreesRegressor(n_estimators=15, max_depth=8, random_state=0).fit(x, y)
    tet = TreeEnsemble.from_sklearn(et)
    test = rng.normal(size=(200, 4))
    np.testing.assert_allclose(tet.predict(test), et.predict(test), rtol=1e-10, atol=1e-10)
    assert [tet.predict_one(r) for r in test] == tet.predict(test).tolist()
