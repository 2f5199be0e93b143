"""Kueue, JobSet and Kubeflow Trainer on a local cluster, each a host process with its own
identity, installed from its own manifests (``horus dev workloads up``; the ``kueue`` test
fixture). Binaries and manifests: ``tools/controlplane/workloads/build.sh``; what each
controller is: :mod:`~horus.devcluster.workload_specs`; the manifest rewriting:
:mod:`~horus.devcluster.workload_manifests`.

**Install**, per controller, in the order JobSet, Trainer, Kueue (Trainer creates JobSets,
Kueue manages both): its namespace; its CRDs (server-side apply: they exceed the last-applied
annotation's size), Kueue's with their conversion webhooks; its ServiceAccount, ClusterRoles
and bindings from its own RBAC folder, named as its kustomization names them; a kubeconfig
with a token of that ServiceAccount, so the controller runs with exactly upstream's least
privilege; a serving certificate from the cluster's CA for 127.0.0.1 and the webhook
Service's DNS names; its configuration file; the process; once ``/readyz`` answers, its
webhook configurations with ``url`` client configs.

**Kueue's metrics certificate**: with internal certificate management off, Kueue v0.19 reads
its metrics server's certificate from the fixed path ``/etc/kueue/metrics/certs`` (its main.go)
and exits without it. The host's ``/etc`` is left alone: Kueue starts in a mount namespace of
its own (``unshare``) in which an overlay over ``/etc`` adds that folder from the cluster's
(``kueue/etc-overlay``); as root a plain mount namespace, otherwise a user namespace that maps
the caller to root.

**Down** removes the webhook configurations first (they fail closed: with the process gone
they would refuse every Job and pod), stops the processes, strips the finalizers from what is
left of the controllers' objects, and deletes the CRDs, RBAC and namespaces it created. ``horus
dev cluster down`` runs it first; :meth:`LocalCluster.down` alone stops only the control
plane's own processes.
State: ``<cluster dir>/workloads/state.json`` (:class:`WorkloadsState`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from horus.common.errors import ClusterError
from horus.devcluster import certs
from horus.devcluster import workload_manifests as wm
from horus.devcluster.cluster import DevClusterState, write_kubeconfig
from horus.devcluster.processes import (
    ManagedProcess,
    free_port,
    load_state_fields,
    port_open,
    save_state,
    spawn,
)
from horus.devcluster.workload_specs import (
    CONTROLLERS,
    JOBSET,
    KUEUE,
    ORDER,
    Controller,
    issue_serving_cert,
    kueue_argv,
    manifests_dir,
    service_dns_names,
)

STATE_FILE = "state.json"
FOLDER = "workloads"


@dataclass
class WorkloadsState:
    """What ``up`` installed and started on one cluster."""

    directory: str
    controllers: list[str] = field(default_factory=list)
    ports: dict[str, dict[str, int]] = field(default_factory=dict)
    processes: list[ManagedProcess] = field(default_factory=list)
    #: per controller, what ``down`` deletes: "webhooks" (``<Kind>/<name>``), "crds" and
    #: "cluster_rbac" (``<resource>/<name>``), recorded as installed
    installed: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def save(self) -> None:
        save_state(Path(self.directory) / STATE_FILE, self)

    @classmethod
    def load(cls, directory: Path) -> WorkloadsState | None:
        raw = load_state_fields(directory / STATE_FILE)
        return None if raw is None else cls(**raw)


class WorkloadControllers:
    """Install, start, inspect and remove the workload controllers on one local cluster."""

    def __init__(
        self, cluster: DevClusterState, kueue_overrides: Mapping[str, Any] | None = None
    ) -> None:
        """``kueue_overrides`` is merged into Kueue's rendered configuration (e.g.
        ``{"resources": {"deviceClassMappings": [...]}}``, ``{"featureGates": {...}}``)."""
        self.cluster = cluster
        self.kueue_overrides = dict(kueue_overrides or {})
        self.bin_dir = Path(cluster.bin_dir)
        self.folder = Path(cluster.directory) / FOLDER
        self.pki = Path(cluster.directory) / "pki"

    # --- kubectl -------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.cluster.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, docs: Sequence[dict[str, Any]], server_side: bool = False) -> None:
        if not docs:
            return
        extra = ["--server-side", "--force-conflicts"] if server_side else []
        # JSON is YAML, and much faster to write than YAML for the large CRDs.
        stream = "\n---\n".join(json.dumps(d) for d in docs)
        self.kubectl("apply", *extra, "-f", "-", input=stream, timeout=300)

    # --- state ---------------------------------------------------------------------------
    def state(self) -> WorkloadsState | None:
        return WorkloadsState.load(self.folder)

    def _ca_bundle(self) -> str:
        return base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()

    # --- up ------------------------------------------------------------------------------
    def up(self, names: Sequence[str] = ORDER, timeout: float = 120.0) -> WorkloadsState:
        """Install and start ``names`` (in :data:`ORDER`); refuses when already up."""
        unknown = [n for n in names if n not in CONTROLLERS]
        if unknown:
            raise ClusterError(f"unknown workload controller(s) {unknown}; known: {list(ORDER)}")
        old = self.state()
        if old is not None and any(p.running() for p in old.processes):
            raise ClusterError(f"workload controllers already run for {self.cluster.directory}")
        manifests = manifests_dir(self.bin_dir)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        state = WorkloadsState(directory=str(self.folder))
        wanted = [n for n in ORDER if n in names]
        try:
            for name in wanted:
                ctl = CONTROLLERS[name]
                state.controllers.append(name)
                state.save()
                self._install(ctl, manifests / name, state)
                state.save()
                self._wait_ready(ctl, state, timeout)
                hooks = self._webhooks(ctl, manifests / name, state.ports[name]["webhook"])
                state.installed[name]["webhooks"] = [
                    f"{d['kind']}/{d['metadata']['name']}" for d in hooks
                ]
                state.save()
                self.apply(hooks)
            self._wait_webhooks(state, timeout)
        except BaseException:
            self.down(state)
            raise
        return state

    def _install(self, ctl: Controller, src: Path, state: WorkloadsState) -> None:
        self._wait_namespace_gone(ctl.namespace)
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctl.namespace}}
        self.apply([ns])
        ports = {k: free_port() for k in ("webhook", "metrics", "health", "extra")}
        state.ports[ctl.name] = ports
        installed: dict[str, list[str]] = {"webhooks": [], "crds": [], "cluster_rbac": []}
        state.installed[ctl.name] = installed
        installed["crds"] = self._apply_crds(ctl, src, ports["webhook"])
        rbac = wm.place(wm.component_documents(src / ctl.rbac_folder), ctl.prefix, ctl.namespace)
        installed["cluster_rbac"] = wm.cluster_rbac_names(rbac)
        state.save()
        self.apply(rbac)
        work = self.folder / ctl.name
        work.mkdir(parents=True, exist_ok=True)
        sa = ctl.prefix + ctl.service_account
        token = self.kubectl(
            "create", "token", sa, "-n", ctl.namespace, f"--duration={certs.TOKEN_DURATION}"
        ).stdout.strip()
        kubeconfig = work / "kubeconfig"
        write_kubeconfig(
            kubeconfig,
            self.cluster.server,
            self.cluster.ca_file(),
            token,
            f"system:serviceaccount:{ctl.namespace}:{sa}",
        )
        cert_dir = work / "certs"
        dns = service_dns_names(ctl.prefix + ctl.webhook_service, ctl.namespace)
        issue_serving_cert(self.pki, dns, cert_dir / "tls.crt", cert_dir / "tls.key")
        config = work / "config.yaml"
        env = dict(os.environ)
        binary = self.bin_dir / ctl.binary
        if ctl is KUEUE:
            rendered = wm.kueue_config(
                namespace=ctl.namespace,
                cert_dir=cert_dir,
                webhook_port=ports["webhook"],
                metrics_port=ports["metrics"],
                health_port=ports["health"],
                visibility_port=ports["extra"],
            )
            rendered = wm.merged(rendered, self.kueue_overrides)
            overlay = work / "etc-overlay"
            metrics_certs = overlay / "upper" / "kueue" / "metrics" / "certs"
            issue_serving_cert(
                self.pki,
                service_dns_names("kueue-controller-manager-metrics-service", ctl.namespace),
                metrics_certs / "tls.crt",
                metrics_certs / "tls.key",
            )
            (overlay / "work").mkdir(parents=True, exist_ok=True)
            argv = kueue_argv(binary, config, kubeconfig, overlay)
        else:
            if ctl is JOBSET:
                rendered = wm.jobset_config(
                    cert_dir=cert_dir,
                    webhook_port=ports["webhook"],
                    metrics_port=ports["metrics"],
                    health_port=ports["health"],
                )
            else:
                rendered = wm.trainer_config(
                    webhook_port=ports["webhook"],
                    metrics_port=ports["metrics"],
                    health_port=ports["health"],
                    status_port=ports["extra"],
                )
                # Trainer's webhook server takes controller-runtime's default certificate
                # folder, $TMPDIR/k8s-webhook-server/serving-certs (no setting for it).
                tmp = work / "tmp"
                serving = tmp / "k8s-webhook-server" / "serving-certs"
                serving.mkdir(parents=True, exist_ok=True)
                for f in ("tls.crt", "tls.key"):
                    (serving / f).write_bytes((cert_dir / f).read_bytes())
                    (serving / f).chmod(0o600)
                env["TMPDIR"] = str(tmp)
            argv = [str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}"]
        config.write_text(yaml.safe_dump(rendered, sort_keys=False))
        state.processes.append(spawn(ctl.name, argv, self.folder, env=env))

    def _wait_namespace_gone(self, namespace: str, timeout: float = 120.0) -> None:
        """Wait while ``namespace`` is still being deleted (a ``down`` just before: its
        deletion does not wait), since nothing can be created in it meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.kubectl(
                "get", "namespace", namespace, "-o", "jsonpath={.status.phase}", check=False
            )
            if got.returncode or got.stdout.strip() != "Terminating":
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"namespace {namespace} still Terminating after {timeout:.0f}s")
            time.sleep(0.5)

    def _wait_crds_gone(self, names: Sequence[str], timeout: float = 120.0) -> None:
        """Wait while any of the CRDs ``names`` is still being deleted (a ``down`` just before):
        applied again meanwhile, it would still go, with everything made from it."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.kubectl(
                "get", "crd", *names, "--ignore-not-found", "-o", "json", check=False
            )
            found = json.loads(got.stdout or "{}")
            items = found.get("items", [found] if found.get("metadata") else [])
            going = [i["metadata"]["name"] for i in items if i["metadata"].get("deletionTimestamp")]
            if got.returncode == 0 and not going:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"CRDs {going} still being deleted after {timeout:.0f}s")
            time.sleep(0.5)

    def _apply_crds(self, ctl: Controller, src: Path, webhook_port: int) -> list[str]:
        folder = src / ctl.crd_folder
        crds = wm.component_documents(folder)
        conversions = {}
        for patch in wm.kustomization(folder).get("patches") or []:
            path = folder / str(patch.get("path", "")) if isinstance(patch, dict) else None
            if path is None or not path.is_file():
                continue
            for doc in wm.load_documents(path):
                if doc.get("kind") == "CustomResourceDefinition" and "conversion" in doc.get(
                    "spec", {}
                ):
                    conversions[doc["metadata"]["name"]] = doc
        url = f"https://127.0.0.1:{webhook_port}"
        ca = self._ca_bundle()
        out = []
        for crd in crds:
            patch = conversions.get(crd["metadata"]["name"])
            if patch is not None:
                path = patch["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"]
                crd = wm.crd_conversion_to_url(crd, patch, url + path, ca)
            out.append(crd)
        self._wait_crds_gone([d["metadata"]["name"] for d in out])
        self.apply(out, server_side=True)
        names = [d["metadata"]["name"] for d in out]
        deadline = time.monotonic() + 60
        query = '{.status.conditions[?(@.type=="Established")].status}'
        for name in names:
            while True:
                got = self.kubectl("get", "crd", name, "-o", f"jsonpath={query}", check=False)
                if got.stdout.strip() == "True":
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"CRD {name} not Established within 60s")
                time.sleep(0.2)
        return names

    def _webhooks(self, ctl: Controller, src: Path, port: int) -> list[dict[str, Any]]:
        docs = wm.place(wm.component_documents(src / ctl.webhook_folder), ctl.prefix, ctl.namespace)
        selector = None
        if ctl is KUEUE:
            selector = wm.excluded_namespaces_selector(wm.KUEUE_EXCLUDED_NAMESPACES)
        return wm.webhooks_to_url(
            docs,
            f"https://127.0.0.1:{port}",
            self._ca_bundle(),
            namespace_selector=selector,
            selector_skips_group=ctl.own_group or None,
        )

    def _wait_ready(self, ctl: Controller, state: WorkloadsState, timeout: float) -> None:
        ports = state.ports[ctl.name]
        proc = next(p for p in state.processes if p.name == ctl.name)
        url = f"http://127.0.0.1:{ports['health']}/readyz"
        deadline = time.monotonic() + timeout
        while True:
            if not proc.running():
                raise ClusterError(f"{ctl.name} exited during start:\n{proc.log_tail(25)}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200 and port_open(ports["webhook"]):
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{ctl.name} not ready within {timeout:.0f}s ({url}):\n{proc.log_tail(25)}"
                )
            time.sleep(0.5)

    def _wait_webhooks(self, state: WorkloadsState, timeout: float) -> None:
        """Each webhook server answers TLS with the cluster CA for 127.0.0.1."""
        ctx = ssl.create_default_context(cafile=str(self.cluster.ca_file()))
        for name, ports in state.ports.items():
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with urllib.request.urlopen(
                        f"https://127.0.0.1:{ports['webhook']}/", timeout=2, context=ctx
                    ):
                        break
                except urllib.error.HTTPError:
                    break  # TLS worked; the path itself is not served
                except (urllib.error.URLError, OSError) as e:
                    if time.monotonic() > deadline:
                        raise ClusterError(f"{name}'s webhook server: {e}") from None
                    time.sleep(0.3)

    # --- status and down -----------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {"up": False, "controllers": {}}
        out: dict[str, Any] = {}
        for proc in state.processes:
            ports = state.ports.get(proc.name, {})
            ready = False
            try:
                url = f"http://127.0.0.1:{ports.get('health', 0)}/readyz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    ready = resp.status == 200
            except (urllib.error.URLError, OSError, ValueError):
                pass
            out[proc.name] = {
                "pid": proc.pid,
                "running": proc.running(),
                "ready": ready,
                "ports": ports,
                "log": proc.log,
            }
        return {"up": any(v["running"] for v in out.values()), "controllers": out}

    def down(self, state: WorkloadsState | None = None, grace: float = 10.0) -> bool:
        """Remove what ``up`` installed and stop what it started; False when nothing was up."""
        state = state or self.state()
        if state is None:
            return False
        names = [n for n in reversed(ORDER) if n in state.controllers]
        installed = {n: state.installed.get(n) or self._inventory(n) for n in names}
        # Webhooks first: they fail closed, and their server is about to go.
        hooks = [h for n in names for h in installed[n].get("webhooks", [])]
        if hooks:
            self.kubectl("delete", *hooks, "--ignore-not-found", "--wait=false", check=False)
        # SIGTERM to all at once, so their graceful shutdowns overlap; then each is waited
        # for (and killed after ``grace``).
        for proc in state.processes:
            if proc.running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in state.processes:
            proc.stop(grace)
        crds = [c for n in names for c in installed[n].get("crds", [])]
        self._strip_finalizers(crds)
        if crds:
            self.kubectl("delete", "crd", *crds, "--ignore-not-found", "--wait=false", check=False)
        rbac = [r for n in names for r in installed[n].get("cluster_rbac", [])]
        self._delete_in_parallel(rbac)
        namespaces = [f"namespace/{CONTROLLERS[n].namespace}" for n in names]
        self.kubectl("delete", *namespaces, "--ignore-not-found", "--wait=false", check=False)
        (self.folder / STATE_FILE).unlink(missing_ok=True)
        return True

    def _delete_in_parallel(self, objects: Sequence[str], parts: int = 4) -> None:
        """``kubectl delete`` ``objects`` in ``parts`` concurrent calls (one call deletes
        them one request at a time: Kueue's RBAC is some seventy objects)."""
        chunks = [list(objects[i::parts]) for i in range(parts) if objects[i::parts]]
        procs = [
            subprocess.Popen(
                [
                    str(self.bin_dir / "kubectl"),
                    f"--kubeconfig={self.cluster.kubeconfig}",
                    "delete",
                    *chunk,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for chunk in chunks
        ]
        for proc in procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _inventory(self, name: str) -> dict[str, list[str]]:
        """What ``up`` installs for ``name``, read from the manifests (for a state written
        before it recorded that, or an ``up`` that failed before recording it)."""
        ctl = CONTROLLERS[name]
        try:
            src = manifests_dir(self.bin_dir) / name
        except ClusterError:
            return {}
        hooks = wm.place(
            wm.component_documents(src / ctl.webhook_folder), ctl.prefix, ctl.namespace
        )
        rbac = wm.place(wm.component_documents(src / ctl.rbac_folder), ctl.prefix, ctl.namespace)
        return {
            "webhooks": [
                f"{d['kind']}/{d['metadata']['name']}"
                for d in hooks
                if d["kind"] in wm.WEBHOOK_KINDS
            ],
            "crds": [d["metadata"]["name"] for d in wm.component_documents(src / ctl.crd_folder)],
            "cluster_rbac": wm.cluster_rbac_names(rbac),
        }

    def _strip_finalizers(self, crds: Sequence[str]) -> None:
        """Remove finalizers from the objects of ``crds`` still there (their controller is
        stopped, so nothing else would, and the CRD's deletion would wait on them)."""
        if not crds:
            return
        got = self.kubectl("get", ",".join(crds), "-A", "-o", "json", check=False)
        if got.returncode:
            return
        for item in json.loads(got.stdout).get("items", []):
            meta = item["metadata"]
            if not meta.get("finalizers"):
                continue
            kind = f"{item['kind'].lower()}.{item['apiVersion'].split('/')[0]}"
            ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
            self.kubectl(
                "patch", kind, meta["name"], *ns, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False,
            )  # fmt: skip
