"""The few Kubernetes calls the DRA driver makes, in one place, as raw JSON.

The node identity reads ResourceClaims (``get``, the ones the kubelet names) and writes its own
node's ResourceSlices; nothing else — no pod and no Node is written on this path
(``docs/dra.md``, "Who may write what").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from horus.common import constants as c
from horus.dra.slices import SLICE_PATH, SliceApi
from horus.kube.client import api_client
from horus.kube.errors import ApiError
from horus.kube.rest import RestClient

_CLAIMS = (
    f"/apis/{c.RESOURCE_API_GROUP}/{c.RESOURCE_API_VERSION}/namespaces/{{}}/resourceclaims/{{}}"
)


class DraApi(SliceApi, Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as JSON (None when it does not exist)."""
        ...


class KubeDraApi:
    """:class:`DraApi` on the real apiserver."""

    def __init__(self, kubeconfig: Path | None = None, rest: RestClient | None = None) -> None:
        self.rest = rest or RestClient(api_client(kubeconfig))

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.rest.get(_CLAIMS.format(namespace, name))

    def list_slices(self, node: str) -> list[dict[str, Any]]:
        selector = f"spec.nodeName={node},spec.driver={c.DRA_DRIVER_NAME}"
        return self.rest.list(SLICE_PATH, query=[("fieldSelector", selector)])

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        out = self.rest.request("POST", SLICE_PATH, body=body)
        return out if isinstance(out, dict) else {}

    def update_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        out = self.rest.request("PUT", f"{SLICE_PATH}/{name}", body=body)
        return out if isinstance(out, dict) else {}

    def delete_slice(self, name: str) -> None:
        try:
            self.rest.request("DELETE", f"{SLICE_PATH}/{name}")
        except ApiError as exc:
            if exc.status != 404:  # already gone: what we wanted
                raise

    def node_uid(self, node: str) -> str | None:
        obj = self.rest.get(f"/api/v1/nodes/{node}")
        if obj is None:
            return None
        return str((obj.get("metadata") or {}).get("uid") or "") or None
