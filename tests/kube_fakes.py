"""What the Kubernetes client's ``ApiClient.call_api`` returns, for tests that replace the
apiserver at that seam (``horus.kube.rest.RestClient`` reads ``status``, ``data``, ``read()``)."""

from __future__ import annotations

import json
from typing import Any


class RawResponse:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data = status, data

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        """What ``horus.api.raw`` calls once it read the body (nothing to give back here)."""


def json_response(body: Any) -> RawResponse:
    """A raw (``_preload_content=False``) answer of ``body`` as JSON."""
    return RawResponse(200, json.dumps(body).encode())
