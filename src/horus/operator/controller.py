"""The operator process: one watch-fed view, one leader-elected reconcile loop, metrics.

The watches are the :class:`~horus.operator.view.ClusterView`'s (the Kubernetes client's watch,
list once and resume, relist only on expiry): the reconcile pass reads its snapshot from that
copy instead of LISTing the cluster, and its change handler *nudges* the loop (an
:class:`asyncio.Event`) only when something that matters to scheduling changed (a phase, a
binding, readiness, the GPU inventory, a class's value) — so our own status writes do not cause
endless passes. kopf runs the process (startup, cleanup, signals, login) with its resource
scanning off: its own watches re-LIST every time they end, which the view does not. No
finalizers, no kopf progress annotations, no kopf events are written: every write comes from
:class:`~horus.operator.reconcile.Reconciler`, and only while this replica holds the
``horus-operator`` Lease (:class:`~horus.operator.lease.LeaseElector`). With two replicas, one
writes; kill it and the other takes over within the lease duration.

Stopping (SIGTERM: a rolling update, a drain) is ours, not kopf's: kopf stops its own tasks
first and runs cleanup handlers only then, and meanwhile the leader went on placing (with the
settings ``helm upgrade`` had just replaced). Once kopf has started, :meth:`Controller.begin_stop`
answers the signal: no write from then on, the pass in flight ends (or is left) within
:data:`~horus.common.constants.OPERATOR_STOP_WAIT_SECONDS`, the Lease is released so the next
replica leads at once (client-go's ``ReleaseOnCancel``), and then kopf is told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horus.common import constants as c
from horus.common import heap
from horus.kube.client import api_client, load_default_config
from horus.operator.kueue.api import KubeKueueApi
from horus.operator.lease import LeaseElector
from horus.operator.metrics import OperatorMetrics
from horus.operator.model_reload import PredictorReloader, ReloadThread
from horus.operator.nudges import change_fingerprint
from horus.operator.settings import OperatorSettings
from horus.predictor.interface import Predictor
from horus.scheduler import SchedulerSettings
from horus.scheduler.types import MigrationSettings, PreemptionSettings

log = logging.getLogger(__name__)


def load_operator_predictor(settings: OperatorSettings) -> Predictor:
    """``settings.predictor`` when set (a :class:`ValidationError` naming the file if it is not
    a usable artifact), else the shipped model."""
    from horus.predictor import load_default_predictor, load_predictor

    if settings.predictor is None:
        return load_default_predictor()
    predictor = load_predictor(str(settings.predictor))
    log.info("predictor %s from %s", predictor.version, settings.predictor)
    return predictor


@dataclass
class Controller:
    """State shared by the kopf handlers and the loop (one per operator process)."""

    settings: OperatorSettings
    #: Thresholds of the scheduling core (the ``scheduler`` section the extender reads too).
    scheduler_settings: SchedulerSettings | None = None
    #: The planners' settings of run-time correction (``migration``/``preemption`` sections).
    correction: tuple[MigrationSettings, PreemptionSettings] | None = None
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    identity: str = ""
    nudge: asyncio.Event | None = None
    elector: LeaseElector | None = None
    reconciler: Any = None
    #: The predictor (``settings.predictor`` or the shipped one); loaded by :func:`run` before
    #: kopf starts, so a bad artifact stops the process with its message, or at :meth:`start`.
    predictor: Predictor | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    passes: int = 0
    #: Watches ``settings.predictor`` for a new model (``predictor_reload_seconds``).
    reloader: ReloadThread | None = None
    #: A reloaded model waiting for the current pass to end before it is used.
    _next_predictor: Predictor | None = None
    _fingerprints: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: The watch-fed copy of the cluster the passes read (started by :meth:`start`).
    view: Any = None
    #: Kueue's Workloads and AdmissionChecks, watch-fed (``settings.kueue_check`` only).
    kueue: KubeKueueApi | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    #: Set by :func:`run` when the process is ours to stop: the flag that stops kopf, set once
    #: the Lease is given up (:meth:`begin_stop`); None leaves stopping to kopf's caller.
    kopf_stop: asyncio.Event | None = None
    #: True from the stop signal on: no pass starts and the reconciler writes nothing.
    stopping: bool = False
    _step_down_task: asyncio.Task[None] | None = None
    _lease_pool: ThreadPoolExecutor | None = None
    #: Records each node's GPU UUIDs in the GPU identity registry (horus.operator.identities).
    identities: Any = None

    def __post_init__(self) -> None:
        self.metrics.gpus = self.settings.gpu_metrics
        if not self.identity:
            self.identity = (
                self.settings.identity
                or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            )

    def poke(self, key: str, fingerprint: tuple[Any, ...] | None) -> None:
        """Nudge the loop when ``key``'s fingerprint changed (None: it was deleted)."""
        if fingerprint is None:
            self._fingerprints.pop(key, None)
        elif self._fingerprints.get(key) == fingerprint:
            return
        else:
            self._fingerprints[key] = fingerprint
        if self.nudge is not None:
            self.nudge.set()

    # --- startup / loops ------------------------------------------------------------------
    async def start(self) -> None:
        from kubernetes import client

        from horus.operator.assignment_key import AssignmentKeySource
        from horus.operator.jobapi import KubeJobApi
        from horus.operator.reconcile import Reconciler, cleanup_workers
        from horus.operator.view import ClusterView

        s = self.settings
        self.nudge = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        # One connection pool for every thread that talks to the apiserver: the commit
        # chains and their replicas (2 × workers), the event posters (workers / 4), the
        # leftover deletions (workers / 4, at least 2), the Lease thread and the pass's own
        # lists. Smaller, and urllib3 would open and drop
        # extra connections under load ("Connection pool is full").
        api = api_client(
            s.kubeconfig or None,
            2 * s.workers + max(2, s.workers // 4) + cleanup_workers(s.workers) + 4,
        )
        key_file = Path(s.assignment_key_file) if s.assignment_key_file else None
        # The namespace first: the signing key's Secret lives there, and a first start whose
        # Secret create fails (namespace missing) places nothing until the key is read again.
        await asyncio.to_thread(_ensure_namespace, client.CoreV1Api(api), s.namespace)
        # Re-read every key_refresh_seconds: a rotated key (docs/operator.md) is used without a
        # restart, and a lost one pauses placement until it is back (assignment_key).
        key = await asyncio.to_thread(
            AssignmentKeySource,
            client.CoreV1Api(api),
            key_file,
            s.key_refresh_seconds,
            s.key_publish_delay,
        )
        if self.predictor is None:
            self.predictor = await asyncio.to_thread(load_operator_predictor, s)
        predictor = self.predictor
        await asyncio.to_thread(_ensure_extender_tls, client.CoreV1Api(api))
        self.elector = LeaseElector(
            client.CoordinationV1Api(api),
            s.namespace,
            s.lease_name,
            self.identity,
            s.lease_duration,
        )
        self.view = ClusterView(
            api,
            on_change=self._changed,
            claims=s.placement_path == c.PLACEMENT_PATH_DRA,
        )
        if not await asyncio.to_thread(self.view.start, 120.0):
            log.warning("the cluster view is not synced yet; passes wait for it")
        if s.kueue_check:  # Kueue's Workloads and AdmissionChecks, watch-fed like the view
            self.kueue = KubeKueueApi(api, on_change=self._changed)
            self.kueue.start()
        from horus.operator.identities import IdentityRecorder, KubeIdentityApi

        self.identities = IdentityRecorder(
            KubeIdentityApi(api, s.namespace), self._published, self.may_write, self.identity
        )
        self.reconciler = Reconciler(
            KubeJobApi(api, self.view),
            predictor,
            key,
            policy=s.policy,
            workers=s.workers,
            metrics=self.metrics,
            is_leader=self.may_write,
            identity=self.identity,
            scheduler_settings=self.scheduler_settings,
            progress_deadline=s.progress_deadline,
            correction=self.correction,
            correction_period=s.correction_period,
            restart_seconds=s.restart_seconds,
            placement_path=s.placement_path,
            lifecycle_events=s.lifecycle_events,
            max_jobs_per_pass=s.max_jobs_per_pass,
            kueue=self.kueue,
        )
        # the live state leaves out a GPU a node publishes that is registered to another
        self.reconciler.live_source.identities = lambda: self.identities.registry
        self.metrics.set_predictor(predictor.version)
        self.metrics.watch_view(self.view.counts)
        self.metrics.serve(s.metrics_port, s.metrics_host)
        self.tasks = [
            asyncio.create_task(self._lease_loop(), name="horus-lease"),
            asyncio.create_task(self._reconcile_loop(), name="horus-reconcile"),
            asyncio.create_task(self._release_loop(), name="horus-heap"),
            asyncio.create_task(self._identities_loop(), name="horus-gpu-identities"),
        ]
        if s.predictor is not None and s.predictor_reload_seconds > 0:
            loop = asyncio.get_running_loop()
            self.reloader = ReloadThread(
                PredictorReloader(
                    s.predictor,
                    predictor,
                    on_result=lambda result, _p: self.metrics.predictor_reloads.labels(
                        result=result
                    ).inc(),
                ),
                s.predictor_reload_seconds,
                lambda new: loop.call_soon_threadsafe(self._offer_predictor, new),
            )
            self.reloader.start()
        if self.kopf_stop is not None:
            # kopf set its own signal handlers before it ran this startup handler: replace them.
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self.begin_stop)
        log.info(
            "operator %s started: policy %s, lease %s/%s (%.0fs), metrics port %s",
            self.identity,
            s.policy,
            s.namespace,
            s.lease_name,
            s.lease_duration,
            s.metrics_port or "off",
        )

    def may_write(self) -> bool:
        """The reconciler's gate before every write: leader, and not told to stop."""
        return not self.stopping and self.elector is not None and self.elector.is_leader()

    def begin_stop(self) -> None:
        """The stop signal (on the event loop): no write from now on, then step down."""
        if self.stopping:
            return
        self.stopping = True
        log.info("operator %s stopping: no more writes, giving the Lease up", self.identity)
        if self.nudge is not None:
            self.nudge.set()  # a loop waiting for work sees the stop at once
        self._step_down_task = asyncio.get_running_loop().create_task(self._step_down())

    async def _step_down(self) -> None:
        """Let the pass in flight end (its writes are off already; this lets requests on the
        wire be answered) for at most OPERATOR_STOP_WAIT_SECONDS, stop renewing (after a
        renewal in flight), release the Lease, then stop kopf."""
        passes = [t for t in self.tasks if t.get_name() == "horus-reconcile"]
        if passes:
            _, left = await asyncio.wait(passes, timeout=c.OPERATOR_STOP_WAIT_SECONDS)
            if left:
                log.warning(
                    "the pass in flight did not end in %.0fs; releasing the Lease anyway "
                    "(it writes nothing more)",
                    c.OPERATOR_STOP_WAIT_SECONDS,
                )
        for t in self.tasks:
            if t.get_name() == "horus-lease":
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        if self.elector is not None:
            await asyncio.to_thread(self.elector.release)  # waits for a renewal in flight
        self.metrics.leader.set(0)
        if self.kopf_stop is not None:
            self.kopf_stop.set()

    async def stop(self) -> None:
        self.begin_stop()
        if self._step_down_task is not None:
            await self._step_down_task
        if self.reloader is not None:
            await asyncio.to_thread(self.reloader.stop)
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._lease_pool is not None:
            self._lease_pool.shutdown(wait=False, cancel_futures=True)
        if self.reconciler is not None:
            self.reconciler.close()
        if self.view is not None:
            self.view.stop()
        if self.kueue is not None:
            self.kueue.stop()

    def _changed(self, kind: str, key: str, old: Any, new: Any) -> None:
        """An object in the view changed (an informer thread): nudge the loop when it is one
        whose change matters to placement."""
        fingerprint = change_fingerprint(kind, new if new is not None else old)
        if not isinstance(fingerprint, tuple) or self._loop is None:
            return
        self._loop.call_soon_threadsafe(
            self.poke, f"{kind}/{key}", None if new is None else fingerprint
        )

    async def _lease_loop(self) -> None:
        assert self.elector is not None and self.nudge is not None
        was = False
        # Its own thread: a renewal must never queue behind a long reconcile pass.
        lease_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="horus-lease")
        self._lease_pool = lease_thread
        loop = asyncio.get_running_loop()
        while not self.stopping:
            try:
                now = await loop.run_in_executor(lease_thread, self.elector.tick)
            except Exception:
                log.exception("lease round failed")
                now = self.elector.is_leader()
            self.metrics.leader.set(1 if now else 0)
            if was and not now:
                self.metrics.clear_leader_state()  # a follower reports no queue or phases
            if now and not was:
                self.nudge.set()  # new leader: reconcile at once
            was = now
            await asyncio.sleep(self.elector.retry_period)

    def _offer_predictor(self, new: Predictor) -> None:
        """A reloaded model (from the reload thread, on the event loop): the reconcile loop
        switches to it between passes."""
        self._next_predictor = new
        if self.nudge is not None:
            self.nudge.set()

    def _switch_predictor(self) -> None:
        new, self._next_predictor = self._next_predictor, None
        if new is None or self.reconciler is None:
            return
        self.predictor = new
        self.reconciler.set_predictor(new)
        self.metrics.set_predictor(new.version)

    def _published(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The view's nodes and (on the DRA path) ResourceSlices, for the identity registry."""
        slices = self.view.slices.items() if self.view.slices is not None else None
        return self.view.nodes.items(), slices

    async def _identities_loop(self) -> None:
        """Every GPU_IDENTITIES_SYNC_SECONDS, once the view is synced: one round of the GPU
        identity registry (horus.operator.identities; only the leader writes)."""
        while not self.stopping:
            if self.identities is not None and self.view is not None and self.view.synced:
                try:
                    await asyncio.to_thread(self.identities.tick)
                except Exception:
                    log.exception("GPU identity registry round failed; retrying")
            await asyncio.sleep(c.GPU_IDENTITIES_SYNC_SECONDS)

    async def _release_loop(self) -> None:
        """Every ``HEAP_RELEASE_SECONDS``, give the heap memory freed since back to the system
        when the view changed (:mod:`horus.common.heap`): without it the process keeps the
        memory of every burst of jobs after the jobs are gone, leader or not."""
        releaser = heap.Releaser()
        while not self.stopping:
            await asyncio.sleep(c.HEAP_RELEASE_SECONDS)
            await self.release_heap(releaser)

    async def release_heap(self, releaser: heap.Releaser) -> bool:
        """One tick of :meth:`_release_loop`: release when the passes or the view moved since
        the last release (timed in ``horus_operator_heap_release_seconds``); whether it did."""
        if self.view is None or not releaser.due((self.passes, self.view.generation)):
            return False
        t0 = time.perf_counter()
        if await asyncio.to_thread(heap.release):
            self.metrics.heap_release.observe(time.perf_counter() - t0)
        return True

    async def _reconcile_loop(self) -> None:
        assert self.elector is not None and self.nudge is not None
        s = self.settings
        while not self.stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.nudge.wait(), timeout=s.resync_period)
            if s.debounce:
                await asyncio.sleep(s.debounce)
            self.nudge.clear()
            self._switch_predictor()  # between passes: never under a pass in flight
            if not self.may_write():
                continue
            try:
                report = await asyncio.to_thread(self.reconciler.run_pass)
            except Exception:
                log.exception("reconcile pass failed; retrying")
                await asyncio.sleep(1.0)
                self.nudge.set()
                continue
            self.passes += 1
            if (
                report.placed
                or report.pods_created
                or report.pods_deleted
                or report.status_writes
                or report.conflicts
            ):
                log.info(
                    "pass %d: placed %d, refused %d, pods created %d bound %d deleted %d, "
                    "status writes %d, conflicts %d (%.2fs: %s; live state %s)",
                    self.passes,
                    report.placed,
                    report.refused,
                    report.pods_created,
                    report.pods_bound,
                    report.pods_deleted,
                    report.status_writes,
                    report.conflicts,
                    report.seconds,
                    ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items()),
                    report.live_state,
                )
            for problem in report.problems[:5]:
                log.warning("%s", problem)
            if report.conflicts or report.held_back:
                self.nudge.set()  # a lost race, or jobs past the pass's cap: look again
            elif report.deferred:  # Running writes held back while placing: come back for them
                asyncio.get_running_loop().call_later(1.0, self.nudge.set)


