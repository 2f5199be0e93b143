"""Property-based fuzzing (hypothesis) of every parser that reads hostile input.

For each parser the property is the same: on *any* input it either returns a value that
satisfies the invariants its callers rely on (finite numbers, bounded sizes, round trips), or
raises the one error type its callers handle (``ValidationError``/``ConfigError``/
``argparse.ArgumentTypeError``) — never ``RecursionError``, ``UnicodeDecodeError``,
``KeyError``, ``OverflowError`` or a hang. Example counts are kept small enough that the
whole file runs in well under a minute on one core.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horus.api.assignment import (
    GpuAssignment,
    decode_assignment,
    decode_predicted,
    encode_assignment,
    encode_predicted,
)
from horus.api.inventory import decode_inventory, encode_inventory
from horus.api.profile import parse_profile_document
from horus.api.resources import (
    container_amount,
    containers_asking,
    parse_quantity,
    pod_effective_request,
)
from horus.common.constants import MAX_PROFILE_FEATURES
from horus.common.documents import check_depth, load_json, load_yaml, load_yaml_all
from horus.common.errors import ConfigError, ValidationError
from horus.common.flags import integer, number
from horus.common.settings import load_settings
from horus.operator.extender import (
    RequestError,
    parse_binding_args,
    parse_extender_args,
    pod_demand,
)
from horus.sim.groundtruth import GroundTruth, load_truth
from horus.sim.traces import MAX_TRACE_SECONDS, load_alibaba, load_philly

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FEW = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=25,
)
#: Text that leans towards what breaks parsers: brackets, quotes, anchors, tabs, NULs, digits.
nasty_text = st.text(
    alphabet=st.sampled_from(list("[]{}:&*!|>-'\"#\t\n \x00\\0123456789.eE+naif,"))
    | st.characters(),
    max_size=200,
)


def _deep(levels: int, opener: str = "[") -> str:
    closer = {"[": "]", "{": "}"}[opener]
    inner = "1" if opener == "[" else "a: 1"
    return opener * levels + inner + closer * levels


deep_text = st.builds(_deep, st.integers(0, 3000), st.sampled_from(["[", "{"]))


# --- bounded document readers ---------------------------------------------------------------------


@FUZZ
@given(text=nasty_text | deep_text, as_bytes=st.booleans())
def test_document_readers_never_escape(text: str, as_bytes: bool) -> None:
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    for reader in (load_yaml, load_json, load_yaml_all):
        try:
            reader(data, "doc", max_bytes=4096, max_depth=16)
        except ValidationError as exc:
            assert str(exc).startswith("doc"), exc


@FUZZ
@given(data=st.binary(max_size=300))
def test_binary_is_named_not_decoded(data: bytes) -> None:
    try:
        load_yaml_all(data, "f", max_bytes=4096)
    except ValidationError as exc:
        assert str(exc).startswith("f")


@FUZZ
@given(levels=st.integers(0, 200), limit=st.integers(1, 100))
def test_depth_check_agrees_with_the_structure(levels: int, limit: int) -> None:
    text = _deep(levels)
    try:
        check_depth(text, "d", limit)
    except ValidationError:
        assert levels > limit
    else:
        assert levels <= limit


# --- profile documents (DLJob inline, ConfigMap, pod annotation, horus predict) ----------------

feature_values = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(10**40), 10**40)
    | st.text(max_size=5)
    | st.booleans()
    | st.none()
)
profile_docs = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["GraphProfile", "Pod", 3]),
        "schemaVersion": st.sampled_from([1, 2, "1", None]),
        "model": st.text(max_size=300) | st.integers(),
        "batchSize": st.integers(-5, 2**40) | st.floats() | st.text(max_size=3),
        "features": st.dictionaries(
            st.text(max_size=20) | st.integers(), feature_values, max_size=8
        )
        | json_like,
    },
    optional={"extra": json_like, "family": json_like},
)


def _check_profile(profile: Any) -> None:
    assert 1 <= len(profile.features) <= MAX_PROFILE_FEATURES
    assert all(math.isfinite(v) and v >= 0 for v in profile.features.values())
    assert isinstance(profile.batch_size, int) and profile.batch_size >= 1


@FUZZ
@given(doc=profile_docs, as_json=st.booleans())
def test_profile_documents(doc: dict[str, Any], as_json: bool) -> None:
    text = json.dumps(doc, allow_nan=True) if as_json else _yaml_dump(doc)
    try:
        profile = parse_profile_document(text, "cm[p]")
    except ValidationError as exc:
        assert str(exc).startswith("cm[p]"), exc
    else:
        _check_profile(profile)


@FUZZ
@given(text=nasty_text | deep_text)
def test_profile_text(text: str) -> None:
    with contextlib.suppress(ValidationError):
        _check_profile(parse_profile_document(text, "p"))


def _yaml_dump(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc, allow_unicode=True)


# --- annotation decoders (assignment, predicted, inventory) -------------------------------------


@FUZZ
@given(value=json_like | st.text(max_size=40).map(lambda t: {"gpus": t}))
def test_assignment_decoder(value: Any) -> None:
    text = json.dumps(value, allow_nan=True)
    try:
        got = decode_assignment(text, "pod ns/p")
    except ValidationError as exc:
        assert str(exc).startswith("pod ns/p")
    else:
        assert decode_assignment(encode_assignment(got)) == got
        assert 1 <= got.core_percent <= 100 and len(got.all_gpus) <= 16


assignment_objects = st.fixed_dictionaries(
    {
        "node": st.text(min_size=0, max_size=5),
        "gpuUUID": st.text(max_size=5),
        "gpuIndex": st.integers(-3, 5000) | st.floats(),
        "corePercent": st.integers(-3, 300) | st.floats(allow_nan=True),
        "memoryMiB": st.integers(-3, 2**22) | st.text(max_size=3),
    },
    optional={"job": json_like, "replica": st.integers(-2, 2000), "gpus": json_like},
)


@FUZZ
@given(obj=assignment_objects)
def test_assignment_objects(obj: dict[str, Any]) -> None:
    try:
        got = decode_assignment(json.dumps(obj, allow_nan=True), "a")
    except ValidationError:
        return
    assert isinstance(got, GpuAssignment) and got.node and 0 <= got.gpu_index <= 1023


@FUZZ
@given(
    value=json_like
    | st.dictionaries(
        st.sampled_from(
            ["utilMean", "utilUpper", "memoryMiBMean", "memoryMiBUpper", "modelVersion", "quantile"]
        ),
        feature_values,
        max_size=6,
    )
)
def test_predicted_decoder(value: Any) -> None:
    try:
        got = decode_predicted(json.dumps(value, allow_nan=True), "p")
    except ValidationError:
        return
    assert all(math.isfinite(x) for x in (got.util_mean, got.util_upper, got.memory_mib_mean))
    assert decode_predicted(encode_predicted(got)) == got


@FUZZ
@given(value=json_like | st.lists(json_like, max_size=3))
def test_inventory_decoder(value: Any) -> None:
    try:
        gpus = decode_inventory(json.dumps(value, allow_nan=True), "node n")
    except ValidationError:
        return
    assert decode_inventory(encode_inventory(gpus)) == gpus


@FUZZ
@given(text=nasty_text | deep_text)
def test_annotation_text(text: str) -> None:
    for decode in (decode_assignment, decode_predicted, decode_inventory):
        with contextlib.suppress(ValidationError):
            decode(text, "x")


# --- quantities and effective requests ------------------------------------------------------------


@FUZZ
@given(value=st.text(alphabet="0123456789.+-eEkMGTPimK ", max_size=40) | scalars)
def test_quantities(value: Any) -> None:
    try:
        amount = parse_quantity(value, "q")
    except ValidationError:
        return
    assert isinstance(amount, int) and 0 <= amount <= 2**62


containers = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "resources": st.fixed_dictionaries(
                {},
                optional={
                    "requests": st.dictionaries(
                        st.sampled_from(["horus.io/gpu-core", "cpu"]),
                        st.integers(0, 200).map(str) | scalars,
                        max_size=2,
                    )
                    | json_like,
                    "limits": json_like,
                },
            )
            | json_like
        },
    ),
    max_size=4,
)


@FUZZ
@given(main=containers, init=containers | json_like)
def test_effective_request(main: list[Any], init: Any) -> None:
    spec = {"containers": main, "initContainers": init}
    try:
        eff = pod_effective_request(spec, "horus.io/gpu-core")
    except ValidationError:
        return
    total = eff.total
    assert total is None or total == max(eff.containers or 0, eff.init or 0)


@FUZZ
@given(main=containers | json_like)
def test_containers_asking_agrees_with_the_amounts(main: Any) -> None:
    """The one "which containers ask for a Horus resource" reader never raises, and names
    exactly the containers whose amount reads as present (where the amount reads at all)."""
    spec = {"containers": main}
    names = containers_asking(spec, "containers", ("horus.io/gpu-core",))
    assert all(isinstance(n, str) for n in names)
    if not isinstance(main, list):
        assert names == []
        return
    expect = []
    for i, ctr in enumerate(main):
        try:
            amount = container_amount(ctr, "horus.io/gpu-core", "c")
        except (ValidationError, AttributeError):
            return  # hostile shape: the amount readers refuse the pod first
        if amount is not None:
            expect.append(str(ctr.get("name") or f"#{i}"))
    assert names == expect


# --- extender request decoding ----------------------------------------------------------------------

pods = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=4)},
            optional={"annotations": st.dictionaries(st.text(max_size=4), scalars, max_size=2)},
        )
        | json_like,
        "spec": st.fixed_dictionaries({"containers": containers, "initContainers": containers})
        | json_like,
    }
)


@FUZZ
@given(
    body=json_like
    | st.fixed_dictionaries({"Pod": pods | json_like}, optional={"NodeNames": json_like})
    | st.fixed_dictionaries({"pod": pods, "nodes": json_like})
)
def test_extender_args(body: Any) -> None:
    try:
        args = parse_extender_args(body)
    except RequestError as exc:
        assert str(exc)
        return
    assert all(isinstance(n, str) and 0 < len(n) <= 253 for n in args.node_names)
    pod_demand(args.pod)  # a parsed pod never makes the demand reader raise


@FUZZ
@given(
    body=json_like
    | st.dictionaries(
        st.sampled_from(["PodName", "podname", "PodNamespace", "PodUID", "Node", "node"]),
        scalars | st.text(max_size=300),
        max_size=5,
    )
)
def test_binding_args(body: Any) -> None:
    try:
        args = parse_binding_args(body)
    except RequestError:
        return
    assert args.pod_name and args.node and len(args.pod_uid) <= 128


# --- settings readers and flags ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Fuzzed:
    period: float = 1.0
    count: int = 1
    name: str = "x"
    path: Path = Path("/tmp")
    on: bool = False


@FUZZ
@given(
    env=st.dictionaries(
        st.sampled_from(
            ["HORUS_F_PERIOD", "HORUS_F_COUNT", "HORUS_F_NAME", "HORUS_F_PATH", "HORUS_F_ON"]
        ),
        st.text(max_size=30) | st.sampled_from(["nan", "inf", "-inf", "1e400", "1.5", "0x10"]),
        max_size=5,
    ),
    cli=st.dictionaries(st.sampled_from(["period", "count", "name"]), scalars, max_size=3),
)
def test_settings_reader(env: dict[str, str], cli: dict[str, Any]) -> None:
    try:
        got = load_settings(_Fuzzed, "f", cli=cli, env=env)
    except ConfigError:
        return
    assert math.isfinite(got.period) and isinstance(got.count, int)
    assert all(ord(ch) >= 32 or ch == "\t" for ch in got.name)


@FUZZ
@given(body=json_like | st.dictionaries(st.just("f"), json_like, max_size=1), tmp=st.just(0))
def test_settings_file(tmp_path_factory: pytest.TempPathFactory, body: Any, tmp: int) -> None:
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(json.dumps(body, allow_nan=True))
    try:
        got = load_settings(_Fuzzed, "f", env={}, config_file=path)
    except ConfigError:
        return
    assert math.isfinite(got.period)


@FUZZ
@given(text=st.text(max_size=30) | st.sampled_from(["nan", "inf", "-0", "1e999", " 5 ", "5_0"]))
def test_flag_types(text: str) -> None:
    for parse, lo, hi in ((number(0.0, 10.0, lo_open=True), 0.0, 10.0), (integer(1, 9), 1, 9)):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "must be" in str(exc)
        else:
            assert math.isfinite(value) and lo <= value <= hi


# --- simulator traces: any accepted trace simulates to the end --------------------------------------


@pytest.fixture(scope="module")
def truth() -> GroundTruth:
    return load_truth("gavel")


trace_fields = st.sampled_from(
    ["0", "1", "10", "-1", "nan", "inf", "-inf", "1e300", "1.5", "x", "", "1e18", "3600"]
)


@FEW
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["ResNet-50 (batch size 64)", "LM (batch size 40)", "nope"]),
            trace_fields,
            trace_fields,
            st.sampled_from(["1", "2", "0", "-1", "8", "x", "1.0"]),
        ),
        min_size=1,
        max_size=5,
    )
)
@pytest.mark.timeout(120)
def test_philly_rows(
    tmp_path_factory: pytest.TempPathFactory, truth: GroundTruth, rows: list[tuple[str, ...]]
) -> None:
    from horus.sim.engine import SimConfig, Simulator
    from horus.sim.predictors import ProfiledPredictor

    path = tmp_path_factory.mktemp("trace") / "t.trace"
    path.write_text("".join(f"{t}\tx\tx\tx\t{steps}\t{arr}\t{g}\n" for t, steps, arr, g in rows))
    try:
        jobs = load_philly([path], truth)
    except ValidationError as exc:
        assert "t.trace line" in str(exc) or "t.trace" in str(exc)
        return
    assert all(0 <= j.submit_time <= MAX_TRACE_SECONDS and j.duration > 0 for j in jobs)
    jobs = [j for j in jobs if j.duration < 1e7]  # keep the run short; the loop is what matters
    if not jobs:
        return
    try:
        predictor = ProfiledPredictor(truth)
        Simulator(jobs, truth, "binpack", predictor, SimConfig(gpus=16, drop_impossible=True)).run()
    except ValidationError:
        pass  # e.g. a stand-in predictor without measurements for a kind: a clear refusal


@FEW
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["1", "0", "x", "8", ""]), trace_fields, trace_fields, trace_fields
        ),
        min_size=1,
        max_size=5,
    )
)
def test_alibaba_rows(
    tmp_path_factory: pytest.TempPathFactory, truth: GroundTruth, rows: list[tuple[str, ...]]
) -> None:
    path = tmp_path_factory.mktemp("trace") / "a.csv"
    head = "name,num_gpu,creation_time,deletion_time,scheduled_time\n"
    path.write_text(head + "".join(f"p{i},{','.join(r)}\n" for i, r in enumerate(rows)))
    try:
        jobs = load_alibaba(path, truth)
    except ValidationError as exc:
        assert "a.csv" in str(exc)
        return
    assert all(math.isfinite(j.submit_time) and math.isfinite(j.duration) for j in jobs)
