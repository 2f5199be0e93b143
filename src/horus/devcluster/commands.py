"""``horus dev cluster up|down|status|add-nodes``: the local control plane from the shell."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from horus.api.inventory import MAX_GPUS_PER_NODE
from horus.common.constants import MAX_GPU_MEMORY_MIB
from horus.common.errors import ConfigError
from horus.common.flags import count, integer, seconds


def register(sub: Any) -> None:
    dev = sub.add_parser("dev", help="development tools (local control plane)")
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="COMMAND")
    _register_cluster(dev_sub)
    _register_images(dev_sub)
    _register_demo(dev_sub)
    _register_workloads(dev_sub)


def _register_cluster(dev_sub: Any) -> None:
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
    up.add_argument("--timeout", type=seconds(), default=120.0, help="seconds to wait for /readyz")
    up.set_defaults(handler=_up)
    down = csub.add_parser(
        "down", help="stop exactly the processes 'up' started; remove the folder"
    )
    down.set_defaults(handler=_down)
    status = csub.add_parser("status", help="what runs, and whether the apiserver is ready")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_status)
    _register_add_nodes(csub)
    remove = csub.add_parser(
        "remove-nodes",
        help="stop real nodes and delete their Node objects (every real node when none named)",
    )
    remove.add_argument("names", nargs="*", help="real node names")
    remove.set_defaults(handler=_remove_nodes)
    load = csub.add_parser(
        "load-images",
        help="build Horus' images (cached) and import them into every real node's containerd",
    )
    load.add_argument("names", nargs="*", help="images (default: operator node workload)")
    load.set_defaults(handler=_load_images)


def _register_add_nodes(csub: Any) -> None:
    add = csub.add_parser(
        "add-nodes",
        help="add nodes with simulated GPUs: kwok nodes, or real kubelets (--real)",
        description=(
            "Without --real: kwok-managed Node objects (no containers run; thousands are "
            "cheap). With --real (root): each node is a real kubelet of the pinned version "
            "with its own containerd, runc and CNI bridge, its own node identity "
            "(system:node:<name>), and simulated GPUs served by the Horus device plugin; "
            "pods run as real containers. A cluster may mix both."
        ),
    )
    add.add_argument("--count", type=count(10_000), required=True, help="number of nodes to add")
    add.add_argument(
        "--real", action="store_true", help="real kubelet nodes (root; see the description)"
    )
    add.add_argument(
        "--gpus-per-node",
        type=count(MAX_GPUS_PER_NODE),
        default=None,
        help="simulated GPUs per node (default: kwok 8, real 2)",
    )
    add.add_argument("--gpu-model", default="H100", help="GPU model name, e.g. H100, A100, V100")
    add.add_argument(
        "--gpu-memory-mib",
        type=count(MAX_GPU_MEMORY_MIB),
        default=81920,
        help="memory of each GPU, MiB",
    )
    add.add_argument(
        "--prefix", default=None, help="node name prefix (default: kwok gpu-node, real real-node)"
    )
    add.add_argument(
        "--device-plugin",
        choices=("host", "none"),
        default="host",
        help="real nodes: run the Horus device plugin (simulated GPUs) as a process of each "
        "node (host), or leave the GPUs to the chart's node DaemonSet (none)",
    )
    add.add_argument(
        "--wait",
        type=seconds(positive=False),
        default=None,
        help="seconds to wait for Ready (default: kwok 120, real 180)",
    )
    add.set_defaults(handler=_add_nodes)


def _register_images(dev_sub: Any) -> None:
    images = dev_sub.add_parser(
        "images",
        help="build Horus' container images from their Dockerfiles with buildah (no Docker engine)",
        description=(
            "Builds operator/Dockerfile, device-plugin/Dockerfile, "
            "examples/workload/Dockerfile (and predictor/Dockerfile, kube-scheduler, pause, "
            "coredns on request) with buildah as root: Debian (mmdebstrap) is committed as "
            "the python:*-slim base, since no registry is reached. buildah's step cache and "
            "storage live in ~/.cache/horus/images; an unchanged image is found in about a "
            "second."
        ),
    )
    isub = images.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = isub.add_parser("build", help="build (or find cached) images; print their names")
    build.add_argument("names", nargs="*", help="images (default: operator node workload)")
    build.set_defaults(handler=_images_build)


def _register_demo(dev_sub: Any) -> None:
    demo = dev_sub.add_parser(
        "demo",
        help="the one-command demo (make demo): cluster, real nodes, helm, Prometheus",
        description=(
            "Brings up the local control plane with real kubelet nodes (root; simulated GPUs), "
            "builds Horus' images from this checkout, installs the chart with helm (operator "
            "Deployment and node DaemonSet in-cluster), runs a real Prometheus, submits "
            "examples/ as real containers, shows a live placement table and writes a PNG "
            "report. --kwok: kwok nodes instead (no containers, no root; the operator and "
            "agent run as local processes). State in --dir (env HORUS_DEMO_DIR, default "
            "~/.local/state/horus/demo)."
        ),
    )
    demo.add_argument("--dir", type=Path, default=None, help="demo folder")
    dsub = demo.add_subparsers(dest="demo_command", metavar="ACTION", required=True)
    up = dsub.add_parser("up", help="run the demo; leaves it up for exploring")
    up.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("DEMO_QUICK", "") not in ("", "0"),
        help="the test suite's smaller, faster variant (env DEMO_QUICK=1)",
    )
    up.add_argument(
        "--kwok",
        action="store_true",
        default=os.environ.get("DEMO_KWOK", "") not in ("", "0"),
        help="kwok nodes instead of real kubelet nodes (env DEMO_KWOK=1)",
    )
    up.add_argument(
        "--nodes", type=count(1000), default=None, help="nodes (env DEMO_NODES; real: at most 16)"
    )
    up.add_argument(
        "--gpus-per-node",
        type=count(MAX_GPUS_PER_NODE),
        default=None,
        help="simulated GPUs of each node (env DEMO_GPUS_PER_NODE)",
    )
    up.add_argument("--watch-seconds", type=seconds(), default=None, help="longest live-table time")
    up.add_argument(
        "--prometheus-port",
        type=integer(1, 65535),
        default=None,
        help="fixed Prometheus port (env HORUS_DEMO_PROMETHEUS_PORT; default: a free one)",
    )
    up.set_defaults(handler=_demo_up)
    down = dsub.add_parser("down", help="stop everything 'up' started (keeps the report)")
    down.set_defaults(handler=_demo_down)
    status = dsub.add_parser("status", help="what the demo runs")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_demo_status)


#: The workload controllers ``horus dev workloads`` knows, in install order.
WORKLOAD_CONTROLLERS = ("jobset", "trainer", "kueue")


def workload_names(raw: str) -> tuple[str, ...]:
    """``--only``: a comma-separated subset of :data:`WORKLOAD_CONTROLLERS`."""
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    unknown = [n for n in names if n not in WORKLOAD_CONTROLLERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(WORKLOAD_CONTROLLERS)}, got {raw!r}"
        )
    return names


def _register_workloads(dev_sub: Any) -> None:
    workloads = dev_sub.add_parser(
        "workloads",
        help="Kueue, JobSet and Kubeflow Trainer on the local cluster (host processes)",
        description=(
            "Installs Kueue, JobSet and Kubeflow Trainer from their own manifests (CRDs, RBAC, "
            "webhooks; built by tools/controlplane/build.sh) on the cluster in --dir and runs "
            "each as a host process with its own ServiceAccount's token. State lives in "
            "<cluster dir>/workloads; 'horus dev cluster down' removes them too."
        ),
    )
    workloads.add_argument("--dir", type=Path, default=None, help="cluster folder")
    wsub = workloads.add_subparsers(dest="workloads_command", metavar="ACTION", required=True)
    up = wsub.add_parser("up", help="install and start the controllers; wait until ready")
    up.add_argument(
        "--only",
        type=workload_names,
        default=WORKLOAD_CONTROLLERS,
        help="comma-separated subset (default: jobset,trainer,kueue)",
    )
    up.add_argument(
        "--timeout", type=seconds(), default=180.0, help="seconds to wait per controller"
    )
    up.set_defaults(handler=_workloads_up)
    down = wsub.add_parser("down", help="remove the webhooks, stop the controllers, uninstall")
    down.set_defaults(handler=_workloads_down)
    status = wsub.add_parser("status", help="which controllers run and are ready")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_workloads_status)


def _workload_controllers(args: argparse.Namespace) -> Any:
    from horus.common.errors import ClusterError
    from horus.devcluster.cluster import LocalCluster
    from horus.devcluster.workload_controllers import WorkloadControllers

    cluster = LocalCluster(args.dir)
    state = cluster.state()
    if state is None:
        raise ClusterError(f"no local cluster in {cluster.directory}: run 'horus dev cluster up'")
    return WorkloadControllers(state)


def _workloads_up(args: argparse.Namespace) -> int:
    ctl = _workload_controllers(args)
    state = ctl.up(args.only, timeout=args.timeout)
    for name in state.controllers:
        ports = state.ports[name]
        print(f"{name}: webhook 127.0.0.1:{ports['webhook']}, health 127.0.0.1:{ports['health']}")
    print(f"logs in {state.directory}/logs")
    return 0


def _workloads_down(args: argparse.Namespace) -> int:
    ctl = _workload_controllers(args)
    if ctl.down():
        print("workload controllers stopped and uninstalled")
    else:
        print("no workload controllers were up; nothing to do")
    return 0


def _workloads_status(args: argparse.Namespace) -> int:
    info = _workload_controllers(args).status()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if info["up"] else 1
    if not info["up"]:
        print("no workload controllers run")
        return 1
    for name, proc in info["controllers"].items():
        state = "running" if proc["running"] else "STOPPED"
        print(f"  {name:<8} pid {proc['pid']:<8} {state} ready={proc['ready']}")
    return 0 if all(p["running"] and p["ready"] for p in info["controllers"].values()) else 1


def _env_int(name: str, parse: Any) -> int | None:
    """An integer environment default, checked as its flag is (read when the command runs,
    so a bad value never breaks ``horus --help`` or another command)."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return None
    try:
        return int(parse(raw))
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"environment variable {name}: {exc}") from None


