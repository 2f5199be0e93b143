"""``horus operator …``: subcommands of this role."""

from __future__ import annotations

import argparse
from typing import Any

from horus.common.constants import GPU_METRICS_MODES, MALLOC_ARENAS, PLACEMENT_PATHS


def register(sub: Any) -> None:
    role = sub.add_parser("operator", help="the kopf operator and scheduler extender")
    rsub = role.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    _register_run(rsub)
    _register_extender(rsub)


# --- horus operator run (the kopf operator; see horus.operator.controller) -----------------------


def _register_run(rsub: Any) -> None:
    from pathlib import Path

    run = rsub.add_parser(
        "run",
        help="run the kopf operator (DLJobs: validate, predict, place, bind)",
        description=(
            "Watches DLJobs, pods and GPU nodes; the replica holding the Lease places queued "
            "DLJobs and binds their pods. Every flag also reads HORUS_OPERATOR_<FLAG> and the "
            "'operator' section of --config (CLI > environment > file > default). The "
            "scheduling thresholds come from the 'scheduler' section and HORUS_SCHEDULER_<FIELD>, "
            "as for the extender."
        ),
    )
    run.add_argument("--config", type=Path, default=None, help="Horus YAML config file")
    run.add_argument("--namespace", default=None, help="namespace of the Lease (horus-system)")
    run.add_argument("--lease-name", default=None, help="Lease name (horus-operator)")
    run.add_argument("--lease-duration", type=float, default=None, help="seconds (15)")
    run.add_argument("--policy", default=None, help="placement policy (horus)")
    run.add_argument("--metrics-port", type=int, default=None, help="0 disables (8080)")
    run.add_argument("--metrics-host", default=None, help="metrics listen address (0.0.0.0)")
    run.add_argument("--resync-period", type=float, default=None, help="seconds (30)")
    run.add_argument("--kubeconfig", default=None, help="default in-cluster or $KUBECONFIG")
    run.add_argument("--identity", default=None, help="name in the Lease (<host>-<pid>)")
    run.add_argument("--workers", type=int, default=None, help="job commit chains in flight (16)")
    run.add_argument("--assignment-key-file", default=None, help="default: the Secret")
    run.add_argument(
        "--key-refresh-seconds", type=float, default=None, help="re-read the signing key (30)"
    )
    run.add_argument(
        "--key-publish-delay",
        type=float,
        default=None,
        help="seconds a newly published key waits before it signs (60)",
    )
    run.add_argument("--debounce", type=float, default=None, help="seconds (0.05)")
    run.add_argument(
        "--predictor", default=None, help="predictor artifact, .json or .json.gz (shipped)"
    )
    run.add_argument(
        "--predictor-reload-seconds",
        type=float,
        default=None,
        help="check the --predictor file for a new model this often; 0: never (30)",
    )
    run.add_argument(
        "--correction-period",
        type=float,
        default=None,
        help="seconds between rounds of moves and preemptions; 0: off (30)",
    )
    run.add_argument(
        "--restart-seconds",
        type=float,
        default=None,
        help="a moved job's restart time, part of its move cost (60)",
    )
    run.add_argument(
        "--progress-deadline",
        type=float,
        default=None,
        help="seconds a placed job may take to start before its GPU share is given back (300)",
    )
    run.add_argument(
        "--placement-path",
        choices=PLACEMENT_PATHS,
        default=None,
        help="dra: one ResourceClaim per replica; deviceplugin: extended resources (deviceplugin)",
    )
    run.add_argument(
        "--lifecycle-events",
        choices=("true", "false"),
        default=None,
        help="also post the Scheduled/Running/Succeeded Events; the conditions say it (false)",
    )
    run.add_argument(
        "--kueue-check",
        choices=("true", "false"),
        default=None,
        help="answer Kueue AdmissionChecks of controller horus.io/gpu-placement (dra path; true)",
    )
    run.add_argument(
        "--max-jobs-per-pass",
        type=int,
        default=None,
        help="new DLJobs admitted, and jobs placed, per pass at most; the rest next pass (1000)",
    )
    run.add_argument(
        "--gpu-metrics",
        choices=GPU_METRICS_MODES,
        default=None,
        help="which GPUs get a predicted-utilisation series: all, busy (with a share), off (all)",
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from horus.common import heap
    from horus.common.settings import load_settings
    from horus.operator.controller import run as run_operator
    from horus.operator.settings import SECTION, OperatorSettings
    from horus.scheduler import SchedulerSettings
    from horus.scheduler.types import MigrationSettings, PreemptionSettings

    fields = (
        "namespace",
        "lease_name",
        "lease_duration",
        "policy",
        "metrics_port",
        "metrics_host",
        "resync_period",
        "kubeconfig",
        "identity",
        "workers",
        "assignment_key_file",
        "key_refresh_seconds",
        "key_publish_delay",
        "debounce",
        "predictor",
        "predictor_reload_seconds",
        "progress_deadline",
        "correction_period",
        "restart_seconds",
        "placement_path",
        "lifecycle_events",
        "kueue_check",
        "max_jobs_per_pass",
        "gpu_metrics",
    )
    cli = {f: getattr(args, f) for f in fields}
    heap.limit_arenas(MALLOC_ARENAS)  # before any thread: see horus.common.heap
    settings = load_settings(OperatorSettings, SECTION, cli=cli, config_file=args.config)
    # The scheduling thresholds: the 'scheduler' section and HORUS_SCHEDULER_* (as the
    # extender reads them), so one config places DLJobs and plain pods by the same rule.
    scheduler_settings = load_settings(SchedulerSettings, "scheduler", config_file=args.config)
    # Run-time correction: the 'migration' and 'preemption' sections (HORUS_MIGRATION_* …).
    migration = load_settings(MigrationSettings, "migration", config_file=args.config)
    preemption = load_settings(PreemptionSettings, "preemption", config_file=args.config)
    run_operator(
        settings,
        scheduler_settings=scheduler_settings,
        correction=(migration, preemption),
    )
    return 0


# --- horus operator extender (scheduler extender; see horus.operator.extender) ------------------


def _register_extender(rsub: Any) -> None:
    from pathlib import Path

    ext = rsub.add_parser(
        "extender",
        help="serve the kube-scheduler extender (filter/prioritize/bind) over mutual TLS",
        description=(
            "Lets the stock kube-scheduler place plain Pods that request horus.io/gpu-core / "
            "horus.io/gpu-memory and carry a horus.io/graph-profile annotation. Configure the "
            "scheduler with manifests/scheduler/horus-extender-config.yaml: the verbs are served "
            "over TLS and only a caller with a client certificate from the client CA gets in "
            "(docs/extender.md). Every flag also "
            "reads HORUS_EXTENDER_<FLAG> and the 'extender' section of --config "
            "(CLI > environment > file > default)."
        ),
    )
    ext.add_argument("--config", type=Path, default=None, help="Horus YAML config file")
    ext.add_argument("--host", default=None, help="listen address (default 0.0.0.0)")
    ext.add_argument("--port", type=int, default=None, help="TLS port of the verbs (default 8888)")
    ext.add_argument(
        "--health-port",
        type=int,
        default=None,
        help="plain-HTTP port for health and /metrics, GET only (default 8889)",
    )
    ext.add_argument(
        "--tls-cert-file", default=None, help="server certificate PEM (default: the Secret)"
    )
    ext.add_argument("--tls-key-file", default=None, help="server key PEM (default: the Secret)")
    ext.add_argument(
        "--tls-client-ca-file",
        default=None,
        help="CA(s) whose client certificates may call the verbs (default: the Secret)",
    )
    ext.add_argument(
        "--tls-reload-seconds",
        type=float,
        default=None,
        help="re-read the TLS files or Secret this often; 0: never (30)",
    )
    ext.add_argument("--policy", default=None, help="placement policy (default horus)")
    ext.add_argument(
        "--kubeconfig", default=None, help="kubeconfig (default $KUBECONFIG/in-cluster)"
    )
    ext.add_argument("--key-file", default=None, help="signing key file, PEM (default: the Secret)")
    ext.add_argument("--predictor", default=None, help="predictor artifact (default: shipped)")
    ext.add_argument(
        "--predictor-reload-seconds",
        type=float,
        default=None,
        help="check the --predictor file for a new model this often; 0: never (30)",
    )
    ext.add_argument("--cache-seconds", type=float, default=None, help="filter→prioritize reuse")
    ext.add_argument(
        "--placement-path",
        choices=PLACEMENT_PATHS,
        default=None,
        help="the path that carries a share to the GPU, as the operator's (deviceplugin)",
    )
    ext.set_defaults(handler=_extender)


def _extender(args: argparse.Namespace) -> int:
    from horus.operator.extender.main import run_extender

    cli = {
        "host": args.host,
        "port": args.port,
        "health_port": args.health_port,
        "tls_cert_file": args.tls_cert_file,
        "tls_key_file": args.tls_key_file,
        "tls_client_ca_file": args.tls_client_ca_file,
        "tls_reload_seconds": args.tls_reload_seconds,
        "policy": args.policy,
        "kubeconfig": args.kubeconfig,
        "key_file": args.key_file,
        "predictor": args.predictor,
        "predictor_reload_seconds": args.predictor_reload_seconds,
        "cache_seconds": args.cache_seconds,
        "placement_path": args.placement_path,
    }
    return run_extender(cli, args.config)
