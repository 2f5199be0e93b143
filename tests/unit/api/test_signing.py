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
