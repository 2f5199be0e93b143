"""What the check reads and writes of Kueue's API, behind a small protocol (tests use an
in-memory one).

The check answers by a JSON patch of the Workload's ``status`` subresource that first
*tests* that the entry at the index is Horus' check in the state it was read in, then
replaces that one entry: the other checks' entries (``listType=map``), written by their own
controllers, are never overwritten, and a Workload that changed since it was read (Kueue
reset the check on eviction) refuses the write instead of taking a stale answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from horus.api.raw import read_items, read_object
from horus.common import constants as c
from horus.kube.errors import Conflict

__all__ = ["KubeKueueApi", "KueueApi", "KueueMissing"]


class KueueMissing(Exception):
    """Kueue's CRDs are not installed (the check has nothing to do)."""


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
    """:class:`KueueApi` on the real apiserver (``CustomObjectsApi``)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.custom: Any = client.CustomObjectsApi(api_client)

    def _list(self, plural: str) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        try:
            return read_items(
                self.custom.list_cluster_custom_object(
                    c.KUEUE_GROUP, c.KUEUE_VERSION, plural, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise KueueMissing(f"{plural}.{c.KUEUE_GROUP} is not served") from None
            raise

    def list_workloads(self) -> list[dict[str, Any]]:
        return self._list(c.KUEUE_WORKLOADS)

    def list_admission_checks(self) -> list[dict[str, Any]]:
        return self._list(c.KUEUE_ADMISSION_CHECKS)

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
        self.custom.patch_cluster_custom_object_status(
            c.KUEUE_GROUP,
            c.KUEUE_VERSION,
            c.KUEUE_ADMISSION_CHECKS,
            name,
            {"status": {"conditions": [dict(condition)]}},
            _preload_content=False,
        )

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
            self.custom.patch_namespaced_custom_object_status(
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
