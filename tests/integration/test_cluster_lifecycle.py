"""`horus dev cluster` as a user meets it: up, up again, status, down, down again, bad builds;
real kubelet nodes: added, shown, acting as their own node identity, and gone without a trace.

These start their own throw-away cluster (not the session one) because they stop it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from horus.common import constants as c
from horus.devcluster import apiaddress
from horus.devcluster.apiaddress import chain_for, interface_for
from horus.devcluster.binaries import repo_root
from horus.devcluster.cluster import DevClusterState
from horus.devcluster.processes import port_open
from horus.devcluster.realnode_state import RealNodesState
from realnode_host import real_node_host

BUILD = repo_root() / "tools" / "controlplane" / "build.sh"


def horus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "horus", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_up_twice_status_down_twice(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    up = horus("dev", "cluster", "--dir", str(folder), "up")
    assert up.returncode == 0, up.stderr
    assert f"export KUBECONFIG={folder / 'kubeconfig'}" in up.stdout
    state = DevClusterState.load(folder)
    assert state is not None
    assert {p.name for p in state.processes} == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
    try:
        again = horus("dev", "cluster", "--dir", str(folder), "up")
        assert again.returncode == 2
        assert "already up" in again.stderr and "down" in again.stderr
        # Still exactly one copy of each component.
        assert DevClusterState.load(folder) == state

        status = horus("dev", "cluster", "--dir", str(folder), "status")
        assert status.returncode == 0 and "ready=True" in status.stdout
        assert status.stdout.count("running") == 5
    finally:
        down = horus("dev", "cluster", "--dir", str(folder), "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not any(p.running() for p in state.processes)
    assert not any(port_open(port) for port in state.ports.values())
    assert not folder.exists()

    again = horus("dev", "cluster", "--dir", str(folder), "down")
    assert again.returncode == 0 and "nothing to stop" in again.stdout
    status = horus("dev", "cluster", "--dir", str(folder), "status")
    assert status.returncode == 1 and "no local cluster" in status.stdout


#: A neighbour of this host: a network namespace on a veth link, routing the apiservers'
#: addresses (10.255.0.0/16) to this host, as a machine on the same network could.
NEIGHBOUR_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print(f"refused: {exc}")
"""


