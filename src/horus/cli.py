"""The ``horus`` command: one entrypoint, a subcommand per role or tool.

Each feature area registers its own subcommands from a small ``commands`` module (listed in
``COMMAND_MODULES``) that imports nothing heavy at registration time, so ``horus --help`` stays
fast and never needs torch or a cluster. A :class:`~horus.common.errors.HorusError` is printed
as one clear line (``horus: error: …``) with exit status 2, and so is an ``OSError`` that names
a file (an output path in a missing or read-only folder, a directory given as a file): that is
the user's path, not a bug. Other exceptions are bugs and keep their traceback. Every input
is validated before it is used (flags by :mod:`horus.common.flags`, settings by
:mod:`horus.common.settings`, files by :mod:`horus.common.documents`), so bad input never
reaches that point.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from horus import __version__
from horus.common.errors import HorusError
from horus.common.logging import setup_logging

# Modules exposing ``register(subparsers: argparse._SubParsersAction) -> None``.
COMMAND_MODULES = [
    "horus.devcluster.commands",
    "horus.operator.commands",
    "horus.deviceplugin.commands",
    "horus.dra.commands",
    "horus.agent.commands",
    "horus.predictor.commands",
    "horus.sim.commands",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horus",
        description=(
            "Horus: interference-aware GPU sharing for Kubernetes. It predicts what a deep-"
            "learning job will use from its model graph and places it where it slows its "
            "neighbours least."
        ),
    )
    parser.add_argument("--version", action="version", version=f"horus {__version__}")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(handler(args) or 0)
    except HorusError as exc:
        print(f"horus: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:
            raise
        print(f"horus: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
