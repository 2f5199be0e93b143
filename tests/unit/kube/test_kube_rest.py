"""horus.kube on the node side: raw JSON requests (RestClient), Events that never raise.

The apiserver is replaced at the ``ApiClient`` seam the code calls (``param_serialize`` /
``call_api`` for raw requests, ``create_namespaced_event`` for Events); the same calls run
against the real kube-apiserver in tests/integration/agent and tests/integration/deviceplugin.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from horus.kube.errors import ApiError
from horus.kube.events import event_body, pod_involved, post_event
from horus.kube.rest import MERGE_PATCH, RestClient
from kube_fakes import RawResponse


class FakeApiClient:
    """Answers by path: bytes (200), an int (that status), or an exception to raise."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.calls: list[tuple[str, str, Any, Any, str]] = []

    def param_serialize(
        self, method: str, path: str, query_params: Any, header_params: Any, body: Any, **_: Any
    ) -> tuple[Any, ...]:
        return (method, path, query_params, body, header_params["Content-Type"])

    def call_api(self, method: str, path: str, query: Any, body: Any, **_: Any) -> RawResponse:
        self.calls.append((method, path, query, body, ""))
        answer = self.routes.get(path, 404)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, int):
            return RawResponse(answer, b'{"message": "no"}')
        return RawResponse(200, answer)


def test_get_list_and_patch() -> None:
    items = [{"metadata": {"name": "a"}}, "not an object", {"metadata": {"name": "b"}}]
    api = FakeApiClient(
        {
            "/api/v1/pods": json.dumps({"items": items}).encode(),
            "/api/v1/nodes/n1": b'{"metadata": {"name": "n1"}}',
            "/apis/x/v1/namespaces/ns/things/t/status": b"",
        }
    )
    rest = RestClient(api)
    got = rest.list("/api/v1/pods", [("fieldSelector", "spec.nodeName=n1")])
    assert [p["metadata"]["name"] for p in got] == ["a", "b"]
    assert api.calls[-1][2] == [("fieldSelector", "spec.nodeName=n1")]
    assert rest.get("/api/v1/nodes/n1") == {"metadata": {"name": "n1"}}
    assert rest.get("/api/v1/nodes/gone") is None  # 404
    assert rest.merge_patch("/apis/x/v1/namespaces/ns/things/t/status", {"a": 1}) is None
    assert api.calls[-1][:2] == ("PATCH", "/apis/x/v1/namespaces/ns/things/t/status")
    assert MERGE_PATCH == "application/merge-patch+json"


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        (500, 500),
        (ApiException(status=403, reason="Forbidden"), 403),
        (ConnectionRefusedError("refused"), 0),
    ],
    ids=["status", "api-exception", "unreachable"],
)
def test_every_failure_is_one_api_error(answer: Any, status: int) -> None:
    rest = RestClient(FakeApiClient({"/api/v1/nodes/n1": answer}))
    with pytest.raises(ApiError) as info:
        rest.get("/api/v1/nodes/n1")
    assert info.value.status == status
    assert f"HTTP {status}" in str(info.value)


def test_rest_event_is_best_effort() -> None:
    body = event_body(
        pod_involved("ml", "p", "uid-p"), "Why", "what", warning=True, component="horus-x"
    )
    ok = FakeApiClient({"/api/v1/namespaces/ml/events": b"{}"})
    assert RestClient(ok).post_event(body)
    sent = ok.calls[-1][3]
    assert sent["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "p",
        "uid": "uid-p",
    }
    assert sent["type"] == "Warning" and sent["source"] == {"component": "horus-x"}
    assert not RestClient(FakeApiClient({})).post_event(body)  # 404: logged, not raised


class _Core:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def create_namespaced_event(self, namespace: str, body: Any, **_: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [ApiException(status=403, reason="Forbidden"), MaxRetryError(None, "/x"), OSError("reset")],
    ids=["refused", "unreachable", "reset"],
)
def test_post_event_never_raises(error: BaseException) -> None:
    body = event_body(pod_involved("ml", "p"), "Why", "what", component="horus-x")
    assert post_event(_Core(error), body) is False
