"""HTTP at the edge: the three verbs' routes, framing checks, decode → :class:`Extender` →
encode. Nothing here decides anything (HAMi's ``routes/route.go`` has the same shape).

Two listeners. The verbs are served over TLS that requires a client certificate from the
extender's client CA (:mod:`horus.operator.extender.tls`): a caller without one never gets
past the handshake, so no byte of its request is parsed. Health (``/healthz``, ``/readyz``,
``/livez``) and ``/metrics`` are also served on a plain port that answers GET only — the
kubelet's probes and Prometheus present no client certificate, and neither path acts on
anything (a POST there is 404 naming the TLS port).
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from horus.common.documents import DEFAULT_MAX_DEPTH, load_json
from horus.common.errors import ConfigError, ValidationError
from horus.operator.extender.decisions import Extender
from horus.operator.extender.metrics import ExtenderMetrics
from horus.operator.extender.settings import CONTENT_LENGTH, REQUEST_TIMEOUT_S, VERBS
from horus.operator.extender.wire import parse_binding_args, parse_extender_args, short

log = logging.getLogger(__name__)

#: Seconds a client has to finish the TLS handshake (a stalled one frees its thread).
HANDSHAKE_TIMEOUT_S = 10.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the scheduler reuses connections
    timeout = REQUEST_TIMEOUT_S  # socket timeout: a stalled client frees its thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, {"Error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/readyz" and not self.server.extender.ready.is_set():
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "building the live state"})
        elif path in ("/healthz", "/readyz", "/livez"):
            self._reply(HTTPStatus.OK, {"status": "ok"})
        elif path.endswith("/metrics"):
            data = self.server.metrics.render()
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(
                HTTPStatus.NOT_FOUND, f"no such path {self.path}; POST to {', '.join(VERBS)}"
            )

    def do_POST(self) -> None:
        if not self.server.serve_verbs:
            self.close_connection = True
            self._error(
                HTTPStatus.NOT_FOUND,
                f"this port serves health and metrics only; the verbs are served over TLS "
                f"with a client certificate on port {self.server.verbs_port}",
            )
            return
        try:
            self._post()
        except Exception as exc:  # a bug: answer 500, log, keep serving
            log.exception("extender request %s failed", self.path)
            with contextlib.suppress(OSError):
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {exc}")

    def _read_body(self) -> tuple[bool, object]:
        """(True, decoded JSON) or (False, None) after an error reply was sent.

        The body is bounded before a byte of it is read: ``Content-Length`` is required (the
        kube-scheduler's Go client always sends it for these JSON bodies), must be one plain
        number within ``max_body_bytes``, and a chunked body is refused; then the JSON is
        depth-checked before it is parsed (:func:`horus.common.documents.load_json`).
        """
        if self.headers.get("Transfer-Encoding") is not None:
            self.close_connection = True
            self._error(
                HTTPStatus.LENGTH_REQUIRED,
                "Transfer-Encoding is not accepted; send the body with a Content-Length",
            )
            return False, None
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length: required")
            return False, None
        if len(lengths) > 1 or not CONTENT_LENGTH.match(lengths[0].strip()):
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"Content-Length: must be one whole number of bytes, got {short(lengths)}",
            )
            return False, None
        length = int(lengths[0])
        limit = self.server.max_body_bytes
        if length > limit:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body: {length} bytes is over the limit of {limit}",
            )
            return False, None
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            self._error(
                HTTPStatus.REQUEST_TIMEOUT,
                f"request body: not received within {REQUEST_TIMEOUT_S:g} s",
            )
            return False, None
        if len(raw) != length:
            self.close_connection = True
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"request body: got {len(raw)} of the {length} bytes Content-Length announced",
            )
            return False, None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"request body: not valid JSON (not UTF-8: byte {exc.start} is "
                f"0x{raw[exc.start]:02x})",
            )
            return False, None
        try:
            return True, load_json(
                text, "request body", max_bytes=limit, max_depth=DEFAULT_MAX_DEPTH
            )
        except ValidationError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return False, None

    def _post(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if verb not in VERBS:
            self._error(
                HTTPStatus.NOT_FOUND, f"no such verb {verb!r}; use one of {', '.join(VERBS)}"
            )
            return
        metrics = self.server.metrics
        with metrics.latency.labels(verb=verb).time():
            outcome = self._answer(verb)
        metrics.requests.labels(verb=verb, outcome=outcome).inc()

    def _answer(self, verb: str) -> str:
        """Decode, decide, encode one verb; the outcome for the metric."""
        ok, body = self._read_body()
        if not ok:
            return "bad_request"
        try:
            if verb == "bind":
                result = self.server.extender.bind(parse_binding_args(body))
                self._reply(HTTPStatus.OK, result)
                return "error" if result.get("Error") else "ok"
            args = parse_extender_args(body)
        except ValidationError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"{verb}: {exc}")
            return "bad_request"
        if verb == "filter":
            answer = self.server.extender.filter(args)
            self._reply(HTTPStatus.OK, answer)
            return "error" if answer.get("Error") else "ok"
        self._reply(HTTPStatus.OK, self.server.extender.prioritize(args))
        return "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        extender: Extender,
        max_body_bytes: int,
        metrics: ExtenderMetrics,
        tls: Callable[[], ssl.SSLContext] | None = None,
        serve_verbs: bool = True,
    ) -> None:
        self.extender = extender
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.tls = tls
        self.serve_verbs = serve_verbs
        self.verbs_port = 0
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handshake first (in the connection's own thread, so a slow client never holds
        up ``accept``); a client that presents no certificate from the client CA, or speaks
        plain HTTP, is dropped here and its request never parsed."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        try:
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            conn = self.tls().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # wrap_socket closes the socket itself
            self.metrics.tls_refused.inc()
            log.warning("extender: TLS handshake from %s refused: %s", client_address[0], exc)
            return
        try:
            _Handler(conn, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def shutdown_request(self, request: Any) -> None:
        # Under TLS the accepted socket was handed to the SSL socket (detached) and is
        # closed in finish_request; closing the husk is harmless.
        if self.tls is not None:
            with contextlib.suppress(OSError):
                request.close()
            return
        super().shutdown_request(request)


class ExtenderServer:
    """The server around an :class:`Extender`; ``port=0`` picks a free port.

    ``tls`` returns the server's context (``TlsSource.context``: asked per connection, so
    reloaded certificates apply to the next handshake); without it the verbs are served over
    plain HTTP — only tests do that, ``horus operator extender`` always passes one.
    ``health_port`` (0: a free one) adds the plain GET-only listener for probes and metrics.
    """

    def __init__(
        self,
        extender: Extender,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 8 * 1024 * 1024,
        tls: Callable[[], ssl.SSLContext] | None = None,
        health_port: int | None = None,
    ) -> None:
        self.extender = extender
        self.metrics = ExtenderMetrics()
        self.tls = tls
        self._health: _Server | None = None
        try:
            self._server = _Server((host, port), extender, max_body_bytes, self.metrics, tls)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        if health_port is not None:
            try:
                self._health = _Server(
                    (host, health_port), extender, 1024, self.metrics, serve_verbs=False
                )
            except OSError as exc:
                self._server.server_close()
                raise ConfigError(
                    f"cannot listen on {host}:{health_port} (health port): {exc.strerror}"
                ) from None
            self._health.verbs_port = self.port
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def health_port(self) -> int | None:
        return None if self._health is None else int(self._health.server_address[1])

    def _host(self) -> str:
        host = str(self._server.server_address[0])
        return "127.0.0.1" if host == "0.0.0.0" else host

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self._host()}:{self.port}"

    @property
    def health_url(self) -> str | None:
        port = self.health_port
        return None if port is None else f"http://{self._host()}:{port}"

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=0.5)

    def start(self) -> ExtenderServer:
        """Serve in background threads (tests, or next to the operator)."""
        servers = [("horus-extender", self._server)]
        if self._health is not None:
            servers.append(("horus-extender-health", self._health))
        for name, server in servers:
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.5}, name=name, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        servers = [self._server] + ([self._health] if self._health is not None else [])
        if self._threads:
            for server in servers:
                server.shutdown()
            for thread in self._threads:
                thread.join(timeout=10)
            self._threads = []
        for server in servers:
            server.server_close()
