"""The operator exports its watch-fed view's own request counters at scrape time."""

from __future__ import annotations

from prometheus_client import generate_latest

from horus.common import constants as c
from horus.operator.metrics import OperatorMetrics


def test_view_counters_are_read_at_each_scrape() -> None:
    counts = {
        "pods": {"lists": 1, "watches": 3, "expired": 0, "errors": 2, "events": 40},
        "dljobs": {"lists": 2, "watches": 5, "expired": 1, "errors": 0, "events": 9},
    }
    m = OperatorMetrics()
    m.watch_view(lambda: counts)

    def value(name: str, **labels: str) -> float | None:
        return m.registry.get_sample_value(name, labels)

    lists = f"{c.METRIC_VIEW_REQUESTS}_total"
    assert value(lists, resource="pods", verb="list") == 1
    assert value(lists, resource="dljobs", verb="watch") == 5
    assert value(f"{c.METRIC_VIEW_WATCH_BREAKS}_total", resource="dljobs", reason="expired") == 1
    assert value(f"{c.METRIC_VIEW_WATCH_BREAKS}_total", resource="pods", reason="error") == 2
    assert value(f"{c.METRIC_VIEW_EVENTS}_total", resource="pods") == 40
    counts["dljobs"]["lists"] = 3  # a relist after the 410: the next scrape shows it
    assert value(lists, resource="dljobs", verb="list") == 3
    text = generate_latest(m.registry).decode()
    assert f'{c.METRIC_VIEW_REQUESTS}_total{{resource="dljobs",verb="list"}} 3.0' in text
