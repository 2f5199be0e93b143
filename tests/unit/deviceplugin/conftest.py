"""Fixtures for device-plugin unit tests: the in-memory API (dp_fakes.py) and short socket dirs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dp_fakes import FakeNodeApi


@pytest.fixture
def fake_api() -> FakeNodeApi:
    return FakeNodeApi()


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: keep them short (pytest's tmp_path is long)
    folder = Path(tempfile.mkdtemp(prefix="hdp-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
