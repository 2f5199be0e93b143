"""Horus installed with its own chart on the local cluster's real nodes, as a cluster admin
would: the operator Deployment and the node DaemonSet run in-cluster from images built from
this checkout (:mod:`horus.devcluster.images`), with the chart's RBAC as shipped.

What differs from a GPU cluster is said in :func:`real_node_values` and nothing else: images
come from the nodes' containerd (``images.registry=horus.local``, ``pullPolicy: Never``; with
``scheduler.enabled`` also the Horus scheduler's kube-scheduler, built from the pinned
Kubernetes binary as ``horus.local/kube-scheduler:<version>``, since real nodes here cannot pull
``registry.k8s.io``), the device plugin and agent use the simulated backend, the DaemonSet
selects the real nodes, and the agent does not start an MPS daemon (there is none without a
GPU) while the device plugin still hands out the MPS settings, so containers see exactly what
they would on a GPU node.

The demo (``make demo``), the real-node e2e tests and the real-node benchmark all start from
:func:`start`, so they exercise one setup.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError
from horus.devcluster import images
from horus.devcluster.binaries import repo_root
from horus.devcluster.cluster import DevClusterState, LocalCluster
from horus.devcluster.realnode_state import RealNodeSpec
from horus.devcluster.realnodes import RealNodes

RELEASE = "horus"
NAMESPACE = c.HORUS_NAMESPACE
#: The images a chart install on real nodes needs.
CHART_IMAGES = ("operator", "node", "workload")
#: The image the optional Horus scheduler (``scheduler.enabled``) adds.
SCHEDULER_IMAGE = "kube-scheduler"


def real_node_values(
    gpus_per_node: int, extra: dict[str, Any] | None = None, kube_scheduler_tag: str = ""
) -> dict[str, Any]:
    """Helm values for the chart on real nodes with simulated GPUs (see the module docstring).
    ``kube_scheduler_tag``: the tag of the imported kube-scheduler image
    (:func:`horus.devcluster.images.kubernetes_version`), for ``scheduler.enabled``."""
    values: dict[str, Any] = {
        "images": {
            "registry": images.LOCAL_REGISTRY,
            "operator": {"pullPolicy": "Never"},
            "node": {"pullPolicy": "Never"},
        },
        "enforcement": "mps",
        "node": {
            "backend": "simulated",
            "nodeSelector": {c.LABEL_DEV_NODE: c.DEV_NODE_REAL},
            "devicePlugin": {"extraArgs": ["--sim-gpu-count", str(gpus_per_node)]},
            # gpuSharing.path picks one of the two (auto: dra on this 1.37 cluster)
            "draDriver": {"extraArgs": ["--sim-gpu-count", str(gpus_per_node)]},
            "agent": {"extraArgs": ["--enforcement", "none", "--interval-seconds", "2"]},
        },
    }
    if kube_scheduler_tag:
        values["images"]["kubeScheduler"] = {
            "registry": images.LOCAL_REGISTRY,
            "repository": images.IMAGES[SCHEDULER_IMAGE].repository,
            "tag": kube_scheduler_tag,
            "pullPolicy": "Never",
        }
    return _merge(values, extra or {})


def scheduler_enabled(values: dict[str, Any] | None) -> bool:
    """Whether ``values`` switch the optional Horus scheduler Deployment on."""
    return bool(((values or {}).get("scheduler") or {}).get("enabled"))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class KubeCli:
    """kubectl and helm of the pinned version against one cluster."""

    kubeconfig: str
    bin_dir: Path
    helm_home: Path

    def run(
        self,
        tool: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "HELM_CACHE_HOME": str(self.helm_home / "cache"),
            "HELM_CONFIG_HOME": str(self.helm_home / "config"),
            "HELM_DATA_HOME": str(self.helm_home / "data"),
        }
        proc = subprocess.run(
            [str(self.bin_dir / tool), *args],
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"{tool} {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, **kw)

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    @classmethod
    def of(cls, state: DevClusterState) -> KubeCli:
        return cls(state.kubeconfig, Path(state.bin_dir), Path(state.directory) / "helm")


def install(
    kube: KubeCli, values: dict[str, Any], timeout: float = 300.0, chart: Path | None = None
) -> None:
    """``helm upgrade --install`` of this checkout's chart (or ``chart``, a changed copy, for
    an upgrade test), waiting for every pod."""
    path = kube.helm_home / "values-real-nodes.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    chart = chart or repo_root() / "charts" / "horus"
    kube.helm(
        *("upgrade", "--install", RELEASE, str(chart), "-n", NAMESPACE, "--create-namespace"),
        *("-f", str(path), "--wait", "--timeout", f"{int(timeout)}s"),
        timeout=timeout + 30,
    )
    wait_nodes_have_gpus(kube, timeout=60)
    wait_operator_leader(kube, timeout=90)


def wait_operator_leader(kube: KubeCli, timeout: float = 90.0) -> None:
    """The operator's Lease is held by a pod of its current ReplicaSet and no old pod is left.

    ``helm upgrade --wait`` returns once the new pods are ready, while an old replica may
    still hold the Lease through its termination grace period and place with the old
    settings (a changed ``gpuSharing.path``, say); a test or benchmark that starts then would
    measure the release it replaced. No operator Deployment (``operator.enabled=false``):
    nothing to wait for."""
    deploy = kube.kubectl("get", "deployment", "horus-operator", "-n", NAMESPACE, check=False)
    if deploy.returncode != 0:
        return
    deadline = time.monotonic() + timeout
    holder, names = "", []
    while time.monotonic() < deadline:
        pods = kube.json(
            "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        names = [p["metadata"]["name"] for p in pods]
        templates = {p["metadata"]["labels"].get("pod-template-hash") for p in pods}
        lease = kube.kubectl(
            "get", "lease", "horus-operator", "-n", NAMESPACE,
            "-o", "jsonpath={.spec.holderIdentity}", check=False,
        ).stdout  # fmt: skip
        holder = lease.strip()
        settled = len(templates) == 1 and not any(
            p["metadata"].get("deletionTimestamp") for p in pods
        )
        if settled and any(holder.startswith(n + "-") for n in names):
            return
        time.sleep(0.5)
    raise ClusterError(
        f"the operator Lease is held by {holder!r}, not by one of the current pods "
        f"{', '.join(names)}, after {timeout:.0f}s"
    )


def dra_path(kube: KubeCli) -> bool:
    """Whether the installed chart is on the dra path (gpuSharing.path): its node DaemonSet
    runs the DRA driver, not the device plugin."""
    ds = kube.json("get", "daemonset", "horus-node", "-n", NAMESPACE)
    return any(x["name"] == "dra-driver" for x in ds["spec"]["template"]["spec"]["containers"])


def wait_nodes_have_gpus(kube: KubeCli, timeout: float = 60.0) -> None:
    """Every real node offers Horus GPUs: on the device-plugin path its allocatable has
    both ``horus.io/gpu-core`` and ``horus.io/gpu-memory`` (the plugin registers the two
    separately, and the kubelet may report one a status update before the other), on the dra
    path the Horus DRA driver published its ResourceSlice with at least one GPU."""
    dra = dra_path(kube)
    container = "dra-driver" if dra else "device-plugin"
    deadline = time.monotonic() + timeout
    missing: list[str] = []
    while time.monotonic() < deadline:
        nodes = kube.json("get", "nodes", "-l", f"{c.LABEL_DEV_NODE}={c.DEV_NODE_REAL}")["items"]
        if dra:
            offered = {
                s["spec"].get("nodeName")
                for s in kube.json("get", "resourceslices")["items"]
                if s["spec"].get("driver") == c.DRA_DRIVER_NAME and s["spec"].get("devices")
            }
        else:
            offered = {
                n["metadata"]["name"]
                for n in nodes
                if all(
                    int((n["status"].get("allocatable") or {}).get(r, "0")) > 0
                    for r in (c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY)
                )
            }
        missing = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] not in offered]
        if nodes and not missing:
            return
        time.sleep(0.5)
    pods = kube.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
    logs = kube.kubectl(
        "logs", "-n", NAMESPACE, "ds/horus-node", "-c", container, "--tail=20", check=False
    )
    what = (
        "a ResourceSlice of " + c.DRA_DRIVER_NAME
        if dra
        else f"{c.RESOURCE_GPU_CORE} and {c.RESOURCE_GPU_MEMORY}"
    )
    raise ClusterError(
        f"real node(s) {', '.join(missing) or '(none)'} have no {what} after "
        f"{timeout:.0f}s: is the chart's {container} running?\n{pods}\n"
        f"kubectl -n {NAMESPACE} logs ds/horus-node -c {container}:\n"
        f"{logs.stdout}{logs.stderr}"
    )


@dataclass
class RealCluster:
    """A local cluster with real nodes and Horus' chart on them."""

    local: LocalCluster
    state: DevClusterState
    real: RealNodes
    kube: KubeCli
    nodes: list[str]


