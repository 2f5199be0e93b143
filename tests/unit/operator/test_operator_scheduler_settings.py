"""The operator places by the same scheduling thresholds as the extender (``scheduler`` section)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horus.cli import main
from horus.predictor import load_default_predictor
from horus.scheduler import SchedulerSettings, published_pair_error


def test_run_passes_the_scheduler_section_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import horus.operator.controller as controller

    seen: dict[str, Any] = {}

    def fake_run(settings: Any, stop_flag: Any = None, ready_flag: Any = None, **kw: Any) -> None:
        seen["settings"], seen["scheduler"] = settings, kw.get("scheduler_settings")

    monkeypatch.setattr(controller, "run", fake_run)
    monkeypatch.setenv("HORUS_SCHEDULER_UTIL_CAP", "150")
    cfg = tmp_path / "horus.yaml"
    cfg.write_text("operator:\n  policy: horus\nscheduler:\n  min_speed: 0.5\n  util_cap: 300\n")
    assert main(["operator", "run", "--config", str(cfg)]) == 0
    sched = seen["scheduler"]
    assert isinstance(sched, SchedulerSettings)
    assert sched.min_speed == 0.5  # from the file
    assert sched.util_cap == 150.0  # the environment beats the file


def test_reconciler_uses_the_settings_and_the_published_pair_error() -> None:
    from kubernetes import client

    from horus.operator.reconcile import Reconciler

    predictor = load_default_predictor()
    rec = Reconciler(
        client.ApiClient(),
        predictor,
        b"k" * 32,
        scheduler_settings=SchedulerSettings(min_speed=0.5, max_jobs_per_gpu=2),
    )
    try:
        assert rec.scheduler.settings.min_speed == 0.5
        assert rec.scheduler.settings.max_jobs_per_gpu == 2
        # its pair-speed wrapper only adds a guess for unknown kinds: the margin stays the
        # predictor's published error, not the 0 of an exact (oracle) source
        assert rec.scheduler.pair_error == published_pair_error(predictor) > 0
    finally:
        rec.close()


def test_run_loads_the_predictor_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--predictor / HORUS_OPERATOR_PREDICTOR: loaded before anything talks to the cluster;
    a missing or broken file stops the operator with a message naming it."""
    import os
    import subprocess
    import sys

    from horus.common.errors import ValidationError
    from horus.operator.controller import load_operator_predictor
    from horus.operator.settings import OperatorSettings
    from horus.predictor.model import DEFAULT_ARTIFACT

    copy = tmp_path / "mine.json"
    copy.write_bytes(DEFAULT_ARTIFACT.read_bytes())
    assert load_operator_predictor(OperatorSettings(predictor=copy)).version == (
        load_default_predictor().version
    )
    assert load_operator_predictor(OperatorSettings()) is load_default_predictor()
    with pytest.raises(ValidationError, match=r"cannot read predictor artifact .*nope.json"):
        load_operator_predictor(OperatorSettings(predictor=tmp_path / "nope.json"))

    broken = tmp_path / "model.json.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00")
    for argv, env in (
        (["--predictor", str(broken)], {}),
        ([], {"HORUS_OPERATOR_PREDICTOR": str(broken)}),
    ):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "horus",
                "operator",
                "run",
                "--kubeconfig",
                "/nonexistent",
                *argv,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
        assert proc.returncode == 2, proc.stderr
        assert f"{broken} is not a predictor artifact" in proc.stderr, proc.stderr
