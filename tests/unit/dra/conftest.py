"""Fixtures for the DRA driver's unit tests: short socket folders (unix socket paths are
limited to 107 bytes, pytest's tmp_path is long)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hdra-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
