"""``horus deviceplugin …``: subcommands of this role."""

from __future__ import annotations

import argparse
from typing import Any

from horus.common.errors import HorusError


def register(sub: Any) -> None:
    role = sub.add_parser("deviceplugin", help="the kubelet device plugin")
    rsub = role.add_subparsers(dest="deviceplugin_command", metavar="ACTION", required=True)
    run = rsub.add_parser("run", help="run the kubelet device plugin")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    raise HorusError("the kubelet device plugin is not implemented yet (tracked as issue #6)")