def _demo(args: argparse.Namespace, **overrides: Any) -> Any:
    from horus.devcluster.demo import Demo
    from horus.devcluster.demo_state import DemoOptions

    return Demo(DemoOptions.make(args.dir, getattr(args, "quick", False), **overrides))


def _demo_up(args: argparse.Namespace) -> int:
    nodes = args.nodes if args.nodes is not None else _env_int("DEMO_NODES", count(1000))
    gpus = (
        args.gpus_per_node
        if args.gpus_per_node is not None
        else _env_int("DEMO_GPUS_PER_NODE", count(MAX_GPUS_PER_NODE))
    )
    port = (
        args.prometheus_port
        if args.prometheus_port is not None
        else _env_int("HORUS_DEMO_PROMETHEUS_PORT", integer(1, 65535))
    )
    _demo(
        args,
        nodes=nodes,
        gpus_per_node=gpus,
        watch_seconds=args.watch_seconds,
        prometheus_port=port,
        kwok=args.kwok,
    ).up()
    return 0


def _demo_down(args: argparse.Namespace) -> int:
    _demo(args).down()
    return 0


def _demo_status(args: argparse.Namespace) -> int:
    info = _demo(args).status()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if not info["up"]:
        print(f"no demo in {info['directory']}")
        return 1
    print(f"demo in {info['directory']}: Prometheus {info['prometheus']}")
    print(f"KUBECONFIG={info['kubeconfig']}")
    _print_processes(info["processes"], width=12)
    cluster = info["cluster"]
    print(f"  cluster ready={cluster.get('ready')}")
    return 0


