"""Signed GPU assignments and placement records: only Horus signs, everyone else verifies.

Anyone who can create a pod can write any annotation on it, including a
``horus.io/gpu-assignment`` that claims a whole GPU. So whoever *places* a pod (the operator,
or the scheduler extender's bind) also writes ``horus.io/gpu-assignment-signature``, an
**Ed25519** signature. Asymmetric on purpose: the private key lives only in the
Secret ``horus-system/horus-signing-key``, which only the operator and the extender may read;
nodes (device plugin, agent) hold only the public keys (ConfigMap ``horus-verify-keys``). A
root user on a GPU node can therefore read what a node verifies with, and still cannot mint an
assignment another node accepts, as it could with a shared (HMAC) key.

What a signature binds, so that nothing replays or rolls back:

* an assignment: the pod's namespace, name and **UID**, the **UID of its DLJob** (empty for a
  plain pod), the record **epoch** it was bound in, and the exact assignment text. A pod
  re-created under the same name with copied annotations has a new UID: its signature does not
  verify. The operator learns the UID only when the pod exists, so it creates the pod without a
  signature and puts the signature in the Binding's ``metadata.annotations`` — the apiserver
  copies them onto the pod in the same write that sets ``spec.nodeName``
  (``pkg/registry/core/pod/storage/storage.go``, ``setPodNodeAndMetadata``), with the UID as a
  precondition;
* a placement record (``status.placementSignature``): the job's namespace, name and UID, its
  phase, placements, a move in progress and ``status.placementEpoch``, which the operator raises
  on every signed write. A record older than what its pods carry, or than what this process
  signed last, is a rollback (:mod:`horus.operator.object_reads`).

The value is ``v2:<epoch>:<base64url signature>`` for an assignment (the epoch travels with the
pod) and ``v2:<base64url signature>`` for a record (its epoch is in its status).

Rotation: :class:`VerifyKeys` accepts any of several public keys (the new and the earlier
ones), so a new private key can sign once its public key is published, while everything signed
before stays valid; Horus never removes a public key itself (``docs/operator.md``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from horus.common.errors import ConfigError

__all__ = [
    "KeyFileRing",
    "KeyRing",
    "SigningKey",
    "SigningUnavailable",
    "VerifyKeys",
    "key_id",
    "parse_public_keys",
]

_PREFIX = "v2:"
#: Bounds on what a verifier parses (a ConfigMap is read on every node).
MAX_PUBLIC_KEYS = 64
MAX_EPOCH = 2**53


class SigningUnavailable(ConfigError):
    """No private key to sign with (the Secret is missing, unreadable, or its public key is not
    published yet): the caller must not place, bind, move or reset anything."""


def key_id(raw_public: bytes) -> str:
    """A short stable name of a public key (16 hex characters of its SHA-256)."""
    return hashlib.sha256(raw_public).hexdigest()[:16]


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def assignment_message(
    namespace: str, pod: str, pod_uid: str, job_uid: str, epoch: int, text: str
) -> bytes:
    """What an assignment signature covers (one field per line; none may hold a newline)."""
    return "\n".join(
        ("horus-assignment-v2", namespace, pod, pod_uid, job_uid, str(epoch), text)
    ).encode()


def placement_message(
    namespace: str,
    name: str,
    uid: str,
    phase: str | None,
    placements: Any,
    epoch: int,
    migration: Any = None,
) -> bytes:
    """What a record signature covers."""
    fields = [namespace, name, uid, str(epoch), phase or "", _canonical(placements or [])]
    fields.append(_canonical(migration or None))
    return "\n".join(("horus-placements-v2", *fields)).encode()


_VerifyKey = tuple[tuple[bytes, ...], bytes, bytes]
#: Two generations of verified signatures: new answers go into the young one; when it is
#: full it becomes the old one and the previous old one is dropped. A signature asked about
#: again is moved up to the young generation, so what passes keep asking about stays and the
#: signatures of deleted objects go within two generations — the memory is bounded and does
#: not grow with each create/delete cycle, and a full cache never makes the next pass verify
#: every live signature again (as clearing it did).
_VERIFIED_YOUNG: dict[_VerifyKey, bool] = {}
_VERIFIED_OLD: dict[_VerifyKey, bool] = {}
_VERIFIED_GENERATION = 1 << 15
_VERIFIED_LOCK = threading.Lock()


def _remember(key: _VerifyKey, ok: bool) -> None:
    global _VERIFIED_YOUNG, _VERIFIED_OLD
    if len(_VERIFIED_YOUNG) >= _VERIFIED_GENERATION:
        _VERIFIED_OLD, _VERIFIED_YOUNG = _VERIFIED_YOUNG, {}
    _VERIFIED_YOUNG[key] = ok


def _verified(raw: tuple[bytes, ...], digest: bytes, message: bytes, sig: bytes) -> bool:
    """Whether ``sig`` is a signature of ``message`` by one of the keys ``raw``, remembered by
    (keys, message digest, signature). Why: every placer pass verifies every record and pod
    assignment again, an Ed25519 verify costs far more than a dictionary look-up (a fraction
    of a millisecond each, thousands per pass on a large cluster), and the same signed
    objects come back pass after pass. Bounded
    to two generations of :data:`_VERIFIED_GENERATION` answers (see there)."""
    key = (raw, digest, sig)
    with _VERIFIED_LOCK:
        hit = _VERIFIED_YOUNG.get(key)
        if hit is None:
            hit = _VERIFIED_OLD.pop(key, None)
            if hit is not None:
                _remember(key, hit)
    if hit is not None:
        return hit
    ok = False
    for one in raw:
        try:
            Ed25519PublicKey.from_public_bytes(one).verify(sig, message)
        except InvalidSignature:
            continue
        ok = True
        break
    with _VERIFIED_LOCK:
        _remember(key, ok)
    return ok


def assignment_epoch(signature: str | None) -> int | None:
    """The epoch an assignment signature claims (None when it is not a v2 signature)."""
    if not signature or not signature.startswith(_PREFIX):
        return None
    parts = signature[len(_PREFIX) :].split(":")
    if len(parts) != 2 or not parts[0].isdigit() or len(parts[0]) > 16:
        return None
    epoch = int(parts[0])
    return epoch if epoch <= MAX_EPOCH else None


@dataclass(frozen=True)
class VerifyKeys:
    """The public keys a verifier accepts (raw 32-byte Ed25519 keys; order irrelevant)."""

    raw: tuple[bytes, ...] = ()
    _objs: tuple[Ed25519PublicKey, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        uniq = tuple(dict.fromkeys(self.raw))
        object.__setattr__(self, "raw", uniq)
        object.__setattr__(
            self, "_objs", tuple(Ed25519PublicKey.from_public_bytes(r) for r in uniq)
        )

    @classmethod
    def of(cls, keys: Iterable[Ed25519PublicKey | bytes]) -> VerifyKeys:
        return cls(tuple(k if isinstance(k, bytes) else _raw(k) for k in keys))

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __contains__(self, raw_public: object) -> bool:
        return raw_public in self.raw

    def union(self, other: VerifyKeys) -> VerifyKeys:
        return VerifyKeys(self.raw + other.raw)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(key_id(r) for r in self.raw)

    def _valid(self, message: bytes, sig_text: str) -> bool:
        sig = _unb64(sig_text)
        if sig is None or len(sig) != 64:
            return False
        return _verified(self.raw, hashlib.sha256(message).digest(), message, sig)

    def verify_assignment(
        self,
        namespace: str,
        pod: str,
        pod_uid: str,
        job_uid: str,
        text: str,
        signature: str | None,
    ) -> int | None:
        """The epoch of a valid signature of ``text`` for exactly this pod (None: invalid)."""
        epoch = assignment_epoch(signature)
        if epoch is None or not pod_uid or signature is None:
            return None
        sig_text = signature[len(_PREFIX) :].split(":", 1)[1]
        message = assignment_message(namespace, pod, pod_uid, job_uid, epoch, text)
        return epoch if self._valid(message, sig_text) else None

    def verify_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        epoch: int,
        signature: str | None,
        migration: Any = None,
    ) -> bool:
        if not signature or not signature.startswith(_PREFIX):
            return False
        message = placement_message(namespace, name, uid, phase, placements, epoch, migration)
        return self._valid(message, signature[len(_PREFIX) :])

    def to_pem(self) -> str:
        """Every key as a PEM ``PUBLIC KEY`` block (the ConfigMap's ``keys.pem``)."""
        return "".join(
            k.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ).decode()
            for k in self._objs
        )


