"""Certificates, keys and tokens for a throw-away local control plane, generated on the fly.

ECDSA P-256 keys keep generation instant. The CA signs the apiserver's serving certificate;
the service-account key pair lets the apiserver issue and verify tokens (so RBAC and
``kubectl auth can-i --as=system:serviceaccount:…`` behave as in a real cluster); static
bearer tokens authenticate the admin and each control-plane component as its own user.
The CA key is kept (``ca.key``, mode 0600, inside the private cluster folder) so that real
nodes added later get client certificates of their own (``system:node:<name>``, group
``system:nodes``: the identity the Node authorizer and NodeRestriction judge), and the
apiserver gets a client certificate for the kubelets' APIs (logs, exec).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from horus.common.errors import ClusterError

SERVICE_IP = "10.96.0.1"  # first address of --service-cluster-ip-range; never contacted
#: How long every certificate of a local cluster is valid: longer than any cluster lives.
VALIDITY = datetime.timedelta(days=365)
#: ``kubectl create token --duration`` of the ServiceAccount tokens the dev cluster hands its
#: host processes (Prometheus' discovery, the demo's operator and agent): the cluster's life,
#: as its certificates. Not renewed, because a token cannot outlive the cluster anyway: it is
#: signed by the service-account key ``up`` made and ``down`` deletes, and it dies with its
#: ServiceAccount. It adds no reach either: it lies, 0600, in the cluster's 0700 folder beside
#: the admin's static token (``system:masters``). A shorter token would expire under a demo
#: left up for a day, and its metrics discovery and its operator would get 401s.
TOKEN_DURATION = f"{int(VALIDITY.total_seconds()) // 3600}h"


@dataclass(frozen=True)
class Credentials:
    """Paths of the generated files and the bearer tokens, by user."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_public_key: Path
    sa_private_key: Path
    token_file: Path
    tokens: dict[str, str]
    kubelet_client_cert: Path
    kubelet_client_key: Path


# user name -> groups. The component users are the ones Kubernetes' bootstrap RBAC policy knows.
USERS: dict[str, list[str]] = {
    "horus-admin": ["system:masters"],
    "system:kube-controller-manager": [],
    "system:kube-scheduler": [],
    "kwok": ["system:masters"],
}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def generate(directory: Path, apiserver_address: str = "127.0.0.1") -> Credentials:
    """Create a fresh CA, serving certificate (valid for ``apiserver_address`` too),
    service-account keys and tokens in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(hours=1), now + VALIDITY)
    ca_key = _key()
    ca_cert = _ca_certificate(ca_key, valid)
    srv_key = _key()
    srv_cert = _serving_certificate(srv_key, ca_key, ca_cert.subject, valid, apiserver_address)
    sa_key = _key()
    creds = Credentials(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_public_key=directory / "sa.pub",
        sa_private_key=directory / "sa.key",
        token_file=directory / "tokens.csv",
        tokens={user: secrets.token_hex(24) for user in USERS},
        ca_key=directory / "ca.key",
        kubelet_client_cert=directory / "apiserver-kubelet-client.crt",
        kubelet_client_key=directory / "apiserver-kubelet-client.key",
    )
    _write(creds.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(creds.ca_key, _pem_key(ca_key))
    _write(creds.serving_cert, srv_cert.public_bytes(serialization.Encoding.PEM))
    _write(creds.serving_key, _pem_key(srv_key))
    _write(creds.sa_private_key, _pem_key(sa_key))
    _write(
        creds.sa_public_key,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    _write(creds.token_file, _token_csv(creds.tokens).encode())
    issue_client_cert(
        directory,
        KUBELET_CLIENT_USER,
        ["system:masters"],
        creds.kubelet_client_cert,
        creds.kubelet_client_key,
    )
    return creds


def _ca_certificate(
    ca_key: ec.EllipticCurvePrivateKey, valid: tuple[datetime.datetime, datetime.datetime]
) -> x509.Certificate:
    """The self-signed CA ("horus-local-ca") that signs every other certificate."""
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "horus-local-ca")])
    return (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _serving_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    valid: tuple[datetime.datetime, datetime.datetime],
    address: str,
) -> x509.Certificate:
    """The apiserver's serving certificate: localhost, its own address, the in-cluster names
    and service IP."""
    names: list[x509.GeneralName] = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    addresses = dict.fromkeys(("127.0.0.1", address, SERVICE_IP))
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _token_csv(tokens: dict[str, str]) -> str:
    """The apiserver's ``--token-auth-file``: ``token,user,uid[,"group,…"]`` per user."""
    lines = []
    for i, (user, groups) in enumerate(USERS.items()):
        group_field = f',"{",".join(groups)}"' if groups else ""
        lines.append(f"{tokens[user]},{user},uid-{i}{group_field}")
    return "\n".join(lines) + "\n"


#: The apiserver's user towards the kubelets (kubeadm's name for it).
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def issue_client_cert(
    pki: Path, user: str, groups: list[str], cert_path: Path, key_path: Path
) -> None:
    """A client certificate for ``user`` (CN) in ``groups`` (O), signed by ``pki``'s CA."""
    try:
        ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    except FileNotFoundError:
        raise ClusterError(
            f"{pki} has no CA key: this cluster was started by an older Horus; run "
            "'horus dev cluster down' and 'up' again"
        ) from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ClusterError(f"{pki / 'ca.key'} is not the EC key Horus generates")
    now = datetime.datetime.now(datetime.UTC)
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _write(key_path, _pem_key(key))
