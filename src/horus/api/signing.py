"""Signed GPU assignments: the node side never trusts a pod's own word.

Anyone who can create a pod can write any annotation on it, including a
``horus.io/gpu-assignment`` that claims a whole GPU. So whoever *places* a pod (the operator,
or the scheduler extender's bind) also writes ``horus.io/gpu-assignment-signature``: an
HMAC-SHA256 over the pod's namespace, name and the exact assignment text, keyed by a random
cluster key kept in the Secret ``horus-system/horus-assignment-key``. Only the operator and the
device plugin can read that Secret (RBAC), so a user can neither forge a signature nor copy a
valid one to another pod (the pod's identity is part of the signed message). The device plugin
refuses, with an Event, any assignment whose signature does not verify.

Why not a managedFields owner check: the field manager's name is chosen by the client, so a
user could claim to be the operator. A keyed MAC cannot be claimed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from horus.common.errors import ConfigError

KEY_BYTES = 32
_PREFIX = "v1:"


def new_key() -> bytes:
    """A fresh random cluster key."""
    return secrets.token_bytes(KEY_BYTES)


def _message(namespace: str, pod: str, assignment_text: str) -> bytes:
    return "\n".join(("horus-assignment-v1", namespace, pod, assignment_text)).encode()


def sign_assignment(key: bytes, namespace: str, pod: str, assignment_text: str) -> str:
    """The signature annotation value for ``assignment_text`` on pod ``namespace/pod``."""
    if len(key) < 16:
        raise ConfigError("the assignment key must be at least 16 bytes")
    mac = hmac.new(key, _message(namespace, pod, assignment_text), hashlib.sha256)
    return _PREFIX + mac.hexdigest()


def verify_assignment(
    key: bytes, namespace: str, pod: str, assignment_text: str, signature: str | None
) -> bool:
    """True only when ``signature`` was made with ``key`` for exactly this pod and text."""
    if not signature or not signature.startswith(_PREFIX):
        return False
    expected = sign_assignment(key, namespace, pod, assignment_text)
    return hmac.compare_digest(expected, signature)


def load_key_file(path: Path) -> bytes:
    """Read the key from a mounted Secret file; errors say how to provide it."""
    try:
        data = path.read_bytes().strip()
    except FileNotFoundError:
        raise ConfigError(
            f"assignment key file {path} does not exist: mount the Secret "
            "horus-system/horus-assignment-key there (the chart does), or set "
            "HORUS_ASSIGNMENT_KEY_FILE to the file"
        ) from None
    if len(data) < 16:
        raise ConfigError(f"assignment key file {path} holds {len(data)} bytes; need at least 16")
    return data