def parse_public_keys(text: str, where: str) -> VerifyKeys:
    """The Ed25519 public keys in PEM ``text`` (one or more blocks); errors name ``where``."""
    blocks = [b for b in text.split("-----END PUBLIC KEY-----") if "-----BEGIN" in b]
    if len(blocks) > MAX_PUBLIC_KEYS:
        raise ConfigError(f"{where}: {len(blocks)} keys; at most {MAX_PUBLIC_KEYS}")
    keys: list[bytes] = []
    for i, block in enumerate(blocks):
        pem = (block.strip() + "\n-----END PUBLIC KEY-----\n").encode()
        try:
            key = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: key {i + 1} is not a PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{where}: key {i + 1} is not an Ed25519 key")
        keys.append(_raw(key))
    return VerifyKeys(tuple(keys))


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key (only the operator and the extender ever hold one)."""

    private: Ed25519PrivateKey = field(compare=False)
    public_raw: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_raw", _raw(self.private.public_key()))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, pem: bytes, where: str) -> SigningKey:
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: not a PEM private key without password ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"{where}: not an Ed25519 private key")
        return cls(key)

    def to_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def public(self) -> VerifyKeys:
        return VerifyKeys((self.public_raw,))

    @property
    def id(self) -> str:
        return key_id(self.public_raw)

    def sign_assignment(
        self, namespace: str, pod: str, pod_uid: str, job_uid: str, epoch: int, text: str
    ) -> str:
        """The ``horus.io/gpu-assignment-signature`` value for ``text`` on exactly this pod."""
        if not pod_uid:
            raise ValueError("an assignment is signed for a pod that exists (its UID)")
        message = assignment_message(namespace, pod, pod_uid, job_uid, epoch, text)
        return f"{_PREFIX}{int(epoch)}:{_b64(self.private.sign(message))}"

    def sign_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        epoch: int,
        migration: Any = None,
    ) -> str:
        message = placement_message(namespace, name, uid, phase, placements, epoch, migration)
        return _PREFIX + _b64(self.private.sign(message))


@dataclass(frozen=True)
class KeyRing:
    """What a Horus process holds: the public keys it accepts and, for the operator and the
    extender only, the private key it signs with (None: it may not sign now, and says why)."""

    verify: VerifyKeys
    signer: SigningKey | None = None
    why_not: str = ""  # why there is no signer (a sentence for Events and logs)

    @classmethod
    def generate(cls) -> KeyRing:
        """A fresh pair (tests, tools)."""
        key = SigningKey.generate()
        return cls(key.public, key)

    @classmethod
    def of(cls, signer: SigningKey, *more: VerifyKeys) -> KeyRing:
        verify = signer.public
        for extra in more:
            verify = verify.union(extra)
        return cls(verify, signer)

    def verify_only(self) -> KeyRing:
        """The same public keys, no private key (what a node holds)."""
        return KeyRing(self.verify, None, "this identity verifies only")

    @property
    def can_sign(self) -> bool:
        return self.signer is not None

    def _signer(self) -> SigningKey:
        if self.signer is None:
            raise SigningUnavailable(self.why_not or "no signing key")
        return self.signer

    def sign_assignment(
        self, namespace: str, pod: str, pod_uid: str, job_uid: str, epoch: int, text: str
    ) -> str:
        return self._signer().sign_assignment(namespace, pod, pod_uid, job_uid, epoch, text)

    def verify_assignment(
        self,
        namespace: str,
        pod: str,
        pod_uid: str,
        job_uid: str,
        text: str,
        signature: str | None,
    ) -> int | None:
        return self.verify.verify_assignment(namespace, pod, pod_uid, job_uid, text, signature)

    def sign_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        epoch: int,
        migration: Any = None,
    ) -> str:
        return self._signer().sign_placements(
            namespace, name, uid, phase, placements, epoch, migration
        )

    def verify_placements(
        self,
        namespace: str,
        name: str,
        uid: str,
        phase: str | None,
        placements: Any,
        epoch: int,
        signature: str | None,
        migration: Any = None,
    ) -> bool:
        return self.verify.verify_placements(
            namespace, name, uid, phase, placements, epoch, signature, migration
        )


def load_public_keys(path: Path) -> VerifyKeys:
    """The public keys in a mounted ``keys.pem``; errors say how to provide it."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise ConfigError(
            f"verify keys file {path} does not exist: mount the ConfigMap "
            "horus-system/horus-verify-keys there (the chart does), or set "
            "HORUS_ASSIGNMENT_KEY_FILE to the file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    keys = parse_public_keys(text, str(path))
    if not keys:
        raise ConfigError(f"{path} holds no public key (the operator publishes one at start)")
    return keys


def _file_stamp(path: Path) -> object:
    try:
        st = path.stat()  # follows the kubelet's ..data symlink swap of a mounted ConfigMap
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class KeyFileRing:
    """The verify-only :class:`KeyRing` of a mounted ``keys.pem``, read again whenever the file
    changes: the kubelet refreshes a mounted ConfigMap within about a minute, so a new public
    key reaches the node without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ring: KeyRing | None = None
        self._stamp: object = None

    def ring(self) -> KeyRing:
        """The current ring (``ConfigError`` when the file cannot be read as public keys)."""
        stamp = _file_stamp(self.path)
        if self._ring is None or stamp != self._stamp:
            self._ring = KeyRing(load_public_keys(self.path), None, "nodes verify only")
            self._stamp = stamp
        return self._ring


def rings_differ(a: KeyRing, b: KeyRing) -> bool:
    """Whether two rings sign or verify differently (for a log line on a change)."""
    sa = a.signer.public_raw if a.signer else None
    sb = b.signer.public_raw if b.signer else None
    return sa != sb or set(a.verify.raw) != set(b.verify.raw)


def public_keys_pem(keys: Sequence[bytes]) -> str:
    return VerifyKeys(tuple(keys)).to_pem()
