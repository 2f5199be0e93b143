"""Plain JSON requests to the apiserver, for the hot loops that cannot afford the generated
client's models (the node agent lists its node's pods every few seconds).

Building the client's model objects costs more CPU than the rest of an agent cycle, so a
request goes through the client's own ``param_serialize``/``call_api`` (authentication and TLS
as the kubeconfig or ServiceAccount set them up, :func:`horus.kube.client.api_client`) and its
body is decoded as plain JSON, bounded and lenient (:func:`horus.common.documents.loads_api_json`:
one absurdly nested object must not make a whole list undecodable). Every failure is one
:class:`~horus.kube.errors.ApiError` carrying the HTTP status (0: unreachable), so a caller
fails one cycle, never the process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from horus.common.documents import loads_api_json
from horus.kube.errors import ApiError

__all__ = ["MERGE_PATCH", "RestClient"]

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
_MAX_ERROR = 500


class RestClient:
    """Raw JSON requests over a ``kubernetes.client.ApiClient`` (or anything with its
    ``param_serialize``/``call_api`` methods: tests replace the apiserver at that seam)."""

    def __init__(self, api_client: Any, timeout_s: float = 30.0) -> None:
        self.api_client = api_client
        self.timeout_s = timeout_s

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = JSON,
    ) -> Any:
        """The decoded JSON answer (None for an empty body); :class:`ApiError` otherwise."""
        from kubernetes.client.exceptions import ApiException

        try:
            params = self.api_client.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.api_client.call_api(*params[:4], _request_timeout=self.timeout_s)
            resp.read()
        except ApiException as exc:
            raise ApiError(int(exc.status or 0), str(exc.body or exc.reason)[:_MAX_ERROR]) from None
        except OSError as exc:  # connection refused/reset: one failed cycle, not a crash
            raise ApiError(0, str(exc)) from None
        if not 200 <= int(resp.status) < 300:
            text = (resp.data or b"").decode(errors="replace")[:_MAX_ERROR]
            raise ApiError(int(resp.status), text)
        return loads_api_json(resp.data) if resp.data else None

    def get(self, path: str) -> dict[str, Any] | None:
        """One object; None when it does not exist (404)."""
        try:
            out = self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return out if isinstance(out, dict) else {}

    def list(self, path: str, query: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """The ``items`` of a list (only the JSON objects among them)."""
        out = self.request("GET", path, query=query)
        items = (out.get("items") if isinstance(out, dict) else None) or []
        return [i for i in items if isinstance(i, dict)]

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> Any:
        """A JSON merge patch (RFC 7386) of the object at ``path``."""
        return self.request("PATCH", path, body=dict(body), content_type=MERGE_PATCH)

    def post_event(self, body: Mapping[str, Any]) -> bool:
        """Post an Event built by :func:`horus.kube.events.event_body` (best effort: an Event
        never blocks a decision); False if refused."""
        namespace = str((body.get("metadata") or {}).get("namespace") or "default")
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=dict(body))
        except ApiError as exc:
            log.warning(
                "could not post event %s on %s: %s",
                body.get("reason"),
                (body.get("involvedObject") or {}).get("name"),
                exc,
            )
            return False
        return True
