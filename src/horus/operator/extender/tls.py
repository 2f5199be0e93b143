"""Who may call the extender: mutual TLS with a CA of its own, kept in one Secret.

Why: ``/bind`` writes a signed GPU assignment and creates a ``Binding`` with the operator's
cluster-wide ``pods/binding`` right — a Binding skips ``NoSchedule`` taints. A NetworkPolicy
alone does not guard that (some CNIs do not enforce one, and the default admits all of
kube-system), so only a caller holding a client
certificate signed by the extender's client CA gets past the TLS handshake; kube-scheduler
presents it through its extender ``tlsConfig`` (``certFile``/``keyFile``/``caFile``), so no
request from anyone else ever reaches the HTTP layer.

The Secret ``horus-system/horus-extender-tls`` holds, as PEM:

* ``ca.crt`` — a CA made only for this (ECDSA P-256). It signs the two certificates below;
  the extender trusts it for callers (client CA) and kube-scheduler trusts it for the server
  (``caFile``). Its private key is never stored: nothing can issue a third certificate, and
  a new set is made by deleting the Secret (README, "Install on a cluster").
* ``tls.crt`` / ``tls.key`` — the extender's server certificate: the Service's DNS names
  (``horus-operator``, ``.horus-system``, ``.svc``, ``.svc.cluster.local``), ``localhost``,
  ``127.0.0.1`` and ``::1`` (the Horus scheduler pod calls its extender on loopback).
  Extended key usage *serverAuth* only, so it cannot be used as a client certificate.
* ``client.crt`` / ``client.key`` — kube-scheduler's client certificate (*clientAuth* only).

Like the assignment key (:mod:`horus.operator.assignment_key`), the Secret is created by
whichever Horus process needs it first — the operator at start, or the extender — and never
by a chart render: an offline ``helm template`` would put fresh random certificates into
every render. A Secret you create yourself (same keys, e.g. from your own CA) is used as is.
The extender re-reads it every ``tls_reload_seconds`` and serves new handshakes with the new
certificates; a read that fails keeps the ones in use.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from horus.common import constants as c
from horus.common.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "TlsMaterial",
    "TlsSource",
    "generate_tls_secret_data",
    "load_or_create_tls_secret",
    "server_names",
]

#: Ten years: kube-scheduler loads its client certificate once at start, and on a control
#: plane it is a file an administrator copied; a short life would break binds on a date
#: nobody watches. A new set is one deleted Secret away.
VALIDITY = datetime.timedelta(days=3650)
CA_NAME = "horus-extender-ca"
SERVER_NAME = "horus-extender"
CLIENT_NAME = "horus-kube-scheduler"


def server_names(
    namespace: str = c.HORUS_NAMESPACE, service: str = c.EXTENDER_SERVICE
) -> list[str]:
    """DNS names the server certificate carries: every way a pod names the Service, and
    ``localhost`` (the Horus scheduler's kube-scheduler calls its extender on loopback)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    ]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    name: str,
    usage: x509.ObjectIdentifier,
    now: datetime.datetime,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def generate_tls_secret_data(
    namespace: str = c.HORUS_NAMESPACE,
    service: str = c.EXTENDER_SERVICE,
    now: datetime.datetime | None = None,
) -> dict[str, bytes]:
    """A fresh CA, server certificate and client certificate, keyed as in the Secret.

    The CA's private key is dropped once both are signed (see the module docstring).
    """
    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names(namespace, service)]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    server_crt, server_key = _leaf(
        ca_cert, ca_key, SERVER_NAME, ExtendedKeyUsageOID.SERVER_AUTH, now, sans
    )
    client_crt, client_key = _leaf(
        ca_cert, ca_key, CLIENT_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, now
    )
    return {
        c.EXTENDER_TLS_CA: ca_cert.public_bytes(serialization.Encoding.PEM),
        c.EXTENDER_TLS_CERT: server_crt,
        c.EXTENDER_TLS_KEY: server_key,
        c.EXTENDER_TLS_CLIENT_CERT: client_crt,
        c.EXTENDER_TLS_CLIENT_KEY: client_key,
    }


@dataclass(frozen=True)
class TlsMaterial:
    """What the extender's TLS server needs: its certificate chain and key, and the CA(s)
    whose client certificates it accepts (all PEM)."""

    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes
    #: Where it came from, for messages ("Secret horus-system/horus-extender-tls", files).
    origin: str = ""

    def context(self) -> ssl.SSLContext:
        """A server context that refuses every client without a certificate from the client
        CA (``CERT_REQUIRED``), TLS 1.2 at least.

        Raises :class:`ConfigError` naming :attr:`origin` when the material does not load.
        """
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            ctx.load_verify_locations(cadata=self.client_ca_pem.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"{self.origin}: client CA does not load: {exc}") from None
        # load_cert_chain takes paths only: write both to a private folder and delete them.
        with tempfile.TemporaryDirectory(prefix="horus-extender-tls-") as folder:
            cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
            cert.write_bytes(self.cert_pem)
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(self.key_pem)
            try:
                ctx.load_cert_chain(cert, key)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"{self.origin}: server certificate and key do not load together: {exc}"
                ) from None
        return ctx


