"""``horus dev cluster up|down|status|add-nodes``: the local control plane from the shell."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    dev = sub.add_parser("dev", help="development tools (local control plane)")
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND")
    cluster = dev_sub.add_parser(
        "cluster",
        help="a real local Kubernetes control plane with simulated (kwok) GPU nodes",
        description=(
            "Builds (first time only) and runs etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler and kwok on 127.0.0.1. State lives in --dir (env HORUS_CLUSTER_DIR, "
            "default ~/.local/state/horus/cluster)."
        ),
    )
    cluster.add_argument("--dir", type=Path, default=None, help="cluster folder")
    csub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = csub.add_parser("up", help="start the control plane and wait until it is ready")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for /readyz")
    up.set_defaults(handler=_up)
    down = csub.add_parser(
        "down", help="stop exactly the processes 'up' started; remove the folder"
    )
    down.set_defaults(handler=_down)
    status = csub.add_parser("status", help="what runs, and whether the apiserver is ready")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_status)
    add = csub.add_parser("add-nodes", help="add kwok-managed nodes with simulated GPUs")
    add.add_argument("--count", type=int, required=True, help="number of nodes to add")
    add.add_argument("--gpus-per-node", type=int, default=8)
    add.add_argument("--gpu-model", default="H100", help="GPU model name, e.g. H100, A100, V100")
    add.add_argument("--gpu-memory-mib", type=int, default=81920, help="memory of each GPU, MiB")
    add.add_argument("--prefix", default="gpu-node", help="node name prefix")
    add.add_argument("--wait", type=float, default=120.0, help="seconds to wait for Ready")
    add.set_defaults(handler=_add_nodes)


def _cluster(args: argparse.Namespace) -> Any:
    from horus.devcluster.cluster import LocalCluster

    return LocalCluster(args.dir)


def _up(args: argparse.Namespace) -> int:
    state = _cluster(args).up(timeout=args.timeout)
    print(f"local cluster is up: {state.server}")
    print(f"  export KUBECONFIG={state.kubeconfig}")
    print(f"  export PATH={state.bin_dir}:$PATH   # kubectl, helm, kwok")
    print("  kubectl get nodes          # then: horus dev cluster add-nodes --count 4")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster.down():
        print(f"local cluster in {cluster.directory} stopped and removed")
    else:
        print(f"no local cluster runs in {cluster.directory}; nothing to stop")
    return 0


def _status(args: argparse.Namespace) -> int:
    info = _cluster(args).status()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if not info["up"]:
        print(f"no local cluster in {info['directory']}")
        return 1
    print(f"server {info['server']}  ready={info['ready']}")
    print(f"KUBECONFIG={info['kubeconfig']}")
    for name, proc in info["processes"].items():
        print(f"  {name:<24} pid {proc['pid']:<8} {'running' if proc['running'] else 'STOPPED'}")
    return 0 if info["ready"] else 1


def _add_nodes(args: argparse.Namespace) -> int:
    from horus.common.errors import ClusterError
    from horus.devcluster.nodes import NodeSpec, add_nodes

    spec = NodeSpec(
        count=args.count,
        gpus_per_node=args.gpus_per_node,
        gpu_model=args.gpu_model,
        gpu_memory_mib=args.gpu_memory_mib,
        prefix=args.prefix,
    )
    state = _cluster(args).state()
    if state is None:
        raise ClusterError("no local cluster is up; run 'horus dev cluster up' first")
    names = add_nodes(state.kubeconfig, spec, wait=args.wait)
    print(
        f"added {len(names)} Ready node(s) ({names[0]} … {names[-1]}), each with "
        f"{spec.gpus_per_node}× {spec.gpu_model} {spec.gpu_memory_mib} MiB"
    )
    return 0
