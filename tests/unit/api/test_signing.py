"""Ed25519 signatures: only a private key signs; they verify only for the pod (its UID), job,
epoch and text they were made for, and a node's public keys cannot make one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horus.api.signing import (
    KeyFileRing,
    KeyRing,
    SigningKey,
    SigningUnavailable,
    VerifyKeys,
    assignment_epoch,
    parse_public_keys,
)
from horus.common.errors import ConfigError

TEXT = '{"node":"n1","gpuUUID":"GPU-1","gpuIndex":0,"corePercent":50,"memoryMiB":1024}'
ARGS = ("ns", "pod-a", "uid-1", "job-uid", TEXT)


def test_valid_signature_verifies_and_carries_its_epoch() -> None:
    ring = KeyRing.generate()
    sig = ring.sign_assignment("ns", "pod-a", "uid-1", "job-uid", 7, TEXT)
    assert sig.startswith("v2:7:") and assignment_epoch(sig) == 7
    assert ring.verify_assignment(*ARGS, sig) == 7


@pytest.mark.parametrize(
    "args",
    [
        ("ns", "pod-b", "uid-1", "job-uid", TEXT),  # copied to another pod
        ("other", "pod-a", "uid-1", "job-uid", TEXT),  # copied to another namespace
        ("ns", "pod-a", "uid-2", "job-uid", TEXT),  # re-created pod (a replay): new UID
        ("ns", "pod-a", "uid-1", "other-job", TEXT),  # a later job of the same name
        ("ns", "pod-a", "uid-1", "job-uid", TEXT.replace('"corePercent":50', '"corePercent":99')),
    ],
    ids=["other-pod", "other-namespace", "replayed-pod", "other-job", "share-raised"],
)
def test_tampering_and_replay_are_detected(args: tuple[str, ...]) -> None:
    ring = KeyRing.generate()
    sig = ring.sign_assignment("ns", "pod-a", "uid-1", "job-uid", 3, TEXT)
    assert ring.verify_assignment(*args, sig) is None


def test_a_changed_epoch_does_not_verify() -> None:
    ring = KeyRing.generate()
    sig = ring.sign_assignment(*ARGS[:4], 3, TEXT)
    assert ring.verify_assignment(*ARGS, sig.replace("v2:3:", "v2:9:", 1)) is None


def test_wrong_key_missing_or_malformed_signature() -> None:
    ring, other = KeyRing.generate(), KeyRing.generate()
    sig = other.sign_assignment(*ARGS[:4], 0, TEXT)
    assert ring.verify_assignment(*ARGS, sig) is None
    for bad in (None, "", "deadbeef", "v1:abc", "v2:x:abc", "v2:1:", "v2:1:!!!", "v2:" + "9" * 30):
        assert ring.verify_assignment(*ARGS, bad) is None


def test_public_keys_cannot_sign() -> None:
    """A node holds only the published public keys: a ring without a private key refuses to
    sign, and nothing in the public PEM is a private key."""
    ring = KeyRing.generate()
    node = KeyRing(parse_public_keys(ring.verify.to_pem(), "keys.pem"))
    assert node.verify == ring.verify and not node.can_sign
    with pytest.raises(SigningUnavailable):
        node.sign_assignment(*ARGS[:4], 0, TEXT)
    with pytest.raises(SigningUnavailable):
        node.sign_placements("ns", "j", "uid", "Running", [], 1)
    with pytest.raises(ConfigError, match="not a PEM private key"):
        SigningKey.from_pem(ring.verify.to_pem().encode(), "keys.pem")


def test_a_record_signature_binds_its_epoch_and_move() -> None:
    ring = KeyRing.generate()
    placements = [{"replica": 0, "node": "n1"}]
    sig = ring.sign_placements("ns", "j", "uid", "Running", placements, 4)
    assert ring.verify_placements("ns", "j", "uid", "Running", placements, 4, sig)
    assert not ring.verify_placements("ns", "j", "uid", "Running", placements, 3, sig)
    assert not ring.verify_placements("ns", "j", "uid", "Failed", placements, 4, sig)
    assert not ring.verify_placements("ns", "j", "uid2", "Running", placements, 4, sig)
    assert not ring.verify_placements(
        "ns", "j", "uid", "Running", placements, 4, sig, {"source": []}
    )


def test_several_published_keys_verify_a_rotation() -> None:
    old, new = KeyRing.generate(), KeyRing.generate()
    both = KeyRing(new.verify.union(old.verify), new.signer)
    sig = old.sign_assignment(*ARGS[:4], 1, TEXT)
    assert both.verify_assignment(*ARGS, sig) == 1
    assert new.verify_assignment(*ARGS, sig) is None  # the old key no longer published


def test_pem_round_trip_and_errors() -> None:
    ring = KeyRing.generate()
    assert ring.signer is not None
    again = SigningKey.from_pem(ring.signer.to_pem(), "private.pem")
    assert again.public_raw == ring.signer.public_raw
    assert parse_public_keys("", "x") == VerifyKeys()
    with pytest.raises(ConfigError, match="not a PEM public key"):
        parse_public_keys("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "x")


def test_key_file_ring_follows_an_update_of_the_mounted_configmap(tmp_path: Path) -> None:
    """The kubelet swaps a mounted ConfigMap's files atomically (a ..data symlink); the
    public keys are read again when keys.pem changes, and kept while it does not."""
    old, new = KeyRing.generate(), KeyRing.generate()
    data = tmp_path / "..data-1"
    data.mkdir()
    (data / "keys.pem").write_text(old.verify.to_pem())
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "keys.pem").symlink_to("..data/keys.pem")
    keys = KeyFileRing(tmp_path / "keys.pem")
    first = keys.ring()
    assert first.verify == old.verify and not first.can_sign and keys.ring() is first
    rotated = tmp_path / "..data-2"
    rotated.mkdir()
    (rotated / "keys.pem").write_text(new.verify.to_pem() + old.verify.to_pem())
    (tmp_path / "..data.tmp").symlink_to(rotated.name)
    (tmp_path / "..data.tmp").rename(tmp_path / "..data")  # the atomic swap
    ring = keys.ring()
    assert set(ring.verify.raw) == set(new.verify.raw + old.verify.raw)
    signature = old.sign_assignment(*ARGS[:4], 0, TEXT)
    assert ring.verify_assignment(*ARGS, signature) == 0  # signed before the rotation
    (rotated / "keys.pem").write_text("")
    with pytest.raises(ConfigError, match="holds no public key"):
        keys.ring()
    with pytest.raises(ConfigError, match="does not exist"):
        KeyFileRing(tmp_path / "missing").ring()


def test_verified_signatures_are_kept_by_use_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verify cache keeps what passes keep asking about and drops what nobody asks about
    any more (a deleted job's signatures), within two generations."""
    from horus.api import signing

    monkeypatch.setattr(signing, "_VERIFIED_GENERATION", 4)
    monkeypatch.setattr(signing, "_VERIFIED_YOUNG", {})
    monkeypatch.setattr(signing, "_VERIFIED_OLD", {})
    ring = KeyRing.generate()  # (making the ring reads its public key once)
    calls: list[bytes] = []
    real = signing.Ed25519PublicKey.from_public_bytes

    def counting(data: bytes) -> Any:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(signing.Ed25519PublicKey, "from_public_bytes", counting)
    live = [("ns", f"live-{i}") for i in range(2)]
    signed = {p: ring.sign_assignment(*p, "uid", "job", 1, "text") for p in live}
    for cycle in range(5):  # each cycle: the live pods again, and 3 pods seen once
        for p, sig in signed.items():
            assert ring.verify_assignment(*p, "uid", "job", "text", sig) == 1
        for i in range(3):
            gone = ("ns", f"c{cycle}-{i}")
            sig = ring.sign_assignment(*gone, "uid", "job", 1, "text")
            assert ring.verify_assignment(*gone, "uid", "job", "text", sig) == 1
    held = len(signing._VERIFIED_YOUNG) + len(signing._VERIFIED_OLD)
    assert held <= 2 * 4  # bounded, though 17 signatures were verified
    # the live pods' answers survived every rotation: verified once each, not once a cycle
    assert len(calls) == 2 + 5 * 3
