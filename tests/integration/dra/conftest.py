"""Fixtures for the DRA driver on the real control plane (``cluster`` from tests/conftest.py):
``dra_env`` and ``driver``, described in dra_cluster_support.py."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_cluster_support import (
    GPU_MIB,
    ROOT,
    DraEnv,
    RunningDriver,
    node_token,
    server_minor,
    token_api,
)

from dra_peer import FakeKubelet
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.dra.app import run_driver
from horus.dra.settings import DraSettings


@pytest.fixture(scope="module")
def dra_env(cluster: Any) -> Iterator[DraEnv]:
    if server_minor(cluster) < 36:
        pytest.skip(
            "the DRA driver's shareable devices need DRAConsumableCapacity (beta, on by default "
            "from Kubernetes 1.36); this control plane is older"
        )
    suffix = uuid.uuid4().hex[:6]
    namespace, node = f"dra-{suffix}", f"dra-node-{suffix}"
    if cluster.kubectl("get", "namespace", c.HORUS_NAMESPACE, check=False).returncode:
        cluster.kubectl("create", "namespace", c.HORUS_NAMESPACE)
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "rbac" / "node.yaml"))
    cluster.kubectl("apply", "-f", str(ROOT / "manifests" / "dra" / "deviceclass.yaml"))
    cluster.kubectl("create", "namespace", namespace)
    manifest = node_manifest(node, NodeSpec(count=1, gpus_per_node=2, gpu_memory_mib=GPU_MIB))
    cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    deadline = time.monotonic() + 60
    while cluster.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode:
        # pods need the namespace's default ServiceAccount (kube-controller-manager makes it)
        assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace}"
        time.sleep(0.2)
    try:
        yield DraEnv(cluster, namespace, node, node_token(cluster, node))
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        cluster.kubectl(
            "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False
        )
        cluster.kubectl("delete", "node", node, check=False)


@pytest.fixture(scope="module")
def driver(dra_env: DraEnv) -> Iterator[RunningDriver]:
    folder = Path(tempfile.mkdtemp(prefix="hdra-"))
    health = folder / "health.json"
    settings = DraSettings(
        node_name=dra_env.node,
        registry_dir=folder / "reg",
        plugin_dir=folder / "plug",
        cdi_dir=folder / "cdi",
        backend="simulated",
        sim_gpu_count=2,
        sim_gpu_memory_mib=GPU_MIB,
        sim_health_file=health,
        health_interval_s=0.3,
        socket_poll_s=0.1,
        slice_resync_s=5.0,
        progress_root=folder / "progress",
    )
    stop = threading.Event()
    api = token_api(dra_env.cluster, dra_env.node_token)
    thread = threading.Thread(target=run_driver, args=(settings, stop, api), daemon=True)
    thread.start()
    kubelet = FakeKubelet(settings.registry_dir)
    try:
        kubelet.register(timeout=30)
        yield RunningDriver(kubelet, settings, thread, stop, health)
    finally:
        stop.set()
        thread.join(10)
        kubelet.close()
        shutil.rmtree(folder, ignore_errors=True)
