"""The workload controllers the local cluster runs (Kueue, JobSet, Kubeflow Trainer): how
each one's kustomization names things, where its binary and manifests are, its serving
certificate and its command line. :mod:`horus.devcluster.workload_controllers` installs and
runs them."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from horus.common.errors import ClusterError
from horus.devcluster import certs


@dataclass(frozen=True)
class Controller:
    """One controller: where its binary and manifests are, how its kustomization names things."""

    name: str
    binary: str
    namespace: str
    #: kustomize namePrefix of its default install
    prefix: str
    #: its ServiceAccount's name before the prefix
    service_account: str
    #: its webhook Service's name before the prefix (the serving certificate's DNS names)
    webhook_service: str
    crd_folder: str
    rbac_folder: str
    webhook_folder: str
    #: the API group of its own objects, whose webhooks keep upstream's (absent) namespace
    #: selector; the job and pod webhooks get :data:`wm.KUEUE_EXCLUDED_NAMESPACES` (Kueue only)
    own_group: str = ""


KUEUE = Controller(
    name="kueue",
    binary="kueue",
    namespace="kueue-system",
    prefix="kueue-",
    service_account="controller-manager",
    webhook_service="webhook-service",
    crd_folder="crd",
    rbac_folder="rbac",
    webhook_folder="webhook",
    own_group="kueue.x-k8s.io",
)
JOBSET = Controller(
    name="jobset",
    binary="jobset-manager",
    namespace="jobset-system",
    prefix="jobset-",
    service_account="controller-manager",
    webhook_service="webhook-service",
    crd_folder="crd",
    rbac_folder="rbac",
    webhook_folder="webhook",
)
TRAINER = Controller(
    name="trainer",
    binary="trainer-controller-manager",
    namespace="kubeflow-system",
    prefix="",
    service_account="kubeflow-trainer-controller-manager",
    webhook_service="kubeflow-trainer-controller-manager",
    crd_folder="crds",
    rbac_folder="rbac",
    webhook_folder="webhook",
)
CONTROLLERS = {c.name: c for c in (JOBSET, TRAINER, KUEUE)}
#: Install order (Trainer creates JobSets; Kueue manages Jobs, JobSets and TrainJobs).
ORDER = ("jobset", "trainer", "kueue")


def manifests_dir(bin_dir: Path) -> Path:
    """The manifests the workloads build copied beside the binaries linked into ``bin_dir``."""
    link = bin_dir / KUEUE.binary
    if not link.exists():
        raise ClusterError(
            f"{link} is missing: tools/controlplane/build.sh builds Kueue, JobSet and Trainer "
            "(tools/controlplane/workloads) and links them there; run tools/dev/setup.sh"
        )
    folder = link.resolve().parent / "manifests"
    if not (folder / ".complete").is_file():
        raise ClusterError(f"{folder} is incomplete: rebuild with tools/controlplane/build.sh")
    return folder


def issue_serving_cert(
    pki: Path, dns_names: Sequence[str], cert_path: Path, key_path: Path
) -> None:
    """A serving certificate for 127.0.0.1 and ``dns_names``, signed by ``pki``'s CA."""
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ClusterError(f"{pki / 'ca.key'} is not the EC key Horus generates")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + certs.VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def kueue_argv(binary: Path, config: Path, kubeconfig: Path, overlay: Path) -> list[str]:
    """Kueue in a mount namespace whose ``/etc`` has the metrics certificate folder from
    ``overlay``/upper (module docstring); the same PID execs Kueue."""
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
    script = (
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay}/upper,"
        f'workdir={overlay}/work /etc && exec "$0" "$@"'
    )
    return [
        *unshare,
        "sh",
        "-c",
        script,
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
    ]
