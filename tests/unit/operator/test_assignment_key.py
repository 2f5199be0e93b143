"""The shared assignment-key loader: file first, else the Secret, created once (hex text)."""

from __future__ import annotations

import base64
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.operator.assignment_key import key_from_secret_data, load_or_create_assignment_key


class FakeCore:
    def __init__(self, data: dict[str, str] | None = None, race: bool = False) -> None:
        self.data = data
        self.race = race
        self.created: list[str] = []

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        assert (name, namespace) == (c.ASSIGNMENT_KEY_SECRET, c.HORUS_NAMESPACE)
        if self.data is None:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=self.data)

    def create_namespace(self, body: Any) -> None:
        self.created.append("namespace")
        raise ApiException(status=409, reason="AlreadyExists")

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> Any:
        self.created.append("secret")
        if self.race:  # another process created it first
            self.data = {c.ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(b"w" * 64).decode()}
            raise ApiException(status=409, reason="AlreadyExists")
        self.data = body["data"]
        return SimpleNamespace(data=self.data)


def test_existing_secret_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    core = FakeCore({c.ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(b"k" * 64 + b"\n").decode()})
    assert load_or_create_assignment_key(core) == b"k" * 64
    assert core.created == []


def test_missing_secret_is_created_as_hex_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    core = FakeCore()
    key = load_or_create_assignment_key(core)
    assert len(key) == 64 and all(ch in b"0123456789abcdef" for ch in key)
    assert core.created == ["namespace", "secret"]
    assert load_or_create_assignment_key(core) == key  # stable afterwards


def test_losing_the_creation_race_reads_the_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    assert load_or_create_assignment_key(FakeCore(race=True)) == b"w" * 64


def test_key_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "key"
    path.write_text("f" * 64 + "\n")
    core = FakeCore()
    assert load_or_create_assignment_key(core, path) == b"f" * 64
    monkeypatch.setenv(c.ASSIGNMENT_KEY_FILE_ENV, str(path))
    assert load_or_create_assignment_key(core) == b"f" * 64
    assert core.created == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "has no 'key' entry"),
        ({"other": "eA=="}, "has no 'key' entry"),
        ({"key": "!!!"}, "is not base64"),
        ({"key": base64.b64encode(b"short").decode()}, "need at least 16"),
    ],
)
def test_bad_secret_data(data: dict[str, str] | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        key_from_secret_data(data)
