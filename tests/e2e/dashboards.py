"""Dashboards as data: every panel's PromQL, the metric names it uses, and its value in a
real Prometheus.

Why: a Grafana panel over a metric nobody exports is silently empty — the dashboard "works"
and shows nothing. So the tests (a) check every metric name a dashboard mentions against the
names the components define in ``horus.common.constants``, and (b) evaluate every query,
with its template variables substituted the way Grafana would, through a real Prometheus
HTTP API and require data.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from horus.common import constants as c

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"

#: Suffixes the Prometheus client library adds to counter and histogram families.
SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")
#: What Grafana's built-in interval variables stand for when a query is sent by hand.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "10m",
    "__range_s": "600",
}

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    expr: str


def load(folder: Path = DASHBOARDS) -> dict[str, dict[str, Any]]:
    """File name → parsed dashboard JSON."""
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def queries(boards: Mapping[str, dict[str, Any]]) -> Iterator[Query]:
    """Every target expression of every panel (rows' nested panels included)."""
    for name, board in boards.items():
        stack = list(board.get("panels", []))
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    yield Query(
                        name, panel.get("title", "?"), target.get("refId", "?"), target["expr"]
                    )


def known_metrics() -> set[str]:
    """Every exported name: each ``METRIC_*`` constant with the client's suffixes."""
    bases = {
        v
        for k, v in vars(c).items()
        if k.startswith("METRIC_") and isinstance(v, str) and v.startswith(c.METRIC_PREFIX)
    }
    return {b + s for b in bases for s in SUFFIXES}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels excluded)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors / subqueries
    # label lists: by (...), without (...), on (...), ignoring (...), group_left(...)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue  # function call or operator keyword
        if m.start() > 0 and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # part of a number like 1e3
        names.add(word)
    return names


def variables(board: dict[str, Any], chosen: Mapping[str, str] | None = None) -> dict[str, str]:
    """Template variable → the value used to evaluate (``All`` = the variable's allValue),
    or the value in ``chosen`` for the board's variables of that name (one picked in Grafana)."""
    chosen = chosen or {}
    out = dict(BUILTINS)
    for var in board.get("templating", {}).get("list", []):
        name = var["name"]
        if var.get("type") == "datasource":
            out[name] = "prometheus"
        elif name in chosen:
            out[name] = chosen[name]
        elif var.get("includeAll"):
            out[name] = var.get("allValue") or ".*"
        else:
            current = var.get("current", {}).get("value", "")
            out[name] = current[0] if isinstance(current, list) else str(current)
    return out


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace ``$name`` / ``${name}`` / ``[[name]]`` as Grafana does; unknown ones stay."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group(0))

    # longest names first (``$__range_s`` before ``$__range``) through the regex's greediness
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", repl, expr)


def evaluate(prometheus_url: str, expr: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Instant query through the Prometheus HTTP API; raises on a PromQL error."""
    url = f"{prometheus_url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as exc:  # 400/422: bad PromQL, body says why
        body = json.load(exc)
    if body.get("status") != "success":
        raise ValueError(f"Prometheus refused {expr!r}: {body.get('error')}")
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [{"value": result}]
    return list(result)


def evaluate_series(
    prometheus_url: str,
    boards: Mapping[str, dict[str, Any]] | None = None,
    chosen: Mapping[str, str] | None = None,
) -> dict[tuple[str, str], list[tuple[Query, list[dict[str, Any]]]]]:
    """(dashboard, panel) → each of its queries with the series it returned, the variables in
    ``chosen`` set to those values and the others to All."""
    boards = load() if boards is None else boards
    out: dict[tuple[str, str], list[tuple[Query, list[dict[str, Any]]]]] = {}
    for q in queries(boards):
        expr = substitute(q.expr, variables(boards[q.dashboard], chosen))
        out.setdefault((q.dashboard, q.panel), []).append((q, evaluate(prometheus_url, expr)))
    return out


def evaluate_all(
    prometheus_url: str, boards: Mapping[str, dict[str, Any]] | None = None
) -> dict[tuple[str, str], list[tuple[Query, int]]]:
    """(dashboard, panel) → each of its queries with the number of series it returned."""
    return {
        key: [(q, len(series)) for q, series in results]
        for key, results in evaluate_series(prometheus_url, boards).items()
    }