def _print_processes(processes: dict[str, dict[str, Any]], width: int) -> None:
    """One line per recorded process: name, PID, whether it still runs."""
    for name, proc in processes.items():
        state = "running" if proc["running"] else "STOPPED"
        print(f"  {name:<{width}} pid {proc['pid']:<8} {state}")


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
    state = cluster.state()
    if state is not None:
        # Kueue, JobSet and Trainer run beside the cluster's own processes, which are all
        # that cluster.down() stops: they go first (`horus dev workloads down`).
        from horus.devcluster.workload_controllers import WorkloadControllers

        workloads = WorkloadControllers(state)
        if workloads.state() is not None:
            workloads.down()
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
    _print_processes(info["processes"], width=24)
    real = info.get("real_nodes") or {}
    for name, node in real.items():
        print(
            f"real node {name}  {node['ip']}  {node['gpus']}  device plugin: {node['device_plugin']}"
        )
        _print_processes(node["processes"], width=22)
    stopped = [p for n in real.values() for p in n["processes"].values() if not p["running"]]
    return 0 if info["ready"] and not stopped else 1


def _add_nodes(args: argparse.Namespace) -> int:
    from horus.common.errors import ClusterError

    cluster = _cluster(args)
    if cluster.state() is None:
        raise ClusterError("no local cluster is up; run 'horus dev cluster up' first")
    if args.real:
        return _add_real_nodes(args, cluster)
    from horus.devcluster.nodes import NodeSpec, add_nodes

    spec = NodeSpec(
        count=args.count,
        gpus_per_node=args.gpus_per_node or 8,
        gpu_model=args.gpu_model,
        gpu_memory_mib=args.gpu_memory_mib,
        prefix=args.prefix or "gpu-node",
    )
    names = add_nodes(
        cluster.state().kubeconfig, spec, wait=120.0 if args.wait is None else args.wait
    )
    print(
        f"added {len(names)} Ready node(s) ({names[0]} … {names[-1]}), each with "
        f"{spec.gpus_per_node}× {spec.gpu_model} {spec.gpu_memory_mib} MiB"
    )
    return 0


