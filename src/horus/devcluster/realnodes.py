"""Real nodes for the local cluster: a kubelet of the pinned version, its own containerd, runc
and CNI bridge per node, so Horus pods run as real containers (``add-nodes --real``).

Several kubelets share this one machine, so each node is isolated the way a machine would be:

* **its own containerd** (root, state, socket, runc root, CNI config under the node's folder)
  and kubelet (ports, ``--cgroup-root /horus-dev-N-k``, certificates, logs);
* **its own mount namespace**, shared by its containerd, kubelet and device plugin, in which a
  private folder is bound over every host path they hard-code (``/var/lib/kubelet`` and with
  it the device-plugin socket directory, ``/var/log/pods``, ``/run/netns``, …; see
  :data:`horus.devcluster.hostenv.PRIVATE_MOUNTS`). When the node's processes are gone the
  namespace is gone, and with it every mount its containers needed;
* **its own bridge** ``hdNnK`` with the node's IP ``10.N.K.1`` (its InternalIP: the kubelet
  rejects a loopback node IP, and the apiserver reaches kubelets by InternalIP for logs and
  exec) and pod subnet ``10.N.K.0/24`` (host-local IPAM in the node's folder). The bridge
  forwards (its own ``forwarding`` switch, not the host's) so pods reach Services whose pods
  sit on other nodes' bridges; nothing is masqueraded beyond this host;
* **its own identity**: a client certificate ``system:node:<name>`` in group ``system:nodes``,
  so the apiserver's Node authorizer and NodeRestriction admission judge it as a node.

Services work as on any cluster: every node runs **kube-proxy** (iptables mode, a host process
like the kubelet; :func:`kube_proxy_config` says what it leaves alone) and **CoreDNS** runs as a
Deployment behind ``kube-dns`` (:mod:`horus.devcluster.dns`), the kubelets' ``clusterDNS``.
The nodes share this host's network namespace, so their kube-proxies write the same chains,
and a second cluster's would rewrite them: one cluster at a time may have real nodes, and
``kube-proxy --cleanup`` removes the chains with the last node. The ``kubernetes`` Service is
one of them: the apiserver listens on an address of its own on this host
(:mod:`horus.devcluster.apiaddress`) and publishes it as that Service's endpoint, so pods reach
it at ``10.96.0.1:443`` through kube-proxy like any other Service.

Simulated GPUs come from the Horus device plugin (``--backend simulated``), either started here
as a host process in the node's mount namespace (``device_plugin="host"``) or left to the
chart's DaemonSet (``"none"``). The host process authenticates as a dev-only user (client
certificate, the chart's node role), not as the node ServiceAccount with a pod-bound token: in
a cluster that also has Horus' admission policies (the chart, ``manifests/``) it is no Horus
identity, and its ``horus.io/gpu-allocated`` mark would be refused — there the chart's
DaemonSet is the device plugin (``"none"``, as the real-node demo and tests run). Teardown (:meth:`RealNodes.remove`, ``horus dev cluster down``)
stops the processes, kills what is left in the node's cgroups, removes the cgroups, the bridge
and the folder, runs ``kube-proxy --cleanup`` after the last node, and hands the host's shared state back to
:mod:`horus.devcluster.hostenv`.

One lifecycle, several modules: a node's folder, cgroup root, bridge, containerd, kubelet,
kube-proxy and identity are made in :meth:`RealNodes.add` and undone, in the reverse order, in
:meth:`RealNodes.remove`, both here, so every "make" sits next to its "undo" and the guarantee
that ``down`` leaves nothing behind stays checkable in one place. What they use lives apart:
what a node is and the cluster's record of its nodes in :mod:`horus.devcluster.realnode_state`,
its configuration files in :mod:`horus.devcluster.realnode_config`, host checks, commands,
cgroups and process waits in :mod:`horus.devcluster.realnode_host`, the host device plugin in
:mod:`horus.devcluster.realnode_deviceplugin`, host-wide state in
:mod:`horus.devcluster.hostenv`, certificates in :mod:`horus.devcluster.certs`, process handling
in :mod:`horus.devcluster.processes`, images in :mod:`horus.devcluster.images`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from horus.common import constants as c
from horus.common.errors import ClusterError
from horus.devcluster import apiaddress, certs, dns, hostenv
from horus.devcluster.processes import free_port, spawn
from horus.devcluster.realnode_config import (
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    write_kubeconfig,
)
from horus.devcluster.realnode_deviceplugin import ensure_device_plugin_rbac, spawn_device_plugin
from horus.devcluster.realnode_host import (
    check_host,
    exited,
    kube_proxy_cleanup,
    make_cgroup_root,
    pids_naming,
    prefer_bin_dir,
    remove_cgroup_root,
    run,
    wait_for,
)
from horus.devcluster.realnode_state import STATE_FILE, RealNode, RealNodeSpec, RealNodesState

#: What each real node runs from the binaries folder besides containerd's.
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns")
NODES_DIR = "nodes"
#: The service IP of ``kubernetes`` (first address of the cluster's service range).
APISERVER_SERVICE_IP = certs.SERVICE_IP


class RealNodes:
    """The real nodes of the cluster in ``cluster_dir`` (whose control plane is up)."""

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster_dir = cluster_dir.resolve()

    def state(self) -> RealNodesState | None:
        return RealNodesState.load(self.cluster_dir)

    def _cluster(self) -> Any:
        from horus.devcluster.cluster import DevClusterState

        cstate = DevClusterState.load(self.cluster_dir)
        if cstate is None:
            raise ClusterError(
                f"no local cluster is up in {self.cluster_dir}; run 'horus dev cluster up' first"
            )
        return cstate

    # -- add --

    def add(self, spec: RealNodeSpec, wait: float = 180.0) -> list[str]:
        """Start ``spec.count`` new real nodes and wait until they are Ready (and, with the
        host device plugin, until their GPUs are allocatable)."""
        cstate = self._cluster()
        bin_dir = Path(cstate.bin_dir)
        check_host(bin_dir)
        apiaddress.require_routable(cstate.apiserver_address)
        prefer_bin_dir(bin_dir)
        if not (bin_dir / "kubelet").is_file():
            raise ClusterError(
                f"{bin_dir} has no kubelet: run tools/controlplane/build.sh (it builds the "
                "kubelet from the same Go module as the control plane), then retry"
            )
        lacking = [b for b in NODE_BINARIES if not (bin_dir / b).is_file()]
        if lacking:
            raise ClusterError(
                f"{bin_dir} has no {', '.join(lacking)}: run tools/controlplane/build.sh (it "
                "builds kube-proxy with the kubelet and CoreDNS from its module), then retry"
            )
        from horus.devcluster import images
        from horus.devcluster.binaries import repo_root

        state = self.state()
        if state is None:
            others = [d for d in hostenv.clusters().values() if d != str(self.cluster_dir)]
            if others:
                raise ClusterError(
                    f"another local cluster ({others[0]}) has real nodes on this host: their "
                    "kube-proxies own this host's Service chains (KUBE-SERVICES, one per "
                    "network namespace), so one cluster at a time may have real nodes; "
                    "'horus dev cluster down' it first"
                )
        base_images = images.build(repo_root(), ["pause", "coredns"], bin_dir=bin_dir)
        if state is None:
            state = RealNodesState(str(self.cluster_dir), hostenv.acquire(self.cluster_dir))
            state.save()
        api = _core_api(cstate.kubeconfig)
        taken = {n.metadata.name for n in api.list_node().items} | {n.name for n in state.nodes}
        used_idx = {n.index for n in state.nodes}
        names: list[str] = []
        indices: list[int] = []
        i = k = 0
        while len(names) < spec.count:
            name = f"{spec.prefix}-{i:04d}"
            if name not in taken:
                names.append(name)
            i += 1
        while len(indices) < spec.count:
            if k not in used_idx:
                indices.append(k)
            k += 1
        if max(indices) > 250:
            raise ClusterError("at most 250 real nodes per cluster (one /24 each in 10.N.0.0/16)")
        if spec.device_plugin == "host":
            ensure_device_plugin_rbac(cstate.kubeconfig)
        started: list[RealNode] = []
        try:
            for name, index in zip(names, indices, strict=True):
                node = self._new_node(state, name, index, spec)
                state.nodes.append(node)
                state.save()
                started.append(node)
                self._start(node, cstate, base_images, state)
                state.save()
            self._wait_ready(api, started, wait)
            dns.deploy(bin_dir / "kubectl", cstate.kubeconfig, base_images[1].ref)
        except BaseException:
            for node in started:
                with contextlib.suppress(Exception):
                    self._teardown(node, api)
                state.nodes = [n for n in state.nodes if n.name != node.name]
            state.save()
            if not state.nodes:
                self._release(state)
            raise
        return names

    def _new_node(
        self, state: RealNodesState, name: str, index: int, spec: RealNodeSpec
    ) -> RealNode:
        n = state.net_index
        return RealNode(
            name=name,
            index=index,
            directory=str(self.cluster_dir / NODES_DIR / name),
            bridge=f"hd{n}n{index}",
            node_ip=f"10.{n}.{index}.1",
            subnet=f"10.{n}.{index}.0/24",
            cgroup_root=f"/horus-dev-{n}-{index}",
            socket_dir=str(hostenv.REGISTRY / "sockets" / f"{n}-{index}"),
            kubelet_port=free_port(),
            healthz_port=free_port(),
            proxy_healthz_port=free_port(),
            proxy_metrics_port=free_port(),
            gpus=spec.gpus_per_node,
            gpu_model=spec.gpu_model,
            gpu_memory_mib=spec.gpu_memory_mib,
            device_plugin=spec.device_plugin,
        )

    def _start(
        self, node: RealNode, cstate: Any, base_images: list[Any], state: RealNodesState
    ) -> None:
        from horus.devcluster import image_load
        from horus.devcluster.image_cache import load_descriptor

        d = Path(node.directory)
        for sub in ("pki", "cni/net.d", "cni/ipam", "containerd", "runc", "logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for mount in hostenv.PRIVATE_MOUNTS:
            (d / "mounts" / mount.strip("/").replace("/", "-")).mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        Path(node.socket_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        pki = Path(cstate.directory) / "pki"
        certs.issue_client_cert(
            pki,
            f"system:node:{node.name}",
            ["system:nodes"],
            d / "pki" / "kubelet-client.crt",
            d / "pki" / "kubelet-client.key",
        )
        write_kubeconfig(
            d / "kubelet.kubeconfig",
            cstate.server,
            pki / "ca.crt",
            f"system:node:{node.name}",
            d / "pki" / "kubelet-client.crt",
            d / "pki" / "kubelet-client.key",
        )
        (d / "containerd.toml").write_text(containerd_config(node, base_images[0].ref))
        (d / "cni" / "net.d" / "10-horus.conflist").write_text(json.dumps(cni_config(node)))
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node, pki / "ca.crt")))

        # The bridge first: its address is the node IP the kubelet binds and reports.
        run(["ip", "link", "add", node.bridge, "type", "bridge"], "create bridge")
        run(["ip", "addr", "add", f"{node.node_ip}/24", "dev", node.bridge], "address bridge")
        run(["ip", "link", "set", node.bridge, "up"], "bring bridge up")
        # Pods reach Services on other nodes' bridges: IPv4 forwarding is decided by the
        # interface a packet comes in by, so this bridge's own switch is enough (the host's
        # net.ipv4.ip_forward stays as it is; the setting goes with the bridge).
        Path(f"/proc/sys/net/ipv4/conf/{node.bridge}/forwarding").write_text("1")
        make_cgroup_root(node.cgroup_root)

        binds = "".join(
            f'mount --bind "{d / "mounts" / m.strip("/").replace("/", "-")}" "{m}"\n'
            for m in hostenv.PRIVATE_MOUNTS
        )
        # containerd 2.x from the binaries folder; that folder first on its PATH, so the runc
        # shim it starts for each pod is the one built with it (containerd looks the shim up
        # on PATH before its own folder, and Debian's 1.6 shim may be in /usr/bin).
        bin_dir = Path(cstate.bin_dir)
        script = (
            f"set -e\n{binds}"
            f'PATH="{bin_dir}:$PATH" exec "{bin_dir / "containerd"}" --config "{d / "containerd.toml"}"\n'
        )
        containerd = spawn(
            "containerd",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                script,
                str(d),
            ],
            d,
        )
        node.processes.append(containerd)
        state.save()
        wait_for("containerd", lambda: node.socket.exists(), 30, containerd)
        # Images loaded into the cluster before this node joined (a pruned one is rebuilt and
        # loaded by the next load-images).
        for ref_path in [
            *(b.descriptor for b in base_images),
            *(p for p in state.images if _descriptor_ref(Path(p))),
        ]:
            image_load.import_into(load_descriptor(Path(ref_path)), node.socket)
        self._start_kubelet(node, cstate)
        self._start_kube_proxy(node, cstate, state)
        if node.device_plugin == "host":
            self._start_device_plugin(node, cstate)

    def _nsenter(self, node: RealNode) -> list[str]:
        containerd = node.process("containerd")
        if containerd is None or not containerd.running():
            raise ClusterError(
                f"containerd of {node.name} is not running; remove the node "
                f"('horus dev cluster remove-nodes {node.name}') and add a new one"
            )
        return ["nsenter", f"--mount=/proc/{containerd.pid}/ns/mnt", "--"]

    def kubelet_argv(self, node: RealNode, cstate: Any) -> list[str]:
        d = Path(node.directory)
        labels = {
            c.LABEL_GPU_NODE: "true",
            c.LABEL_GPU_MODEL: node.gpu_model,
            c.LABEL_DEV_NODE: c.DEV_NODE_REAL,
        }
        return [
            *self._nsenter(node),
            str(Path(cstate.bin_dir) / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.node_ip}",
            "--root-dir=/var/lib/kubelet",
            f"--cert-dir={d / 'pki'}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
            "--v=1",
        ]

    def _start_kubelet(self, node: RealNode, cstate: Any) -> None:
        node.processes = [p for p in node.processes if p.name != "kubelet"]
        node.processes.append(
            spawn("kubelet", self.kubelet_argv(node, cstate), Path(node.directory))
        )

    def _start_kube_proxy(self, node: RealNode, cstate: Any, state: RealNodesState) -> None:
        """kube-proxy as ``system:kube-proxy`` (bound to ``system:node-proxier`` by the
        apiserver's bootstrap RBAC), a host process like the kubelet."""
        d = Path(node.directory)
        pki = Path(cstate.directory) / "pki"
        cert, key = d / "pki" / "kube-proxy.crt", d / "pki" / "kube-proxy.key"
        certs.issue_client_cert(pki, "system:kube-proxy", [], cert, key)
        kubeconfig = d / "kube-proxy.kubeconfig"
        write_kubeconfig(kubeconfig, cstate.server, pki / "ca.crt", "system:kube-proxy", cert, key)
        config = d / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(kube_proxy_config(node, kubeconfig, state.pod_range)))
        argv = [str(Path(cstate.bin_dir) / "kube-proxy"), f"--config={config}", "--v=1"]
        node.processes.append(spawn("kube-proxy", argv, d))

    def _start_device_plugin(self, node: RealNode, cstate: Any) -> None:
        node.processes.append(spawn_device_plugin(node, cstate, self._nsenter(node)))

    def _wait_ready(self, api: Any, nodes: list[RealNode], wait: float) -> None:
        deadline = time.monotonic() + wait
        pending = {n.name: n for n in nodes}
        while pending and time.monotonic() < deadline:
            for node in list(pending.values()):
                for proc in node.processes:
                    if exited(proc):
                        raise ClusterError(
                            f"{proc.name} of {node.name} exited; last lines of {proc.log}:\n"
                            + proc.log_tail()
                        )
            for obj in api.list_node(label_selector=f"{c.LABEL_DEV_NODE}={c.DEV_NODE_REAL}").items:
                waiting = pending.get(obj.metadata.name)
                if waiting is None:
                    continue
                conds = {cd.type: cd.status for cd in (obj.status.conditions or [])}
                alloc = obj.status.allocatable or {}
                gpus_ok = (
                    waiting.device_plugin != "host"
                    or int(alloc.get(c.RESOURCE_GPU_CORE, "0") or 0)
                    == c.GPU_CORE_UNITS_PER_GPU * waiting.gpus
                )
                if conds.get("Ready") == "True" and gpus_ok:
                    del pending[waiting.name]
            if pending:
                time.sleep(0.5)
        if pending:
            late = next(iter(pending.values()))
            kubelet = late.process("kubelet")
            tail = kubelet.log_tail(20) if kubelet else ""
            raise ClusterError(
                f"{len(pending)} real node(s) not Ready (with their GPUs) after {wait:.0f}s, "
                f"e.g. {late.name}; last lines of its kubelet log:\n{tail}"
            )

    # -- day 2 --

    def restart_kubelet(self, name: str, down_seconds: float = 0.0) -> None:
        """Stop the node's kubelet (its containers keep running) and start it again."""
        state, node = self._node(name)
        kubelet = node.process("kubelet")
        if kubelet is not None:
            kubelet.stop(grace=15)
        time.sleep(down_seconds)
        self._start_kubelet(node, self._cluster())
        state.save()

    def socket(self, name: str) -> Path:
        """The node's containerd socket (``ctr --address``)."""
        return self._node(name)[1].socket

    def cdi_dir(self, name: str) -> Path:
        """The node's CDI spec folder as this host sees it: inside the node's mount namespace
        it is :data:`CDI_SPEC_DIR`, the one folder its containerd reads CDI specs from."""
        _, node = self._node(name)
        return Path(node.directory) / "mounts" / "run-cdi"

    def device_plugin_dir(self, name: str) -> Path:
        """Where the node's kubelet sees /var/lib/kubelet/device-plugins (its private bind)."""
        _, node = self._node(name)
        return Path(node.directory) / "mounts" / "var-lib-kubelet" / "device-plugins"

    def _node(self, name: str) -> tuple[RealNodesState, RealNode]:
        state = self.state()
        node = next((n for n in state.nodes if n.name == name), None) if state else None
        if state is None or node is None:
            raise ClusterError(f"no real node {name!r} in {self.cluster_dir}")
        return state, node

    def import_images(self, descriptors: list[Path]) -> None:
        """Import built images into every node, and remember them for nodes added later."""
        from horus.devcluster import image_load
        from horus.devcluster.image_cache import load_descriptor

        prefer_bin_dir(Path(self._cluster().bin_dir))
        state = self.state()
        if state is None:
            raise ClusterError(
                "this cluster has no real nodes; add some with 'horus dev cluster add-nodes "
                "--real --count 2' first"
            )
        loaded = [load_descriptor(path) for path in descriptors]

        def load(node: RealNode) -> None:
            for image in loaded:
                image_load.import_into(image, node.socket)

        # One thread per node: each import is mostly the node's containerd writing and
        # unpacking layers, so nodes overlap well.
        with ThreadPoolExecutor(max_workers=max(1, len(state.nodes))) as pool:
            list(pool.map(load, state.nodes))
        for path, image in zip(descriptors, loaded, strict=True):
            state.images = [
                p for p in state.images if _descriptor_ref(Path(p)) not in ("", image.ref)
            ]
            state.images.append(str(path))
        state.save()

    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {}
        return {
            n.name: {
                "ip": n.node_ip,
                "gpus": f"{n.gpus}x {n.gpu_model} {n.gpu_memory_mib} MiB",
                "device_plugin": n.device_plugin,
                "processes": {p.name: {"pid": p.pid, "running": p.running()} for p in n.processes},
            }
            for n in state.nodes
        }

    # -- remove --

    def remove(self, names: list[str] | None = None) -> list[str]:
        """Tear the named nodes (all when None) down and delete their Node objects; the last
        node of the cluster also removes kube-proxy's chains and releases the host's state."""
        state = self.state()
        if state is None:
            return []
        wanted = set(names) if names is not None else {n.name for n in state.nodes}
        unknown = wanted - {n.name for n in state.nodes}
        if unknown:
            raise ClusterError(
                f"no real node(s) {', '.join(sorted(unknown))} in {self.cluster_dir}"
            )
        api = None
        with contextlib.suppress(Exception):
            from horus.devcluster.cluster import DevClusterState

            cstate = DevClusterState.load(self.cluster_dir)
            if cstate is not None:
                api = _core_api(cstate.kubeconfig)
        left: list[str] = []
        for node in [n for n in state.nodes if n.name in wanted]:
            try:
                left += self._teardown(node, api)
            except Exception as exc:  # keep going: every other node must still be stopped
                left.append(f"{node.name}: {exc!r}")
            state.nodes = [n for n in state.nodes if n.name != node.name]
            state.save()
        if not state.nodes:
            self._release(state)
        if left:
            raise ClusterError("could not remove: " + "; ".join(left))
        return sorted(wanted)

    def _release(self, state: RealNodesState) -> None:
        # The last node's kube-proxy is stopped; its chains (KUBE-SERVICES, KUBE-SVC-…, in
        # iptables and ip6tables) stay until kube-proxy's own cleanup removes them.
        cstate = None
        with contextlib.suppress(Exception):
            cstate = self._cluster()
        bin_dir = Path(cstate.bin_dir) if cstate is not None else None
        failed = kube_proxy_cleanup(bin_dir) if bin_dir is not None else ""
        (self.cluster_dir / STATE_FILE).unlink(missing_ok=True)
        shutil.rmtree(self.cluster_dir / NODES_DIR, ignore_errors=True)
        hostenv.release(state.net_index)
        if failed:
            raise ClusterError(f"kube-proxy --cleanup failed: {failed}")

    def _teardown(self, node: RealNode, api: Any) -> list[str]:
        """Stop everything of one node; returns what could not be removed."""
        for name in ("device-plugin", "kube-proxy", "kubelet"):
            proc = node.process(name)
            if proc is not None:
                proc.stop(grace=10)
        left = remove_cgroup_root(node.cgroup_root)  # the containers, then their cgroups
        containerd = node.process("containerd")
        markers = [node.directory, *([node.socket_dir] if node.socket_dir else [])]

        def ours() -> set[int]:  # the shims name the socket, the rest the folder
            return {pid for m in markers for pid in pids_naming(m)}

        for pid in ours():
            if containerd is None or pid != containerd.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if containerd is not None:
            containerd.stop(grace=10)
        deadline = time.monotonic() + 10
        while (pids := ours()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        if ours():
            left.append(f"processes of {node.name} still run")
        left += remove_cgroup_root(node.cgroup_root)
        if Path(f"/sys/class/net/{node.bridge}").exists():
            deleted = run(["ip", "link", "del", node.bridge], "delete bridge", check=False)
            if deleted.returncode != 0:
                left.append(f"bridge {node.bridge}: {deleted.stderr.strip()}")
        shutil.rmtree(node.directory, ignore_errors=True)
        if node.socket_dir:
            shutil.rmtree(node.socket_dir, ignore_errors=True)
        if api is not None:
            with contextlib.suppress(Exception):
                api.delete_node(node.name)
        return left


def _core_api(kubeconfig: str) -> Any:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def _descriptor_ref(path: Path) -> str:
    """The image a descriptor names, or "" when it is gone from the cache."""
    try:
        return str(json.loads(path.read_text())["ref"])
    except (OSError, ValueError, KeyError):
        return ""
