"""The cluster key that signs GPU assignments: read it from a file, else from its Secret,
creating the Secret on first start.

Both placers (the kopf operator and the scheduler extender's ``bind``) sign every
``horus.io/gpu-assignment`` they write (see :mod:`horus.api.signing`), and the device plugin
verifies with the same key. So the two placers must agree on *one* key and *one* encoding,
whichever of them starts first — that is why this lives in one shared function.

Encoding: the Secret's ``key`` entry holds the key as **64 hex characters** (ASCII), and the
HMAC key is exactly those ASCII bytes. A pod mounting the Secret as a file
(``HORUS_ASSIGNMENT_KEY_FILE``) therefore reads the very same bytes through
:func:`horus.api.signing.load_key_file` (which strips surrounding whitespace — raw random bytes
could lose a leading or trailing whitespace byte there; hex text cannot).

Order: an explicit key file (argument or ``HORUS_ASSIGNMENT_KEY_FILE``) wins; otherwise the
Secret ``horus-system/horus-assignment-key`` is read, and created (namespace too) when absent.
When two processes race to create it, the loser reads the winner's key (HTTP 409).

Rotation without a restart: the Secret's optional ``previous`` entry (or a ``previous`` file
beside the key file) lists keys that still *verify*; :class:`AssignmentKeySource` re-reads
the key every ``refresh_seconds`` and hands out a :class:`~horus.api.signing.KeyRing`. A
read that fails keeps the ring in use (logged), so a deleted or garbled Secret never stops
placement — it only delays the new key.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from horus.api.signing import KeyRing, load_key_ring, new_key, ring_from_secret_data
from horus.common.constants import (
    ASSIGNMENT_KEY_FILE_ENV,
    ASSIGNMENT_KEY_SECRET,
    ASSIGNMENT_KEY_SECRET_KEY,
    HORUS_NAMESPACE,
)
from horus.common.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "AssignmentKeySource",
    "encode_key_text",
    "key_from_secret_data",
    "load_or_create_assignment_key",
]


def encode_key_text() -> bytes:
    """A fresh key in its stored form: 64 lowercase hex characters (ASCII bytes)."""
    return new_key().hex().encode("ascii")


def key_from_secret_data(data: dict[str, str] | None) -> KeyRing:
    """The key ring from the Secret's ``data`` (:func:`horus.api.signing.ring_from_secret_data`)."""
    return ring_from_secret_data(data, f"Secret {HORUS_NAMESPACE}/{ASSIGNMENT_KEY_SECRET}")


def load_or_create_assignment_key(core_v1: Any, key_file: Path | None = None) -> KeyRing:
    """The assignment key: from ``key_file`` / ``$HORUS_ASSIGNMENT_KEY_FILE``, else the Secret.

    ``core_v1`` is a ``kubernetes.client.CoreV1Api``. The Secret (and the ``horus-system``
    namespace) is created when absent; a concurrent creator's key is read back on conflict.
    """
    from kubernetes.client.exceptions import ApiException

    env_file = os.environ.get(ASSIGNMENT_KEY_FILE_ENV)
    path = key_file or (Path(env_file) if env_file else None)
    if path is not None:
        return load_key_ring(path)
    try:
        secret = core_v1.read_namespaced_secret(ASSIGNMENT_KEY_SECRET, HORUS_NAMESPACE)
        return key_from_secret_data(secret.data)
    except ApiException as exc:
        if exc.status != 404:
            raise ConfigError(
                f"cannot read Secret {HORUS_NAMESPACE}/{ASSIGNMENT_KEY_SECRET}: "
                f"HTTP {exc.status} {exc.reason}; grant get on it (manifests/rbac) or set "
                f"{ASSIGNMENT_KEY_FILE_ENV}"
            ) from None
    try:
        core_v1.create_namespace({"metadata": {"name": HORUS_NAMESPACE}})
    except ApiException as exc:
        if exc.status not in (409, 403):  # exists already / may not create: try the Secret
            raise ConfigError(
                f"cannot create namespace {HORUS_NAMESPACE}: HTTP {exc.status} {exc.reason}"
            ) from None
    body = {
        "metadata": {
            "name": ASSIGNMENT_KEY_SECRET,
            "namespace": HORUS_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "horus"},
        },
        "type": "Opaque",
        "data": {ASSIGNMENT_KEY_SECRET_KEY: base64.b64encode(encode_key_text()).decode()},
    }
    try:
        created = core_v1.create_namespaced_secret(HORUS_NAMESPACE, body)
        log.info("created the assignment key Secret %s/%s", HORUS_NAMESPACE, ASSIGNMENT_KEY_SECRET)
        return key_from_secret_data(created.data)
    except ApiException as exc:
        if exc.status != 409:
            raise ConfigError(
                f"cannot create Secret {HORUS_NAMESPACE}/{ASSIGNMENT_KEY_SECRET}: "
                f"HTTP {exc.status} {exc.reason}"
            ) from None
    secret = core_v1.read_namespaced_secret(ASSIGNMENT_KEY_SECRET, HORUS_NAMESPACE)
    return key_from_secret_data(secret.data)


class AssignmentKeySource:
    """The current :class:`KeyRing`, re-read at most every ``refresh_seconds``.

    Thread-safe (commit chains sign concurrently). The first read happens in the constructor,
    so a missing or unusable key stops the process at start with its message; later failures
    keep the last good ring.
    """

    def __init__(
        self, core_v1: Any, key_file: Path | None = None, refresh_seconds: float = 30.0
    ) -> None:
        self._core, self._file, self._refresh = core_v1, key_file, refresh_seconds
        self._lock = threading.Lock()
        self._ring = load_or_create_assignment_key(core_v1, key_file)
        self._read_at = time.monotonic()
        self._failed = False

    def __call__(self) -> KeyRing:
        return self.ring()

    def ring(self) -> KeyRing:
        with self._lock:
            if self._refresh > 0 and time.monotonic() - self._read_at >= self._refresh:
                self._read_at = time.monotonic()
                try:
                    new = load_or_create_assignment_key(self._core, self._file)
                except (ConfigError, OSError) as exc:
                    if not self._failed:
                        log.warning("cannot re-read the assignment key (%s); keeping it", exc)
                    self._failed = True
                else:
                    if new != self._ring:
                        log.info("assignment key changed: signing with the new key")
                    self._ring, self._failed = new, False
            return self._ring
