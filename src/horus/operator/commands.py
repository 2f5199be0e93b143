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


def _run(args: argparse.Namespace) -> int:
    raise HorusError(
        "the kopf operator and scheduler extender is not implemented yet (tracked as issue #5)"
    )
