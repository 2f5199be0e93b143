"""common.clock: the one writer and reader of Kubernetes timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from horus.common.clock import now_rfc3339, rfc3339, timestamp


def test_rfc3339_writes_utc_with_and_without_microseconds() -> None:
    at = datetime(2026, 11, 23, 19, 0, 5, 123456, tzinfo=UTC)
    assert rfc3339(at) == "2026-11-23T19:00:05Z"
    assert rfc3339(at, micro=True) == "2026-11-23T19:00:05.123456Z"
    # another zone is converted, a naive time is taken as UTC
    cet = at.astimezone(timezone(timedelta(hours=1)))
    assert rfc3339(cet, micro=True) == "2026-11-23T19:00:05.123456Z"
    assert rfc3339(at.replace(tzinfo=None)) == "2026-11-23T19:00:05Z"


def test_now_round_trips_through_timestamp() -> None:
    before = datetime.now(UTC).timestamp()
    for micro in (False, True):
        text = now_rfc3339(micro)
        assert text.endswith("Z") and ("." in text) == micro
        assert before - 1.0 <= timestamp(text) <= datetime.now(UTC).timestamp()
    assert timestamp("not a time") == 0.0 and timestamp(None) == 0.0
