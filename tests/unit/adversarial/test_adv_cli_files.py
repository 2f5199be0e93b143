"""Hostile files given to the other CLI readers, through the real entry point.

* predictor artifacts (``horus predict --model-file``, ``horus predictor card``): truncated,
  binary, deep, huge, gzip bombs, forged tree arrays;
* simulator traces (``horus sim --trace philly|alibaba --trace-file``): NaN/inf/negative times,
  absurd sizes, binary and malformed CSV — none may hang the simulator;
* role config files (``horus agent|deviceplugin|operator run --config``, ``horus operator
  extender --config``): binary, deep, aliases, wrong shapes, non-finite numbers;
* observed rows (``horus predictor train --extra-rows/--extra-pair-rows``).

Each is refused with one line naming the file (and the field or line) and exit status 2.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from horus.predictor.model import DEFAULT_ARTIFACT
from horus.predictor.schema import FEATURE_NAMES

GOOD_PROFILE = (
    "apiVersion: horus.io/v1alpha1\nkind: GraphProfile\nschemaVersion: 1\nmodel: m\n"
    "batchSize: 8\nfeatures: {batch_size: 8, params: 1.0e+6, fwd_flops: 1.0e+9, "
    "bwd_flops: 2.0e+9, activation_bytes: 1.0e+7, param_bytes: 4.0e+6}\n"
)


@pytest.fixture(scope="module")
def artifact() -> dict[str, Any]:
    return dict(json.loads(DEFAULT_ARTIFACT.read_text()))


def _b64(values: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values.astype(dtype)).tobytes()).decode()


def _forge(art: dict[str, Any], head: str, key: str, value: Any) -> bytes:
    out = copy.deepcopy(art)
    trees = out[head]["trees"]
    if key in ("feature", "left", "right", "threshold", "value") and not isinstance(value, str):
        shape = tuple(trees["shape"])
        dtype = "<i4" if key in ("feature", "left", "right") else "<f8"
        trees[key] = _b64(np.full(shape, value), dtype)
    else:
        trees[key] = value
    return json.dumps(out).encode()


def _without(art: dict[str, Any], key: str) -> bytes:
    return json.dumps({k: v for k, v in art.items() if k != key}).encode()


# (case id, builder of the file's bytes from the shipped artifact, words of the error line)
ARTIFACT_CASES: list[tuple[str, Callable[[dict[str, Any]], bytes], tuple[str, ...]]] = [
    ("binary", lambda a: bytes(range(256)) * 64, ("not UTF-8",)),
    ("empty", lambda a: b"", ("not valid JSON",)),
    ("truncated-json", lambda a: DEFAULT_ARTIFACT.read_bytes()[:5000], ("not valid JSON",)),
    (
        "truncated-gzip",
        lambda a: gzip.compress(DEFAULT_ARTIFACT.read_bytes())[:4000],
        ("truncated or corrupt gzip",),
    ),
    ("gzip-header-only", lambda a: b"\x1f\x8b\x08\x00", ("truncated or corrupt gzip",)),
    ("corrupt-gzip", lambda a: b"\x1f\x8b" + bytes(range(200)), ("truncated or corrupt gzip",)),
    ("gzip-bomb", lambda a: gzip.compress(b" " * (65 << 20), 9), ("inflates to more than",)),
    ("gzip-of-binary", lambda a: gzip.compress(bytes(range(256)) * 4), ("not UTF-8",)),
    ("deep-json", lambda a: b"[" * 100_000 + b"]" * 100_000, ("nested deeper",)),
    ("json-list", lambda a: b"[1, 2, 3]", ("not a predictor artifact",)),
    ("json-string", lambda a: b'"model"', ("not a predictor artifact",)),
    ("format-99", lambda a: json.dumps({**a, "format": 99}).encode(), ("format 99",)),
    ("no-util-head", lambda a: _without(a, "util"), ("missing field", "util")),
    ("no-version", lambda a: _without(a, "version"), ("missing field", "version")),
    (
        "feature-index-out-of-range",
        lambda a: _forge(a, "util", "feature", 10_000),
        ("feature index",),
    ),
    ("child-index-out-of-range", lambda a: _forge(a, "pair", "left", 99_999), ("child index",)),
    ("negative-child", lambda a: _forge(a, "memory", "right", -7), ("child index",)),
    ("absurd-depth", lambda a: _forge(a, "util", "depth", 40), ("too large",)),
    ("shape-mismatch", lambda a: _forge(a, "util", "shape", [151, 31]), ("not a usable",)),
    ("shape-huge", lambda a: _forge(a, "util", "shape", [10**9, 10**9]), ("not a usable",)),
    ("nan-leaves", lambda a: _forge(a, "util", "value", np.nan), ("not finite",)),
    ("not-base64", lambda a: _forge(a, "util", "threshold", "%%%"), ("not a usable",)),
    (
        "unknown-input",
        lambda a: json.dumps(
            {**a, "util": {**a["util"], "inputs": ["nope"] * len(a["util"]["inputs"])}}
        ).encode(),
        ("missing field", "nope"),
    ),
    (
        "offset-not-number",
        lambda a: json.dumps({**a, "memory": {**a["memory"], "upper_offset": "x"}}).encode(),
        ("not a usable",),
    ),
    ("ranges-wrong-shape", lambda a: json.dumps({**a, "ranges": [1]}).encode(), ("not a usable",)),
]


@pytest.mark.parametrize(
    ("case", "build", "words"), ARTIFACT_CASES, ids=[c[0] for c in ARTIFACT_CASES]
)
def test_hostile_predictor_artifact_is_refused(
    tmp_path: Path,
    cli: Callable,
    artifact: dict[str, Any],
    case: str,
    build: Callable[[dict[str, Any]], bytes],
    words: tuple[str, ...],
) -> None:
    model = tmp_path / "model.json"
    model.write_bytes(build(artifact))
    profile = tmp_path / "p.yaml"
    profile.write_text(GOOD_PROFILE)
    cli(["predict", str(profile), "--model-file", str(model)]).refused(str(model), *words)
    cli(["predictor", "card", "--model-file", str(model)]).refused(str(model), *words)


def test_huge_artifact_is_refused_before_reading(tmp_path: Path, cli: Callable) -> None:
    model = tmp_path / "model.json"
    with model.open("wb") as fh:
        fh.truncate(3 << 30)  # sparse
    cli(["predictor", "card", "--model-file", str(model)]).refused(str(model), "larger than")


def test_the_shipped_artifact_loads_gzipped_too(tmp_path: Path, cli: Callable) -> None:
    """Control case: the loader's checks accept what 'horus predictor train -o' writes."""
    model = tmp_path / "model.json.gz"
    model.write_bytes(gzip.compress(DEFAULT_ARTIFACT.read_bytes()))
    result = cli(["predictor", "card", "--model-file", str(model)])
    assert result.rc == 0, result.err


