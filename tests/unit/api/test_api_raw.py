"""Raw responses give their connection back to the pool — read or discarded.

Against a real HTTP server and urllib3's real pool (what the Kubernetes client uses): a pool of
one connection serves several requests in turn only if each response is released properly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import urllib3

from horus.api.raw import discard, read_items, read_json, read_object


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one TCP connection serves many requests
    connections: ClassVar[set[int]] = set()

    def do_GET(self) -> None:
        _Handler.connections.add(self.client_address[1])
        body = {"/list": {"items": [{"a": 1}, "junk", {"b": 2}]}, "/scalar": 7}.get(
            self.path, {"kind": "Status", "padding": "x" * 100_000}
        )
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    _Handler.connections = set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _pool(url: str) -> urllib3.HTTPConnectionPool:
    # block=True: a leaked connection would make the next request wait, not open another.
    return urllib3.connection_from_url(url, maxsize=1, block=True, timeout=5)


def test_read_helpers_decode_and_release(server: str) -> None:
    pool = _pool(server)
    for _ in range(3):
        assert read_items(pool.request("GET", "/list", preload_content=False)) == [
            {"a": 1},
            {"b": 2},
        ]
        assert read_json(pool.request("GET", "/scalar", preload_content=False)) == 7
        assert read_object(pool.request("GET", "/scalar", preload_content=False)) == {}
    assert pool.num_connections == 1
    assert len(_Handler.connections) == 1


def test_discard_drains_an_unread_body_and_reuses_the_connection(server: str) -> None:
    pool = _pool(server)
    for _ in range(5):
        discard(pool.request("GET", "/big", preload_content=False))
    assert pool.num_connections == 1
    assert len(_Handler.connections) == 1


def test_an_unread_response_holds_its_connection(server: str) -> None:
    """What the helpers prevent: an unread response keeps the only connection checked out."""
    pool = _pool(server)
    leaked = pool.request("GET", "/big", preload_content=False)
    with pytest.raises(urllib3.exceptions.EmptyPoolError):
        pool.urlopen("GET", "/scalar", pool_timeout=0.2)
    discard(leaked)
    assert read_json(pool.request("GET", "/scalar", preload_content=False)) == 7
