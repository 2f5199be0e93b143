"""What the check reads and writes of Kueue's API, behind a small protocol (tests use an
in-memory one).

On the real apiserver Workloads and AdmissionChecks come from watch-fed copies
(:class:`~horus.kube.informer.Informer`), listed once and then followed, as every other kind
the operator reads: a pass reads them from memory, not by a LIST of every Workload. The
answers of Horus' own writes go into the copies at once, so the next pass sees its own
decision even before the watch event arrives.

The check answers by a JSON patch of the Workload's ``status`` subresource that first
*tests* that the entry at the index is Horus' check in the state it was read in, then
replaces that one entry: the other checks' entries (``listType=map``), written by their own
controllers, are never overwritten, and a Workload that changed since it was read (Kueue
reset the check on eviction) refuses the write instead of taking a stale answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from horus.api.raw import read_object
from horus.common import constants as c
from horus.kube.errors import Conflict
from horus.kube.informer import Informer, wait_all_synced
from horus.operator.view import lean

__all__ = ["KubeKueueApi", "KueueApi", "KueueMissing", "KueueNotSynced"]


#: Told of every change of the copies: (kind, key, old, new); ``new`` None: deleted.
KueueChangeHandler = Callable[
    [str, str, "Mapping[str, Any] | None", "Mapping[str, Any] | None"], None
]

#: How long the first read waits for the copies' first LIST (later reads never wait).
KUEUE_SYNC_SECONDS = 30.0


class KueueMissing(Exception):
    """Kueue's CRDs are not installed (the check has nothing to do)."""


class KueueNotSynced(Exception):
    """The copies of Kueue's objects have not had their first LIST yet (the check waits)."""


class KueueApi(Protocol):
    def list_workloads(self) -> list[dict[str, Any]]:
        """Every Workload (:class:`KueueMissing` without Kueue's CRDs)."""
        ...

    def list_admission_checks(self) -> list[dict[str, Any]]: ...

    def read_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A ResourceClaimTemplate, or None when there is none of that name."""
        ...

    def activate_check(self, name: str, condition: Mapping[str, Any]) -> None:
        """Set the AdmissionCheck's status conditions to ``[condition]`` (type ``Active``):
        Kueue keeps a ClusterQueue that names a check inactive until its controller says the
        check is active."""
        ...

    def answer_check(
        self,
        namespace: str,
        name: str,
        index: int,
        expected: Mapping[str, str],
        entry: Mapping[str, Any],
    ) -> None:
        """Replace ``status.admissionChecks[index]`` with ``entry`` if that entry's fields
        still equal ``expected`` (name, state); :class:`Conflict` otherwise."""
        ...


class KubeKueueApi:
    """:class:`KueueApi` on the real apiserver (``CustomObjectsApi``); Workloads and
    AdmissionChecks read from watch-fed copies, started by the first read and ended by
    :meth:`stop`."""

    def __init__(
        self,
        api_client: Any,
        sync_seconds: float = KUEUE_SYNC_SECONDS,
        on_change: KueueChangeHandler | None = None,
    ) -> None:
        """``on_change`` hears every change of either copy as ``(kind, key, old, new)``, kind
        :data:`~horus.common.constants.KUEUE_WORKLOADS` or
        :data:`~horus.common.constants.KUEUE_ADMISSION_CHECKS` (the operator's loop is
        nudged by it, as by a pod's change)."""
        from kubernetes import client

        self.custom: Any = client.CustomObjectsApi(api_client)
        self.sync_seconds = sync_seconds
        self.on_change = on_change
        self.workloads = self._informer(c.KUEUE_WORKLOADS)
        self.admission_checks = self._informer(c.KUEUE_ADMISSION_CHECKS)
        self._started = False
        self._waited = False

    def _informer(self, plural: str) -> Informer:
        def tell(key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            if self.on_change is not None:
                self.on_change(plural, key, old, new)

        return Informer(
            f"kueue-{plural}",
            lambda **kw: self.custom.list_cluster_custom_object(
                c.KUEUE_GROUP, c.KUEUE_VERSION, plural, **kw
            ),
            project=lean,
            on_change=tell,
            missing_ok=True,  # Kueue may be installed after Horus: looked for again
        )

    def start(self) -> None:
        """Start both copies (the first read does it when nobody did)."""
        if not self._started:
            self._started = True
            self.workloads.start()
            self.admission_checks.start()

    def stop(self) -> None:
        if self._started:
            self.workloads.stop()
            self.admission_checks.stop()

    def _read(self, informer: Informer) -> list[dict[str, Any]]:
        self.start()
        if not self._waited:  # only the first read waits: a LIST failing for good (no RBAC)
            self._waited = True  # must not hold up every pass
            wait_all_synced([self.workloads, self.admission_checks], self.sync_seconds)
        if not informer.synced:
            raise KueueNotSynced(f"{informer.name}: no LIST answered yet")
        if informer.served is False:
            raise KueueMissing(
                f"{informer.name.removeprefix('kueue-')}.{c.KUEUE_GROUP} is not served"
            )
        return informer.items()

    def list_workloads(self) -> list[dict[str, Any]]:
        return self._read(self.workloads)

    def list_admission_checks(self) -> list[dict[str, Any]]:
        return self._read(self.admission_checks)

    def read_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.custom.get_namespaced_custom_object(
                c.RESOURCE_API_GROUP,
                c.RESOURCE_API_VERSION,
                namespace,
                "resourceclaimtemplates",
                name,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return read_object(resp)

    def activate_check(self, name: str, condition: Mapping[str, Any]) -> None:
        resp = self.custom.patch_cluster_custom_object_status(
            c.KUEUE_GROUP,
            c.KUEUE_VERSION,
            c.KUEUE_ADMISSION_CHECKS,
            name,
            {"status": {"conditions": [dict(condition)]}},
            _preload_content=False,
        )
        self.admission_checks.observe(read_object(resp))

    def answer_check(
        self,
        namespace: str,
        name: str,
        index: int,
        expected: Mapping[str, str],
        entry: Mapping[str, Any],
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        path = f"/status/admissionChecks/{index}"
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": f"{path}/{k}", "value": v} for k, v in expected.items()
        ]
        ops.append({"op": "replace", "path": path, "value": dict(entry)})
        try:
            resp = self.custom.patch_namespaced_custom_object_status(
                c.KUEUE_GROUP,
                c.KUEUE_VERSION,
                namespace,
                c.KUEUE_WORKLOADS,
                name,
                ops,
                _content_type="application/json-patch+json",
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                raise Conflict(
                    f"Workload {namespace}/{name} changed or vanished (HTTP {exc.status}); "
                    "deciding again next pass"
                ) from None
            raise
        self.workloads.observe(read_object(resp))