def start(
    directory: Path,
    nodes: int,
    gpus_per_node: int,
    values: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> RealCluster:
    """Control plane, ``nodes`` real nodes, the images, and the chart; stops what it started
    when a step fails."""
    say = log or (lambda text: None)
    local = LocalCluster(directory)
    t0 = time.monotonic()
    state = local.up(timeout=180)
    try:
        say(f"control plane up in {time.monotonic() - t0:.0f}s")
        return prepare(local, state, nodes, gpus_per_node, values, say)
    except BaseException:
        local.down(quiet=True)
        raise


def prepare(
    local: LocalCluster,
    state: DevClusterState,
    nodes: int,
    gpus_per_node: int,
    values: dict[str, Any] | None,
    say: Callable[[str], None],
) -> RealCluster:
    """On a running control plane: real nodes, the images in them, the chart installed."""
    real = RealNodes(local.directory)
    t = time.monotonic()
    names = real.add(RealNodeSpec(count=nodes, gpus_per_node=gpus_per_node, device_plugin="none"))
    say(f"{nodes} real node(s) Ready in {time.monotonic() - t:.0f}s: {', '.join(names)}")
    t = time.monotonic()
    wanted = list(CHART_IMAGES)
    scheduler_tag = ""
    if scheduler_enabled(values):
        wanted.append(SCHEDULER_IMAGE)
        scheduler_tag = images.kubernetes_version(Path(state.bin_dir))
    built = images.build(repo_root(), wanted, log=say, bin_dir=Path(state.bin_dir))
    t_import = time.monotonic()
    real.import_images([Path(b.descriptor) for b in built])
    say(
        f"images built/cached in {t_import - t:.0f}s, imported into {nodes} node(s) in "
        f"{time.monotonic() - t_import:.0f}s"
    )
    kube = KubeCli.of(state)
    t = time.monotonic()
    install(kube, real_node_values(gpus_per_node, values, scheduler_tag))
    what = "operator x2 + node DaemonSet" + (" + Horus scheduler" if scheduler_tag else "")
    say(f"helm install ({what}) Ready in {time.monotonic() - t:.0f}s")
    return RealCluster(local, state, real, kube, names)
