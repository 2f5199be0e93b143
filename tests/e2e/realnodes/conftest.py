"""One local cluster with two real kubelet nodes and Horus' chart on them, shared by every test
of this package (``horus.devcluster.chart.start``: control plane, nodes, images, helm).

It is its own cluster, not the session's kwok one, so its real nodes never receive the other
tests' pods, and it is stopped when this package's last test ends (package scope): the
integration tests that run later check the host is left as it was. Each node has one
simulated GPU of 81,559 MiB (a real H100's memory, not a multiple of the gpu-memory unit), so a
two-replica job whose replicas cannot share a GPU lands on both nodes.

The tests run in file order and share state on purpose, to pay for the cluster once: the chart
is checked first (with the optional Horus scheduler Deployment on), then its day-2 operations
(scheduler, key rotation, PodDisruptionBudget), a ``helm upgrade`` to a changed CRD and the
no-leader alert in the real Prometheus, jobs, node events (kubelet restart, drain,
node removal) later, uninstall last.
Real nodes need root, the containerd 2.x that tools/controlplane/build.sh builds (on PATH, as
tools/dev/test.sh puts it), and Debian's runc and CNI plugins (tools/dev/setup.sh); the
package is skipped with that reason elsewhere.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from chart_support import write_fast_alert_rules
from realnode_support import GPU_MEMORY_MIB

from horus.api.signing import KeyRing, SigningKey, parse_public_keys
from horus.common import constants as c
from horus.devcluster.chart import NAMESPACE, RealCluster, start
from realnode_host import real_node_host

GPUS_PER_NODE = 1
NODES = 2


def _skip_reason() -> str:
    if os.geteuid() != 0:
        return "real kubelet nodes need root"
    missing = [
        t for t in ("containerd", "runc", "ctr", "iptables", "mmdebstrap") if not shutil.which(t)
    ]
    if missing or not Path("/usr/lib/cni/bridge").is_file():
        return f"real nodes need {', '.join(missing) or 'CNI plugins'}: run tools/dev/setup.sh"
    return ""


@pytest.fixture(scope="package")
def rc() -> Iterator[RealCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    host = ExitStack()  # released by down(): one real-node cluster per host at a time
    host.enter_context(real_node_host())
    folder = Path(tempfile.mkdtemp(prefix="horus-real-")) / "c"
    timings: list[str] = []
    # with the optional Horus scheduler Deployment (test_1b), from the project-built image
    # on the device-plugin path: the tests up to test_2d are that path's; test_2e/test_2f
    # upgrade the release to the dra path (the chart's default on 1.37) and back
    sim = [*("--sim-gpu-count", str(GPUS_PER_NODE)), *("--sim-gpu-memory-mib", str(GPU_MEMORY_MIB))]
    values = {
        "scheduler": {"enabled": True},
        "gpuSharing": {"path": "devicePlugin"},
        "node": {"devicePlugin": {"extraArgs": sim}, "draDriver": {"extraArgs": sim}},
    }
    try:
        cluster = start(folder, NODES, GPUS_PER_NODE, values=values, log=timings.append)
    except BaseException:
        host.close()
        raise
    print("real-node cluster: " + "; ".join(timings))

    def down() -> None:
        t = time.monotonic()
        try:
            cluster.local.down()
            print(f"real-node cluster down in {time.monotonic() - t:.0f}s")
            shutil.rmtree(folder.parent, ignore_errors=True)
        finally:
            host.close()

    _DOWN.append(down)
    try:
        yield cluster
    finally:
        if down in _DOWN:
            _DOWN.remove(down)
            down()


#: The package cluster's stop, run as soon as the last test of this folder is done: without an
#: ``__init__.py`` this folder is no package, so a "package" fixture lives to the end of the
#: session, and only one cluster with real nodes may exist on a host (kube-proxy's chains).
_DOWN: list[Callable[[], None]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    here = Path(__file__).parent
    if nextitem is None or Path(nextitem.path).parent != here:
        while _DOWN:
            _DOWN.pop()()


@pytest.fixture(scope="package")
def assignment_key(rc: RealCluster) -> KeyRing:
    """The operator's signing pair (read as the cluster admin) with every published public key."""
    secret = rc.kube.json("get", "secret", c.SIGNING_KEY_SECRET, "-n", NAMESPACE)
    pem = base64.b64decode(secret["data"][c.SIGNING_KEY_SECRET_ENTRY])
    cm = rc.kube.json("get", "configmap", c.VERIFY_KEYS_CONFIGMAP, "-n", NAMESPACE)
    published = parse_public_keys(cm["data"][c.VERIFY_KEYS_CONFIGMAP_ENTRY], "ConfigMap")
    return KeyRing.of(SigningKey.from_pem(pem, "Secret"), published)


@pytest.fixture(scope="package")
def prometheus(rc: RealCluster) -> Iterator[str]:
    """A real Prometheus on this host (the one built with the Kubernetes service discovery,
    :mod:`horus.devcluster.prometheus`) that finds the chart's operator and agent pods itself,
    through the apiserver as the least-privileged discovery identity, and scrapes them by pod
    IP every 2 s, with the shipped alert rules loaded; yields its URL.

    The rules are the shipped file with each ``for:`` shortened to 10 s and evaluated every
    2 s, as in tests/e2e/test_alert_rules_fire.py (the expressions untouched), so test_1c sees
    the no-leader alert fire without waiting the shipped 2 minutes."""
    from horus.devcluster import prometheus as prom
    from horus.devcluster.processes import free_port

    folder = Path(rc.state.directory) / "prometheus"
    kubeconfig = prom.grant_discovery(
        rc.kube, rc.state.server, rc.state.ca_file(), folder / "discovery.kubeconfig"
    )
    write_fast_alert_rules(folder / "rules.yaml", interval="2s")
    config = prom.write_config(folder, prom.scrape_configs(kubeconfig), [folder / "rules.yaml"])
    port = free_port()
    proc = subprocess.Popen(
        prom.command(config, folder, port),
        stdout=(folder / "log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None, (folder / "log").read_text()[-2000:]
                assert time.monotonic() < deadline, "Prometheus not ready in 60 s"
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
