"""Settings of ``horus operator extender`` and the limits of what a request may carry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from horus.common import constants as c
from horus.common.errors import ConfigError
from horus.common.settings import check_range, check_seconds
from horus.scheduler import POLICY_NAMES

#: k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority.
MAX_EXTENDER_PRIORITY = 10
#: Reasons start with this, so a person reading a Pending pod knows who refused it.
REASON_PREFIX = "horus: "
#: Why a node without a Horus GPU inventory cannot take a pod.
NO_INVENTORY = (
    f"{REASON_PREFIX}node has no Horus GPUs (no {c.ANNOTATION_GPU_INVENTORY} annotation; "
    "is the Horus device plugin running there?)"
)
VERBS = ("filter", "prioritize", "bind")
#: The most ``max_body_bytes`` may allow: a Pod is rarely over 100 KiB, and the apiserver
#: itself refuses requests over 3 MiB; a NodeList of 5,000 nodes stays under this.
MAX_REQUEST_BYTES = 64 << 20
#: Candidate nodes one request may name (Kubernetes supports clusters of 5,000 nodes).
MAX_CANDIDATE_NODES = 50_000
#: A Kubernetes object name (DNS subdomain) is at most 253 characters; a UID 36 (we allow 128).
MAX_NAME_LENGTH = 253
MAX_UID_LENGTH = 128
#: Containers of one pod (init containers and containers each); the apiserver has no limit,
#: but a pod with more is not one Horus can place anyway.
MAX_CONTAINERS = 256
#: Seconds a client may take to send a request once connected; a stalled one is dropped so
#: it cannot hold a server thread (and its socket) forever.
REQUEST_TIMEOUT_S = 60.0
CONTENT_LENGTH = re.compile(r"^[0-9]{1,15}$")


@dataclass(frozen=True)
class ExtenderSettings:
    """Settings of ``horus operator extender`` (section ``extender``; CLI > env > file).

    Environment variables are ``HORUS_EXTENDER_<FIELD>`` (e.g. ``HORUS_EXTENDER_PORT``).
    """

    #: Address to listen on (``0.0.0.0`` in a pod; ``127.0.0.1`` for a local scheduler).
    host: str = "0.0.0.0"
    #: TCP port of the verbs, served over TLS with client certificates; the kube-scheduler's
    #: ``urlPrefix`` (``https://…``) points here (the Service uses 8888).
    port: int = 8888
    #: Plain-HTTP port that answers GET only: ``/healthz``, ``/readyz``, ``/livez`` and
    #: ``/metrics`` (the kubelet's probes and Prometheus present no client certificate).
    health_port: int = 8889
    #: The server certificate (PEM, may carry the chain), its key, and the CA(s) whose client
    #: certificates may call the verbs. All three or none; none: the Secret
    #: ``horus-system/horus-extender-tls`` (created when absent, docs/extender.md).
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    #: Seconds between re-reads of the TLS material (files or Secret); new handshakes use
    #: what changed. 0: read once at start.
    tls_reload_seconds: float = 30.0
    #: Placement policy of :mod:`horus.scheduler` (``horus`` is interference-aware).
    policy: str = "horus"
    #: kubeconfig to reach the apiserver; unset: ``$KUBECONFIG``, else in-cluster config.
    kubeconfig: Path | None = None
    #: Signing key file (PEM Ed25519 private key, a mounted Secret); unset:
    #: ``$HORUS_ASSIGNMENT_KEY_FILE``, else the Secret ``horus-system/horus-signing-key``
    #: (created only on the first install; :mod:`horus.operator.assignment_key`).
    key_file: Path | None = None
    #: Predictor artifact (``horus predictor train -o``); unset: the shipped one.
    predictor: Path | None = None
    #: Seconds between checks of the ``predictor`` file for a new model (as the operator's
    #: ``predictor_reload_seconds``); 0: read once at start.
    predictor_reload_seconds: float = 30.0
    #: How long filter results are reused by the prioritize call of the same pod (seconds).
    cache_seconds: float = 2.0
    #: Largest request body accepted (bytes); a Pod is rarely over 100 KiB.
    max_body_bytes: int = 8 * 1024 * 1024
    #: After writing an assignment, re-read the cluster and back off if another placer raced.
    verify_binds: bool = True
    #: Which path carries a share to the GPU (as the operator's ``placement_path``; the chart
    #: sets both from ``gpuSharing.path``): ``dra`` or ``deviceplugin``.
    placement_path: c.PlacementPath = c.PLACEMENT_PATH_DEVICE_PLUGIN

    @property
    def tls_files(self) -> tuple[Path, Path, Path] | None:
        """(certificate, key, client CA) when given as files, else None (the Secret)."""
        if self.tls_cert_file and self.tls_key_file and self.tls_client_ca_file:
            return (self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)
        return None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"extender port must be 0..65535, got {self.port}")
        if not 0 <= self.health_port <= 65535:
            raise ConfigError(f"extender health_port must be 0..65535, got {self.health_port}")
        if self.port and self.port == self.health_port:
            raise ConfigError(
                f"extender health_port must differ from port ({self.port}): the verbs need TLS "
                "with a client certificate, health and metrics are plain HTTP"
            )
        files = {
            "tls_cert_file": self.tls_cert_file,
            "tls_key_file": self.tls_key_file,
            "tls_client_ca_file": self.tls_client_ca_file,
        }
        given = [k for k, v in files.items() if v is not None]
        if given and len(given) != len(files):
            missing = [k for k in files if k not in given]
            raise ConfigError(
                f"extender {', '.join(given)} given without {', '.join(missing)}: give all "
                f"three, or none to use the Secret {c.HORUS_NAMESPACE}/{c.EXTENDER_TLS_SECRET}"
            )
        if self.policy not in POLICY_NAMES:
            raise ConfigError(
                f"extender policy must be one of {', '.join(POLICY_NAMES)}, got {self.policy!r}"
            )
        if self.cache_seconds < 0:
            raise ConfigError(f"extender cache_seconds must be >= 0, got {self.cache_seconds}")
        if not self.predictor_reload_seconds >= 0:
            raise ConfigError(
                "extender predictor_reload_seconds must be >= 0 (0: never reload), got "
                f"{self.predictor_reload_seconds}"
            )
        check_seconds("cache_seconds", self.cache_seconds, positive=False)
        check_seconds("tls_reload_seconds", self.tls_reload_seconds, positive=False)
        check_seconds("predictor_reload_seconds", self.predictor_reload_seconds, positive=False)
        check_range("max_body_bytes", self.max_body_bytes, 1024, MAX_REQUEST_BYTES, unit=" bytes")
