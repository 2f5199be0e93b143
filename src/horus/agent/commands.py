"""``horus agent …``: subcommands of this role (``python -m horus.agent`` runs ``agent run``).

Every setting of :class:`horus.agent.settings.AgentSettings` is a flag here and an environment
variable ``HORUS_AGENT_<FIELD>``; precedence is CLI > environment > ``--config`` file section
``agent`` > default. ``NODE_NAME`` (the downward-API convention of DaemonSets) sets
``node_name`` when neither ``--node-name`` nor ``HORUS_AGENT_NODE_NAME`` is given.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from horus.agent.settings import SECTION, AgentSettings
from horus.common.constants import NODE_NAME_ENV
from horus.common.settings import add_settings_flags, cli_values, env_var_name, load_settings

log = logging.getLogger("horus.agent")


def register(sub: Any) -> None:
    role = sub.add_parser("agent", help="the node sharing agent")
    rsub = role.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    run = rsub.add_parser(
        "run",
        help="run the node sharing agent",
        description=(
            "Samples the node's GPUs (NVML, or simulated for kwok nodes), exports Prometheus "
            "metrics, enforces memory shares (watchdog) and supervises MPS. Every flag also "
            "reads HORUS_AGENT_<FLAG>; precedence CLI > env > --config file > default."
        ),
    )
    run.add_argument("--config", type=Path, default=None, help="YAML file with an 'agent:' section")
    add_settings_flags(run, AgentSettings, SECTION)
    run.set_defaults(handler=_run)


def settings_from_args(
    args: argparse.Namespace, env: dict[str, str] | None = None
) -> AgentSettings:
    environ = dict(os.environ if env is None else env)
    cli = cli_values(args, AgentSettings)
    if cli.get("node_name") is None and env_var_name(SECTION, "node_name") not in environ:
        node = environ.get(NODE_NAME_ENV)
        if node and not cli.get("nodes") and not cli.get("node_selector"):
            environ[env_var_name(SECTION, "node_name")] = node
    return load_settings(AgentSettings, SECTION, cli=cli, env=environ, config_file=args.config)


def _run(args: argparse.Namespace) -> int:
    from horus.agent.agent import Agent
    from horus.agent.kube import AgentApi

    settings = settings_from_args(args)
    agent = Agent(settings, AgentApi.connect(settings.kubeconfig))
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent.start_metrics()
    agent.run(stop)
    return 0
