"""``horus predict`` on hostile profile and DLJob files, through the real entry point.

Each file is refused with one line naming the file (and the field), exit status 2, the file
left as it was; the same rules as the operator (``horus.api.profile``), so a profile the
cluster refuses is refused here with the same sentence.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from horus.common.constants import MAX_PROFILE_FEATURES

BASE_FEATURES = {
    "batch_size": 8,
    "params": 1.0e6,
    "fwd_flops": 1.0e9,
    "bwd_flops": 2.0e9,
    "activation_bytes": 1.0e7,
    "param_bytes": 4.0e6,
}


def profile_yaml(features: str | None = None, **fields: str) -> str:
    """A profile document as text, with any field replaced by raw YAML."""
    body = {
        "apiVersion": "horus.io/v1alpha1",
        "kind": "GraphProfile",
        "schemaVersion": "1",
        "model": "m",
        "family": "f",
        "batchSize": "8",
        "features": features if features is not None else json.dumps(BASE_FEATURES),
    }
    body.update(fields)
    return "".join(f"{k}: {v}\n" for k, v in body.items() if v is not None)


def feats(**changes: object) -> str:
    return json.dumps({**BASE_FEATURES, **changes})


def deep_flow(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_block(levels: int) -> str:
    return "".join(" " * i + "a:\n" for i in range(levels)) + " " * levels + "1\n"


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def dljob(profile: str, name: str = "j") -> str:
    return (
        "apiVersion: horus.io/v1alpha1\nkind: DLJob\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n  replicas: 1\n"
        f"  profile: {profile}\n"
        "  template:\n    spec:\n      containers: [{name: main, image: busybox}]\n"
    )


INLINE = json.dumps({"model": "m", "batchSize": 8, "features": BASE_FEATURES})

# (case id, file bytes, words the one error line must hold)
CASES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("binary", bytes(range(256)) * 8, ("not UTF-8", "binary")),
    ("utf16", profile_yaml().encode("utf-16"), ("not UTF-8",)),
    ("latin1", profile_yaml(model="caf\xe9").encode("latin-1"), ("not UTF-8",)),
    ("empty", b"", ("holds no document",)),
    ("only-comments", b"# nothing\n# here\n", ("holds no document",)),
    ("only-separators", b"---\n---\n", ("holds no document",)),
    ("deep-flow-5000", deep_flow(5000).encode(), ("nested deeper than",)),
    ("deep-flow-in-features", profile_yaml(features=deep_flow(80)).encode(), ("nested deeper",)),
    ("deep-block-2000", deep_block(2000).encode(), ("nested deeper",)),
    ("deep-block-100", deep_block(100).encode(), ("nested deeper",)),
    ("deep-mapping-flow", ("{a: " * 200 + "1" + "}" * 200).encode(), ("nested deeper",)),
    ("billion-laughs", billion_laughs().encode(), ("anchors", "aliases")),
    ("one-alias", (profile_yaml() + "x: &x 1\ny: *x\n").encode(), ("anchors",)),
    ("inf-feature", profile_yaml(feats().replace("1000000.0", ".inf")).encode(), ("params",)),
    (
        "nan-feature",
        profile_yaml(features="{params: .nan}").encode(),
        ("features.params", "finite"),
    ),
    ("neg-inf", profile_yaml(features="{params: -.inf}").encode(), ("features.params", "finite")),
    ("negative", profile_yaml(feats(params=-1)).encode(), ("features.params", "horus profile")),
    (
        "yaml-1e400",
        profile_yaml(feats(fwd_flops="X")).replace('"X"', "1.0e+400").encode(),
        ("features.fwd_flops", "finite"),
    ),
    ("string-value", profile_yaml(feats(params="many")).encode(), ("features.params", "number")),
    ("bool-value", profile_yaml(feats(params=True)).encode(), ("features.params", "number")),
    ("null-value", profile_yaml(feats(params=None)).encode(), ("features.params", "number")),
    ("list-value", profile_yaml(feats(params=[1])).encode(), ("features.params", "number")),
    ("features-list", profile_yaml(features="[1, 2]").encode(), ("features", "object")),
    ("features-scalar", profile_yaml(features="12").encode(), ("features", "object")),
    ("features-missing", profile_yaml().split("features:")[0].encode(), ("features", "required")),
    ("features-empty", profile_yaml(features="{}").encode(), ("features", "1..")),
    ("too-many-features", b"", ("features", f"1..{MAX_PROFILE_FEATURES}")),
    ("bad-feature-name", profile_yaml(feats(**{"bad name!": 1})).encode(), ("feature name",)),
    ("long-feature-name", profile_yaml(feats(**{"f" * 200: 1})).encode(), ("feature name",)),
    ("numeric-feature-key", profile_yaml(features="{1: 2, params: 3}").encode(), ("name",)),
    ("missing-required", profile_yaml(json.dumps({"params": 1.0})).encode(), ("lack",)),
    ("batch-zero", profile_yaml(batchSize="0").encode(), ("batchSize",)),
    ("batch-string", profile_yaml(batchSize='"8"').encode(), ("batchSize", "integer")),
    ("batch-huge", profile_yaml(batchSize="1e12").encode(), ("batchSize",)),
    ("batch-float", profile_yaml(batchSize="8.5").encode(), ("batchSize", "integer")),
    ("schema-2", profile_yaml(schemaVersion="2").encode(), ("schemaVersion", "horus profile")),
    ("kind-pod", profile_yaml(kind="Pod").encode(), ("kind", "GraphProfile")),
    ("api-version", profile_yaml(apiVersion="v1").encode(), ("apiVersion",)),
    ("unknown-field", (profile_yaml() + "gpu: A100\n").encode(), ("gpu", "unknown")),
    ("model-too-long", profile_yaml(model="m" * 300).encode(), ("model", "253")),
    ("model-list", profile_yaml(model="[a]").encode(), ("model", "string")),
    ("top-level-list", b"- 1\n- 2\n", ("must be an object",)),
    ("top-level-scalar", b"hello\n", ("must be an object",)),
    ("two-profiles", (profile_yaml() + "---\n" + profile_yaml()).encode(), ("2 documents",)),
    ("bad-syntax", b"features: [1, 2\n", ("not valid JSON or YAML", "line")),
    ("tab-indent", b"features:\n\t- 1\n", ("not valid JSON or YAML",)),
    ("nul-byte", profile_yaml(model='"a\x00b"').encode(), ("not valid JSON or YAML",)),
    (
        "json-1e999",
        json.dumps({**json.loads(INLINE), "kind": "GraphProfile"})
        .replace("1000000.0", "1e999")
        .encode(),
        ("features.params", "number"),
    ),
    (
        "json-NaN",
        json.dumps({**json.loads(INLINE)}).replace("1000000.0", "NaN").encode(),
        ("features.params",),
    ),
    (
        "dljob-configmap-absent",
        dljob("{configMapRef: {name: prof, key: profile.yaml}}").encode(),
        ("ConfigMap 'prof'", "kubectl get configmap"),
    ),
    (
        "dljob-configmap-inf",
        (
            dljob("{configMapRef: {name: prof, key: p}}") + "---\napiVersion: v1\nkind: ConfigMap\n"
            "metadata: {name: prof}\ndata:\n  p: |\n"
            + "".join(
                "    " + ln + "\n" for ln in profile_yaml(features="{params: .inf}").splitlines()
            )
        ).encode(),
        ("ConfigMap prof[p]", "features.params", "finite"),
    ),
    (
        "dljob-configmap-binary-ish",
        (
            dljob("{configMapRef: {name: prof, key: p}}") + "---\napiVersion: v1\nkind: ConfigMap\n"
            "metadata: {name: prof}\ndata: {p: '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'}\n"
        ).encode(),
        ("ConfigMap prof[p]",),
    ),
    ("two-dljobs", (dljob(INLINE) + "---\n" + dljob(INLINE, "k")).encode(), ("2 DLJobs",)),
    ("dljob-inline-nan", dljob(INLINE.replace("1000000.0", ".nan")).encode(), ("params",)),
    (
        "dljob-deep-template",
        dljob(INLINE)
        .replace("containers: [{name: main, image: busybox}]", "containers: " + deep_flow(3000))
        .encode(),
        ("nested deeper",),
    ),
]


def _too_many_features() -> bytes:
    many = {**BASE_FEATURES, **{f"x{i}": 1 for i in range(2_000)}}
    return profile_yaml(json.dumps(many)).encode()


@pytest.mark.parametrize(("case", "data", "words"), CASES, ids=[c[0] for c in CASES])
def test_hostile_profile_file_is_refused(
    tmp_path: Path, cli: Callable, case: str, data: bytes, words: tuple[str, ...]
) -> None:
    if case == "too-many-features":
        data = _too_many_features()
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(data)
    result = cli(["predict", str(path)])
    result.refused(str(path), *words)
    assert path.read_bytes() == data  # nothing lost: the input is untouched


def test_the_second_profile_is_named_too(tmp_path: Path, cli: Callable) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(profile_yaml())
    bad.write_bytes(b"\x00\xff" * 100)
    cli(["predict", str(good), "--with", str(bad)]).refused(str(bad), "not UTF-8")
    assert cli(["predict", str(good)]).rc == 0  # the good file still predicts


def test_oversized_file_is_refused_before_reading(tmp_path: Path, cli: Callable) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as fh:  # sparse: 5 GiB announced, nothing written
        fh.truncate(5 << 30)
    cli(["predict", str(path)]).refused(str(path), "larger than")


def test_missing_file_and_directory(tmp_path: Path, cli: Callable) -> None:
    cli(["predict", str(tmp_path / "nope.yaml")]).refused("nope.yaml", "cannot read")
    cli(["predict", str(tmp_path)]).refused(str(tmp_path), "cannot read")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; permissions cannot refuse")
def test_unreadable_file(tmp_path: Path, cli: Callable) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(profile_yaml())
    path.chmod(0)
    cli(["predict", str(path)]).refused("secret.yaml", "cannot read")


def test_valid_profile_still_predicts(tmp_path: Path, cli: Callable) -> None:
    """The control case: the same builder without the poison is accepted."""
    path = tmp_path / "ok.yaml"
    path.write_text(profile_yaml())
    result = cli(["predict", str(path), "--json"])
    assert result.rc == 0, result.err
    assert json.loads(result.out)["model"] == "m"
