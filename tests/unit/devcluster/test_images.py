"""The image builder's pure parts: Dockerfile parsing, .dockerignore, what pip installs, cache
keys, layer diffs with whiteouts, and the OCI config/manifest."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from horus.common.errors import ValidationError
from horus.devcluster import dockerfile
from horus.devcluster.buildcontext import Ignore
from horus.devcluster.imagebuild import Builder, StageResult
from horus.devcluster.images import IMAGES, _config, _manifest
from horus.devcluster.layers import extract_layer, snapshot, write_layer
from horus.devcluster.wheels import pip_target, project_requirements

ROOT = Path(__file__).resolve().parents[3]


def test_every_shipped_dockerfile_parses_and_installs_the_context() -> None:
    for spec in IMAGES.values():
        df = dockerfile.parse(ROOT / spec.dockerfile)
        runs = [i for s in df.stages for i in s.instructions if i.keyword == "RUN"]
        for ins in runs:
            pip_target(ins, str(df.path))  # raises if a RUN installs something else
    op = dockerfile.parse(ROOT / "operator" / "Dockerfile")
    assert [s.name for s in op.stages] == ["build", "1"]
    assert op.stages[1].instructions[-1].exec_form() == ["python", "-m", "horus.operator"]


def test_parser_refuses_what_it_cannot_build(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim-bookworm\nHEALTHCHECK CMD true\n")
    with pytest.raises(ValidationError, match=r"Dockerfile:2: HEALTHCHECK is not supported"):
        dockerfile.parse(bad)
    bad.write_text("RUN true\n")
    with pytest.raises(ValidationError, match="before the first FROM"):
        dockerfile.parse(bad)
    bad.write_text("FROM a \\\n  AS b\n# c\nRUN x && \\\n  y\n")
    df = dockerfile.parse(bad)
    assert df.stages[0].name == "b" and df.stages[0].instructions[0].args == "x && y"


def test_env_substitution_and_forms() -> None:
    ins = dockerfile.Instruction("ENV", "PATH=/opt/horus/bin:$PATH A=1", 1)
    pairs = dockerfile.split_env(ins, "x")
    env = {"PATH": "/usr/bin"}
    assert [(k, dockerfile.substitute(v, env)) for k, v in pairs] == [
        ("PATH", "/opt/horus/bin:/usr/bin"),
        ("A", "1"),
    ]
    assert dockerfile.split_env(dockerfile.Instruction("ENV", "K some value", 1), "x") == [
        ("K", "some value")
    ]


def test_pip_target_extras_and_refusal() -> None:
    run = dockerfile.Instruction
    assert pip_target(run("RUN", 'pip install --no-cache-dir "."', 1), "x") == []
    assert pip_target(run("RUN", 'pip install --no-cache-dir ".[profile]"', 1), "x") == ["profile"]
    assert pip_target(run("RUN", "echo hi", 1), "x") is None
    with pytest.raises(ValidationError, match="installs only the build context"):
        pip_target(run("RUN", "pip install requests", 1), "x")


def test_project_requirements_include_extras_and_the_build_backend() -> None:
    req = project_requirements(ROOT / "pyproject.toml", ["profile"])
    assert any(r.startswith("torch") for r in req) and any(r.startswith("setuptools") for r in req)
    with pytest.raises(ValidationError, match="no optional dependency group 'gpu'"):
        project_requirements(ROOT / "pyproject.toml", ["gpu"])


def test_dockerignore_patterns(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("**/__pycache__\n.venv\n*.log\n!keep.log\n")
    ig = Ignore(tmp_path)
    assert ig.ignored("src/horus/__pycache__/x.pyc")
    assert ig.ignored(".venv/bin/python") and ig.ignored("a.log")
    assert not ig.ignored("keep.log") and not ig.ignored("src/horus/cli.py")


def test_stage_key_follows_the_copied_bytes_not_the_trailing_config(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print(1)\n")
    df_path = tmp_path / "Dockerfile"
    df_path.write_text(
        'FROM python:3.11-slim-bookworm\nCOPY app.py /app.py\nENTRYPOINT ["python"]\n'
    )
    b = Builder(tmp_path)
    df = dockerfile.parse(df_path)
    fs1, full1 = b.fs_key(df, df.stages[0]), b.stage_key(df, df.stages[0])
    df_path.write_text(
        'FROM python:3.11-slim-bookworm\nCOPY app.py /app.py\nENTRYPOINT ["python3"]\n'
    )
    df = dockerfile.parse(df_path)
    assert b.fs_key(df, df.stages[0]) == fs1 and b.stage_key(df, df.stages[0]) != full1
    (tmp_path / "app.py").write_text("print(2)\n")
    assert Builder(tmp_path).fs_key(df, df.stages[0]) != fs1
    df_path.write_text("FROM python:3.12-slim-bookworm\n")
    with pytest.raises(ValidationError, match=r"ships Python 3\.11"):
        Builder(tmp_path).stage_key(dockerfile.parse(df_path), dockerfile.parse(df_path).stages[0])


def test_layer_holds_changes_and_whiteouts_and_applies_back(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "keep").write_text("k")
    (root / "etc" / "gone").write_text("g")
    (root / "olddir").mkdir()
    (root / "olddir" / "f").write_text("f")
    before = snapshot(root)
    (root / "etc" / "gone").unlink()
    (root / "olddir" / "f").unlink()
    (root / "olddir").rmdir()
    (root / "opt").mkdir()
    (root / "opt" / "new").write_text("n")
    digest = write_layer(root, before, tmp_path / "layers")
    assert digest is not None
    layer = tmp_path / "layers" / f"{digest}.tar"
    with tarfile.open(layer) as tar:
        names = set(tar.getnames())
    assert "./.wh.olddir" in names  # one whiteout for the folder, none for its file
    assert "./opt/new" in names and "./etc/.wh.gone" in names
    assert "./etc/keep" not in names and not any("olddir/f" in n for n in names)
    # applied to a copy of the old tree, it gives the new one
    lower = tmp_path / "lower"
    (lower / "etc").mkdir(parents=True)
    (lower / "etc" / "keep").write_text("k")
    (lower / "etc" / "gone").write_text("g")
    (lower / "olddir").mkdir()
    (lower / "olddir" / "f").write_text("f")
    extract_layer(layer, lower)
    got = sorted(
        os.path.relpath(os.path.join(d, f), lower) for d, _, fs in os.walk(lower) for f in fs
    )
    assert got == ["etc/keep", "opt/new"]
    assert write_layer(root, snapshot(root), tmp_path / "layers") is None


def test_oci_config_and_manifest_name_the_layers(tmp_path: Path) -> None:
    layer = tmp_path / ("a" * 64 + ".tar")
    layer.write_bytes(b"x" * 10)
    result = StageResult(layers=[], env={"PATH": "/bin"}, entrypoint=["/pause"], user="65535")
    cfg = json.loads(_config(result, [layer]))
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "a" * 64]
    assert cfg["config"]["Entrypoint"] == ["/pause"] and cfg["config"]["User"] == "65535"
    manifest = json.loads(_manifest(json.dumps(cfg).encode(), [layer]))
    assert manifest["layers"][0] == {
        "mediaType": "application/vnd.oci.image.layer.v1.tar",
        "digest": "sha256:" + "a" * 64,
        "size": 10,
    }
