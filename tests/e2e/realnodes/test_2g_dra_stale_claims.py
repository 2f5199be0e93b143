"""The DRA driver's stale-claim sweep on a real node: a claim deleted while the node's driver
was down is unprepared by the first sweep after the driver returns.

The driver runs as a process of node 0, in its mount namespace (as test_2d_dra.py runs it),
with its checkpoint in this test's folder. Two pods with claims run on it; the driver stops;
one pod and its claim are deleted — the kubelet cannot unprepare it, and the
kube-controller-manager deallocates the claim and removes it from the apiserver. The driver
then returns with its sockets where this kubelet does not look, so nothing but its own sweep
can unprepare the claim, and its sweep interval is an hour, so only the sweep it runs as it
starts can do it in time. Within that sweep the deleted claim's checkpoint entry and CDI spec
are gone, while the kubelet's own state (``dra_manager_state``) still holds the claim — the
kubelet did not do it — and the claim of the pod still running keeps its entry and spec.
Last, the driver is served where the kubelet looks: the kubelet's late Unprepare of the
swept claim succeeds (it drops the claim from its state), and the other pod is deleted with
its claim unprepared as usual.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import yaml
from realnode_support import GPU_MEMORY_MIB, apply, claim_and_pod, share_line, wait_for

from horus.devcluster.chart import NAMESPACE, RealCluster
from horus.dra import cdi

GONE, KEPT = "sweep-gone", "sweep-kept"
GRANT_FIELDS = (
    "enforcement",
    "gpu_access",
    "mps_pipe_dir",
    "mps_shm_dir",
    "progress_root",
    "pass_device_specs",
)
#: Seconds the returned driver may take to start and run its first sweep (a Python start on
#: a loaded 2-core machine takes a few).
FIRST_SWEEP_S = 60
#: The kubelet retries an Unprepare that failed in its DRA manager's reconcile loop (60 s).
KUBELET_RETRY_S = 180


class Node0:
    """Node 0 as the test sees it: the driver's files and the kubelet's DRA state."""

    def __init__(self, rc: RealCluster, folder: Path) -> None:
        state = rc.real.state()
        assert state is not None
        self.rc = rc
        self.node = next(n for n in state.nodes if n.name == rc.nodes[0])
        self.folder = folder
        self.checkpoint = folder / "checkpoint.json"
        self.kubelet_state = (
            Path(self.node.directory) / "mounts" / "var-lib-kubelet" / "dra_manager_state"
        )
        config = rc.kube.json("get", "configmap", "horus-config", "-n", NAMESPACE)
        plugin = yaml.safe_load(config["data"]["config.yaml"])["deviceplugin"]
        (folder / "config.yaml").write_text(
            yaml.safe_dump({"dra": {k: plugin[k] for k in GRANT_FIELDS if k in plugin}})
        )

    def checkpointed(self) -> list[str]:
        if not self.checkpoint.is_file():
            return []
        return sorted(json.loads(self.checkpoint.read_text())["claims"])

    def spec(self, uid: str) -> Path:
        return self.rc.real.cdi_dir(self.node.name) / cdi.spec_file_name(uid)

    def kubelet_holds(self, uid: str) -> bool:
        return uid in self.kubelet_state.read_text()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.folder.glob("*.log"))
        )

    @contextmanager
    def driver(self, name: str, *extra: str) -> Iterator[Path]:
        """``horus dra run`` on the node until the block ends; yields its log file."""
        log_path = self.folder / f"{name}.log"
        argv = [
            *self.rc.real._nsenter(self.node),
            sys.executable, "-m", "horus", "dra", "run",
            "--config", str(self.folder / "config.yaml"),
            "--node-name", self.node.name,
            "--backend", "simulated",
            "--sim-gpu-count", "1",
            "--sim-gpu-memory-mib", str(GPU_MEMORY_MIB),
            "--kubeconfig", self.rc.kube.kubeconfig,
            "--checkpoint-file", str(self.checkpoint),
            *extra,
        ]  # fmt: skip
        with log_path.open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield log_path
        finally:  # only the process this block started
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _delete(rc: RealCluster, name: str) -> None:
    rc.kube.kubectl("delete", "pod", name, "--grace-period=0", "--force", check=False)
    rc.kube.kubectl("delete", "resourceclaim", name, "--wait=false", check=False)


def _gone(rc: RealCluster, name: str) -> bool:
    out = rc.kube.kubectl("get", "resourceclaim", name, "-o", "name", check=False)
    return out.returncode != 0 and "NotFound" in out.stderr


@pytest.fixture
def node0(rc: RealCluster) -> Iterator[Node0]:
    folder = Path(tempfile.mkdtemp(prefix="hsweep-"))  # short: the sockets live here too
    node = Node0(rc, folder)
    try:
        yield node
    finally:
        for name in (GONE, KEPT):
            _delete(rc, name)
        # whatever the test left, a driver where the kubelet looks lets it finish unpreparing
        with node.driver("cleanup"):
            try:
                wait_for(
                    "the kubelet's DRA state without this test's claims",
                    lambda: "sweep-" not in node.kubelet_state.read_text(),
                    KUBELET_RETRY_S,
                    node.logs,
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)


def test_a_claim_deleted_while_the_driver_was_down_is_unprepared_by_its_first_sweep(
    rc: RealCluster, node0: Node0
) -> None:
    node = node0.node.name
    with node0.driver("first"):
        docs = [d for n in (GONE, KEPT) for d in claim_and_pod(n, node, "10", "1024Mi")]
        apply(rc, {"apiVersion": "v1", "kind": "List", "items": docs})
        for name in (GONE, KEPT):
            wait_for(f"{name}'s share line", partial(share_line, rc, name), 240, node0.logs)
        uids = {n: rc.kube.json("get", "resourceclaim", n)["metadata"]["uid"] for n in (GONE, KEPT)}
        assert node0.checkpointed() == sorted(uids.values())
        assert all(node0.spec(uid).is_file() for uid in uids.values())
    gone, kept = uids[GONE], uids[KEPT]

    # the driver is down: the pod and its claim are deleted; the kubelet cannot unprepare it
    _delete(rc, GONE)
    wait_for(f"claim {GONE} gone from the apiserver", lambda: _gone(rc, GONE), 120, node0.logs)
    assert node0.checkpointed() == sorted([gone, kept]) and node0.spec(gone).is_file()
    assert node0.kubelet_holds(gone)

    # back, where the kubelet does not look, sweeping hourly: only its start-up sweep can act
    hidden = node0.folder / "hidden"
    started = time.monotonic()
    with node0.driver(
        "returned",
        "--registry-dir", str(hidden / "registry"),
        "--plugin-dir", str(hidden / "plugin"),
        "--publish-slices", "false",
        "--claim-sweep-interval-s", "3600",
    ) as log:  # fmt: skip
        wait_for(
            "the swept claim's checkpoint entry and CDI spec removed",
            lambda: node0.checkpointed() == [kept] and not node0.spec(gone).exists(),
            FIRST_SWEEP_S,
            node0.logs,
        )
        took = time.monotonic() - started
        text = log.read_text(errors="replace")
        assert f"claim sweep: default/{GONE} (uid {gone}) is gone from the apiserver" in text
        assert "1 stale unprepared" in text
    assert node0.spec(kept).is_file(), "the running pod's claim was swept"
    assert node0.kubelet_holds(gone), "the kubelet unprepared it, not the sweep"
    print(json.dumps({"first_sweep_done_s": round(took, 1), "swept": gone, "kept": kept}))

    # served where the kubelet looks: its late Unprepare of the swept claim succeeds, and the
    # running pod's claim is unprepared as usual when that pod goes
    with node0.driver("registered"):
        wait_for(
            "the kubelet's late Unprepare of the swept claim",
            lambda: not node0.kubelet_holds(gone),
            KUBELET_RETRY_S,
            node0.logs,
        )
        _delete(rc, KEPT)
        wait_for(
            f"{KEPT} unprepared by the kubelet",
            lambda: node0.checkpointed() == [] and not node0.spec(kept).exists(),
            KUBELET_RETRY_S,
            node0.logs,
        )
