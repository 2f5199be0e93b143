"""The bounded document readers: every hostile shape gives a ValidationError, never a crash."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horus.common.documents import (
    TOO_DEEP,
    check_depth,
    depth_of,
    load_json,
    load_yaml,
    loads_api_json,
    read_text_file,
)
from horus.common.errors import ValidationError

MB = 1 << 20


def deep_json(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_deep_json_is_refused_before_parsing() -> None:
    with pytest.raises(ValidationError, match=r"nested deeper than 64 levels"):
        load_json(deep_json(5000), "req", max_bytes=MB)


def test_deep_flow_yaml_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"nested deeper than 64"):
        load_yaml("a: " + "[" * 4000 + "]" * 4000, "profile.yaml", max_bytes=MB)


def test_deep_block_yaml_is_refused_not_a_recursion_error() -> None:
    text = "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "v: 1\n"
    with pytest.raises(ValidationError, match=r"profile.yaml: nested deeper"):
        load_yaml(text, "profile.yaml", max_bytes=64 * MB)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"s": "[" * 500, "t": "{" * 500})
    assert load_json(text, "x", max_bytes=MB) == {"s": "[" * 500, "t": "{" * 500}
    assert load_yaml('s: \'[[[[[[[\'\nt: "{{{{\\""\n', "y", max_bytes=MB)["s"] == "[[[[[[["


def test_binary_input_is_named() -> None:
    with pytest.raises(ValidationError, match=r"not UTF-8 text .*binary file"):
        load_yaml(b"\x89PNG\r\n\x1a\n\x00\x00", "trace.csv", max_bytes=MB)


def test_size_limit() -> None:
    with pytest.raises(ValidationError, match=r"larger than the 100 bytes"):
        load_json("[" + "1," * 100 + "1]", "req", max_bytes=100)


def test_aliases_are_refused() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    with pytest.raises(ValidationError, match=r"aliases|anchors"):
        load_yaml(bomb, "f", max_bytes=MB)


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(ValidationError, match=r"req: not valid JSON .* line 1 column"):
        load_json('{"a": }', "req", max_bytes=MB)


def test_read_text_file_checks_size_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 2048)
    with pytest.raises(ValidationError, match=r"big.yaml: 2048 bytes is larger than the 1024"):
        read_text_file(big, max_bytes=1024)
    with pytest.raises(ValidationError, match=r"cannot read .*missing"):
        read_text_file(tmp_path / "missing", max_bytes=1024)


def test_api_json_keeps_the_list_and_marks_the_deep_item() -> None:
    items = [{"metadata": {"name": "ok"}}, json.loads(deep_json(150))]
    body = (
        '{"items":['
        + json.dumps(items[0])
        + ',{"metadata":{"name":"evil"},"spec":'
        + deep_json(5000)
        + "}]}"
    )
    out = loads_api_json(body.encode())
    assert out["items"][0] == {"metadata": {"name": "ok"}}
    evil = out["items"][1]
    assert evil["metadata"] == {"name": "evil"}
    assert TOO_DEEP in json.dumps(evil["spec"])  # the deep part replaced, the rest kept
    assert depth_of(evil) <= 201


def test_api_json_fast_path_is_plain_json() -> None:
    assert loads_api_json(b'{"items": [1, 2]}') == {"items": [1, 2]}


def test_depth_of_handles_shared_references() -> None:
    leaf: list[object] = []
    doc = {"a": leaf, "b": leaf, "c": {"d": [[1]]}}
    assert depth_of(doc) == 4
    assert depth_of(7) == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_give_a_value_or_a_validation_error(data: bytes) -> None:
    for loader in (load_json, load_yaml):
        with contextlib.suppress(ValidationError):
            loader(data, "fuzz", max_bytes=4096, max_depth=16)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_check_depth_agrees_with_depth_of(value: object) -> None:
    text = json.dumps(value)
    d = depth_of(value)
    check_depth(text, "x", max_depth=d)  # exactly deep enough: accepted
    if d:
        with pytest.raises(ValidationError):
            check_depth(text, "x", max_depth=d - 1)
