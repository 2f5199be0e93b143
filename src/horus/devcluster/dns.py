"""The local cluster's DNS: CoreDNS as a Deployment behind the ``kube-dns`` Service, as kubeadm
installs it, so pods on real nodes resolve ``<service>.<namespace>.svc.cluster.local`` and the
kubelet (``clusterDNS``) writes that server into every pod's ``resolv.conf``.

The image is ``tools/controlplane/coredns/Dockerfile`` around the ``coredns`` that
``tools/controlplane/build.sh`` builds at the pinned version (this machine pulls no images).
CoreDNS listens on 1053 as a non-root user (no capability needed); the Service maps the
usual port 53 there. It answers the cluster's zones only (``kubernetes`` plugin): the pods'
network here reaches this host and nothing beyond, so there is no upstream to forward to.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.common.errors import ClusterError

#: The kube-dns Service's ClusterIP (the tenth of the service range, as kubeadm picks it).
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
NAMESPACE = "kube-system"
NAME = "coredns"
PORT = 1053

COREFILE = f"""\
.:{PORT} {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    reload
}}
"""


def manifests(image: str) -> list[dict[str, Any]]:
    """CoreDNS' objects (upstream's deployment/kubernetes/coredns.yaml.sed, trimmed): its
    identity with read access to what the kubernetes plugin watches, the Corefile, one
    replica, and the kube-dns Service."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"name": NAME, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "priorityClassName": "system-cluster-critical",
                        # its own resolv.conf is the host's: CoreDNS must not ask itself
                        "dnsPolicy": "Default",
                        "nodeSelector": {c.LABEL_DEV_NODE: c.DEV_NODE_REAL},
                        "containers": [
                            {
                                "name": NAME,
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": PORT, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": PORT, "protocol": "TCP"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "initialDelaySeconds": 10,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": NAME}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "clusterIP": DNS_SERVICE_IP,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "targetPort": PORT, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": PORT, "protocol": "TCP"},
                ],
            },
        },
    ]


def deploy(kubectl: Path, kubeconfig: str, image: str, wait: float = 120.0) -> None:
    """Apply CoreDNS' objects (idempotent) and wait until its Deployment is available."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(image)})
    env = {"KUBECONFIG": kubeconfig, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(kubectl), "apply", "--server-side", "--force-conflicts", "-f", "-"],
        input=doc,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if proc.returncode != 0:
        raise ClusterError(f"kubectl apply of CoreDNS failed: {proc.stderr.strip()}")
    deadline = time.monotonic() + wait
    status = ""
    while time.monotonic() < deadline:
        got = subprocess.run(
            [str(kubectl), "-n", NAMESPACE, "get", "deployment", NAME, "-o", "json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        if got.returncode == 0:
            body = json.loads(got.stdout)
            status = json.dumps(body.get("status", {}).get("conditions", []))
            if body.get("status", {}).get("availableReplicas", 0) >= 1:
                return
        time.sleep(1)
    raise ClusterError(f"CoreDNS not available after {wait:.0f}s: {status}")