# --- simulator traces ----------------------------------------------------------------------------

PHILLY_OK = "ResNet-50 (batch size 64)\tx\tx\tx\t1000\t{arrival}\t1\n"


def philly(*fields: str) -> str:
    return "\t".join(fields) + "\n"


def _ok(arrival: str = "0") -> str:
    return PHILLY_OK.format(arrival=arrival)


PHILLY_CASES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("nan-arrival", (_ok() + _ok("nan")).encode(), ("line 2", "arrival_time", "finite")),
    ("inf-arrival", _ok("inf").encode(), ("line 1", "arrival_time")),
    ("neg-arrival", _ok("-5").encode(), ("arrival_time",)),
    ("huge-arrival", _ok("1e300").encode(), ("arrival_time",)),
    ("text-arrival", _ok("soon").encode(), ("arrival_time", "number")),
    (
        "nan-steps",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "nan", "0", "1").encode(),
        ("total_steps",),
    ),
    (
        "zero-steps",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "0", "0", "1").encode(),
        ("total_steps",),
    ),
    (
        "neg-steps",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "-10", "0", "1").encode(),
        ("total_steps",),
    ),
    (
        "endless-job",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "1e18", "0", "1").encode(),
        ("lasts",),
    ),
    (
        "zero-gpus",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "10", "0", "0").encode(),
        ("scale_factor",),
    ),
    (
        "huge-gpus",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "10", "0", "99999999").encode(),
        ("scale_factor",),
    ),
    (
        "float-gpus",
        philly("ResNet-50 (batch size 64)", "x", "x", "x", "10", "0", "1.5").encode(),
        ("scale_factor", "integer"),
    ),
    ("six-fields", b"a\tb\tc\td\te\tf\n", ("7 tab-separated fields",)),
    (
        "unknown-type",
        philly("Frobnicator", "x", "x", "x", "10", "0", "1").encode(),
        ("has no measured throughput",),
    ),
    ("binary", bytes(range(256)) * 16, ("not UTF-8",)),
    ("empty", b"", ("no GPU jobs",)),
]


