"""Reading the apiserver's refusals: one ``Conflict``, one ``ApiError`` for raw requests, and
the apiserver's own sentence."""

from __future__ import annotations

import json
from typing import Any

from horus.common.errors import HorusError

__all__ = ["ApiError", "Conflict", "api_message", "status_of"]

_MAX_MESSAGE = 1024


class Conflict(HorusError):
    """A write lost an optimistic-concurrency race or its object vanished (HTTP 409/404):
    read again and retry (the next pass, the next request)."""


class ApiError(HorusError):
    """A raw request (:class:`horus.kube.rest.RestClient`) failed: ``status`` is the HTTP
    status, 0 when the apiserver could not be reached at all."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a ``kubernetes.client.ApiException`` (None for other errors)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_message(exc: Any) -> str:
    """The apiserver's own sentence from an ``ApiException`` (its Status ``message``)."""
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        body = {}
    msg = body.get("message") if isinstance(body, dict) else None
    return str(msg or getattr(exc, "reason", None) or f"HTTP {status_of(exc)}")[:_MAX_MESSAGE]
