"""Times as Kubernetes writes and reads them (RFC 3339, UTC, trailing ``Z``), in one place.

Every status field, Event and Lease Horus writes carries one of these strings, and every
component reads them back; one writer and one reader keep the format identical everywhere.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["now_rfc3339", "rfc3339", "timestamp"]


def rfc3339(value: datetime, micro: bool = False) -> str:
    """``value`` in UTC, as ``YYYY-MM-DDThh:mm:ssZ`` (``micro``: with microseconds, as
    Leases and Events' ``eventTime`` are written); a naive datetime is taken as UTC."""
    utc = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339(micro: bool = False) -> str:
    """Now, as :func:`rfc3339` writes it."""
    return rfc3339(datetime.now(UTC), micro)


def timestamp(value: object) -> float:
    """Seconds since the epoch of an RFC 3339 string or a datetime; 0.0 when unreadable."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0
