"""PredictorReloader: a changed artifact file is loaded again, a broken one never replaces the
running model, and a ConfigMap-style symlink swap is seen."""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from horus.common.errors import ValidationError
from horus.operator.model_reload import PredictorReloader, ReloadThread

pytestmark = pytest.mark.unit


@dataclass
class Model:
    """Stands in for a loaded predictor: only its version matters to the reloader."""

    version: str


def load(path: str) -> Any:
    text = Path(path).read_text()
    if not text.startswith("model "):
        raise ValidationError(f"{path}: not a predictor artifact")
    return Model(text.split()[1])


def bump(path: Path, text: str) -> None:
    """Rewrite ``path`` so that its identity surely changes (size or mtime)."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_a_changed_file_is_loaded_and_a_broken_one_keeps_the_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "model.json"
    path.write_text("model v1")
    results: list[tuple[str, str]] = []
    r = PredictorReloader(
        path, Model("v1"), load=load, on_result=lambda res, p: results.append((res, p.version))
    )
    assert r.check() is None  # unchanged: nothing loaded
    bump(path, "model v1")
    assert r.check() is None  # the same model written again
    bump(path, "model v2")
    new = r.check()
    assert new is not None and new.version == "v2" and r.current is new
    assert results == [("reloaded", "v2")]
    with caplog.at_level(logging.ERROR, logger="horus.operator.model_reload"):
        bump(path, "garbage")
        assert r.check() is None
        assert r.check() is None  # unchanged broken file: not reported again
        path.unlink()
        assert r.check() is None
        assert r.check() is None
    errors = [m for m in caplog.messages if "cannot be used" in m]
    assert len(errors) == 2, errors
    assert "not a predictor artifact" in errors[0] and "still placing with v2" in errors[0]
    assert "cannot be read" in errors[1]
    assert results[1:] == [("failed", "v2"), ("failed", "v2")]
    assert r.current.version == "v2"
    path.write_text("model v3")  # back, fixed
    new = r.check()
    assert new is not None and new.version == "v3"


def test_configmap_symlink_swap_is_seen(tmp_path: Path) -> None:
    """The kubelet updates a ConfigMap volume by pointing ``..data`` at a new folder; the
    file name the process opened stays the same."""
    for name, version in (("..v1", "v1"), ("..v2", "v2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.json").write_text(f"model {version}")
    (tmp_path / "..data").symlink_to("..v1")
    (tmp_path / "model.json").symlink_to("..data/model.json")
    r = PredictorReloader(tmp_path / "model.json", Model("v1"), load=load)
    assert r.check() is None
    (tmp_path / "..tmp").symlink_to("..v2")
    os.replace(tmp_path / "..tmp", tmp_path / "..data")
    new = r.check()
    assert new is not None and new.version == "v2"


def test_reload_thread_hands_over_a_new_model(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text("model v1")
    got: list[str] = []
    thread = ReloadThread(
        PredictorReloader(path, Model("v1"), load=load), 0.05, lambda p: got.append(p.version)
    )
    thread.start()
    try:
        bump(path, "model v2")
        for _ in range(200):
            if got:
                break
            time.sleep(0.05)
    finally:
        thread.stop()
    assert got == ["v2"]


@pytest.mark.parametrize("value", [-1.0, math.nan])
def test_bad_reload_interval_is_refused(value: float) -> None:
    from horus.common.errors import HorusError
    from horus.common.settings import load_settings
    from horus.operator.extender import ExtenderSettings
    from horus.operator.settings import OperatorSettings

    for cls, section in ((OperatorSettings, "operator"), (ExtenderSettings, "extender")):
        with pytest.raises(
            HorusError, match=r"predictor[_-]reload[_-]seconds(: nan is not a finite| must be >= 0)"
        ):
            load_settings(cls, section, cli={"predictor_reload_seconds": value})


@pytest.mark.parametrize("command", ["run", "extender"])
def test_cli_flag_reaches_the_settings(command: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "horus", "operator", command, "--predictor-reload-seconds", "-5"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert "predictor_reload_seconds must be >= 0 (0: never reload), got -5" in proc.stderr
