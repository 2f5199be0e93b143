"""Helpers and fixtures for the operator on the real control plane: GPU nodes, DLJob factories, and the
operator itself run as a subprocess (``python -m horus.operator``) so tests can ``kill -9`` it.

Every test uses its own namespace and its own Lease name, so tests never see each other's
jobs or leaders; :func:`cleanup_namespace` removes a test's jobs and pods in two API calls.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.api.assignment import decode_assignment
from horus.api.inventory import decode_inventory
from horus.common import constants as c
from horus.devcluster.nodes import NodeSpec, add_nodes
from horus.devcluster.processes import spawn

ROOT = Path(__file__).resolve().parents[3]
NODE_PREFIX = "opnode"
BIG_PREFIX = "opbig"
BIG_GPU_MIB = 1_048_576


def _profile(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "profiles" / f"{name}.yaml").read_text())
    return {k: doc[k] for k in ("model", "batchSize", "features", "family") if k in doc}


PROFILES = {n: _profile(n) for n in ("resnet50-bs64", "mobilenetv2-cifar-bs128", "lstm-lm-bs20")}


def dljob_body(
    name: str,
    replicas: int = 1,
    core: int | None = None,
    memory: int | None = None,
    profile: str = "resnet50-bs64",
    gpus_per_replica: int = 1,
) -> dict[str, Any]:
    gpu: dict[str, Any] = (
        {"mode": "explicit", "corePercent": core, "memoryMiB": memory}
        if core is not None
        else {"mode": "auto"}
    )
    return {
        "apiVersion": c.API_GROUP_VERSION,
        "kind": c.DLJOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "gpusPerReplica": gpus_per_replica,
            "profile": PROFILES[profile],
            "gpu": gpu,
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }


@dataclass
class Kube:
    """Thin helpers over the Python client for one test namespace."""

    api: Any
    namespace: str

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        resp = call(*args, _preload_content=False, **kwargs)
        items = json.loads(resp.data).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def create_jobs(self, bodies: list[dict[str, Any]], workers: int = 8) -> None:
        def one(body: dict[str, Any]) -> None:
            self.custom.create_namespaced_custom_object(
                c.API_GROUP, c.API_VERSION, self.namespace, c.DLJOB_PLURAL, body
            )

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, bodies))

    def jobs(self) -> list[dict[str, Any]]:
        return self._raw(
            self.custom.list_namespaced_custom_object,
            c.API_GROUP,
            c.API_VERSION,
            self.namespace,
            c.DLJOB_PLURAL,
        )

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace is None:
            return self._raw(self.core.list_pod_for_all_namespaces)
        return self._raw(self.core.list_namespaced_pod, namespace)

    def nodes(self) -> list[dict[str, Any]]:
        return self._raw(self.core.list_node)

    def events(self) -> list[dict[str, Any]]:
        return self._raw(self.core.list_namespaced_event, self.namespace)

    def all_bound(self, names: list[str] | None = None) -> bool:
        """Every (named) DLJob is placed and each of its replica pods is bound to a node.

        Bound, not Running: kwok turns bound pods Running at its own (rate-limited) pace,
        which says nothing about the operator."""
        jobs = self.jobs_by_name()
        wanted = names if names is not None else list(jobs)
        pods = {p["metadata"]["name"]: p for p in self.pods(self.namespace)}
        for n in wanted:
            j = jobs.get(n)
            if j is None or not (j.get("status") or {}).get("placements"):
                return False
            for i in range(j["spec"].get("replicas", 1)):
                pod = pods.get(f"{n}-{i}")
                if pod is None or not (pod.get("spec") or {}).get("nodeName"):
                    return False
        return True

    def jobs_by_name(self) -> dict[str, dict[str, Any]]:
        return {j["metadata"]["name"]: j for j in self.jobs()}

    def phases(self) -> dict[str, str]:
        return {
            j["metadata"]["name"]: (j.get("status") or {}).get("phase", "") for j in self.jobs()
        }

    def wait(
        self, what: str, pred: Callable[[], bool], timeout: float, every: float = 0.5
    ) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if pred():
                return time.monotonic() - start
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def cleanup_namespace(kube: Kube) -> None:
    """Delete the namespace's DLJobs and pods (collection deletes, no grace) and wait."""
    kube.custom.delete_collection_namespaced_custom_object(
        c.API_GROUP, c.API_VERSION, kube.namespace, c.DLJOB_PLURAL
    )
    kube.core.delete_collection_namespaced_pod(kube.namespace, grace_period_seconds=0)
    kube.wait("pods to go", lambda: not kube.pods(kube.namespace), 60)


