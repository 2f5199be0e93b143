"""The extender's HTTP surface: routes, status codes, JSON error bodies, and that no body a
client can send stops the server (a 400 naming the field, never a 500 or a dead thread)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from extfixtures import FakeSource, plain_pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opfixtures import KEY, node

from horus.operator.extender import Extender, ExtenderServer
from horus.predictor import load_default_predictor


@pytest.fixture(scope="module")
def server() -> Iterator[ExtenderServer]:
    source = FakeSource([node("n1", gpus=1), node("n2", gpus=1)], [plain_pod("p")])
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    srv = ExtenderServer(ext, "127.0.0.1", 0, max_body_bytes=64 * 1024).start()
    yield srv
    srv.close()


def call(
    srv: ExtenderServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def post(srv: ExtenderServer, verb: str, payload: object) -> tuple[int, Any]:
    return call(srv, "POST", f"/{verb}", json.dumps(payload).encode())


def test_health(server: ExtenderServer) -> None:
    assert call(server, "GET", "/healthz") == (200, {"status": "ok"})
    status, body = call(server, "GET", "/nope")
    assert status == 404 and "filter, prioritize, bind" in body["Error"]


class _SlowSource(FakeSource):
    """A copy whose first build waits until the test lets it go (a cluster that takes long
    to take in), with a generation so the built state is kept and shared."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__([node("n1", gpus=1)], [])
        self.release = release
        self.listed = 0

    def generation(self) -> object:
        return 1

    def list_objects(self) -> Any:
        self.release.wait(30)
        self.listed += 1
        return super().list_objects()


def test_not_ready_until_the_live_state_is_built() -> None:
    """The first build at 5,000 nodes and 10,000 DLJobs took 19 s on a loaded machine, past
    kube-scheduler's 10 s httpTimeout: the extender builds it before anyone asks, and says
    it is not ready (503 on /readyz, while /healthz and /livez stay up) until then."""
    release = threading.Event()
    source = _SlowSource(release)
    ext = Extender(source, load_default_predictor(), key=KEY)
    warming = ext.warm_up()
    srv = ExtenderServer(ext, "127.0.0.1", 0).start()
    try:
        assert call(srv, "GET", "/readyz")[0] == 503
        assert call(srv, "GET", "/healthz") == (200, {"status": "ok"})
        assert call(srv, "GET", "/livez") == (200, {"status": "ok"})
        release.set()
        warming.join(10)
        assert call(srv, "GET", "/readyz") == (200, {"status": "ok"})
        assert source.listed == 1
        # the first request answers from the state built ahead: no second build
        assert post(srv, "filter", {"Pod": plain_pod("p"), "NodeNames": ["n1"]})[0] == 200
        assert source.listed == 1
    finally:
        srv.close()


def test_filter_prioritize_bind_over_http(server: ExtenderServer) -> None:
    args = {"Pod": plain_pod("p"), "NodeNames": ["n1", "n2"]}
    status, body = post(server, "filter", args)
    assert status == 200 and body["NodeNames"] == ["n1", "n2"] and body["Error"] == ""
    status, body = post(server, "prioritize", args)
    assert status == 200 and body == [{"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 10}]
    bind = {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n2"}
    assert post(server, "bind", bind) == (200, {"Error": ""})
    # a URL prefix with a path works too (urlPrefix: http://host:8888/horus)
    status, body = call(server, "POST", "/horus/filter/", json.dumps(args).encode())
    assert status == 200 and body["Error"] == ""


@pytest.mark.parametrize(
    ("verb", "raw", "status", "message"),
    [
        ("filter", b"{not json", 400, "request body: not valid JSON"),
        ("filter", b"\xff\xfe", 400, "request body: not valid JSON"),
        ("filter", b"[]", 400, "filter: request body: must be a JSON object"),
        ("prioritize", b'{"NodeNames": []}', 400, "prioritize: Pod: required"),
        ("bind", b'{"PodName": "p"}', 400, "bind: PodNamespace: required"),
        ("preempt", b"{}", 404, "no such verb 'preempt'"),
    ],
)
def test_bad_requests_get_a_json_error(
    server: ExtenderServer, verb: str, raw: bytes, status: int, message: str
) -> None:
    got, body = call(server, "POST", f"/{verb}", raw)
    assert got == status and message in body["Error"]


def test_body_limits(server: ExtenderServer) -> None:
    status, body = call(server, "POST", "/filter", b"{}" + b" " * 70000)
    assert status == 413 and "over the limit" in body["Error"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", "/filter")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 411 and "Content-Length" in json.loads(resp.read())["Error"]
    conn.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
pod_like = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=5)}),
        "spec": st.fixed_dictionaries(
            {
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {"resources": st.fixed_dictionaries({"requests": json_values})}
                    ),
                    max_size=2,
                )
            }
        ),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    verb=st.sampled_from(["filter", "prioritize", "bind"]),
    payload=json_values
    | st.fixed_dictionaries({"Pod": json_values | pod_like, "NodeNames": json_values})
    | st.fixed_dictionaries(
        {"PodName": json_values, "PodNamespace": json_values, "Node": json_values}
    ),
)
def test_no_body_crashes_the_server(server: ExtenderServer, verb: str, payload: Any) -> None:
    status, body = post(server, verb, payload)
    assert status in (200, 400), body
    if status == 400:
        assert body["Error"]
    assert call(server, "GET", "/healthz")[0] == 200


def test_metrics_count_requests_by_verb_and_outcome() -> None:
    source = FakeSource([node("n1", gpus=1)], [plain_pod("p")])
    ext = Extender(source, load_default_predictor(), key=KEY, cache_seconds=0)
    srv = ExtenderServer(ext, "127.0.0.1", 0, max_body_bytes=64 * 1024).start()
    try:
        assert post(srv, "filter", {"Pod": plain_pod("p"), "NodeNames": ["n1"]})[0] == 200
        assert post(srv, "filter", {"NodeNames": ["n1"]})[0] == 400
        # The handler counts a request after its reply is sent, so a scrape right after the
        # answer may come first (seen under load): scrape until the second one is counted.
        deadline = time.monotonic() + 10
        while True:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            text = resp.read().decode()
            conn.close()
            if 'outcome="bad_request",verb="filter"} 1.0' in text or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        srv.close()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/plain")
    assert 'horus_extender_requests_total{outcome="ok",verb="filter"} 1.0' in text
    assert 'horus_extender_requests_total{outcome="bad_request",verb="filter"} 1.0' in text
    assert 'horus_extender_request_duration_seconds_count{verb="filter"} 2.0' in text
