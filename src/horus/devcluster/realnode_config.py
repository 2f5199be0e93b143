"""The configuration files of one real node (:mod:`horus.devcluster.realnodes`): its
containerd's, its CNI bridge's, its kubelet's and its kube-proxy's, and the kubeconfigs its
identities use. Every path in them lies under the node's own folder or inside its mount
namespace, so nodes on one host never read each other's files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from horus.devcluster import dns
from horus.devcluster.realnode_host import CNI_BIN_DIR
from horus.devcluster.realnode_state import RealNode

#: Where a node's containerd reads CDI specs (the path a DRA driver writes by default). Inside
#: the node's mount namespace it is the node's own folder: ``/run/cdi`` (``/var/run`` is a link
#: to ``/run``) is one of :data:`horus.devcluster.hostenv.PRIVATE_MOUNTS`, bound from
#: ``<node>/mounts/run-cdi`` (:meth:`horus.devcluster.realnodes.RealNodes.cdi_dir`).
CDI_SPEC_DIR = "/var/run/cdi"


def containerd_config(node: RealNode, sandbox_image: str) -> str:
    """containerd 2.x's config (version 4, containerd v2.4's own) for one node; every path
    under its folder.

    CDI is on (containerd 2's default) and reads specs only from :data:`CDI_SPEC_DIR`, which
    inside the node's mount namespace is the node's own folder (``mounts/run-cdi``, a
    :data:`~horus.devcluster.hostenv.PRIVATE_MOUNTS` entry): a DRA driver of this node, as a
    host process in the namespace or as a DaemonSet pod with that hostPath, writes its specs
    where this node's containerd — and no other node's — reads them. The host's /etc/cdi is
    not read: a spec there would apply to every node. NRI is off: its socket
    (/var/run/nri/nri.sock) is one per host, and several containerds share this one.
    """
    d = Path(node.directory)
    return f"""\
# Written by horus dev cluster add-nodes --real for node {node.name} (containerd 2.x).
version = 4
root = "{d / "containerd" / "root"}"
state = "{d / "containerd" / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

[debug]
  level = "warn"

[plugins."io.containerd.server.v1.grpc"]
  address = "{node.socket}"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "{node.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd" / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # This VM lacks CAP_SYS_RESOURCE: without it every sandbox fails with
  # "can't get final child's PID from pipe" (runc may not lower oom_score_adj).
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = ["{CDI_SPEC_DIR}"]

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  Root = "{d / "runc"}"
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{d / "cni" / "net.d"}"
  max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_config(node: RealNode) -> dict[str, Any]:
    """The node's pod network: a bridge we created (its IP is the node's), host-local IPAM."""
    return {
        "cniVersion": "0.4.0",
        "name": f"horus-{node.bridge}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                # The bridge already carries the node IP; isGateway would also switch on the
                # host's ip_forward, which nothing here needs (pods only talk to this host).
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.node_ip}]],
                    "routes": [{"dst": "0.0.0.0/0", "gw": node.node_ip}],
                    "dataDir": str(Path(node.directory) / "cni" / "ipam"),
                },
            }
        ],
    }


def kubelet_config(node: RealNode, ca_file: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "failSwapOn": False,
        "failCgroupV1": False,
        "rotateCertificates": False,
        "serializeImagePulls": False,
        # Every node shares this host's disk and memory: evict only when truly short, and
        # never garbage-collect the imported images (nothing could pull them back).
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": 110,
        "resolvConf": "/etc/resolv.conf",
        # CoreDNS behind the kube-dns Service (horus.devcluster.dns): pods resolve Service
        # names as on any cluster, and the kubelet has a cluster DNS to write.
        "clusterDNS": [dns.DNS_SERVICE_IP],
        "clusterDomain": dns.CLUSTER_DOMAIN,
        "containerLogMaxSize": "10Mi",
        "shutdownGracePeriod": "0s",
        # How often the kubelet re-syncs every pod, and with it how late a changed Secret or
        # ConfigMap reaches a mounted volume (up to this plus the kubelet's cache TTL; the
        # default 1m). 10 s lets the e2e's assignment-key rotation reach the device plugin's
        # mounted key in seconds instead of a minute; it changes nothing else Horus relies on.
        "syncFrequency": "10s",
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path, pod_range: str) -> dict[str, Any]:
    """kube-proxy's configuration for one node (iptables mode). Every node's kube-proxy
    programs the same Service rules into this host's one network namespace, so each leaves
    the host's own settings alone: no conntrack table sizing or timeouts, no
    ``route_localnet`` for localhost NodePorts. Traffic to a Service is masqueraded to the
    bridge it leaves by (``masqueradeAll``): a reply from a pod on the client's own bridge
    then returns through this host, where conntrack undoes the DNAT."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "bindAddress": node.node_ip,
        "mode": "iptables",
        "clusterCIDR": pod_range,
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "nodePortAddresses": [f"{node.node_ip}/32"],
        "healthzBindAddress": f"127.0.0.1:{node.proxy_healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{node.proxy_metrics_port}",
    }


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, cert: Path, key: Path) -> None:
    """A kubeconfig for ``user`` with a client certificate; readable by root only (it names
    the key)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "horus-local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "horus-local", "context": {"cluster": "horus-local", "user": user}}],
        "current-context": "horus-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