@pytest.mark.timeout(60)  # a NaN arrival used to make the event loop spin forever
@pytest.mark.parametrize(("case", "data", "words"), PHILLY_CASES, ids=[c[0] for c in PHILLY_CASES])
def test_hostile_philly_trace_is_refused(
    tmp_path: Path, cli: Callable, case: str, data: bytes, words: tuple[str, ...]
) -> None:
    trace = tmp_path / f"{case}.trace"
    trace.write_bytes(data)
    result = cli(["sim", "--trace", "philly", "--trace-file", str(trace), "--no-progress"])
    result.refused(*words)
    assert trace.name in result.err or case == "empty"
    assert trace.read_bytes() == data


ALIBABA_HEAD = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def alibaba(row: str) -> bytes:
    return (ALIBABA_HEAD + "p0,1,1,1,1000,,LS,Running,0,100,0\n" + row + "\n").encode()


ALIBABA_CASES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("nan-creation", alibaba("p1,1,1,1,1000,,LS,Running,nan,100,0"), ("line 3", "creation_time")),
    ("inf-deletion", alibaba("p1,1,1,1,1000,,LS,Running,0,inf,0"), ("deletion_time",)),
    ("neg-scheduled", alibaba("p1,1,1,1,1000,,LS,Running,0,100,-1e9"), ("scheduled_time",)),
    ("text-gpus", alibaba("p1,1,1,two,1000,,LS,Running,0,100,0"), ("num_gpu", "integer")),
    ("huge-gpus", alibaba("p1,1,1,10000000,1000,,LS,Running,0,100,0"), ("num_gpu",)),
    ("short-row", alibaba("p1,1,1"), ("line 3", "header")),
    ("long-row", alibaba("p1,1,1,1,1000,,LS,Running,0,100,0,extra,extra"), ("line 3",)),
    ("missing-columns", b"name,num_gpu\np,1\n", ("missing column",)),
    ("binary", bytes(range(256)) * 16, ("not UTF-8",)),
    (
        "huge-field",
        alibaba('"' + "x" * 300_000 + '",1,1,1,1000,,LS,Running,0,100,0'),
        ("not valid CSV",),
    ),
    ("empty-name", alibaba(",1,1,1,1000,,LS,Running,0,100,0"), ("name",)),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("case", "data", "words"), ALIBABA_CASES, ids=[c[0] for c in ALIBABA_CASES]
)
def test_hostile_alibaba_trace_is_refused(
    tmp_path: Path, cli: Callable, case: str, data: bytes, words: tuple[str, ...]
) -> None:
    trace = tmp_path / f"{case}.csv"
    trace.write_bytes(data)
    result = cli(["sim", "--trace", "alibaba", "--trace-file", str(trace), "--no-progress"])
    result.refused(trace.name, *words)


@pytest.mark.timeout(120)
def test_a_valid_trace_still_runs(tmp_path: Path, cli: Callable) -> None:
    """Control case: two good rows of the same builder simulate to the end."""
    trace = tmp_path / "ok.trace"
    trace.write_text(_ok("0") + _ok("30"))
    result = cli(
        ["sim", "--trace", "philly", "--trace-file", str(trace), "--no-progress", "--gpus", "8"]
    )
    assert result.rc == 0, result.err
    assert "2 jobs on 8 GPUs" in result.out


# --- role config files ---------------------------------------------------------------------------

ROLES = {
    "agent": ["agent", "run", "--node-name", "n1"],
    "deviceplugin": ["deviceplugin", "run", "--node-name", "n1"],
    "operator": ["operator", "run"],
    "extender": ["operator", "extender"],
}