@pytest.fixture(scope="session")
def dljob_crd(cluster: Any) -> None:
    """The DLJob CRD installed and Established (idempotent: other tests may apply it too)."""
    cluster.apply_crds(ROOT / "manifests" / "crds" / "horus.io_dljobs.yaml", c.DLJOB_CRD_NAME)


@pytest.fixture(scope="session")
def gpu_nodes(cluster: Any, dljob_crd: None) -> list[str]:
    """50 kwok nodes × 8 H100 (80 GiB), added once per session."""
    return add_nodes(cluster.kubeconfig, NodeSpec(count=50, gpus_per_node=8, prefix=NODE_PREFIX))


@pytest.fixture
def kube(cluster: Any, dljob_crd: None, request: pytest.FixtureRequest) -> Iterator[Kube]:
    api = cluster.api_client()
    ns = f"op-{request.node.name.replace('_', '-')[:40].lower()}-{uuid.uuid4().hex[:4]}"
    ns = "".join(ch for ch in ns if ch.isalnum() or ch == "-").strip("-")
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    k = Kube(api, ns)
    # The ServiceAccount controller makes the namespace's "default" account a moment later; a
    # pod created before it is refused ("serviceaccount default not found"), which made tests
    # that create pods directly flaky under load.
    k.wait(
        f"ServiceAccount {ns}/default",
        lambda: bool(core.list_namespaced_service_account(ns).items),
        60,
        every=0.1,
    )
    try:
        yield k
    finally:
        try:
            cleanup_namespace(k)
        except Exception as exc:
            print(f"cleanup of {ns} failed: {exc}")


