"""Fixtures for device-plugin tests on the real control plane (``cluster`` from tests/conftest.py).

``dp_env`` creates, once per module, what the scheduler side would have made: the signing key
pair (Secret ``horus-system/horus-signing-key`` and the public keys in the ConfigMap
``horus-verify-keys``, which the plugin reads; reused when the operator's tests made them
first), a namespace for the pods, and one kwok GPU node per test module; ``run_plugin`` starts
the real plugin (``horus.deviceplugin.app.run_plugin`` with the real API client, the
simulated GPU backend for that node) in a thread with a kubelet-side peer on a private socket
directory.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dp_cluster_support import DpEnv, RunningPlugin, sim_settings

from deviceplugin_peer import FakeKubelet
from horus.api.signing import KeyRing, SigningKey, VerifyKeys, parse_public_keys
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.deviceplugin.app import run_plugin


def ensure_key(core: Any) -> KeyRing:
    """The signing key pair as the operator keeps it (the test signs as the placers do; the
    plugin reads only the published public keys)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": c.HORUS_NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    fresh = SigningKey.generate()
    body = {
        "metadata": {"name": c.SIGNING_KEY_SECRET, "namespace": c.HORUS_NAMESPACE},
        "data": {c.SIGNING_KEY_SECRET_ENTRY: base64.b64encode(fresh.to_pem()).decode()},
    }
    try:
        core.create_namespaced_secret(c.HORUS_NAMESPACE, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    secret = core.read_namespaced_secret(c.SIGNING_KEY_SECRET, c.HORUS_NAMESPACE)
    signer = SigningKey.from_pem(
        base64.b64decode(secret.data[c.SIGNING_KEY_SECRET_ENTRY]), "the signing Secret"
    )
    try:
        cm = core.read_namespaced_config_map(c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise
        cm = None
    published = (
        parse_public_keys((cm.data or {}).get(c.VERIFY_KEYS_CONFIGMAP_ENTRY, ""), "ConfigMap")
        if cm is not None
        else VerifyKeys()
    )
    if signer.public_raw not in published:
        data = {c.VERIFY_KEYS_CONFIGMAP_ENTRY: published.union(signer.public).to_pem()}
        if cm is None:
            core.create_namespaced_config_map(
                c.HORUS_NAMESPACE, {"metadata": {"name": c.VERIFY_KEYS_CONFIGMAP}, "data": data}
            )
        else:
            core.patch_namespaced_config_map(
                c.VERIFY_KEYS_CONFIGMAP, c.HORUS_NAMESPACE, {"data": data}
            )
    return KeyRing.of(signer)


def make_node(core: Any, name: str, gpus: int = 2) -> None:
    core.create_node(node_manifest(name, NodeSpec(count=1, gpus_per_node=gpus)))


def wait_sa(core: Any, namespace: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(namespace).items
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"no default ServiceAccount in {namespace}")


@pytest.fixture(scope="module")
def dp_env(cluster: Any) -> Iterator[DpEnv]:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    suffix = uuid.uuid4().hex[:6]
    namespace = f"dp-{suffix}"
    node = f"dp-node-{suffix}"
    core.create_namespace({"metadata": {"name": namespace}})
    wait_sa(core, namespace)
    make_node(core, node)
    key = ensure_key(core)
    try:
        yield DpEnv(core, key, namespace, node, cluster.kubeconfig)
    finally:
        core.delete_namespace(namespace)
        core.delete_node(node)


@pytest.fixture(scope="module")
def plugin(dp_env: DpEnv) -> Iterator[RunningPlugin]:
    folder = Path(tempfile.mkdtemp(prefix="hdp-"))
    kubelet = FakeKubelet(folder).start()
    settings = sim_settings(
        dp_env.node,
        folder,
        dp_env.kubeconfig,
        sim_health_file=folder / "health.json",
        sim_gpu_memory_mib=81920,
        health_interval_s=0.5,
    )
    stop = threading.Event()
    thread = threading.Thread(target=run_plugin, args=(settings, stop), daemon=True)
    thread.start()
    try:
        assert kubelet.wait(
            lambda: set(kubelet.lists) == {c.RESOURCE_GPU_CORE, c.RESOURCE_GPU_MEMORY}, 30
        )
        yield RunningPlugin(kubelet, thread, stop, folder)
    finally:
        stop.set()
        thread.join(10)
        kubelet.stop()
        shutil.rmtree(folder, ignore_errors=True)
