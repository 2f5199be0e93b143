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
"""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import Any

from horus.api.signing import load_key_file, new_key
from horus.common.constants import (
    ASSIGNMENT_KEY_FILE_ENV,
    ASSIGNMENT_KEY_SECRET,
    ASSIGNMENT_KEY_SECRET_KEY,
    HORUS_NAMESPACE,
)
from horus.common.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["encode_key_text", "key_from_secret_data", "load_or_create_assignment_key"]


def encode_key_text() -> bytes:
    """A fresh key in its stored form: 64 lowercase hex characters (ASCII bytes)."""
    return new_key().hex().encode("ascii")


def key_from_secret_data(data: dict[str, str] | None) -> bytes:
    """The HMAC key from a Secret's ``data`` (base64 values); errors say what is wrong."""
    where = f"Secret {HORUS_NAMESPACE}/{ASSIGNMENT_KEY_SECRET}"
    raw = (data or {}).get(ASSIGNMENT_KEY_SECRET_KEY)
    if raw is None:
        raise ConfigError(
            f"{where} has no '{ASSIGNMENT_KEY_SECRET_KEY}' entry; delete the Secret so Horus "
            "creates a fresh one, or add the entry (64 hex characters)"
        )
    try:
        key = base64.b64decode(raw, validate=True).strip()
    except ValueError:
        raise ConfigError(f"{where}: data.{ASSIGNMENT_KEY_SECRET_KEY} is not base64") from None
    if len(key) < 16:
        raise ConfigError(
            f"{where}: data.{ASSIGNMENT_KEY_SECRET_KEY} holds {len(key)} bytes; need at least 16"
        )
    return key


def load_or_create_assignment_key(core_v1: Any, key_file: Path | None = None) -> bytes:
    """The assignment key: from ``key_file`` / ``$HORUS_ASSIGNMENT_KEY_FILE``, else the Secret.

    ``core_v1`` is a ``kubernetes.client.CoreV1Api``. The Secret (and the ``horus-system``
    namespace) is created when absent; a concurrent creator's key is read back on conflict.
    """
    from kubernetes.client.exceptions import ApiException

    env_file = os.environ.get(ASSIGNMENT_KEY_FILE_ENV)
    path = key_file or (Path(env_file) if env_file else None)
    if path is not None:
        return load_key_file(path)
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
