"""The local cluster's Prometheus (demo, e2e tests): its binary, its configuration, and how
it finds the chart's metrics endpoints — through the Kubernetes API, as on any cluster.

**The binary** is Prometheus built from its Go module by ``tools/controlplane/build.sh``, in a
cached folder of its own (``prometheus-<version>-k8s-sd``) linked into the control-plane bin
folder, with only the Kubernetes service discovery compiled in (build tags
``remove_all_sd,enable_kubernetes_sd``) and without the web UI's assets (``builtinassets``
needs npm): the HTTP API, which the tests, the demo's report and Grafana query, is complete;
the browser UI at ``/`` is not there. Debian's prometheus package cannot do this: Debian patches
the Kubernetes discovery out (its 2.42 refuses ``kubernetes_sd_configs``, "field not found"),
and with it the targets had to be looked up and rewritten by the test itself, which no cluster
does and which hid a broken Service or annotation. ``promtool`` comes from the same build.

**Discovery** (:func:`scrape_configs`): role ``endpointslice`` in the chart's namespace, kept
to the chart's metrics Services (``horus-operator``, ``horus-node``) that carry the
``prometheus.io/scrape`` annotation (the annotation-driven setup ``metrics.serviceAnnotations``
in values.yaml is for), port ``metrics``. So a replaced pod is found by Prometheus itself, from
the EndpointSlice the cluster keeps, and a Service that selects the wrong pods or lost its
annotation shows as a missing target. The targets keep ``instance="<podIP>:<port>"`` and
get no ``pod``/``node``/``namespace`` target labels: the agent's own series carry those
labels for the pods and nodes they describe, and target labels would rename them.

**Identity** (:func:`grant_discovery`): the dev-only ServiceAccount
:data:`~horus.common.constants.PROMETHEUS_SERVICE_ACCOUNT` with a Role in the chart's namespace
that may only get/list/watch pods, Services, Endpoints and EndpointSlices — what the
``endpointslice`` role reads — and nothing cluster-wide, no Secret, no write. It is not in the
chart: a cluster's Prometheus brings its own RBAC (or uses the chart's
ServiceMonitor/PodMonitor).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError
from horus.devcluster import certs
from horus.devcluster.binaries import ensure_binaries
from horus.devcluster.cluster import write_kubeconfig

if TYPE_CHECKING:
    from horus.devcluster.chart import KubeCli

#: Prometheus job -> the chart's metrics Service it discovers its targets through (the job
#: names the dashboards and alert rules expect).
SCRAPE_JOBS = {"horus-operator": c.OPERATOR_METRICS_SERVICE, "horus-agent": c.NODE_METRICS_SERVICE}


def binary(name: str = "prometheus") -> Path:
    """The built ``prometheus`` (or ``promtool``) in the control-plane bin folder. There is no
    fallback to another Prometheus: Debian's lacks the Kubernetes discovery (module docstring)."""
    path = ensure_binaries() / name
    if not path.is_file():
        raise ClusterError(
            f"{path} is missing: tools/controlplane/build.sh builds Prometheus (with the "
            "Kubernetes service discovery) into its own cached folder and links it there; "
            "run tools/dev/setup.sh"
        )
    return path


def discovery_rbac(namespace: str = c.HORUS_NAMESPACE) -> list[dict[str, Any]]:
    """The ServiceAccount, Role and RoleBinding of Prometheus' discovery (module docstring)."""
    name = c.PROMETHEUS_SERVICE_ACCOUNT
    meta = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/component": "dev-prometheus"},
    }
    read = ["get", "list", "watch"]
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "services", "endpoints"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def grant_discovery(
    kube: KubeCli, server: str, ca_file: Path, path: Path, namespace: str = c.HORUS_NAMESPACE
) -> Path:
    """Create the discovery identity in ``namespace`` (idempotent) and write a kubeconfig
    with a token of it to ``path`` (mode 0600) for ``kubernetes_sd_configs``; returns
    ``path``."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(discovery_rbac(namespace)))
    sa = c.PROMETHEUS_SERVICE_ACCOUNT
    token = kube.kubectl(
        "create", "token", sa, "-n", namespace, f"--duration={certs.TOKEN_DURATION}"
    ).stdout.strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(path, server, ca_file, token, f"system:serviceaccount:{namespace}:{sa}")
    return path


def scrape_configs(
    kubeconfig: Path, interval: str = "2s", namespace: str = c.HORUS_NAMESPACE
) -> list[dict[str, Any]]:
    """One job per :data:`SCRAPE_JOBS` entry, its targets discovered in ``namespace`` through
    the apiserver with ``kubeconfig`` (module docstring)."""
    return [
        {
            "job_name": job,
            "scrape_interval": interval,
            "kubernetes_sd_configs": [
                {
                    "role": "endpointslice",
                    "kubeconfig_file": str(kubeconfig),
                    "namespaces": {"names": [namespace]},
                }
            ],
            "relabel_configs": [
                {
                    "source_labels": [
                        "__meta_kubernetes_service_name",
                        "__meta_kubernetes_service_annotation_prometheus_io_scrape",
                        "__meta_kubernetes_endpointslice_port_name",
                    ],
                    "regex": f"{service};true;metrics",
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_service_annotation_prometheus_io_path"],
                    "regex": "(.+)",
                    "target_label": "__metrics_path__",
                },
            ],
        }
        for job, service in SCRAPE_JOBS.items()
    ]


def write_config(
    folder: Path,
    scrape: list[dict[str, Any]],
    rule_files: Sequence[Path] = (),
    interval: str = "2s",
) -> Path:
    """``folder/prometheus.yml`` scraping and evaluating every ``interval``; returns it."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": scrape,
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def command(config: Path, folder: Path, port: int, retention: str = "1d") -> list[str]:
    """The command line of the built Prometheus with ``config``, its TSDB in ``folder`` and
    its HTTP API on 127.0.0.1:``port``."""
    return [
        str(binary()),
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.retention.time={retention}",
    ]


def discovered_pods(url: str, timeout: float = 5.0) -> dict[str, set[str]]:
    """Per job, the pods whose targets Prometheus at ``url`` found through the Kubernetes
    discovery (``__meta_kubernetes_pod_name`` among the target's discovered labels) and
    scraped successfully (``health: up``), from its ``/api/v1/targets``."""
    with urllib.request.urlopen(f"{url}/api/v1/targets?state=active", timeout=timeout) as resp:
        active = json.load(resp)["data"]["activeTargets"]
    found: dict[str, set[str]] = {}
    for target in active:
        pod = (target.get("discoveredLabels") or {}).get("__meta_kubernetes_pod_name")
        if pod and target.get("health") == "up":
            found.setdefault(target["labels"]["job"], set()).add(pod)
    return found