CONFIG_CASES: list[tuple[str, str, bytes, tuple[str, ...]]] = [
    ("binary", "agent", bytes(range(256)) * 4, ("not UTF-8",)),
    ("deep-flow", "operator", b"operator: " + b"[" * 5000 + b"]" * 5000, ("nested deeper",)),
    (
        "deep-block",
        "deviceplugin",
        "".join(" " * i + "a:\n" for i in range(500)).encode(),
        ("nested deeper",),
    ),
    ("aliases", "extender", b"extender: &e {port: 1}\nother: *e\n", ("anchors",)),
    ("top-list", "agent", b"- agent\n", ("mapping of sections",)),
    ("section-list", "operator", b"operator: [1, 2]\n", ("section 'operator'",)),
    (
        "unknown-key",
        "deviceplugin",
        b"deviceplugin: {helth_interval_s: 1}\n",
        ("helth_interval_s",),
    ),
    ("nan-float", "agent", b"agent: {interval_seconds: .nan}\n", ("interval_seconds", "finite")),
    ("inf-float", "operator", b"operator: {resync_period: .inf}\n", ("resync_period", "finite")),
    ("text-int", "extender", b"extender: {port: eighty}\n", ("port", "whole number")),
    ("fraction-int", "extender", b"extender: {port: 80.5}\n", ("port", "whole number")),
    ("bool-int", "operator", b"operator: {workers: true}\n", ("workers", "whole number")),
    (
        "huge-int",
        "deviceplugin",
        b"deviceplugin: {memory_unit_mib: 99999999999}\n",
        ("memory_unit_mib",),
    ),
    (
        "long-text",
        "agent",
        b"agent: {metrics_address: " + b"a" * 5000 + b"}\n",
        ("metrics_address", "longer"),
    ),
    ("newline-text", "operator", b'operator: {identity: "a\\nb"}\n', ("identity", "control")),
    ("nul-path", "deviceplugin", b'deviceplugin: {plugin_dir: "/tmp/\\0x"}\n', ("plugin_dir",)),
    ("empty-path", "deviceplugin", b'deviceplugin: {plugin_dir: ""}\n', ("plugin_dir", "empty")),
    ("period-overflow", "agent", b"agent: {interval_seconds: 1.0e+300}\n", ("interval_seconds",)),
    ("negative-period", "deviceplugin", b"deviceplugin: {socket_poll_s: -1}\n", ("socket_poll_s",)),
    ("bad-literal", "agent", b"agent: {watchdog: explode}\n", ("watchdog", "report")),
    ("bad-bool", "deviceplugin", b"deviceplugin: {publish_inventory: maybe}\n", ("boolean",)),
    ("dict-for-number", "extender", b"extender: {cache_seconds: {a: 1}}\n", ("cache_seconds",)),
    ("bad-syntax", "operator", b"operator: {workers: [\n", ("not valid JSON or YAML",)),
]


@pytest.mark.parametrize(
    ("case", "role", "data", "words"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES]
)
def test_hostile_config_file_is_refused(
    tmp_path: Path, cli: Callable, case: str, role: str, data: bytes, words: tuple[str, ...]
) -> None:
    config = tmp_path / "horus.yaml"
    config.write_bytes(data)
    cli([*ROLES[role], "--config", str(config)]).refused(*words)
    assert config.read_bytes() == data


def test_config_file_missing_huge_or_a_directory(tmp_path: Path, cli: Callable) -> None:
    cli([*ROLES["agent"], "--config", str(tmp_path / "nope.yaml")]).refused("does not exist")
    cli([*ROLES["operator"], "--config", str(tmp_path)]).refused("cannot read")
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as fh:
        fh.truncate(2 << 30)
    cli([*ROLES["extender"], "--config", str(huge)]).refused("larger than")


# --- observed training rows ----------------------------------------------------------------------


def _rows(head: list[str], row: dict[str, str]) -> bytes:
    return (",".join(head) + "\n" + ",".join(row.get(k, "1") for k in head) + "\n").encode()


