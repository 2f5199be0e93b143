"""The shared assignment-key loader: file first, else the Secret, created once (hex text)."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from horus.api.signing import KeyRing, sign_assignment
from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.operator.assignment_key import (
    AssignmentKeySource,
    key_from_secret_data,
    load_or_create_assignment_key,
)


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
    assert load_or_create_assignment_key(core).current == b"k" * 64
    assert core.created == []


def test_missing_secret_is_created_as_hex_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    core = FakeCore()
    key = load_or_create_assignment_key(core).current
    assert len(key) == 64 and all(ch in b"0123456789abcdef" for ch in key)
    assert core.created == ["namespace", "secret"]
    assert load_or_create_assignment_key(core).current == key  # stable afterwards


def test_losing_the_creation_race_reads_the_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    assert load_or_create_assignment_key(FakeCore(race=True)).current == b"w" * 64


def test_key_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "key"
    path.write_text("f" * 64 + "\n")
    core = FakeCore()
    assert load_or_create_assignment_key(core, path).current == b"f" * 64
    monkeypatch.setenv(c.ASSIGNMENT_KEY_FILE_ENV, str(path))
    assert load_or_create_assignment_key(core).current == b"f" * 64
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


def test_previous_keys_still_verify_during_a_rotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotated Secret keeps the old key in ``previous``: pods signed with it stay valid,
    new ones are signed with the new key."""
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    old, new = b"o" * 64, b"n" * 64
    data = {
        c.ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(new).decode(),
        "previous": base64.b64encode(old + b"\n").decode(),
    }
    ring = load_or_create_assignment_key(FakeCore(data))
    assert ring == KeyRing(new, (old,))
    signed_before = sign_assignment(old, "ns", "p", "{}")
    assert ring.verify_assignment("ns", "p", "{}", signed_before)
    assert not KeyRing(new).verify_assignment("ns", "p", "{}", signed_before)
    # the same from a mounted Secret: a "previous" file beside the key file
    (tmp_path / "key").write_bytes(new)
    (tmp_path / "previous").write_bytes(old)
    assert load_or_create_assignment_key(FakeCore(), tmp_path / "key") == ring


def test_key_source_picks_up_a_rotation_without_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)
    core = FakeCore({c.ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(b"a" * 64).decode()})
    source = AssignmentKeySource(core, refresh_seconds=0.01)
    assert source().current == b"a" * 64
    core.data = {c.ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(b"b" * 64).decode()}
    time.sleep(0.02)
    assert source().current == b"b" * 64
    core.data = {c.ASSIGNMENT_KEY_SECRET_KEY: "!!!"}  # garbled: the last good key stays
    time.sleep(0.02)
    assert source().current == b"b" * 64
