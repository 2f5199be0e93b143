"""``horus deviceplugin run``: the kubelet device plugin of one node.

Every flag mirrors a field of :class:`~horus.deviceplugin.settings.DevicePluginSettings` and
has an environment variable (``HORUS_DEVICEPLUGIN_<FIELD>``) and a config-file key
(``deviceplugin.<field>``); precedence is CLI > environment > file > default. Heavy imports
(grpc, kubernetes) happen only when the command runs, so ``horus --help`` stays fast.
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
    "plugin_dir": "the kubelet's device-plugin directory (default /var/lib/kubelet/device-plugins)",
    "backend": "GPU discovery: nvml (real GPUs) or simulated (kwok/CI stand-in)",
    "sim_gpu_count": "simulated backend: number of GPUs",
    "sim_gpu_model": "simulated backend: GPU model name",
    "sim_gpu_memory_mib": "simulated backend: memory per GPU, MiB",
    "sim_health_file": 'simulated backend: JSON {"<index>": "Healthy"|"Unhealthy"} re-read each check',
    "memory_unit_mib": "MiB per horus.io/gpu-memory device ID (default 256)",
    "enforcement": "mps (hand out CUDA MPS limits) or none",
    "mps_pipe_dir": "host directory of the MPS control daemon's pipes",
    "mps_shm_dir": "host directory mounted as /dev/shm into MPS clients (the daemon's /dev/shm)",
    "progress_root": "host directory of the per-pod progress directories (default "
    "/run/horus/progress; empty: none; docs/agent.md)",
    "pass_device_specs": "also hand out /dev/nvidia* device nodes (true/false)",
    "gpu_access": "how the GPU is granted: envvar, volume-mounts or cdi (docs/agent.md)",
    "cdi_kind": "CDI kind of the node's GPUs, for gpu_access=cdi (default nvidia.com/gpu)",
    "kubeconfig": "kubeconfig file (default: in-cluster, else ~/.kube/config)",
    "assignment_key_file": "public keys file, keys.pem (default: $HORUS_ASSIGNMENT_KEY_FILE, else the ConfigMap)",
    "publish_inventory": "write the node's horus.io/gpu-inventory annotation (true/false)",
    "health_interval_s": "seconds between GPU health checks",
    "socket_poll_s": "seconds between looks at kubelet.sock",
    "fail_on_init_error": "exit when GPU discovery fails instead of waiting (true/false)",
    "retry_interval_s": "seconds between GPU discovery retries",
    "allow_other_gpu_plugin": "advertise even where the node lists nvidia.com/gpu (true/false)",
    "node_check_interval_s": "seconds between reads of the node for another GPU device plugin",
}


def register(sub: Any) -> None:
    from horus.deviceplugin.settings import SECTION, DevicePluginSettings

    role = sub.add_parser("deviceplugin", help="the kubelet device plugin")
    rsub = role.add_subparsers(dest="deviceplugin_command", metavar="ACTION", required=True)
    run = rsub.add_parser(
        "run",
        help="run the kubelet device plugin",
        description="Advertise horus.io/gpu-core and horus.io/gpu-memory to the kubelet and "
        "hand each admitted container its signed GPU share. Every flag also reads "
        "HORUS_DEVICEPLUGIN_<FLAG> and the config file's deviceplugin section.",
    )
    run.add_argument("--config", type=Path, default=None, help="YAML config file")
    add_settings_flags(run, DevicePluginSettings, SECTION, _HELP)
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from horus.deviceplugin import settings as settings_mod
    from horus.deviceplugin.app import run_plugin

    cli = cli_values(args, settings_mod.DevicePluginSettings)
    settings = settings_mod.load(cli=cli, config_file=args.config)
    return run_until_signalled(settings.node_name, lambda stop: run_plugin(settings, stop))
