"""``horus operator extender``: wire settings, the apiserver client, the assignment key and the
predictor into a running :class:`~horus.operator.extender.ExtenderServer`.

Kept apart from :mod:`horus.operator.extender` so the server stays testable without a process
around it (tests build an ``Extender`` on a fake cluster), and from ``commands.py`` so that
``horus --help`` never imports numpy or the Kubernetes client.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.common import heap
from horus.common.settings import load_settings
from horus.kube.client import api_client
from horus.operator.assignment_key import AssignmentKeySource
from horus.operator.extender.decisions import Extender
from horus.operator.extender.http import ExtenderServer
from horus.operator.extender.settings import ExtenderSettings
from horus.operator.extender.source import KubeClusterSource
from horus.operator.extender.tls import TlsSource
from horus.operator.view import ClusterView
from horus.scheduler import SchedulerSettings

log = logging.getLogger(__name__)


def build_extender(
    settings: ExtenderSettings, scheduler_settings: SchedulerSettings, api_client: Any
) -> Extender:
    """The :class:`Extender` these settings describe, on the live cluster."""
    from kubernetes import client

    from horus.predictor import load_default_predictor, load_predictor

    predictor = (
        load_predictor(str(settings.predictor))
        if settings.predictor is not None
        else load_default_predictor()
    )
    # Re-read every 30 s: a rotated key is used without a restart (docs/operator.md).
    keys = AssignmentKeySource(client.CoreV1Api(api_client), settings.key_file)
    # One watch-fed copy of nodes, pods and DLJobs: filter and prioritize read it instead of
    # LISTing the cluster per request (horus.operator.view).
    view = ClusterView(
        api_client,
        claims=settings.placement_path == c.PLACEMENT_PATH_DRA,
        priority_classes=False,
        change_log=True,  # the live state follows the watch's changes (LiveDelta)
    )
    if not view.start(120.0):
        log.warning("the cluster view is not synced yet; requests wait for it")
    return Extender(
        KubeClusterSource(api_client, view),
        predictor,
        key=keys,
        policy=settings.policy,
        scheduler_settings=scheduler_settings,
        cache_seconds=settings.cache_seconds,
        verify_binds=settings.verify_binds,
    )


def close_extender(extender: Extender) -> None:
    """Stop the watches :func:`build_extender` started: their threads would outlive the
    server and keep retrying (and logging) against an apiserver that is gone."""
    view = getattr(extender.source, "view", None)
    if view is not None:
        view.stop()


def build_tls(settings: ExtenderSettings, api_client: Any) -> TlsSource:
    """The verbs' TLS: the three files when given, else the Secret (created when absent)."""
    from kubernetes import client

    files = settings.tls_files
    return TlsSource(
        None if files is not None else client.CoreV1Api(api_client),
        files,
        refresh_seconds=settings.tls_reload_seconds,
    )


def run_extender(cli: Mapping[str, Any], config_file: Path | None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status."""
    heap.limit_arenas(c.MALLOC_ARENAS)  # before any thread: see horus.common.heap
    settings = load_settings(ExtenderSettings, "extender", cli=cli, config_file=config_file)
    scheduler_settings = load_settings(SchedulerSettings, "scheduler", config_file=config_file)
    api = api_client(settings.kubeconfig)
    extender = build_extender(settings, scheduler_settings, api)
    extender.warm_up()  # /readyz says 503 until the live state is built
    server = ExtenderServer(
        extender,
        settings.host,
        settings.port,
        settings.max_body_bytes,
        tls=build_tls(settings, api).context,
        health_port=settings.health_port,
    )
    stop = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping the extender", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    reload = None
    if settings.predictor is not None and settings.predictor_reload_seconds > 0:
        from horus.operator.model_reload import PredictorReloader, ReloadThread

        reloader = PredictorReloader(settings.predictor, extender.predictor)
        reload = ReloadThread(reloader, settings.predictor_reload_seconds, extender.set_predictor)
        reload.start()
    server.start()
    log.info(
        "scheduler extender (policy %s) listening on %s:%d (TLS, client certificates "
        "required) — verbs filter, prioritize, bind; health and metrics on plain HTTP :%s",
        settings.policy,
        settings.host,
        server.port,
        server.health_port,
    )
    stop.wait()
    if reload is not None:
        reload.stop()
    server.close()
    close_extender(extender)
    return 0