def _ensure_namespace(core: Any, namespace: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status not in (403, 409):
            log.warning("cannot create namespace %s: HTTP %s", namespace, exc.status)


def _ensure_extender_tls(core: Any) -> None:
    """Create the extender's TLS Secret when absent (horus.operator.extender.tls), so it
    exists before the Horus scheduler pod mounts its client certificate. The operator places
    DLJobs without it, so a failure is logged, never fatal (the extender says so too)."""
    from horus.common.errors import ConfigError
    from horus.operator.extender.tls import load_or_create_tls_secret

    try:
        load_or_create_tls_secret(core)
    except ConfigError as exc:
        log.warning("extender TLS Secret: %s", exc)


# --- kopf wiring -------------------------------------------------------------------------------


def connection_info() -> Any:
    """kopf credentials from the already loaded client configuration.

    kopf's own ``login_via_client`` reloads the configuration from the default places, which
    ignores ``--kubeconfig``; this reads what :func:`load_kube_config` loaded instead.
    """
    import kopf
    from kubernetes import client

    cfg = client.Configuration.get_default_copy()
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    parts = header.split(" ", 1) if header else []
    scheme, token = (
        (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    )
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


def build_registry(ctl: Controller) -> Any:
    """A kopf registry that runs ``ctl`` (its watches are the view's, not kopf's)."""
    import kopf

    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # all Events come from the reconciler
        settings.scanning.disabled = True  # no kopf watches: the view keeps the cluster
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 30
        await ctl.start()

    @kopf.on.cleanup(registry=registry)
    async def _cleanup(**_: Any) -> None:
        await ctl.stop()

    @kopf.on.login(registry=registry)
    def _login(**_: Any) -> Any:
        return connection_info()

    return registry


def run(
    settings: OperatorSettings,
    stop_flag: Any = None,
    ready_flag: Any = None,
    scheduler_settings: SchedulerSettings | None = None,
    correction: tuple[MigrationSettings, PreemptionSettings] | None = None,
) -> None:
    """Run the operator until stopped (SIGINT/SIGTERM, or ``stop_flag`` set)."""
    import kopf

    predictor = load_operator_predictor(settings)  # a bad artifact fails here, with its name
    load_default_config(settings.kubeconfig or None)  # kopf logs in with the default
    # kopf logs every handler call at INFO; ours only nudge a loop, so keep kopf to warnings.
    for name in ("kopf.objects", "kopf.activities.startup", "kopf.activities.cleanup"):
        logging.getLogger(name).setLevel(logging.WARNING)
    ctl = Controller(settings, scheduler_settings, correction, predictor=predictor)
    if stop_flag is None:  # the process is ours to stop: Controller.begin_stop does it
        stop_flag = ctl.kopf_stop = asyncio.Event()
    registry = build_registry(ctl)
    started = time.monotonic()
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=True,
            standalone=True,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    )
    log.info("operator %s stopped after %.0fs", ctl.identity, time.monotonic() - started)