def test_apiserver_address_serves_this_host_and_no_neighbour(tmp_path: Path) -> None:
    """As root, ``up`` gives the apiserver its own address (not loopback: it is the
    ``kubernetes`` Service's endpoint); the host's clients use it, a neighbour routed to it
    gets nothing (the filter; shown to matter by lifting it), and ``down`` removes it all."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("the apiserver's own address needs root and iproute2")
    folder = tmp_path / "cluster"
    up = horus("dev", "cluster", "--dir", str(folder), "up")
    assert up.returncode == 0, up.stderr
    state = DevClusterState.load(folder)
    assert state is not None
    port = state.ports["kube-apiserver"]
    address = apiaddress.address_for(port)
    ns, host_end, ns_end = f"hnb{os.getpid()}", f"hnbh{os.getpid()}", f"hnbn{os.getpid()}"
    jump = ["INPUT", "-d", f"{address}/32", "-j", chain_for(port)]

    def neighbour() -> str:
        proc = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-c",
                NEIGHBOUR_CONNECT,
                address,
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.stdout.strip() + proc.stderr.strip()

    try:
        assert state.apiserver_address == address and state.server == f"https://{address}:{port}"
        kubectl = [str(Path(state.bin_dir) / "kubectl"), "--kubeconfig", state.kubeconfig]
        slice_ = subprocess.run(
            [
                *kubectl,
                "get",
                "endpointslices",
                "-n",
                "default",
                "-l",
                "kubernetes.io/service-name=kubernetes",
                "-o",
                "jsonpath={.items[0].endpoints[0].addresses[0]}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert slice_ == address  # the apiserver publishes itself: kube-proxy can carry it
        for cmd in (
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end],
            ["ip", "link", "set", ns_end, "netns", ns],
            ["ip", "addr", "add", "192.168.251.1/30", "dev", host_end],
            ["ip", "link", "set", host_end, "up"],
            ["ip", "-n", ns, "addr", "add", "192.168.251.2/30", "dev", ns_end],
            ["ip", "-n", ns, "link", "set", ns_end, "up"],
            ["ip", "-n", ns, "route", "add", "10.255.0.0/16", "via", "192.168.251.1"],
        ):
            subprocess.run(cmd, check=True, capture_output=True)
        assert neighbour().startswith("refused"), "a neighbour reached the apiserver"
        # without the filter the neighbour would reach it (the kernel answers for any local
        # address on any interface): the filter, not the address, keeps it in
        subprocess.run(["iptables", "-w", "-D", *jump], check=True)
        try:
            assert neighbour() == "connected"
        finally:
            subprocess.run(["iptables", "-w", "-I", *jump], check=True)
        assert neighbour().startswith("refused")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)
        down = horus("dev", "cluster", "--dir", str(folder), "down")
    assert down.returncode == 0, down.stderr
    assert not Path(f"/sys/class/net/{apiaddress.interface_for(port)}").exists()
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert chain_for(port) not in rules and address not in rules


def test_add_nodes_without_cluster_says_so(tmp_path: Path) -> None:
    proc = horus("dev", "cluster", "--dir", str(tmp_path / "none"), "add-nodes", "--count", "1")
    assert proc.returncode == 2 and "run 'horus dev cluster up' first" in proc.stderr


def test_bad_node_shape_is_refused(tmp_path: Path) -> None:
    proc = horus("dev", "cluster", "--dir", str(tmp_path), "add-nodes", "--count", "0")
    assert proc.returncode == 2 and "--count: must be a whole number from 1 to 10000" in proc.stderr


def test_missing_go_toolchain_names_the_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HORUS_BIN_DIR"}
    env["HORUS_CACHE_DIR"] = str(tmp_path / "empty-cache")
    # A PATH with the script's ordinary tools and no Go.
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("awk", "sed", "mkdir", "dirname", "mktemp", "rm", "mv", "cat"):
        found = shutil.which(name)
        assert found, name
        (tools / name).symlink_to(found)
    env["PATH"] = str(tools)
    bash = shutil.which("bash")
    assert bash
    proc = subprocess.run([bash, str(BUILD)], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert "step 'find Go toolchain' failed" in proc.stderr
    assert "Install Go" in proc.stderr


def test_failed_build_names_the_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HORUS_BIN_DIR"}
    env.update(
        HORUS_CACHE_DIR=str(tmp_path / "cache"),
        GOPROXY="off",  # nothing can be downloaded, and the module cache below is empty
        GOMODCACHE=str(tmp_path / "modcache"),
        GOCACHE=str(tmp_path / "gocache"),
    )
    proc = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 1
    assert "step 'go build kube-apiserver' failed" in proc.stderr
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)


# --- real nodes ------------------------------------------------------------------------------


#: Host settings kube-proxy could change (it is configured not to): they must end as before.
PROXY_SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/bridge/bridge-nf-call-iptables",
)

#: A client pod on a real node: the Service's name resolves through the kubelet's cluster DNS
#: (CoreDNS) to its ClusterIP, and kube-proxy's rules carry the request to the server pod.
#: Retries each step for up to 90 s, as any client of a just-made Service must: the
#: Service's endpoints, kube-proxy's rules and CoreDNS's copy each follow a moment later.
#: The apiserver is reached the same way, as in-cluster clients do: https://kubernetes.default.svc
#: (kube-proxy, to the address the apiserver publishes), verified with the ServiceAccount's CA.
CLIENT = """
import json, socket, ssl, sys, time, urllib.request
def retry(what, fn):
    deadline = time.monotonic() + 90
    while True:
        try:
            return fn()
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.exit(f"{what}: {exc}")
            print(f"{what}: {exc}; again", file=sys.stderr, flush=True)
            time.sleep(1)
