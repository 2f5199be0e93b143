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
