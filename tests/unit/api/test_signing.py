"""Assignment signatures verify only for the pod and text they were made for."""

from __future__ import annotations

from pathlib import Path

import pytest

from horus.api.signing import load_key_file, new_key, sign_assignment, verify_assignment
from horus.common.errors import ConfigError

TEXT = '{"node":"n1","gpuUUID":"GPU-1","gpuIndex":0,"corePercent":50,"memoryMiB":1024}'


def test_valid_signature_verifies() -> None:
    key = new_key()
    sig = sign_assignment(key, "ns", "pod-a", TEXT)
    assert verify_assignment(key, "ns", "pod-a", TEXT, sig)


@pytest.mark.parametrize(
    ("namespace", "pod", "text"),
    [
        ("ns", "pod-b", TEXT),  # copied to another pod
        ("other", "pod-a", TEXT),  # copied to another namespace
        ("ns", "pod-a", TEXT.replace('"corePercent":50', '"corePercent":100')),  # share raised
    ],
)
def test_tampering_is_detected(namespace: str, pod: str, text: str) -> None:
    key = new_key()
    sig = sign_assignment(key, "ns", "pod-a", TEXT)
    assert not verify_assignment(key, namespace, pod, text, sig)


def test_wrong_key_missing_or_malformed_signature() -> None:
    key = new_key()
    sig = sign_assignment(new_key(), "ns", "pod-a", TEXT)
    assert not verify_assignment(key, "ns", "pod-a", TEXT, sig)
    assert not verify_assignment(key, "ns", "pod-a", TEXT, None)
    assert not verify_assignment(key, "ns", "pod-a", TEXT, "deadbeef")


def test_key_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_key_file(tmp_path / "missing")
    short = tmp_path / "short"
    short.write_bytes(b"abc")
    with pytest.raises(ConfigError, match="need at least 16"):
        load_key_file(short)
    good = tmp_path / "good"
    good.write_bytes(b"0123456789abcdef0123\n")
    assert load_key_file(good) == b"0123456789abcdef0123"


def test_key_file_ring_follows_a_rotation_of_the_mounted_secret(tmp_path: Path) -> None:
    """The kubelet swaps a mounted Secret's files atomically (a ..data symlink); the ring is
    read again when the key or the previous file changes, and kept while neither does."""
    from horus.api.signing import KeyFileRing

    old, new = b"o" * 32, b"n" * 32
    data = tmp_path / "..data-1"
    data.mkdir()
    (data / "key").write_bytes(old)
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "key").symlink_to("..data/key")
    (tmp_path / "previous").symlink_to("..data/previous")  # dangling until a rotation
    keys = KeyFileRing(tmp_path / "key")
    first = keys.ring()
    assert first.keys == (old,) and keys.ring() is first  # unchanged: not read again
    rotated = tmp_path / "..data-2"
    rotated.mkdir()
    (rotated / "key").write_bytes(new + b"\n")
    (rotated / "previous").write_text(old.decode() + "\n")
    (tmp_path / "..data.tmp").symlink_to(rotated.name)
    (tmp_path / "..data.tmp").rename(tmp_path / "..data")  # the atomic swap
    ring = keys.ring()
    assert ring.current == new and ring.previous == (old,)
    signature = sign_assignment(old, "ml", "p", "{}")
    assert ring.verify_assignment("ml", "p", "{}", signature)  # signed before the rotation
    (rotated / "key").write_bytes(b"short")
    with pytest.raises(ConfigError, match="need at least 16"):
        keys.ring()
