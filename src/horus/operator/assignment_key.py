"""The key pair that signs GPU assignments and placement records: where the placers find it,
how its public half reaches the nodes, and what happens when it is lost.

Both placers (the operator and the scheduler extender's ``bind``) sign (:mod:`horus.api.signing`);
nodes only verify. So:

* the **private key** is the Secret ``horus-system/horus-signing-key`` (``private.pem``, PKCS8
  PEM), readable only by the operator and the extender (RBAC), or a file
  (``--assignment-key-file`` / ``$HORUS_ASSIGNMENT_KEY_FILE``, e.g. from a secret manager);
* the **public keys** are the ConfigMap ``horus-system/horus-verify-keys`` (``keys.pem``), which
  the nodes mount. The placers publish their current public key there themselves, and never
  remove one: a key an administrator removes is revoked (what it signed no longer verifies, and
  is still never deleted or un-counted: docs/operator.md).

**Published before it signs.** A key whose public half is new to a ConfigMap that already held
other keys signs only ``publish_delay`` seconds after it was added (the time is an annotation on
the ConfigMap, ``horus.io/published-<key id>``, so every replica and the extender wait for the
same moment): the kubelet refreshes a mounted ConfigMap within about a minute, and a pod signed
with a key its node does not know yet would be refused by Allocate.

**Lost key.** A fresh key pair is generated only on the first install, when neither the Secret
nor the ConfigMap holds a key. A Secret that is deleted or unreadable later leaves Horus without
a signer (:attr:`KeyRing.can_sign` is False, :attr:`KeyRing.why_not` says why and how to fix
it): placement, binding, moves and resets pause, nothing is deleted, and every share stays
counted — the public keys still verify what was signed. Placement resumes at the first read
that finds the key again (every ``refresh_seconds``, every 5 s while it is missing).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from horus.api.signing import (
    KeyRing,
    SigningKey,
    VerifyKeys,
    key_id,
    parse_public_keys,
    rings_differ,
)
from horus.common.constants import (
    ANNOTATION_KEY_PUBLISHED_PREFIX,
    ASSIGNMENT_KEY_FILE_ENV,
    HORUS_NAMESPACE,
    SIGNING_KEY_SECRET,
    SIGNING_KEY_SECRET_ENTRY,
    VERIFY_KEYS_CONFIGMAP,
    VERIFY_KEYS_CONFIGMAP_ENTRY,
)
from horus.common.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["AssignmentKeySource", "load_signing_key_file"]

SECRET_WHERE = f"Secret {HORUS_NAMESPACE}/{SIGNING_KEY_SECRET}"
CONFIGMAP_WHERE = f"ConfigMap {HORUS_NAMESPACE}/{VERIFY_KEYS_CONFIGMAP}"
#: While no key can sign, it is looked for this often (at most).
MISSING_RETRY_SECONDS = 5.0
_RESTORE = (
    f"restore the Secret from your backup (kubectl -n {HORUS_NAMESPACE} apply -f …), or create "
    f"a new key: openssl genpkey -algorithm ed25519 -out private.pem && kubectl -n "
    f"{HORUS_NAMESPACE} create secret generic {SIGNING_KEY_SECRET} "
    f"--from-file={SIGNING_KEY_SECRET_ENTRY}=private.pem (its public key is published, then "
    "used; docs/operator.md, Key rotation)"
)


def load_signing_key_file(path: Path) -> SigningKey:
    """The private key in a PEM file; errors say how to provide it."""
    try:
        pem = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"signing key file {path} does not exist: mount the Secret {HORUS_NAMESPACE}/"
            f"{SIGNING_KEY_SECRET} there, or unset {ASSIGNMENT_KEY_FILE_ENV}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read signing key file {path}: {exc}") from None
    return SigningKey.from_pem(pem, str(path))


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` of a kubernetes model, or ``obj[name]`` of a dict."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class AssignmentKeySource:
    """The current :class:`KeyRing` (signer + published public keys), re-read at most every
    ``refresh_seconds`` (every 5 s while no key can sign). Thread-safe: commit chains sign
    concurrently. Never raises after construction: a failed read keeps what was known, and a
    lost key shows as a ring that cannot sign."""

    def __init__(
        self,
        core_v1: Any,
        key_file: Path | None = None,
        refresh_seconds: float = 30.0,
        publish_delay: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = core_v1
        env_file = os.environ.get(ASSIGNMENT_KEY_FILE_ENV)
        self._file = key_file or (Path(env_file) if env_file else None)
        self._refresh, self._delay, self._clock = refresh_seconds, publish_delay, clock
        self._lock = threading.Lock()
        self._known = VerifyKeys()  # every public key read or published, for a deleted ConfigMap
        self._ring = self._load()
        self._read_at = time.monotonic()

    def __call__(self) -> KeyRing:
        return self.ring()

    def ring(self) -> KeyRing:
        with self._lock:
            every = (
                self._refresh if self._ring.can_sign else min(self._refresh, MISSING_RETRY_SECONDS)
            )
            if self._refresh > 0 and time.monotonic() - self._read_at >= every:
                self._read_at = time.monotonic()
                new = self._load()
                if rings_differ(new, self._ring):
                    if new.can_sign:
                        log.info(
                            "signing with key %s; %d public key(s) verify",
                            new.signer.id if new.signer else "",
                            len(new.verify.raw),
                        )
                    else:
                        log.warning("cannot sign: %s", new.why_not)
                self._ring = new
            return self._ring

    # --- reading ---------------------------------------------------------------------------
    def _signer(self) -> tuple[SigningKey | None, str, bool]:
        """(the private key or None, why not, whether the Secret is simply absent)."""
        if self._file is not None:
            try:
                return load_signing_key_file(self._file), "", False
            except ConfigError as exc:
                return None, f"placement is paused: {exc}", False
        try:
            secret = self._core.read_namespaced_secret(SIGNING_KEY_SECRET, HORUS_NAMESPACE)
        except Exception as exc:
            if _status(exc) == 404:
                return None, f"placement is paused: {SECRET_WHERE} does not exist; {_RESTORE}", True
            return (
                None,
                f"placement is paused: cannot read {SECRET_WHERE} ({_status(exc) or exc}); "
                "the operator and the extender need get on it (manifests/rbac)",
                False,
            )
        raw = (_field(secret, "data") or {}).get(SIGNING_KEY_SECRET_ENTRY)
        try:
            pem = base64.b64decode(raw or "", validate=True)
            if not pem:
                raise ConfigError(f"{SECRET_WHERE} has no '{SIGNING_KEY_SECRET_ENTRY}' entry")
            return SigningKey.from_pem(pem, SECRET_WHERE), "", False
        except (ConfigError, ValueError) as exc:
            return None, f"placement is paused: {exc}; {_RESTORE}", False

    def _configmap(self) -> tuple[Any, VerifyKeys | None]:
        """(the ConfigMap object or None when absent, its keys or None when unreadable)."""
        try:
            cm = self._core.read_namespaced_config_map(VERIFY_KEYS_CONFIGMAP, HORUS_NAMESPACE)
        except Exception as exc:
            if _status(exc) == 404:
                return None, VerifyKeys()
            log.warning(
                "cannot read %s: %s; verifying with the keys read before", CONFIGMAP_WHERE, exc
            )
            return None, None
        text = (_field(cm, "data") or {}).get(VERIFY_KEYS_CONFIGMAP_ENTRY) or ""
        try:
            return cm, parse_public_keys(str(text), CONFIGMAP_WHERE)
        except ConfigError as exc:
            log.warning("%s; verifying with the keys read before", exc)
            return cm, None

    def _load(self) -> KeyRing:
        signer, why, absent = self._signer()
        cm, published = self._configmap()
        if (
            signer is None
            and absent
            and published is not None
            and not published
            and not self._known
        ):
            signer = self._first_install()  # no private key and no public key anywhere
            why = "" if signer is not None else why
        verify = published if published is not None else self._known
        if signer is not None and published is not None and signer.public_raw not in published:
            self._publish(cm, published, signer)
            cm, published = self._configmap()
            verify = published if published is not None else verify
        self._known = self._known.union(verify)
        if signer is None:
            return KeyRing(verify, None, why)
        if signer.public_raw not in verify:
            return KeyRing(
                verify,
                None,
                f"placement is paused: the public key {signer.id} of the signing key is not in "
                f"{CONFIGMAP_WHERE} yet (publishing it failed; see the log)",
            )
        not_before = _parse_time(
            ((_field(_field(cm, "metadata"), "annotations") or {}) if cm is not None else {}).get(
                ANNOTATION_KEY_PUBLISHED_PREFIX + signer.id
            )
        )
        now = self._clock()
        if not_before is not None and now < not_before:
            return KeyRing(
                verify,
                None,
                f"placement is paused for {not_before - now:.0f} s more: the new signing key "
                f"{signer.id} was published in {CONFIGMAP_WHERE} and signs once every node has "
                "had time to see it",
            )
        return KeyRing(verify, signer)

    # --- writing ---------------------------------------------------------------------------
    def _first_install(self) -> SigningKey | None:
        """Generate the pair, store the private key (a racing creator's key wins)."""
        key = SigningKey.generate()
        body = {
            "metadata": {
                "name": SIGNING_KEY_SECRET,
                "namespace": HORUS_NAMESPACE,
                "labels": {"app.kubernetes.io/part-of": "horus"},
            },
            "type": "Opaque",
            "data": {SIGNING_KEY_SECRET_ENTRY: base64.b64encode(key.to_pem()).decode()},
        }
        try:
            self._core.create_namespaced_secret(HORUS_NAMESPACE, body)
        except Exception as exc:
            if _status(exc) != 409:
                log.warning("cannot create %s: %s", SECRET_WHERE, exc)
                return None
            found, _, _ = self._signer()
            return found
        log.info("first start: created the signing key %s in %s", key.id, SECRET_WHERE)
        return key

    def _publish(self, cm: Any, published: VerifyKeys, signer: SigningKey) -> None:
        """Add the signer's public key to the ConfigMap (create it when absent), never
        removing one; when others were there, mark when the new one may sign."""
        keys = published.union(self._known).union(signer.public)
        annotations: dict[str, str] = {}
        if (published or self._known) and signer.public_raw not in self._known:
            # a key new to a set of others (a rotation, not the first key): give nodes time
            annotations[ANNOTATION_KEY_PUBLISHED_PREFIX + signer.id] = _rfc3339(
                self._clock() + self._delay
            )
        data = {VERIFY_KEYS_CONFIGMAP_ENTRY: keys.to_pem()}
        try:
            if cm is None:
                self._core.create_namespaced_config_map(
                    HORUS_NAMESPACE,
                    {
                        "metadata": {
                            "name": VERIFY_KEYS_CONFIGMAP,
                            "namespace": HORUS_NAMESPACE,
                            "labels": {"app.kubernetes.io/part-of": "horus"},
                            "annotations": annotations,
                        },
                        "data": data,
                    },
                )
            else:
                rv = _field(_field(cm, "metadata"), "resource_version") or _field(
                    _field(cm, "metadata"), "resourceVersion"
                )
                self._core.patch_namespaced_config_map(
                    VERIFY_KEYS_CONFIGMAP,
                    HORUS_NAMESPACE,
                    {"metadata": {"resourceVersion": rv, "annotations": annotations}, "data": data},
                )
        except Exception as exc:  # a racing publisher: the next read sees its write
            log.warning("cannot publish key %s in %s: %s", signer.id, CONFIGMAP_WHERE, exc)
            return
        log.info(
            "published public key %s in %s (%d key(s))",
            key_id(signer.public_raw),
            CONFIGMAP_WHERE,
            len(keys.raw),
        )
