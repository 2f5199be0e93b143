"""What the Kubernetes client's ``ApiClient.call_api`` returns, for tests that replace the
apiserver at that seam (``horus.kube.rest.RestClient`` reads ``status``, ``data``, ``read()``)."""

from __future__ import annotations


class RawResponse:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.data = status, data

    def read(self) -> bytes:
        return self.data
