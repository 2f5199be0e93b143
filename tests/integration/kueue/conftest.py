"""The ``kueue`` fixture: real Kueue, JobSet and Kubeflow Trainer controllers on the session's
control plane (``cluster`` from tests/conftest.py), once per module; see kueue_support.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kueue_support import KueueEnv

from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.devcluster.workload_controllers import WorkloadControllers
from horus.devcluster.workload_specs import KUEUE, ORDER


@pytest.fixture(scope="module")
def kueue(cluster: Any, request: pytest.FixtureRequest) -> Iterator[KueueEnv]:
    """Kueue, JobSet and Trainer for this test module. A module may set
    ``KUEUE_CONFIG_OVERRIDES`` (merged into Kueue's configuration, e.g. DRA device class
    mappings)."""
    if not (cluster.bin_dir / KUEUE.binary).exists():
        pytest.skip(
            f"{cluster.bin_dir} has no Kueue: tools/controlplane/build.sh builds it "
            "(tools/controlplane/workloads)"
        )
    node = f"kueue-node-{uuid.uuid4().hex[:6]}"
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(node_manifest(node, NodeSpec(count=1, gpus_per_node=1))),
    )
    overrides = getattr(request.module, "KUEUE_CONFIG_OVERRIDES", None)
    controllers = WorkloadControllers(cluster.state, kueue_overrides=overrides)
    env = KueueEnv(cluster, controllers, node)
    try:
        controllers.up(ORDER, timeout=180)
        yield env
    finally:
        for ns in env.namespaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        controllers.down()
        cluster.kubectl("delete", "node", node, check=False)
