"""``horus agent …``: subcommands of this role."""

from __future__ import annotations

import argparse
from typing import Any

from horus.common.errors import HorusError


def register(sub: Any) -> None:
    role = sub.add_parser("agent", help="the node sharing agent")
    rsub = role.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    run = rsub.add_parser("run", help="run the node sharing agent")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    raise HorusError("the node sharing agent is not implemented yet (tracked as issue #6)")
