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

The same key signs the operator's *placement record* on a DLJob (``status.placements`` with
the phase, :func:`sign_placements`): whoever may write ``dljobs/status`` could otherwise put
placements on a job the operator never placed, and the operator would create, sign and bind
pods for them. A record whose signature does not verify is not trusted: its shares are not
counted and no pod is made from it; the operator restores the truth from the job's own pods.

Rotation: a :class:`KeyRing` signs with its first key and accepts any of its keys, so a new
key can be rolled out while signatures made with the previous one stay valid (the Secret's
``previous`` entry, see ``docs/operator.md``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from horus.common.constants import ASSIGNMENT_KEY_SECRET_KEY, ASSIGNMENT_KEY_SECRET_PREVIOUS
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
    return _mac(key, _message(namespace, pod, assignment_text))


def verify_assignment(
    key: bytes, namespace: str, pod: str, assignment_text: str, signature: str | None
) -> bool:
    """True only when ``signature`` was made with ``key`` for exactly this pod and text."""
    if not signature or not signature.startswith(_PREFIX):
        return False
    expected = sign_assignment(key, namespace, pod, assignment_text)
    return hmac.compare_digest(expected, signature)


@dataclass(frozen=True)
class KeyRing:
    """The signing key and, during a rotation, the previous keys that still verify."""

    current: bytes
    previous: tuple[bytes, ...] = ()

    @property
    def keys(self) -> tuple[bytes, ...]:
        return (self.current, *self.previous)

    def verify_assignment(
        self, namespace: str, pod: str, assignment_text: str, signature: str | None
    ) -> bool:
        return any(
            verify_assignment(k, namespace, pod, assignment_text, signature) for k in self.keys
        )

    def sign_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        migration: Any = None,
    ) -> str:
        return sign_placements(self.current, namespace, name, uid, phase, placements, migration)

    def verify_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        signature: str | None,
        migration: Any = None,
    ) -> bool:
        if not signature or not signature.startswith(_PREFIX):
            return False
        msg = _placement_message(namespace, name, uid, phase, placements, migration)
        return any(hmac.compare_digest(_mac(k, msg), signature) for k in self.keys)


def _placement_message(
    namespace: str, name: str, uid: str, phase: str | None, placements: Any, migration: Any
) -> bytes:
    fields = [namespace, name, uid, phase or "", _canonical(placements or [])]
    if migration:  # only a record with a move in progress has one (older records stay valid)
        fields.append(_canonical(migration))
    return "\n".join(("horus-placements-v1", *fields)).encode()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def sign_placements(
    key: bytes,
    namespace: str,
    name: str,
    uid: str,
    phase: str | None,
    placements: Any,
    migration: Any = None,
) -> str:
    """The ``status.placementSignature`` of DLJob ``namespace/name`` (its ``uid``): binds its
    phase, its placement records and a move in progress (``status.migration``), so none of
    them can be changed by another writer."""
    return _mac(key, _placement_message(namespace, name, uid, phase, placements, migration))


def _mac(key: bytes, message: bytes) -> str:
    """``v1:`` + HMAC-SHA256 hex of ``message`` (the one MAC of every Horus signature)."""
    if len(key) < 16:
        raise ConfigError("the assignment key must be at least 16 bytes")
    return _PREFIX + hmac.new(key, message, hashlib.sha256).hexdigest()


def parse_key_list(text: str, where: str) -> tuple[bytes, ...]:
    """Keys written one per line or separated by spaces/commas (a Secret's ``previous``)."""
    keys = tuple(k.encode() for k in text.replace(",", " ").split())
    short = [k for k in keys if len(k) < 16]
    if short:
        raise ConfigError(f"{where}: a key of {len(short[0])} bytes; each needs at least 16")
    return keys


def load_key_ring(path: Path, previous: Sequence[bytes] = ()) -> KeyRing:
    """The key in ``path`` plus the keys in a ``previous`` file beside it (a mounted Secret's
    optional ``previous`` entry), for verifying during a rotation."""
    key = load_key_file(path)
    extra = list(previous)
    prev_file = path.parent / "previous"
    if prev_file.is_file() and prev_file != path:
        try:
            extra += parse_key_list(prev_file.read_text(), str(prev_file))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {prev_file}: {exc}") from None
    return KeyRing(key, tuple(k for k in extra if k != key))


def _file_stamp(path: Path) -> object:
    try:
        st = path.stat()  # follows the kubelet's ..data symlink swap of a mounted Secret
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class KeyFileRing:
    """The :class:`KeyRing` of a mounted Secret (``key`` and an optional ``previous`` file
    beside it), read again whenever either file changes: the kubelet refreshes a mounted
    Secret within about a minute, so a rotation reaches the process without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ring: KeyRing | None = None
        self._stamp: object = None

    def ring(self) -> KeyRing:
        """The current ring (``ConfigError`` when the files cannot be read as keys)."""
        stamp = (_file_stamp(self.path), _file_stamp(self.path.parent / "previous"))
        if self._ring is None or stamp != self._stamp:
            self._ring = load_key_ring(self.path)
            self._stamp = stamp
        return self._ring


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


def ring_from_secret_data(data: Mapping[str, str] | None, where: str) -> KeyRing:
    """The key ring in a Secret's ``data`` (base64 values): ``key`` signs, the optional
    ``previous`` entry (keys one per line) still verifies; errors say what is wrong."""
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
    previous: tuple[bytes, ...] = ()
    raw_prev = (data or {}).get(ASSIGNMENT_KEY_SECRET_PREVIOUS)
    if raw_prev:
        try:
            text = base64.b64decode(raw_prev, validate=True).decode("ascii")
        except ValueError:
            raise ConfigError(
                f"{where}: data.{ASSIGNMENT_KEY_SECRET_PREVIOUS} is not base64 ASCII text"
            ) from None
        previous = tuple(
            k
            for k in parse_key_list(text, f"{where} data.{ASSIGNMENT_KEY_SECRET_PREVIOUS}")
            if k != key
        )
    return KeyRing(key, previous)