ROW_HEAD = ["gpu", "util", "memory_mib", *FEATURE_NAMES]
PAIR_HEAD = ["gpu", "speed", *[f"a_{k}" for k in FEATURE_NAMES], *[f"b_{k}" for k in FEATURE_NAMES]]

ROW_CASES: list[tuple[str, str, bytes, tuple[str, ...]]] = [
    ("nan-feature", "rows", _rows(ROW_HEAD, {"gpu": "A100", "params": "nan"}), (":2", "params")),
    ("neg-feature", "rows", _rows(ROW_HEAD, {"gpu": "A100", "params": "-1"}), ("params",)),
    ("util-200", "rows", _rows(ROW_HEAD, {"gpu": "A100", "util": "200"}), ("util",)),
    ("unknown-gpu", "rows", _rows(ROW_HEAD, {"gpu": "Z9000"}), (":2", "Z9000")),
    ("binary", "rows", bytes(range(256)) * 8, ("not UTF-8",)),
    ("short-line", "rows", ",".join(ROW_HEAD).encode() + b"\nA100,1\n", (":2", "fields")),
    ("missing-cols", "rows", b"gpu,util\nA100,1\n", ("missing columns",)),
    ("pair-inf-speed", "pairs", _rows(PAIR_HEAD, {"gpu": "A100", "speed": "inf"}), ("speed",)),
    ("pair-text", "pairs", _rows(PAIR_HEAD, {"gpu": "A100", "a_params": "x"}), ("a_params",)),
    ("pair-binary", "pairs", b"\xff\xfe" * 100, ("not UTF-8",)),
]


@pytest.mark.parametrize(
    ("case", "kind", "data", "words"), ROW_CASES, ids=[c[0] for c in ROW_CASES]
)
def test_hostile_observed_rows_are_refused_before_training(
    tmp_path: Path, cli: Callable, case: str, kind: str, data: bytes, words: tuple[str, ...]
) -> None:
    rows = tmp_path / f"{case}.csv"
    rows.write_bytes(data)
    flag = "--extra-rows" if kind == "rows" else "--extra-pair-rows"
    out = tmp_path / "model.json"
    cli(["predictor", "train", flag, str(rows), "-o", str(out)]).refused(rows.name, *words)
    assert not out.exists()  # nothing trained, nothing written


# --- measured ground truth (horus sim --truth measured:DIR) ---------------------------------------


def _measure_json(**over: Any) -> bytes:
    from horus.predictor.measure import RESULTS_FORMAT

    features = {k: 1.0 for k in FEATURE_NAMES}
    doc: dict[str, Any] = {
        "format": RESULTS_FORMAT,
        "gpu": "A100",
        "solo": {"resnet50:32": {"features": features, "util": 50.0, "steps_per_s": 3.0}},
        "pairs": {},
        "failed": {},
    }
    doc.update(over)
    return json.dumps(doc).encode()


MEASURED_CASES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("binary", bytes(range(256)) * 4, ("not UTF-8",)),
    ("deep", b"[" * 5000 + b"]" * 5000, ("nested deeper",)),
    ("list", b"[1]", ("format is None",)),
    ("wrong-format", _measure_json(format=99), ("format is 99",)),
    ("solo-list", _measure_json(solo=[1, 2]), ("'solo' must map",)),
    ("pair-string", _measure_json(pairs={"a|b": "fast"}), ("'pairs' must map",)),
    (
        "nan-feature",
        _measure_json(
            solo={"resnet50:32": {"features": {k: "nan" for k in FEATURE_NAMES}, "util": 1.0}}
        ),
        ("resnet50:32", "features"),
    ),
    ("no-pairs", _measure_json(), ("no measured pairs",)),
]


@pytest.mark.parametrize(
    ("case", "data", "words"), MEASURED_CASES, ids=[c[0] for c in MEASURED_CASES]
)
def test_hostile_measured_truth_is_refused(
    tmp_path: Path, cli: Callable, case: str, data: bytes, words: tuple[str, ...]
) -> None:
    (tmp_path / "measure.json").write_bytes(data)
    result = cli(["sim", "--truth", f"measured:{tmp_path}", "--no-progress", "--jobs", "5"])
    result.refused(*words)
