"""The agent's loop: every ``interval_seconds`` sample each served node, then act on the sample.

One cycle, per node: list the node's pods (one API call), keep the Running ones with a valid
(and, with a key, verified) assignment, sample them through the node's backend, and hand the
sample to the exporter (new snapshot), the memory watchdog and the feedback statistics. Every
``feedback_interval_seconds`` the DLJobs' ``status.observed`` is merge-patched; pods that left
become training rows. With ``enforcement: mps`` the MPS control daemon is checked (and restarted)
each cycle.

Failure policy, because a node agent that crash-loops helps nobody: a backend that cannot start
(NVML absent) leaves the agent running with ``horus_agent_gpu_backend_up 0`` and a clear log
line, retried every ``nvml_retry_seconds``; an API error fails one cycle (logged), not the
process; a malformed pod is skipped with a log line naming it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from horus.agent.attribution import progress_contexts
from horus.agent.backend import BackendUnavailable, NodeSample, NodeView, UsageSampler
from horus.agent.claims import ClaimedPod, ClaimShares
from horus.agent.exporter import Snapshot, make_registry
from horus.agent.feedback import (
    PAIR_FILE_COLUMNS,
    ROW_COLUMNS,
    Feedback,
    PodStats,
    append_rows,
    pair_rows,
    training_row,
)
from horus.agent.jobinfo import JobLookups
from horus.agent.kube import AgentApi, KubeActions
from horus.agent.mps import MpsSupervisor
from horus.agent.nvml import NvmlBackend
from horus.agent.pods import PodInfo, SkipLog, parse_pod
from horus.agent.progress import Context
from horus.agent.settings import AgentSettings
from horus.agent.simulated import SimulatedBackend
from horus.agent.watchdog import MemoryWatchdog
from horus.api.assignment import GpuAssignment
from horus.api.inventory import decode_inventory
from horus.api.signing import KeyFileRing, KeyRing, VerifyKeys
from horus.common import constants as c
from horus.common.errors import ConfigError, HorusError
from horus.kube.errors import ApiError
from horus.predictor.interface import GraphProfile, Predictor
from horus.progress.mount import progress_dir, remove_stale
from horus.progress.reader import (
    ProgressError,
    ProgressRecord,
    read_progress,
    write_simulated_speed,
)
from horus.scheduler import job_kind

log = logging.getLogger("horus.agent")

#: Progress directories of pods gone from the node are removed once untouched this long (a pod
#: whose directory the device plugin just made may not be Running yet).
PROGRESS_DIR_TTL = 600.0


def _default_predictor() -> Predictor | None:
    from horus.predictor import load_default_predictor

    return load_default_predictor()


class Agent:
    """One agent process serving one node (or, simulated, several)."""

    def __init__(
        self,
        settings: AgentSettings,
        kube: AgentApi,
        nvml_factory: Callable[[], UsageSampler] | None = None,
        predictor: Callable[[], Predictor | None] | None = _default_predictor,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.registry, self.collector = make_registry()
        self.skips = SkipLog()
        #: the pods' graph profiles and their DLJobs' replica counts, cached
        self.jobs = JobLookups(kube, self.skips)
        self._keys = (
            KeyFileRing(settings.assignment_key_file) if settings.assignment_key_file else None
        )
        self.key: KeyRing | None = None
        #: pod UID → the last assignment of it that verified (horus.agent.pods._assignment)
        self.verified: dict[str, GpuAssignment] = {}
        if self._keys is not None:
            try:
                self.key = self._keys.ring()
            except ConfigError as exc:  # not published yet (first install): verify nothing
                log.warning("%s; no assignment verifies until the keys are published", exc)
                self.key = KeyRing(VerifyKeys(), None, "no published keys yet")
        self.simulated = SimulatedBackend(
            seed=settings.seed,
            noise=settings.noise,
            cap_to_core_share=settings.enforcement == "mps",
            predictor=predictor,
        )
        self._nvml_factory = nvml_factory or (lambda: NvmlBackend(settings.proc_root))
        self._nvml: UsageSampler | None = None
        self._nvml_next_try = 0.0
        self._nvml_error = ""
        self.watchdog = MemoryWatchdog(settings.watchdog, settings.grace_seconds, KubeActions(kube))
        self.feedback = Feedback()
        self._last_feedback = time.monotonic()
        self.mps = (
            MpsSupervisor(
                settings.mps_control, settings.mps_pipe_directory, settings.mps_log_directory
            )
            if settings.enforcement == "mps"
            else None
        )
        self.last_snapshot = Snapshot()
        self.rows_written = 0
        self.pair_rows_written = 0
        self._nodes_cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._sim_speed_written: dict[str, float] = {}
        #: the dra path: shares from the claims reserved for the node's pods (agent/claims.py)
        self.dra = settings.placement_path == c.PLACEMENT_PATH_DRA
        self.claims = ClaimShares(kube, self.skips)
        self._reported_joined: set[str] = set()
        self._progress_cleaned = time.monotonic()

    # --- backends --------------------------------------------------------------------------

    def _nvml_backend(self) -> UsageSampler | None:
        if self._nvml is not None:
            return self._nvml
        now = time.monotonic()
        if now < self._nvml_next_try:
            return None
        self._nvml_next_try = now + self.settings.nvml_retry_seconds
        try:
            self._nvml = self._nvml_factory()
            log.info("NVML backend ready")
            self._nvml_error = ""
        except BackendUnavailable as exc:
            self._nvml_error = str(exc)
            log.error(
                "%s — the agent keeps running (metrics %s=0) and retries in %.0fs",
                exc,
                c.METRIC_AGENT_BACKEND_UP,
                self.settings.nvml_retry_seconds,
            )
        return self._nvml

    def _backend_for(self, node: dict[str, Any]) -> tuple[str, UsageSampler | None]:
        choice = self.settings.backend
        is_kwok = (node.get("metadata", {}).get("annotations") or {}).get(
            c.KWOK_NODE_ANNOTATION
        ) == c.KWOK_NODE_ANNOTATION_VALUE
        if choice == "simulated" or (choice == "auto" and (is_kwok or len(self.node_names()) > 1)):
            return c.BACKEND_SIMULATED, self.simulated
        return c.BACKEND_NVML, self._nvml_backend()

    # --- nodes, pods, profiles ---------------------------------------------------------------

    def node_names(self) -> list[str]:
        if self.settings.node_selector:
            return self.kube.node_names(self.settings.node_selector)
        return self.settings.node_list

    def _node(self, name: str) -> dict[str, Any] | None:
        now = time.monotonic()
        hit = self._nodes_cache.get(name)
        if hit is None or now - hit[0] > 30.0:
            hit = (now, self.kube.node(name))
            self._nodes_cache[name] = hit
        return hit[1]

    def _profile(self, pod: PodInfo) -> GraphProfile | None:
        """The pod's graph profile: its DLJob's (inline or ConfigMap), or its own annotation."""
        return self.jobs.profile(pod)

    # --- the cycle -------------------------------------------------------------------------

    def cycle(self) -> Snapshot:
        started = time.perf_counter()
        snap = Snapshot()
        present: list[str] = []
        for name in self.node_names():
            try:
                sample = self._sample_node(name, snap)
            except (ApiError, HorusError) as exc:
                log.warning("node %s: cycle failed: %s", name, exc)
                continue
            except Exception as exc:  # a bug or a hostile object: this node waits, others go on
                self.skips.warn(
                    f"node:{name}:{type(exc).__name__}",
                    f"node {name}: cycle failed ({type(exc).__name__}: {exc}); other nodes "
                    "go on, this one is retried every cycle (logged once)",
                )
                continue
            if sample is None:
                continue
            snap.samples.append(sample)
            for uid, ps in sample.pods.items():
                pod = snap.pods[uid]
                present.append(uid)
                self.watchdog.check(pod, ps.memory_used_bytes, sample.backend)
                gpu = next(
                    (g.model for g in sample.gpus if g.index == pod.assignment.gpu_index), ""
                )
                self.feedback.add(pod, gpu, sample.backend, ps.utilization, ps.memory_used_bytes)
            self._pair_samples(sample, snap)
            self._progress_samples(sample, snap)
        snap.pairs = {uid: r for uid in present if (r := self.feedback.readings(uid))}
        self.watchdog.forget(present)
        self._forget_progress(present)
        self.verified = {uid: a for uid, a in self.verified.items() if uid in snap.pods}
        self._write_rows(self.feedback.finished(present))
        if time.monotonic() - self._last_feedback >= self.settings.feedback_interval_seconds:
            self.publish_observed()
        if self.mps is not None:
            self.mps.check()
            snap.mps_restarts = self.mps.restarts
        snap.evictions = dict(self.watchdog.evictions)
        snap.cycle_seconds = time.perf_counter() - started
        self.collector.update(snap)
        self.last_snapshot = snap
        return snap

    def _pair_samples(self, sample: NodeSample, snap: Snapshot) -> None:
        """Feed each GPU's Horus pods (alone, or in a pair) to the pair-speed estimates."""
        on_gpu: dict[int, list[PodInfo]] = {}
        for uid in sample.pods:
            pod = snap.pods[uid]
            on_gpu.setdefault(pod.assignment.gpu_index, []).append(pod)
        models = {g.index: g.model for g in sample.gpus}
        for index, pods in on_gpu.items():
            group: list[tuple[str, str | None, float | None]] = []
            for pod in pods:
                kind = None
                if len(pods) == 2:  # a neighbour's kind is needed only in a pair
                    profile = self._profile(pod)
                    if profile is not None:
                        kind = job_kind(profile)
                        self.feedback.pairs.know(kind, profile)
                group.append((pod.uid, kind, sample.pods[pod.uid].utilization))
            self.feedback.pairs.add(models.get(index, ""), group)

    # --- progress --------------------------------------------------------------------------

    def _progress_dir(self, uid: str) -> Path | None:
        if self.settings.progress_root is None:
            return None
        try:
            return progress_dir(self.settings.progress_root, uid)
        except ValueError:  # not a Kubernetes UID (tests' stand-ins): no directory
            return None

    def _read_progress(self, pod: PodInfo) -> ProgressRecord | None:
        where = self._progress_dir(pod.uid)
        if where is None:
            return None
        try:
            return read_progress(where)
        except ProgressError as exc:
            self.skips.warn(
                pod.uid,
                f"pod {pod.key}: progress file refused ({exc}); its pair speeds come from "
                "utilisation until it writes a valid one",
            )
        except OSError as exc:
            self.skips.warn(pod.uid, f"pod {pod.key}: progress directory unreadable ({exc})")
        return None

    def _replica_count(self, pod: PodInfo) -> int | None:
        """How many replicas the pod's DLJob has (1 for a plain pod; None: unknown)."""
        return self.jobs.replica_count(pod)

    def _contexts(self, sample: NodeSample, snap: Snapshot) -> dict[str, Context | None]:
        """Per pod on this node, the context its progress window is attributed to, or None
        (:func:`horus.agent.attribution.progress_contexts`)."""
        return progress_contexts(sample, snap, self._replica_count, self._profile)

    def _progress_samples(self, sample: NodeSample, snap: Snapshot) -> None:
        """Read each pod's progress and feed the windows (:mod:`horus.agent.progress`); on
        simulated GPUs first hand each pod its simulated speed (SIMULATION ONLY)."""
        if self.settings.progress_root is None:
            return
        if sample.backend == c.BACKEND_SIMULATED:
            self._write_simulated_speeds(sample)
        records = {uid: self._read_progress(snap.pods[uid]) for uid in sample.pods}
        if not any(r is not None for r in records.values()):
            for uid in records:
                self.feedback.progress.observe(uid, None, None, None, time.time())
            return
        contexts = self._contexts(sample, snap)
        now = time.time()
        for uid, record in records.items():
            kind = None
            if record is not None:
                profile = self._profile(snap.pods[uid])
                kind = job_kind(profile) if profile is not None else None
            self.feedback.progress.observe(uid, record, contexts.get(uid), kind, now)

    def _write_simulated_speeds(self, sample: NodeSample) -> None:
        """SIMULATION ONLY: write each pod's true simulated speed where its progress directory
        exists (the example workload stretches its steps by it: docs/agent.md)."""
        for uid in sample.pods:
            speed = self.simulated.speeds.get(uid)
            where = self._progress_dir(uid)
            if speed is None or where is None or not where.is_dir():
                continue
            if abs(self._sim_speed_written.get(uid, -1.0) - speed) < 1e-4:
                continue
            try:
                write_simulated_speed(where, speed)
                self._sim_speed_written[uid] = speed
            except OSError as exc:
                self.skips.warn(uid, f"cannot write the simulated speed into {where}: {exc}")

    def _forget_progress(self, present: list[str]) -> None:
        keep = set(present)
        self._sim_speed_written = {u: v for u, v in self._sim_speed_written.items() if u in keep}
        self.simulated.speeds = {u: v for u, v in self.simulated.speeds.items() if u in keep}
        root = self.settings.progress_root
        now = time.monotonic()
        if root is None or not self.settings.node_name or now - self._progress_cleaned < 60:
            return  # one process serving many simulated nodes shares no host directory
        self._progress_cleaned = now
        try:
            removed = remove_stale(root, keep, older_than=PROGRESS_DIR_TTL)
        except OSError as exc:
            log.warning("cannot clean up progress directories in %s: %s", root, exc)
            return
        if removed:
            log.info("removed the progress directories of %d pod(s) gone", len(removed))

    def _reload_key(self) -> None:
        """Pick up newly published keys (the mounted ConfigMap changed); a file that cannot be
        read keeps the keys in use, said once."""
        if self._keys is None:
            return
        try:
            self.key = self._keys.ring()
        except ConfigError as exc:
            self.skips.warn("assignment-key", f"{exc}; verifying with the key read before")

    def _sample_node(self, name: str, snap: Snapshot) -> NodeSample | None:
        node = self._node(name)
        if node is None:
            self.skips.warn(f"node:{name}", f"node {name} does not exist; nothing to sample there")
            return None
        backend_name, backend = self._backend_for(node)
        snap.backend_up[(name, backend_name)] = backend is not None
        if backend is None:
            return None
        inventory = []
        if self.dra:
            if backend_name == c.BACKEND_SIMULATED:
                inventory = self.claims.gpus(name)  # what the node's DRA driver published
        elif backend_name == c.BACKEND_SIMULATED:
            text = (node.get("metadata", {}).get("annotations") or {}).get(
                c.ANNOTATION_GPU_INVENTORY
            )
            if text is None:
                self.skips.warn(
                    f"node:{name}",
                    f"simulated node {name} has no {c.ANNOTATION_GPU_INVENTORY} annotation; "
                    "skipping it",
                )
                return None
            try:
                inventory = decode_inventory(text, f"node {name} {c.ANNOTATION_GPU_INVENTORY}")
            except HorusError as exc:
                self.skips.warn(f"node:{name}:{text}", f"skipping simulated node {name}: {exc}")
                return None
        pods: list[PodInfo] = []
        objects = self.kube.pods_on(name)
        if self.dra:
            for claimed in self.claims.pods(name, objects):
                if claimed.joined:
                    self._joined_claim(claimed)
                pods.append(claimed.info)
                snap.pods[claimed.info.uid] = claimed.info
            objects = []  # on this path annotations carry no share
        else:
            self._reload_key()
        for obj in objects:
            try:
                info = parse_pod(obj, self.skips, self.key, self.verified)
            except Exception as exc:  # one malformed object never stops the node's cycle
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                who = (
                    f"{meta.get('namespace')}/{meta.get('name')}" if isinstance(meta, dict) else "?"
                )
                self.skips.warn(
                    f"pod:{who}",
                    f"skipping pod {who} on node {name}: cannot read it "
                    f"({type(exc).__name__}: {exc})",
                )
                continue
            if info is not None:
                pods.append(info)
                snap.pods[info.uid] = info
        profiles: dict[str, GraphProfile] = {}
        if backend_name == c.BACKEND_SIMULATED:
            shared = {p.assignment.gpu_index for p in pods}
            counts = {g: sum(1 for p in pods if p.assignment.gpu_index == g) for g in shared}
            for p in pods:
                if counts[p.assignment.gpu_index] > 1 or self._writes_rows:
                    prof = self._profile(p)
                    if prof is not None:
                        profiles[p.uid] = prof
        elif self._writes_rows:
            for p in pods:
                self._profile(p)
        return backend.sample(NodeView(name, inventory), pods, profiles)

    def _joined_claim(self, claimed: ClaimedPod) -> None:
        """A pod that joined a claim the kubelet had prepared for another pod: the two use one
        share, each limited to all of it by MPS (docs/dra.md, "Limits"). Reported once; with
        the watchdog in ``evict`` mode the pod that joined is deleted (its UID precondition
        spares a new pod of the same name), the one the claim was prepared for keeps it."""
        pod, share = claimed.info, claimed.share
        first = next(iter(share.others), ("", "", ""))
        message = (
            f"pod {pod.key} uses claim {share.share.ref}, which was prepared for pod "
            f"{first[0]}/{first[1]}: one share is one pod's"
        )
        key = f"joined:{pod.uid}"
        if self.settings.watchdog == "evict":
            if self.kube.delete_pod(pod):
                self.skips.warn(key, message + "; deleted it")
                self.kube.event(pod, c.EVENT_REASON_SHARED_CLAIM, message + "; deleted")
            return
        if self.settings.watchdog == "report" and key not in self._reported_joined:
            if len(self._reported_joined) > 10_000:  # pods come and go: bounded, like SkipLog
                self._reported_joined.clear()
            self._reported_joined.add(key)
            self.kube.event(pod, c.EVENT_REASON_SHARED_CLAIM, message)
        self.skips.warn(key, message)

    # --- feedback --------------------------------------------------------------------------

    def publish_observed(self) -> int:
        """Merge-patch ``status.observed`` of every DLJob with pods here; returns how many."""
        self._last_feedback = time.monotonic()
        done = 0
        for (ns, job), observed in self.feedback.job_observed().items():
            try:
                self.kube.patch_observed(ns, job, observed)
                done += 1
            except ApiError as exc:
                if exc.status == 404:
                    log.debug("DLJob %s/%s is gone; observed use not written", ns, job)
                else:
                    log.warning("could not write status.observed of DLJob %s/%s: %s", ns, job, exc)
        return done

    @property
    def _writes_rows(self) -> bool:
        """Whether finished pods become rows (their profiles are then kept fresh meanwhile)."""
        return self.settings.training_rows is not None or self.settings.pair_rows is not None

    def _write_rows(self, finished: list[PodStats]) -> None:
        if not finished or not self._writes_rows:
            return
        rows: list[dict[str, Any]] = []
        pairs: list[dict[str, Any]] = []
        for st in finished:
            profile = self._profile(st.pod)
            if profile is None:
                log.debug("no training row for pod %s: its graph profile is unknown", st.pod.key)
                continue
            row = training_row(st, profile)
            if row is not None:
                rows.append(row)
            pairs += pair_rows(st, profile)
        self.rows_written += self._append(
            self.settings.training_rows, rows, ROW_COLUMNS, "training"
        )
        self.pair_rows_written += self._append(
            self.settings.pair_rows, pairs, PAIR_FILE_COLUMNS, "pair"
        )

    @staticmethod
    def _append(
        path: Path | None, rows: list[dict[str, Any]], columns: list[str], what: str
    ) -> int:
        if path is None or not rows:
            return 0
        try:
            n = append_rows(path, rows, columns)
        except OSError as exc:
            log.error("feedback: cannot write %s rows to %s: %s", what, path, exc)
            return 0
        if n:
            log.info("feedback: appended %d %s row(s) to %s", n, what, path)
        return n

    def flush(self) -> None:
        """Publish observed use and write rows for every pod still tracked (at shutdown)."""
        self.publish_observed()
        self._write_rows(self.feedback.drain())

    # --- lifecycle -------------------------------------------------------------------------

    def start_metrics(self) -> int:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(
            self.settings.metrics_port, self.settings.metrics_address, registry=self.registry
        )
        self._server = server
        port = int(server.server_address[1])
        log.info("metrics on http://%s:%d/metrics", self.settings.metrics_address, port)
        return port

    def run(self, stop: threading.Event) -> None:
        nodes = self.settings.node_name or self.settings.nodes or self.settings.node_selector
        log.info(
            "agent serving %s (backend %s, watchdog %s, grace %.0fs, enforcement %s)",
            nodes,
            self.settings.backend,
            self.settings.watchdog,
            self.settings.grace_seconds,
            self.settings.enforcement,
        )
        if self.settings.backend != "nvml":
            log.info(
                'simulated GPU numbers (kwok nodes) are labelled backend="simulated" in every '
                "metric and log line"
            )
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                self.cycle()
            except Exception:
                log.exception("agent cycle failed; retrying next interval")
            stop.wait(max(0.0, self.settings.interval_seconds - (time.monotonic() - t0)))
        self.shutdown()

    def shutdown(self) -> None:
        try:
            self.flush()
        except Exception as exc:
            log.warning("final feedback flush failed: %s", exc)
        if self.mps is not None:
            self.mps.stop()
        if self._nvml is not None:
            self._nvml.close()
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
