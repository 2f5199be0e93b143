"""The prepared claims, on disk: what Prepare answered, so it answers the same again.

The kubelet calls ``NodePrepareResources`` again for a claim it already prepared after it or
the plugin restarted, and expects the same answer; ``NodeUnprepareResources`` may come after
a plugin restart too, and must find what to undo. So every prepared claim is kept in one JSON
file in the plugin's directory (``checkpoint.json``), rewritten atomically after each change
(:func:`horus.dra.cdi.atomic_write`). An unreadable or foreign file is not trusted: the driver
starts with no prepared claims and says so (Prepare then reads the claims from the apiserver
again, which gives the same answer; nothing is lost but the shortcut).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from horus.common.documents import load_json, read_text_file
from horus.common.errors import ValidationError
from horus.dra.cdi import atomic_write

log = logging.getLogger(__name__)

VERSION = 1
MAX_CHECKPOINT_BYTES = 16 << 20  # ~ 50,000 claims; a node runs a few hundred pods at most


@dataclass(frozen=True)
class PreparedDevice:
    """One entry of the kubelet's answer (dra/v1 ``Device``)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str

    def to_json(self) -> dict[str, Any]:
        return {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
            "shareID": self.share_id,
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> PreparedDevice:
        def strings(key: str) -> tuple[str, ...]:
            value = raw.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValidationError(f"{key}: must be a list of strings")
            return tuple(value)

        def text(key: str) -> str:
            value = raw.get(key, "")
            if not isinstance(value, str):
                raise ValidationError(f"{key}: must be a string")
            return value

        return PreparedDevice(
            strings("requestNames"),
            text("poolName"),
            text("deviceName"),
            strings("cdiDeviceIDs"),
            text("shareID"),
        )


@dataclass(frozen=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "devices": [d.to_json() for d in self.devices],
        }

    @staticmethod
    def from_json(raw: Any) -> PreparedClaim:
        if not isinstance(raw, Mapping):
            raise ValidationError("a claim entry must be an object")
        devices = raw.get("devices")
        if not isinstance(devices, list) or not all(isinstance(d, Mapping) for d in devices):
            raise ValidationError("devices: must be a list of objects")
        fields = [raw.get(k) for k in ("namespace", "name", "uid")]
        if not all(isinstance(f, str) and f for f in fields):
            raise ValidationError("namespace, name and uid must be non-empty strings")
        return PreparedClaim(
            str(fields[0]),
            str(fields[1]),
            str(fields[2]),
            tuple(PreparedDevice.from_json(d) for d in devices),
        )


class Checkpoint:
    """Prepared claims by UID, persisted on every change (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        if not self.path.is_file():
            return {}
        try:
            text = read_text_file(self.path, max_bytes=MAX_CHECKPOINT_BYTES) or "{}"
            raw = load_json(text, str(self.path), max_bytes=MAX_CHECKPOINT_BYTES, max_depth=8)
            if not isinstance(raw, dict) or raw.get("version") != VERSION:
                raise ValidationError(f"not a version-{VERSION} Horus DRA checkpoint")
            claims = raw.get("claims") or {}
            if not isinstance(claims, dict):
                raise ValidationError("claims: must be an object")
            out = {str(uid): PreparedClaim.from_json(entry) for uid, entry in claims.items()}
        except (ValidationError, OSError) as exc:
            log.error(
                "ignoring the checkpoint %s (%s): starting with no prepared claims; the "
                "kubelet's next Prepare of each reads it from the apiserver again",
                self.path,
                exc,
            )
            return {}
        for uid, claim in out.items():
            if claim.uid != uid:
                log.error(
                    "ignoring the checkpoint %s: entry %s names uid %s", self.path, uid, claim.uid
                )
                return {}
        log.info("checkpoint %s: %d prepared claim(s)", self.path, len(out))
        return out

    def _save(self, claims: dict[str, PreparedClaim]) -> None:
        """Write ``claims``; the caller adopts them only once they are on disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "version": VERSION,
            "claims": {uid: claim.to_json() for uid, claim in sorted(claims.items())},
        }
        atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True) + "\n")

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def uids(self) -> list[str]:
        with self._lock:
            return sorted(self._claims)

    def put(self, claim: PreparedClaim) -> None:
        with self._lock:
            claims = {**self._claims, claim.uid: claim}
            self._save(claims)
            self._claims = claims

    def remove(self, uid: str) -> bool:
        """Forget ``uid``; False when it was not there."""
        with self._lock:
            if uid not in self._claims:
                return False
            claims = {k: v for k, v in self._claims.items() if k != uid}
            self._save(claims)
            self._claims = claims
            return True