ip = retry("web.default.svc.cluster.local", lambda: socket.gethostbyname("web.default.svc.cluster.local"))
short = retry("web", lambda: socket.gethostbyname("web"))
api = retry("kubernetes.default", lambda: socket.gethostbyname("kubernetes.default"))
get = lambda: urllib.request.urlopen("http://web:8080/hello.txt", timeout=10).read().decode()
body = retry("GET http://web:8080/hello.txt", get)
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
tls = ssl.create_default_context(cafile=sa + "ca.crt")
token = open(sa + "token").read().strip()
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
req = urllib.request.Request(
    "https://kubernetes.default.svc/apis/authentication.k8s.io/v1/selfsubjectreviews",
    data=json.dumps(review).encode(),
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
)
who = lambda: json.load(urllib.request.urlopen(req, timeout=10, context=tls))
me = retry("POST https://kubernetes.default.svc", who)["status"]["userInfo"]["username"]
print(json.dumps({"ip": ip, "short": short, "api": api, "body": body, "me": me}))
"""


def _real_node_skip_reason() -> str:
    if os.geteuid() != 0:
        return "real kubelet nodes need root"
    if not all(shutil.which(t) for t in ("containerd", "runc", "ctr", "iptables")):
        return "real nodes need containerd, runc and iptables: run tools/dev/setup.sh"
    return ""


def _host_state(marker: str) -> dict[str, object]:
    """What real nodes may touch on the host, as comparable values."""
    from horus.devcluster import hostenv

    def lines(cmd: list[str]) -> list[str]:
        """Rules and chains (without their packet counters), table by table."""
        proc = subprocess.run(cmd, capture_output=True, text=True)
        out = []
        for line in proc.stdout.splitlines():
            if line.startswith("#"):
                continue
            out.append(line.rsplit(" [", 1)[0] if line.startswith(":") else line)
        return out

    mounts = []
    for info in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            mounts += [
                f"{info.parent.name}: {m}" for m in info.read_text().splitlines() if marker in m
            ]
        except OSError:
            continue
    procs = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                procs.append(cmdline.parent.name)
        except OSError:
            continue
    return {
        "iptables": lines(["iptables-save"]),
        "ip6tables": lines(["ip6tables-save"]),
        "links": sorted(p.name for p in Path("/sys/class/net").iterdir()),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/horus-dev-*")),
        "paths": {
            m: sorted(os.listdir(m)) if Path(m).is_dir() else None for m in hostenv.PRIVATE_MOUNTS
        },
        "registry": hostenv.REGISTRY.exists(),
        "sysctls": {
            s: (Path("/proc/sys") / s).read_text().strip()
            for s in (*hostenv.KUBELET_SYSCTLS, *PROXY_SYSCTLS)
            if (Path("/proc/sys") / s).exists()
        },
        "mounts": mounts,
        "processes": procs,
    }


def test_real_node_up_status_identity_down_leaves_nothing(tmp_path: Path) -> None:
    reason = _real_node_skip_reason()
    if reason:
        pytest.skip(reason)
    with real_node_host():  # one cluster with real nodes per host at a time
        _real_node_up_status_identity_down(tmp_path)


def _real_node_up_status_identity_down(tmp_path: Path) -> None:
    from horus.devcluster import hostenv

    folder = tmp_path / "cluster"
    shared_host = hostenv.REGISTRY.exists()  # another cluster's real nodes hold host state
    before = _host_state(str(folder))
    assert horus("dev", "cluster", "--dir", str(folder), "up").returncode == 0
    state = DevClusterState.load(folder)
    assert state is not None
    env = {**os.environ, "KUBECONFIG": state.kubeconfig}
    kubectl = [str(Path(state.bin_dir) / "kubectl")]
    try:
        add = horus("dev", "cluster", "--dir", str(folder), "add-nodes", "--real", "--count", "1")
        assert add.returncode == 0, add.stderr
        assert "real-node-0000" in add.stdout
        mine = RealNodesState.load(folder)
        assert mine is not None and [n.name for n in mine.nodes] == ["real-node-0000"]
        status = horus("dev", "cluster", "--dir", str(folder), "status")
        assert status.returncode == 0, status.stdout
        assert "real node real-node-0000" in status.stdout
        assert (
            status.stdout.count("running") == 5 + 4
        )  # control plane + containerd, kubelet, kube-proxy, plugin
        node = json.loads(
            subprocess.run(
                [*kubectl, "get", "node", "real-node-0000", "-o", "json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        assert node["status"]["allocatable"][c.RESOURCE_GPU_CORE] == "200"
        assert node["metadata"]["labels"][c.LABEL_DEV_NODE] == c.DEV_NODE_REAL
        # the kubelet's own identity, judged by the Node authorizer and NodeRestriction
        node_env = {
            **env,
            "KUBECONFIG": str(folder / "nodes" / "real-node-0000" / "kubelet.kubeconfig"),
        }
        who = subprocess.run(
            [*kubectl, "auth", "whoami", "-o", "json"],
            env=node_env,
            capture_output=True,
            text=True,
            check=True,
        )
        user = json.loads(who.stdout)["status"]["userInfo"]
        assert user["username"] == "system:node:real-node-0000"
        assert "system:nodes" in user["groups"]
        assert (
            horus("dev", "cluster", "--dir", str(folder), "add-nodes", "--count", "1").returncode
            == 0
        )
        other = subprocess.run(
            [*kubectl, "label", "node", "gpu-node-0000", "stolen=yes"],
            env=node_env,
            capture_output=True,
            text=True,
        )
        assert other.returncode != 0 and "Forbidden" in other.stderr
        own = subprocess.run(
            [*kubectl, "label", "node", "real-node-0000", "node-restriction.kubernetes.io/x=y"],
            env=node_env,
            capture_output=True,
            text=True,
        )
        assert own.returncode != 0 and "Forbidden" in own.stderr
        # a real container runs (the sandbox image doubles as a container image)
        from horus.devcluster.images import pause_image

        pause = pause_image(Path(state.bin_dir)).ref  # imported into every node
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "nodeName": "real-node-0000",
                "containers": [{"name": "p", "image": pause, "imagePullPolicy": "Never"}],
            },
        }
        subprocess.run(
            [*kubectl, "apply", "-f", "-"],
            env=env,
            input=json.dumps(pod),
            capture_output=True,
            text=True,
            check=True,
        )
        wait = subprocess.run(
            [*kubectl, "wait", "pod/p", "--for=condition=Ready", "--timeout=60s"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert wait.returncode == 0, wait.stderr
        _service_by_name_from_a_pod(folder, state, kubectl, env)
    finally:
        down = horus("dev", "cluster", "--dir", str(folder), "down")  # with the pod running
    assert down.returncode == 0, down.stderr
    after = _host_state(str(folder))
    assert after["mounts"] == [] and after["processes"] == []
    # what this cluster made is gone, whatever other local clusters do meanwhile ...
    api_port = state.ports["kube-apiserver"]
    assert state.apiserver_address == apiaddress.address_for(api_port)
    assert [x for x in after["iptables"] if chain_for(api_port) in x or str(folder) in x] == []
    assert interface_for(api_port) not in after["links"]
    roots = [n.cgroup_root for n in mine.nodes]
    assert not {n.bridge for n in mine.nodes} & set(after["links"])
    assert not [g for g in after["cgroups"] if any(r in g for r in roots)]
    # kube-proxy's chains went with the last node (kube-proxy --cleanup), in both families
    rules = [*cast(list[str], after["iptables"]), *cast(list[str], after["ip6tables"])]
    assert [x for x in rules if "KUBE-SERVICES" in x or "KUBE-SVC-" in x or "KUBE-SEP-" in x] == []
    # ... and with no other cluster's real nodes about, the host is exactly as it was
    if not (shared_host or hostenv.REGISTRY.exists()):
        assert after == before


def _service_by_name_from_a_pod(
    folder: Path, state: DevClusterState, kubectl: list[str], env: dict[str, str]
) -> None:
    """A Service answers by name from a pod on the real node (CoreDNS + kube-proxy), and the
    kubelet, which has a cluster DNS now, never logs MissingClusterDNS."""
    from horus.devcluster.images import IMAGES, reference

    load = horus("dev", "cluster", "--dir", str(folder), "load-images", "workload")
    assert load.returncode == 0, load.stderr
    image = reference(IMAGES["workload"].repository)
    node = {"nodeName": "real-node-0000"}
    server = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            **node,
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c"],
                    "args": [
                        "mkdir -p /tmp/www && echo served-by-web > /tmp/www/hello.txt && "
                        "exec python -m http.server 8080 --directory /tmp/www"
                    ],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8080}]},
    }
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client", "namespace": "default"},
        "spec": {
            **node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "client",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", CLIENT],
                }
            ],
        },
    }

    def kc(*args: str, data: object = None, check: bool = True) -> str:
        proc = subprocess.run(
            [*kubectl, *args],
            env=env,
            input=json.dumps(data) if data is not None else None,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert not check or proc.returncode == 0, proc.stderr
        return proc.stdout

    for obj in (server, service):
        kc("apply", "-f", "-", data=obj)
    kc("wait", "pod/web", "--for=condition=Ready", "--timeout=120s")
    kc("apply", "-f", "-", data=client)
    deadline = time.monotonic() + 180
    phase = ""
    while phase not in ("Succeeded", "Failed") and time.monotonic() < deadline:
        time.sleep(1)
        phase = kc("get", "pod", "client", "-o", "jsonpath={.status.phase}")
    assert phase == "Succeeded", (
        f"client pod {phase or 'not started'}:\n"
        + kc("logs", "client", check=False)
        + kc("describe", "pod", "client", check=False)
        + kc("get", "pods", "-A", "-o", "wide", check=False)
    )
    got = json.loads(kc("logs", "client").strip().splitlines()[-1])
    cluster_ip = kc("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
    assert got == {
        "ip": cluster_ip,
        "short": cluster_ip,
        "api": "10.96.0.1",
        "body": "served-by-web\n",
        "me": "system:serviceaccount:default:default",
    }
    # ... through kube-proxy to the apiserver's own address, which it publishes itself
    endpoints = kc(
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=kubernetes",
        "-o",
        "jsonpath={.items[0].endpoints[0].addresses[0]}:{.items[0].ports[0].port}",
    )
    assert f"https://{endpoints}" == state.server
    resolv = json.loads(kc("get", "pod", "client", "-o", "json"))["spec"]
    assert resolv.get("dnsPolicy", "ClusterFirst") == "ClusterFirst"
    kubelet_log = (folder / "nodes" / "real-node-0000" / "logs" / "kubelet.log").read_text()
    assert kubelet_log.strip() and "MissingClusterDNS" not in kubelet_log
    # the kubelet reports it as a pod Event (reason MissingClusterDNS) when it has no DNS
    events = kc("get", "events", "-A", "--field-selector", "reason=MissingClusterDNS", "-o", "name")
    assert events.strip() == ""
