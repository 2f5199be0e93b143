"""What a real node of the local cluster is (:mod:`horus.devcluster.realnodes`): the request
``add-nodes --real`` makes, each node's folder, network, ports and processes, and the
cluster's record of them in ``<cluster>/real-nodes.json``, which ``down`` reads to undo them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from horus.common.errors import ValidationError
from horus.devcluster.processes import ManagedProcess

STATE_FILE = "real-nodes.json"


@dataclass(frozen=True)
class RealNodeSpec:
    """What ``add-nodes --real`` was asked for."""

    count: int
    gpus_per_node: int = 2
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81920
    prefix: str = "real-node"
    #: "host": run the Horus device plugin (simulated GPUs) as a process of the node;
    #: "none": leave the GPUs to the chart's node DaemonSet.
    device_plugin: str = "host"

    def __post_init__(self) -> None:
        if not 1 <= self.count <= 16:
            raise ValidationError(
                f"--count must be between 1 and 16 for real nodes (each runs a kubelet and a "
                f"containerd, ~150 MB), got {self.count}"
            )
        if not 1 <= self.gpus_per_node <= 16:
            raise ValidationError(
                f"--gpus-per-node must be between 1 and 16, got {self.gpus_per_node}"
            )
        if not 1024 <= self.gpu_memory_mib <= 1_048_576:
            raise ValidationError(
                f"--gpu-memory-mib must be between 1024 and 1048576 MiB, got {self.gpu_memory_mib}"
            )
        if not self.gpu_model.replace("-", "").replace("_", "").isalnum():
            raise ValidationError(
                f"--gpu-model must be letters, digits, '-' or '_' (e.g. H100), got {self.gpu_model!r}"
            )
        if self.device_plugin not in ("host", "none"):
            raise ValidationError(
                f"--device-plugin must be 'host' or 'none', got {self.device_plugin!r}"
            )
        if not self.prefix or len(self.prefix) > 40 or not _dns_label(self.prefix):
            raise ValidationError(
                f"--prefix must be a DNS label of at most 40 characters, got {self.prefix!r}"
            )


def _dns_label(text: str) -> bool:
    return (
        text[0].isalnum()
        and text[-1].isalnum()
        and all(ch.isdigit() or ("a" <= ch <= "z") or ch == "-" for ch in text)
    )


@dataclass
class RealNode:
    """One node: where it lives, its network, its ports and its processes."""

    name: str
    index: int
    directory: str
    bridge: str
    node_ip: str
    subnet: str
    cgroup_root: str
    kubelet_port: int
    healthz_port: int
    gpus: int
    gpu_model: str
    gpu_memory_mib: int
    device_plugin: str
    processes: list[ManagedProcess] = field(default_factory=list)
    #: containerd's sockets live here, not in ``directory``: a unix socket path has at most
    #: 104 characters, and cluster folders (pytest's tmp_path) can be longer.
    socket_dir: str = ""
    proxy_healthz_port: int = 0
    proxy_metrics_port: int = 0

    @property
    def socket(self) -> Path:
        return Path(self.socket_dir or self.directory) / "containerd.sock"

    def process(self, name: str) -> ManagedProcess | None:
        return next((p for p in self.processes if p.name == name), None)


@dataclass
class RealNodesState:
    """Every real node of one cluster (``<cluster>/real-nodes.json``)."""

    cluster_dir: str
    net_index: int
    nodes: list[RealNode] = field(default_factory=list)
    #: Image descriptors (``horus dev images``) to import into every node, new ones too.
    images: list[str] = field(default_factory=list)

    @property
    def pod_range(self) -> str:
        return f"10.{self.net_index}.0.0/16"

    def save(self) -> None:
        path = Path(self.cluster_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, cluster_dir: Path) -> RealNodesState | None:
        path = cluster_dir / STATE_FILE
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        nodes = []
        for n in raw.pop("nodes", []):
            n["processes"] = [ManagedProcess(**p) for p in n.get("processes", [])]
            nodes.append(RealNode(**n))
        return cls(nodes=nodes, **raw)
