"""The DRA path on real nodes (issue 25): kubelet + containerd 2 with CDI, the real
kube-scheduler allocating ResourceClaims against the Horus DRA driver's ResourceSlices, and a
container whose environment — read from its own output — equals its claim's consumed capacity.

The driver runs as a process of each real node (in the node's mount namespace, like its
kubelet and containerd: ``/var/lib/kubelet/plugins*`` and ``/var/run/cdi`` are the node's own),
with the grant settings the chart gives the device plugin (the ``deviceplugin`` section of the
ConfigMap ``horus-config``), so both paths hand out the same thing. The chart's device plugin
keeps running beside it: the two paths are independent (another resource, another socket).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realnode_support import GPU_MEMORY_MIB, apply, claim_and_pod, running, share_line, wait_for

from horus.api.resources import parse_quantity
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster

#: Every pod (and its claim, same name) this module makes.
POD_NAMES = ("dra-twin-a", "dra-twin-b", "dra-after-restart")
GRANT_FIELDS = (
    "enforcement",
    "gpu_access",
    "mps_pipe_dir",
    "mps_shm_dir",
    "progress_root",
    "pass_device_specs",
)


@pytest.fixture(scope="module")
def dra_drivers(rc: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``horus dra run`` on every real node; yields the folder of their logs."""
    config = rc.kube.json("get", "configmap", "horus-config", "-n", NAMESPACE)
    plugin = yaml.safe_load(config["data"]["config.yaml"])["deviceplugin"]
    folder = tmp_path_factory.mktemp("dra")
    (folder / "config.yaml").write_text(
        yaml.safe_dump({"dra": {k: plugin[k] for k in GRANT_FIELDS if k in plugin}})
    )
    state = rc.real.state()
    assert state is not None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for node in state.nodes:
            argv = [
                *rc.real._nsenter(node),
                sys.executable, "-m", "horus", "dra", "run",
                "--config", str(folder / "config.yaml"),
                "--node-name", node.name,
                "--backend", "simulated",
                "--sim-gpu-count", "1",
                "--sim-gpu-memory-mib", str(GPU_MEMORY_MIB),
                "--kubeconfig", rc.kube.kubeconfig,
            ]  # fmt: skip
            log = (folder / f"{node.name}.log").open("wb")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

        def published() -> bool:
            out = rc.kube.json("get", "resourceslices")
            nodes = {
                s["spec"].get("nodeName")
                for s in out["items"]
                if s["spec"].get("driver") == c.DRA_DRIVER_NAME
            }
            return nodes >= {n.name for n in state.nodes}

        wait_for("the DRA drivers' ResourceSlices", published, 60, lambda: _logs(folder))
        yield folder
    finally:
        _delete(rc, *POD_NAMES)  # before the drivers stop, so the kubelet can unprepare
        for proc in procs:  # only the processes this fixture started
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _logs(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(folder.glob("*.log")))


def test_a_pod_with_a_claim_runs_with_exactly_its_consumed_capacity(
    rc: RealCluster, dra_drivers: Path
) -> None:
    node = rc.nodes[0]
    twins = {"dra-twin-a": "16384Mi", "dra-twin-b": "8192Mi"}  # same cores, other memory
    for name, memory in twins.items():
        for doc in claim_and_pod(name, node, "30", memory):
            apply(rc, doc)
    try:
        for name in twins:
            line = wait_for(
                f"{name}'s share line",
                lambda name=name: share_line(rc, name),
                240,
                lambda name=name: (
                    _logs(dra_drivers)
                    + rc.kube.kubectl("describe", "pod", name, check=False).stdout[-3000:]
                ),
            )
            claim = rc.kube.json("get", "resourceclaim", name)
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == node and result["device"] == "gpu-0"
            cores = parse_quantity(result["consumedCapacity"]["cores"], "cores")
            memory_mib = parse_quantity(result["consumedCapacity"]["memory"], "memory") // c.MIB
            env = line["env"]
            assert env[c.ENV_GPU_CORE_PERCENT] == str(cores) == "30"
            assert env[c.ENV_GPU_MEMORY_MIB] == str(memory_mib)
            assert memory_mib == parse_quantity(twins[name], "memory") // c.MIB
            assert env[c.ENV_CLAIM_UID] == claim["metadata"]["uid"]
            assert env[c.ENV_SHARE_ID] == result["shareID"]
            assert env[c.ENV_POD_NAME] == name
            if env.get(c.ENV_ENFORCEMENT) == "mps":
                assert env[c.ENV_MPS_ACTIVE_THREAD_PERCENTAGE] == "30"
                assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory_mib}M"
        print(json.dumps({n: rc.kube.json("get", "resourceclaim", n)["status"] for n in twins}))
    except BaseException:
        _delete(rc, *twins)
        raise


def _delete(rc: RealCluster, *names: str) -> None:
    for name in names:
        rc.kube.kubectl("delete", "pod", name, "--grace-period=0", "--force", check=False)
        rc.kube.kubectl("delete", "resourceclaim", name, check=False)


def test_a_kubelet_restart_keeps_prepared_claims_and_prepares_new_ones(
    rc: RealCluster, dra_drivers: Path
) -> None:
    """The kubelet restarts; the twins keep running with the same containers, and the
    restarted kubelet finds the driver again (its plugin watcher walks plugins_registry):
    a new pod with a claim starts with its share."""
    node = rc.nodes[0]
    twins = ("dra-twin-a", "dra-twin-b")
    try:
        before = {n: rc.kube.json("get", "pod", n) for n in twins}
        assert all(running(p) for p in before.values()), "the twins are not running"
        rc.real.restart_kubelet(node)
        for doc in claim_and_pod("dra-after-restart", node, "20", "2048Mi"):
            apply(rc, doc)
        line = wait_for(
            "the new pod's share line after the kubelet restart",
            lambda: share_line(rc, "dra-after-restart"),
            240,
            lambda: (
                _logs(dra_drivers)
                + rc.kube.kubectl("describe", "pod", "dra-after-restart", check=False).stdout[
                    -3000:
                ]
            ),
        )
        assert line["env"][c.ENV_GPU_CORE_PERCENT] == "20"
        assert line["env"][c.ENV_GPU_MEMORY_MIB] == "2048"
        for name, old in before.items():
            new = rc.kube.json("get", "pod", name)
            old_c = old["status"]["containerStatuses"][0]
            new_c = new["status"]["containerStatuses"][0]
            assert running(new), name
            assert new_c["containerID"] == old_c["containerID"] and new_c["restartCount"] == 0
    finally:
        _delete(rc, *twins, "dra-after-restart")
