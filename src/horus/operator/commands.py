"""``horus operator …``: subcommands of this role."""

from __future__ import annotations

import argparse
from typing import Any

from horus.common.errors import HorusError


def register(sub: Any) -> None:
    role = sub.add_parser("operator", help="the kopf operator and scheduler extender")
    rsub = role.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    run = rsub.add_parser("run", help="run the kopf operator and scheduler extender")
    run.set_defaults(handler=_run)
    _register_extender(rsub)


def _run(args: argparse.Namespace) -> int:
    raise HorusError(
        "the kopf operator and scheduler extender is not implemented yet (tracked as issue #5)"
    )


# --- horus operator extender (scheduler extender; see horus.operator.extender) ------------------


def _register_extender(rsub: Any) -> None:
    from pathlib import Path

    ext = rsub.add_parser(
        "extender",
        help="serve the kube-scheduler extender (filter/prioritize/bind) over HTTP",
        description=(
            "Lets the stock kube-scheduler place plain Pods that request horus.io/gpu-core / "
            "horus.io/gpu-memory and carry a horus.io/graph-profile annotation. Configure the "
            "scheduler with manifests/scheduler/horus-extender-config.yaml. Every flag also "
            "reads HORUS_EXTENDER_<FLAG> and the 'extender' section of --config "
            "(CLI > environment > file > default)."
        ),
    )
    ext.add_argument("--config", type=Path, default=None, help="Horus YAML config file")
    ext.add_argument("--host", default=None, help="listen address (default 0.0.0.0)")
    ext.add_argument("--port", type=int, default=None, help="listen port (default 8888)")
    ext.add_argument("--policy", default=None, help="placement policy (default horus)")
    ext.add_argument(
        "--kubeconfig", default=None, help="kubeconfig (default $KUBECONFIG/in-cluster)"
    )
    ext.add_argument("--key-file", default=None, help="assignment key file (default: the Secret)")
    ext.add_argument("--predictor", default=None, help="predictor artifact (default: shipped)")
    ext.add_argument("--cache-seconds", type=float, default=None, help="filter→prioritize reuse")
    ext.set_defaults(handler=_extender)


def _extender(args: argparse.Namespace) -> int:
    from horus.operator.extender_main import run_extender

    cli = {
        "host": args.host,
        "port": args.port,
        "policy": args.policy,
        "kubeconfig": args.kubeconfig,
        "key_file": args.key_file,
        "predictor": args.predictor,
        "cache_seconds": args.cache_seconds,
    }
    return run_extender(cli, args.config)
