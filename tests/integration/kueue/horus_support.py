"""Horus on kwok nodes for the Kueue tests and benchmarks/kueue_gang_start.py: simulated GPUs
published by the real Horus DRA driver (in-process, with a node-bound token and a kubelet-side
peer registered with it), and Horus' reconcile pass in a thread, every 0.3 s as the operator
process runs it, scoped to one namespace and the given nodes (other tests' objects in the
session cluster are never touched).

``cluster`` is anything with ``kubectl(*args, check=, input=)`` and ``api_client()``: the
test session's ``RunningCluster`` or the benchmark's own."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dra"))
from dra_cluster_support import GPU_MIB, ScopedJobs, node_token, token_api
from kueue_support import wait_for

from dra_peer import FakeKubelet
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, node_manifest
from horus.dra.app import run_driver
from horus.dra.settings import DraSettings
from horus.operator.kueue.api import KubeKueueApi
from horus.operator.reconcile import Reconciler
from horus.predictor import load_default_predictor
from signing_keys import KEY

__all__ = ["GPU_MIB", "HorusOnKwok", "Operator", "ScopedJobs", "ScopedKueue"]


class ScopedKueue(KubeKueueApi):
    """Kueue's API, seeing only one namespace's Workloads."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        super().__init__(api_client)
        self.namespace = namespace

    def list_workloads(self) -> list[dict[str, Any]]:
        return [w for w in super().list_workloads() if w["metadata"]["namespace"] == self.namespace]


class Operator:
    """Reconcile passes every 0.3 s in a thread; what a pass raised is kept in ``errors``."""

    def __init__(self, rec: Reconciler) -> None:
        self.rec = rec
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.rec.run_pass()
            except Exception as exc:
                self.errors.append(repr(exc)[:300])
            self.stop.wait(0.3)


class HorusOnKwok:
    """Two-GPU kwok nodes ``nodes`` with their DRA drivers, and the reconcile pass for
    ``namespace`` (with Kueue's check); :meth:`stop` ends them and deletes the nodes."""

    def __init__(self, cluster: Any, nodes: list[str], namespace: str) -> None:
        self.cluster, self.nodes = cluster, nodes
        self.stops: list[threading.Event] = []
        self.threads: list[threading.Thread] = []
        self.kubelets: list[FakeKubelet] = []
        self.folders: list[Path] = []
        try:
            for node in nodes:
                self._start_node(node)
            client = cluster.api_client()
            self.kueue_api = ScopedKueue(client, namespace)
            self.rec = Reconciler(
                ScopedJobs(client, namespace, set(nodes)),
                load_default_predictor(),
                KEY,
                workers=4,
                correction_period=0,
                placement_path=c.PLACEMENT_PATH_DRA,
                kueue=self.kueue_api,
            )
        except BaseException:
            self._stop_nodes()
            raise
        self.op = Operator(self.rec)
        wait_for(
            lambda: len(self.rec.api.list_resource_slices()) == len(nodes),
            60,
            "every node's ResourceSlice",
        )
        self.op.thread.start()

    def _start_node(self, node: str) -> None:
        manifest = node_manifest(node, NodeSpec(count=1, gpus_per_node=2, gpu_memory_mib=GPU_MIB))
        self.cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
        folder = Path(tempfile.mkdtemp(prefix="horus-kq-dra-"))
        self.folders.append(folder)
        settings = DraSettings(
            node_name=node,
            registry_dir=folder / "reg",
            plugin_dir=folder / "plug",
            cdi_dir=folder / "cdi",
            backend="simulated",
            sim_gpu_count=2,
            sim_gpu_memory_mib=GPU_MIB,
            sim_health_file=folder / "health.json",
            health_interval_s=0.3,
            socket_poll_s=0.1,
            slice_resync_s=5.0,
            progress_root=folder / "progress",
        )
        stop = threading.Event()
        api = token_api(self.cluster, node_token(self.cluster, node))
        thread = threading.Thread(target=run_driver, args=(settings, stop, api), daemon=True)
        thread.start()
        self.stops.append(stop)
        self.threads.append(thread)
        kubelet = FakeKubelet(settings.registry_dir)
        self.kubelets.append(kubelet)
        kubelet.register(timeout=30)

    def _stop_nodes(self) -> None:
        for stop in self.stops:
            stop.set()
        for thread in self.threads:
            thread.join(10)
        for kubelet in self.kubelets:
            kubelet.close()
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)
        for node in self.nodes:
            self.cluster.kubectl("delete", "node", node, check=False)

    def stop(self) -> None:
        self.op.stop.set()
        self.op.thread.join(10)
        self.rec.close()
        self.kueue_api.stop()
        self._stop_nodes()