@dataclass
class OperatorProc:
    """One ``python -m horus.operator`` subprocess."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    identity: str
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    history: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        out = self.log.open("ab")
        out.write(f"--- start {self.starts} ---\n".encode())
        out.flush()
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
        self.history.append(self.proc.pid)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.kill9()

    def wait_leader(self, timeout: float = 60.0) -> None:
        """Wait until this process (start number ``starts``) has logged taking the lease."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            if text.count(f"{self.identity} is now leader") >= self.starts:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"operator exited with {self.proc.returncode}:\n{text[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(f"operator {self.identity} did not become leader in {timeout:.0f}s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def operator_factory(cluster: Any, tmp_path: Path) -> Iterator[Callable[..., OperatorProc]]:
    lease = f"horus-operator-{uuid.uuid4().hex[:6]}"
    made: list[OperatorProc] = []

    def make(
        identity: str = "",
        lease_duration: float = 10.0,
        start: bool = True,
        extra_args: Sequence[str] = (),
    ) -> OperatorProc:
        ident = identity or f"op-{len(made)}"
        log = tmp_path / f"operator-{ident}.log"
        argv = [
            sys.executable,
            "-m",
            "horus.operator",
            "--kubeconfig",
            cluster.kubeconfig,
            "--lease-name",
            lease,
            "--lease-duration",
            str(lease_duration),
            "--resync-period",
            "2",
            "--metrics-port",
            "0",
            "--identity",
            ident,
            *extra_args,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        op = OperatorProc(argv, env, log, ident)
        made.append(op)
        if start:
            op.start()
        return op

    make.lease = lease  # type: ignore[attr-defined]
    yield make
    for op in made:
        op.stop()
    for op in made:  # shown by pytest only when the test failed
        print(f"=== operator {op.identity} log (tail) ===")
        print(op.log.read_text(errors="replace")[-4000:] if op.log.exists() else "(none)")


def gpu_capacity(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """GPU UUID → memory MiB, from every node's inventory."""
    out: dict[str, int] = {}
    for n in nodes:
        text = ((n.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GPU_INVENTORY)
        if text:
            for g in decode_inventory(text):
                out[g.uuid] = g.memory_mib
    return out


def check_invariants(kube: Kube, expect_running: bool = True) -> dict[str, Any]:
    """No GPU over-committed; every placed job has exactly its replicas, placed once, and its
    status matches its pods. Returns a summary for further asserts."""
    jobs = kube.jobs()
    all_pods = [
        p
        for p in kube.pods()
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    cap = gpu_capacity(kube.nodes())
    core: dict[str, int] = {}
    mem: dict[str, int] = {}
    for p in all_pods:
        text = ((p.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_GPU_ASSIGNMENT)
        if not text:
            continue
        a = decode_assignment(text)
        for g in a.all_gpus:
            core[g.gpu_uuid] = core.get(g.gpu_uuid, 0) + g.core_percent
            mem[g.gpu_uuid] = mem.get(g.gpu_uuid, 0) + g.memory_mib
    over = [u for u in core if core[u] > 100 or mem[u] > cap.get(u, 0)]
    assert not over, f"over-committed GPUs: {[(u, core[u], mem[u]) for u in over[:5]]}"
    pods = [p for p in all_pods if p["metadata"]["namespace"] == kube.namespace]
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        for ref in p["metadata"].get("ownerReferences") or []:
            by_owner.setdefault(ref["uid"], []).append(p)
    uids = {j["metadata"]["uid"] for j in jobs}
    orphans = [
        p["metadata"]["name"]
        for p in pods
        if not set(r["uid"] for r in p["metadata"].get("ownerReferences") or []) & uids
    ]
    assert not orphans, f"pods without a DLJob: {orphans[:5]}"
    placed = 0
    for j in jobs:
        status = j.get("status") or {}
        name = j["metadata"]["name"]
        replicas = j["spec"].get("replicas", 1)
        placements = status.get("placements") or []
        mine = by_owner.get(j["metadata"]["uid"], [])
        if not placements:
            assert not mine, f"{name}: pods exist but no placements recorded"
            assert status.get("message") and status.get("reason"), f"{name}: pending, no reason"
            continue
        placed += 1
        assert sorted({p["replica"] for p in placements}) == list(range(replicas)), name
        names = sorted(p["metadata"]["name"] for p in mine)
        assert names == sorted(f"{name}-{i}" for i in range(replicas)), (name, names)
        rec = {(p["replica"], p["gpuUUID"]): p for p in placements}
        for p in mine:
            a = decode_assignment(p["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT])
            assert p["spec"].get("nodeName") == a.node, f"{p['metadata']['name']} not bound"
            for g in a.all_gpus:
                r = rec[(a.replica, g.gpu_uuid)]
                assert r["node"] == a.node and r["corePercent"] == g.core_percent
        if expect_running:
            phases = {(p.get("status") or {}).get("phase") for p in mine}
            if status.get("phase") == c.DLJOB_PHASE_RUNNING:
                assert phases == {"Running"}, (name, phases)
    return {"jobs": len(jobs), "placed": placed, "pods": len(pods)}


_REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")


def request_counts(
    cluster: Any, verb: str, resources: Sequence[str], scope: str | None = None
) -> dict[str, float]:
    """Requests the apiserver has served (its own ``apiserver_request_total``) with ``verb``,
    per ``resource`` or ``resource/subresource``, dry runs left out; only ``scope``
    (``cluster``, ``namespace``) when given."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    out = dict.fromkeys(resources, 0.0)
    for line in text.splitlines():
        m = _REQUESTS.match(line)
        if not m or f'verb="{verb}"' not in m.group(1):
            continue
        if scope is not None and f'scope="{scope}"' not in m.group(1):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("dry_run"):
            continue
        key = labels.get("resource", "")
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        if key in out:
            out[key] += float(m.group(2))
    return out


def restart_apiserver(cluster: Any) -> None:
    """Kill the kube-apiserver (SIGKILL: a crash, every watch cut at once) and start it again
    with the same command line."""
    state = cluster.state
    i, proc = next((i, p) for i, p in enumerate(state.processes) if p.name == "kube-apiserver")
    argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    os.kill(proc.pid, signal.SIGKILL)
    wait_for("the apiserver to stop", lambda: not proc.running(), 60)

    def ready() -> bool:
        got = cluster.kubectl("get", "--raw", "/readyz", check=False)
        return got.returncode == 0 and got.stdout.strip() == "ok"

    def started() -> bool:
        # The killed process's port can stay taken for a moment after it is gone (seen in
        # CI: "bind: address already in use"): a start that exits is tried again.
        if not state.processes[i].running():
            state.processes[i] = spawn("kube-apiserver", argv, Path(state.directory))
            state.save()
            return False
        return ready()

    state.processes[i] = spawn("kube-apiserver", argv, Path(state.directory))
    state.save()
    try:
        wait_for("the apiserver to be ready again", started, 240)
    except AssertionError:
        raise AssertionError(
            "the restarted apiserver is not ready:\n" + state.processes[i].log_tail()
        ) from None


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``cond`` every 0.2 s until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
