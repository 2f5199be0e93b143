"""A control plane of our own whose kube-scheduler is configured with the Horus extender.

The session ``cluster`` fixture's scheduler knows nothing of the extender, and its
configuration is fixed when it starts, so these tests start their own ``LocalCluster``
(module-scoped, in a temporary folder) with the shipped snippet
``manifests/scheduler/horus-extender-config.yaml`` — its ``urlPrefix`` pointed at an extender
served from this test process on a free loopback port, and its ``tlsConfig`` files written from
the extender's TLS Secret: the scheduler calls the extender over mutual TLS, as in a cluster.
The set is generated before the control plane starts (kube-scheduler reads the files once, at
start) and stored as the Secret the extender then reads, as it does in a pod.
"""

from __future__ import annotations

import base64
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from extcluster import ExtenderCluster

from horus.common import constants as c
from horus.devcluster.cluster import LocalCluster
from horus.devcluster.nodes import NodeSpec, add_nodes
from horus.operator.extender import ExtenderServer, ExtenderSettings
from horus.operator.extender.main import build_extender, build_tls, close_extender
from horus.operator.extender.tls import generate_tls_secret_data
from horus.scheduler import SchedulerSettings

ROOT = Path(__file__).resolve().parents[3]
SNIPPET = ROOT / "manifests" / "scheduler" / "horus-extender-config.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ext_cluster() -> Iterator[ExtenderCluster]:
    from kubernetes import client, config

    port = _free_port()
    snippet = yaml.safe_load(SNIPPET.read_text())
    extenders = snippet["extenders"]
    extenders[0]["urlPrefix"] = f"https://127.0.0.1:{port}"
    folder = Path(tempfile.mkdtemp(prefix="horus-extender-cluster-")) / "c"
    tls_data = generate_tls_secret_data()
    pki = folder.parent / "pki"
    pki.mkdir()
    files = {}
    for entry, pem in tls_data.items():
        files[entry] = pki / entry
        files[entry].write_bytes(pem)
    extenders[0]["tlsConfig"] = {
        "caFile": str(files[c.EXTENDER_TLS_CA]),
        "certFile": str(files[c.EXTENDER_TLS_CLIENT_CERT]),
        "keyFile": str(files[c.EXTENDER_TLS_CLIENT_KEY]),
    }
    local = LocalCluster(folder)
    state = local.up(timeout=180, scheduler_config={"extenders": extenders})
    server: ExtenderServer | None = None
    extender = None
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)
        settings = ExtenderSettings(host="127.0.0.1", port=port, cache_seconds=2.0)
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": c.HORUS_NAMESPACE}})
        extender = build_extender(settings, SchedulerSettings(), api)
        core.create_namespaced_secret(
            c.HORUS_NAMESPACE,
            {
                "metadata": {"name": c.EXTENDER_TLS_SECRET},
                "type": "kubernetes.io/tls",
                "data": {k: base64.b64encode(v).decode() for k, v in tls_data.items()},
            },
        )
        server = ExtenderServer(
            extender, "127.0.0.1", port, tls=build_tls(settings, api).context, health_port=0
        ).start()
        deadline = time.monotonic() + 60  # pods need the controller-made "default" ServiceAccount
        while not core.list_namespaced_service_account("default").items:
            assert time.monotonic() < deadline, "no default ServiceAccount after 60 s"
            time.sleep(0.3)
        nodes = add_nodes(
            state.kubeconfig,
            NodeSpec(count=2, gpus_per_node=1, gpu_memory_mib=81920, prefix="ext"),
        )
        yield ExtenderCluster(
            local,
            state.kubeconfig,
            Path(state.bin_dir),
            server,
            api,
            client.CoreV1Api(api),
            nodes,
            files,
        )
    finally:
        if server is not None:
            server.close()
        if extender is not None:
            close_extender(extender)
        local.down()
