"""``horus dra run``: the DRA kubelet plugin of one node.

Every flag mirrors a field of :class:`~horus.dra.settings.DraSettings` and has an environment
variable (``HORUS_DRA_<FIELD>``) and a config-file key (``dra.<field>``); precedence is CLI >
environment > file > default. Heavy imports (grpc, kubernetes) happen only when the command
runs, so ``horus --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from horus.common.settings import add_settings_flags, cli_values
from horus.node.role import run_until_signalled

log = logging.getLogger(__name__)

_HELP = {
    "node_name": "this node's name (default: $NODE_NAME)",
    "registry_dir": "the kubelet's plugin-registration directory (default /var/lib/kubelet/plugins_registry)",
    "plugin_dir": "this driver's directory: dra.sock, checkpoint (default /var/lib/kubelet/plugins/gpu.horus.io)",
    "cdi_dir": "where the container runtime reads CDI specs (default /var/run/cdi)",
    "checkpoint_file": "prepared claims file (default <plugin-dir>/checkpoint.json)",
    "backend": "GPU discovery: nvml (real GPUs) or simulated (kwok/CI stand-in)",
    "sim_gpu_count": "simulated backend: number of GPUs",
    "sim_gpu_model": "simulated backend: GPU model name",
    "sim_gpu_memory_mib": "simulated backend: memory per GPU, MiB",
    "sim_health_file": 'simulated backend: JSON {"<index>": "Healthy"|"Unhealthy"} re-read each check',
    "enforcement": "mps (hand out CUDA MPS limits) or none",
    "mps_pipe_dir": "host directory of the MPS control daemon's pipes",
    "mps_shm_dir": "host directory mounted as /dev/shm into MPS clients (the daemon's /dev/shm)",
    "pass_device_specs": "also hand out /dev/nvidia* device nodes (true/false)",
    "gpu_access": "how the GPU is granted: envvar, volume-mounts or cdi (docs/agent.md)",
    "cdi_kind": "CDI kind of the node's GPUs, for gpu_access=cdi (default nvidia.com/gpu)",
    "progress_root": "host root of the per-pod progress directories (empty: none)",
    "kubeconfig": "kubeconfig file (default: in-cluster, else ~/.kube/config)",
    "publish_slices": "publish this node's ResourceSlice (true/false)",
    "health_interval_s": "seconds between GPU health checks",
    "slice_resync_s": "seconds between re-reads of this node's ResourceSlice",
    "socket_poll_s": "seconds between checks that the sockets exist",
    "claim_sweep_interval_s": "seconds between sweeps that unprepare checkpointed claims the apiserver no longer has",
    "fail_on_init_error": "exit when GPU discovery fails instead of waiting (true/false)",
    "retry_interval_s": "seconds between GPU discovery retries",
}


def register(sub: Any) -> None:
    from horus.dra.settings import SECTION, DraSettings

    role = sub.add_parser("dra", help="the DRA kubelet plugin (driver gpu.horus.io)")
    rsub = role.add_subparsers(dest="dra_command", metavar="ACTION", required=True)
    run = rsub.add_parser(
        "run",
        help="run the DRA kubelet plugin",
        description="Publish this node's GPUs as a ResourceSlice of driver gpu.horus.io and "
        "prepare the ResourceClaims the kube-scheduler allocated on them (a CDI spec per "
        "claim). Every flag also reads HORUS_DRA_<FLAG> and the config file's dra section.",
    )
    run.add_argument("--config", type=Path, default=None, help="YAML config file")
    add_settings_flags(run, DraSettings, SECTION, _HELP)
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from horus.dra import settings as settings_mod
    from horus.dra.app import run_driver

    cli = cli_values(args, settings_mod.DraSettings)
    settings = settings_mod.load(cli=cli, config_file=args.config)
    return run_until_signalled(settings.node_name, lambda stop: run_driver(settings, stop))