def material_from_secret_data(data: Mapping[str, str] | None, origin: str) -> TlsMaterial:
    """:class:`TlsMaterial` from a Secret's base64 ``data``; ConfigError naming a missing entry."""
    data = data or {}
    out: dict[str, bytes] = {}
    for entry in (c.EXTENDER_TLS_CERT, c.EXTENDER_TLS_KEY, c.EXTENDER_TLS_CA):
        value = data.get(entry)
        if not value:
            raise ConfigError(
                f"{origin} has no {entry!r} entry; it needs {c.EXTENDER_TLS_CA}, "
                f"{c.EXTENDER_TLS_CERT} and {c.EXTENDER_TLS_KEY} (delete it and Horus makes a "
                "new one)"
            )
        try:
            out[entry] = base64.b64decode(value, validate=True)
        except ValueError:
            raise ConfigError(f"{origin}: entry {entry!r} is not base64") from None
    return TlsMaterial(
        out[c.EXTENDER_TLS_CERT], out[c.EXTENDER_TLS_KEY], out[c.EXTENDER_TLS_CA], origin
    )


def _secret_origin() -> str:
    return f"Secret {c.HORUS_NAMESPACE}/{c.EXTENDER_TLS_SECRET}"


def load_or_create_tls_secret(core_v1: Any) -> dict[str, str]:
    """The Secret's ``data`` (base64 values), created with fresh certificates when absent.

    ``core_v1`` is a ``kubernetes.client.CoreV1Api``. Two processes creating it at once: the
    loser reads the winner's (HTTP 409), so every caller ends up with one CA.
    """
    from kubernetes.client.exceptions import ApiException

    name, ns = c.EXTENDER_TLS_SECRET, c.HORUS_NAMESPACE
    try:
        return dict(core_v1.read_namespaced_secret(name, ns).data or {})
    except ApiException as exc:
        if exc.status != 404:
            raise ConfigError(
                f"cannot read {_secret_origin()}: HTTP {exc.status} {exc.reason}; grant get on "
                "it (manifests/rbac) or give --tls-cert-file, --tls-key-file and "
                "--tls-client-ca-file"
            ) from None
    body = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"app.kubernetes.io/part-of": "horus"},
        },
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in generate_tls_secret_data().items()},
    }
    try:
        created = core_v1.create_namespaced_secret(ns, body)
        log.info("created the extender TLS Secret %s/%s (new CA)", ns, name)
        return dict(created.data or {})
    except ApiException as exc:
        if exc.status != 409:
            raise ConfigError(
                f"cannot create {_secret_origin()}: HTTP {exc.status} {exc.reason}"
            ) from None
    return dict(core_v1.read_namespaced_secret(name, ns).data or {})


def _read_files(cert: Path, key: Path, ca: Path) -> TlsMaterial:
    parts = []
    for what, path in (
        ("--tls-cert-file", cert),
        ("--tls-key-file", key),
        ("--tls-client-ca-file", ca),
    ):
        try:
            parts.append(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{what} {path}: cannot read: {exc.strerror}") from None
    return TlsMaterial(parts[0], parts[1], parts[2], f"files {cert}, {key}, {ca}")


class TlsSource:
    """The server's :class:`ssl.SSLContext` now, rebuilt when its material changes.

    From three files (``files``: certificate, key, client CA — a mounted Secret is refreshed
    by the kubelet) or else from the Secret through the API (created when absent). The first
    read happens in the constructor, so unusable material stops the process at start with its
    message; later failures (unreadable, garbled) are logged and the context in use is kept.
    Thread-safe: every connection asks for the context in its own thread.
    """

    def __init__(
        self,
        core_v1: Any | None,
        files: tuple[Path, Path, Path] | None = None,
        refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if core_v1 is None and files is None:
            raise ConfigError("the extender's TLS needs files or an apiserver to read its Secret")
        self._core, self._files, self._refresh, self._clock = core_v1, files, refresh_seconds, clock
        self._lock = threading.Lock()
        self._material = self._read()
        self._context = self._material.context()
        self._read_at = clock()
        self._failed = False

    def _read(self) -> TlsMaterial:
        if self._files is not None:
            return _read_files(*self._files)
        return material_from_secret_data(load_or_create_tls_secret(self._core), _secret_origin())

    @property
    def material(self) -> TlsMaterial:
        return self._material

    def context(self) -> ssl.SSLContext:
        with self._lock:
            if self._refresh > 0 and self._clock() - self._read_at >= self._refresh:
                self._read_at = self._clock()
                try:
                    material = self._read()
                    if material != self._material:
                        self._context = material.context()
                        self._material = material
                        log.info(
                            "extender TLS: %s changed; new connections use it", material.origin
                        )
                    self._failed = False
                except (ConfigError, OSError) as exc:
                    if not self._failed:
                        log.warning(
                            "extender TLS: cannot re-read (%s); keeping the one in use", exc
                        )
                    self._failed = True
            return self._context