def _add_real_nodes(args: argparse.Namespace, cluster: Any) -> int:
    from horus.devcluster.realnode_state import RealNodeSpec
    from horus.devcluster.realnodes import RealNodes

    spec = RealNodeSpec(
        count=args.count,
        gpus_per_node=args.gpus_per_node or 2,
        gpu_model=args.gpu_model,
        gpu_memory_mib=args.gpu_memory_mib,
        prefix=args.prefix or "real-node",
        device_plugin=args.device_plugin,
    )
    names = RealNodes(cluster.directory).add(spec, wait=180.0 if args.wait is None else args.wait)
    gpus = (
        "GPUs to come from the chart's node DaemonSet"
        if spec.device_plugin == "none"
        else f"each {spec.gpus_per_node}× simulated {spec.gpu_model} {spec.gpu_memory_mib} MiB"
    )
    print(f"added {len(names)} real kubelet node(s), Ready: {', '.join(names)}; {gpus}")
    return 0


def _remove_nodes(args: argparse.Namespace) -> int:
    from horus.devcluster.realnodes import RealNodes

    removed = RealNodes(_cluster(args).directory).remove(args.names or None)
    print(f"removed {len(removed)} real node(s){': ' + ', '.join(removed) if removed else ''}")
    return 0


def _build_images(names: list[str]) -> list[Any]:
    from horus.devcluster import images
    from horus.devcluster.binaries import repo_root

    return images.build(repo_root(), names or list(images.DEFAULT_IMAGES))


def _images_build(args: argparse.Namespace) -> int:
    for image in _build_images(args.names):
        print(f"{image.ref}  {image.manifest_digest[:19]}  {image.descriptor}")
    return 0


def _load_images(args: argparse.Namespace) -> int:
    from horus.devcluster.realnodes import RealNodes

    real = RealNodes(_cluster(args).directory)
    if real.state() is None:
        from horus.common.errors import ClusterError

        raise ClusterError(
            "this cluster has no real nodes; add some first: horus dev cluster add-nodes "
            "--real --count 2"
        )
    started = time.monotonic()
    built = _build_images(args.names)
    imported = time.monotonic()
    real.import_images([Path(b.descriptor) for b in built])
    done = time.monotonic()
    for image in built:
        print(f"loaded {image.ref} into every real node")
    print(
        f"built (or found cached) in {imported - started:.1f}s, imported in {done - imported:.1f}s"
    )
    return 0
