"""Deterministic Ed25519 key pairs for tests, and signing as the placers sign.

A test pod gets the signature the operator would put in its Binding: over its namespace, name,
UID (one is set when the fixture has none), its DLJob's UID (the controller ownerReference)
and a record epoch (:mod:`horus.api.signing`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from horus.api.podassignment import controller_dljob_uid
from horus.api.signing import KeyRing, SigningKey
from horus.common import constants as c


def key_ring(seed: str) -> KeyRing:
    """The key pair derived from ``seed`` (same seed, same key: fixtures and tests agree)."""
    raw = hashlib.sha256(seed.encode()).digest()
    return KeyRing.of(SigningKey(Ed25519PrivateKey.from_private_bytes(raw)))


#: What the operator and the extender under test sign with.
KEY = key_ring("horus-test-key")
#: A key Horus never published (a forger's, or a node's attempt to sign).
OTHER = key_ring("not-horus")


def pod_uid(meta: Mapping[str, Any]) -> str:
    return str(meta.get("uid") or f"uid-{meta.get('namespace', 'default')}-{meta.get('name')}")


def sign_pod(pod: dict[str, Any], ring: KeyRing = KEY, epoch: int = 0) -> dict[str, Any]:
    """Sign ``pod``'s assignment annotation as its placer would (in place; returns it). A pod
    without a UID gets one first (the signature binds it)."""
    meta = pod.setdefault("metadata", {})
    meta["uid"] = pod_uid(meta)
    ann = meta.setdefault("annotations", {})
    text = ann.get(c.ANNOTATION_GPU_ASSIGNMENT)
    if text is not None:
        ann[c.ANNOTATION_ASSIGNMENT_SIGNATURE] = ring.sign_assignment(
            str(meta.get("namespace", "default")),
            str(meta["name"]),
            meta["uid"],
            controller_dljob_uid(meta),
            epoch,
            str(text),
        )
    return pod


def sign_record(obj: dict[str, Any], ring: KeyRing = KEY) -> dict[str, Any]:
    """Sign a DLJob's status (in place) as the operator's writer does, at its epoch."""
    meta, status = obj["metadata"], obj.setdefault("status", {})
    status[c.STATUS_PLACEMENT_SIGNATURE] = ring.sign_placements(
        str(meta.get("namespace", "default")),
        str(meta["name"]),
        str(meta.get("uid", "")),
        status.get("phase"),
        status.get("placements"),
        int(status.get(c.STATUS_PLACEMENT_EPOCH) or 0),
        status.get("migration"),
    )
    return obj


def write_public_keys(path: Path, *rings: KeyRing) -> Path:
    """A ``keys.pem`` as the ConfigMap mounted on nodes holds it."""
    verify = rings[0].verify
    for ring in rings[1:]:
        verify = verify.union(ring.verify)
    path.write_text(verify.to_pem())
    return path


def write_private_key(path: Path, ring: KeyRing = KEY) -> Path:
    """A ``private.pem`` as the Secret holds it (for ``--assignment-key-file``)."""
    assert ring.signer is not None
    path.write_bytes(ring.signer.to_pem())
    return path
