"""The signing key pair's source: the Secret (private) and the published ConfigMap (public),
created together only on the first install; a lost key pauses signing and deletes nothing; a
new key is published before it signs."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from horus.api.signing import KeyRing, parse_public_keys
from horus.common import constants as c
from horus.operator.assignment_key import AssignmentKeySource
from signing_keys import KEY, OTHER, write_private_key


def secret_data(ring: KeyRing) -> dict[str, str]:
    assert ring.signer is not None
    return {c.SIGNING_KEY_SECRET_ENTRY: base64.b64encode(ring.signer.to_pem()).decode()}


class FakeCore:
    """The Secret and the ConfigMap of horus-system, as the CoreV1Api returns them."""

    def __init__(self, secret: dict[str, str] | None = None, race: dict[str, str] | None = None):
        self.secret = secret
        self.cm: dict[str, Any] | None = None
        self.race = race
        self.rv = 0
        self.calls: list[str] = []

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        assert (name, namespace) == (c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
        if self.secret is None:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=self.secret)

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> Any:
        self.calls.append("create secret")
        if self.race is not None:  # another process created it first
            self.secret = self.race
            raise ApiException(status=409, reason="AlreadyExists")
        self.secret = body["data"]
        return SimpleNamespace(data=self.secret)

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        assert (name, namespace) == (c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE)
        if self.cm is None:
            raise ApiException(status=404, reason="Not Found")
        meta = SimpleNamespace(
            annotations=dict(self.cm["annotations"]), resource_version=str(self.rv)
        )
        return SimpleNamespace(data=dict(self.cm["data"]), metadata=meta)

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> Any:
        self.calls.append("create configmap")
        self.rv += 1
        self.cm = {"data": body["data"], "annotations": body["metadata"].get("annotations") or {}}

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> Any:
        self.calls.append("patch configmap")
        assert self.cm is not None and body["metadata"]["resourceVersion"] == str(self.rv)
        self.rv += 1
        self.cm["data"].update(body["data"])
        self.cm["annotations"].update(body["metadata"].get("annotations") or {})

    def published(self) -> set[bytes]:
        assert self.cm is not None
        return set(parse_public_keys(self.cm["data"][c.VERIFY_KEYS_CONFIGMAP_ENTRY], "cm").raw)


@pytest.fixture(autouse=True)
def _no_key_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(c.ASSIGNMENT_KEY_FILE_ENV, raising=False)


def test_first_install_creates_the_pair_and_publishes_it() -> None:
    core = FakeCore()
    ring = AssignmentKeySource(core)()
    assert ring.can_sign and ring.signer is not None
    assert core.calls == ["create secret", "create configmap"]
    assert core.published() == {ring.signer.public_raw}
    assert core.cm is not None and core.cm["annotations"] == {}  # the first key signs at once


def test_losing_the_creation_race_signs_with_the_winner() -> None:
    core = FakeCore(race=secret_data(KEY))
    ring = AssignmentKeySource(core)()
    assert ring.signer == KEY.signer and core.published() == set(KEY.verify.raw)


def test_an_existing_pair_is_read() -> None:
    core = FakeCore(secret_data(KEY))
    first = AssignmentKeySource(core)()
    assert first.signer == KEY.signer and first.can_sign
    calls = list(core.calls)
    again = AssignmentKeySource(core)()  # published already: nothing written
    assert again.signer == KEY.signer and core.calls == calls


def test_a_deleted_secret_pauses_signing_and_creates_no_new_key() -> None:
    """Issue 24: a new key on a 404 made every pod and record unverifiable. Now the published
    public keys keep verifying, nothing signs until the Secret is back, and no key is made."""
    core = FakeCore(secret_data(KEY))
    source = AssignmentKeySource(core, refresh_seconds=0.01)
    signed = source().sign_assignment("ns", "p", "uid", "", 1, "{}")
    core.secret = None
    time.sleep(0.02)
    ring = source()
    assert not ring.can_sign
    assert f"{c.SIGNING_KEY_SECRET} does not exist" in ring.why_not
    assert "placement is paused" in ring.why_not
    assert ring.verify_assignment("ns", "p", "uid", "", "{}", signed) == 1
    assert "create secret" not in core.calls
    # a new process started while the Secret is gone does not generate one either
    assert not AssignmentKeySource(core)().can_sign and "create secret" not in core.calls
    core.secret = secret_data(KEY)  # restored from a backup
    time.sleep(0.02)
    assert source().can_sign


def test_a_garbled_secret_pauses_signing() -> None:
    core = FakeCore({c.SIGNING_KEY_SECRET_ENTRY: "!!!"})
    core.cm = {"data": {c.VERIFY_KEYS_CONFIGMAP_ENTRY: KEY.verify.to_pem()}, "annotations": {}}
    ring = AssignmentKeySource(core)()
    assert not ring.can_sign and "placement is paused" in ring.why_not
    assert ring.verify == KEY.verify


def test_a_new_key_is_published_before_it_signs() -> None:
    """A rotation: the new private key's public half is added (the old one stays) and the new
    key signs only once the publish delay has passed, so every node has it first."""
    now = [1_000_000.0]
    core = FakeCore(secret_data(KEY))
    source = AssignmentKeySource(core, refresh_seconds=0.01, publish_delay=60, clock=lambda: now[0])
    old_sig = source().sign_assignment("ns", "p", "uid", "", 1, "{}")
    core.secret = secret_data(OTHER)
    time.sleep(0.02)
    ring = source()
    assert not ring.can_sign and "published" in ring.why_not
    assert core.published() == set(KEY.verify.raw) | set(OTHER.verify.raw)
    assert ring.verify_assignment("ns", "p", "uid", "", "{}", old_sig) == 1
    now[0] += 61
    time.sleep(0.02)
    ring = source()
    assert ring.can_sign and ring.signer == OTHER.signer
    assert ring.verify_assignment("ns", "p", "uid", "", "{}", old_sig) == 1


def test_a_deleted_configmap_is_published_again_with_every_known_key() -> None:
    core = FakeCore(secret_data(KEY))
    source = AssignmentKeySource(core, refresh_seconds=0.01)
    assert source().can_sign
    core.cm = None
    time.sleep(0.02)
    assert source().can_sign and core.published() == set(KEY.verify.raw)


def test_a_removed_public_key_no_longer_verifies() -> None:
    """Revocation is the administrator's: a key taken out of the ConfigMap stops verifying."""
    core = FakeCore(secret_data(KEY))
    old_sig = OTHER.sign_assignment("ns", "p", "uid", "", 1, "{}")
    core.cm = {
        "data": {c.VERIFY_KEYS_CONFIGMAP_ENTRY: KEY.verify.union(OTHER.verify).to_pem()},
        "annotations": {},
    }
    source = AssignmentKeySource(core, refresh_seconds=0.01)
    assert source().verify_assignment("ns", "p", "uid", "", "{}", old_sig) == 1
    core.cm["data"][c.VERIFY_KEYS_CONFIGMAP_ENTRY] = KEY.verify.to_pem()
    time.sleep(0.02)
    assert source().verify_assignment("ns", "p", "uid", "", "{}", old_sig) is None


def test_a_key_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_private_key(tmp_path / "private.pem", OTHER)
    core = FakeCore(secret_data(KEY))
    assert AssignmentKeySource(core, path)().signer == OTHER.signer
    monkeypatch.setenv(c.ASSIGNMENT_KEY_FILE_ENV, str(path))
    assert AssignmentKeySource(FakeCore(secret_data(KEY)))().signer == OTHER.signer
    missing = AssignmentKeySource(FakeCore(), tmp_path / "nope.pem")()
    assert not missing.can_sign and "does not exist" in missing.why_not
