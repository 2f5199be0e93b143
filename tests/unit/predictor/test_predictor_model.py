"""The shipped artifact loads and answers; the catalog; bad inputs; training determinism."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from horus.common.errors import ValidationError
from horus.predictor import load_default_predictor
from horus.predictor.catalog import job_type, measured_job_types
from horus.predictor.interface import GraphProfile, Predictor, pair_extrapolated
from horus.predictor.model import load_predictor
from horus.predictor.schema import FEATURE_NAMES
from predictor_tables import small_tables


def test_shipped_artifact_loads_and_answers() -> None:
    p = load_default_predictor()
    assert isinstance(p, Predictor)
    assert p.version.startswith("horus-predictor-")
    r = p.predict(job_type("gavel", "ResNet-50 (batch size 64)").profile, "V100")
    assert 0 <= r.util_mean <= r.util_upper <= 100
    assert 1000 < r.memory_mib_mean <= r.memory_mib_upper
    assert r.quantile == 0.9 and r.model_version == p.version
    assert "GPUMemNet" in str(p.card["licences"]) and "Lucid" not in str(p.card["trained_on"])


def test_predict_many_matches_predict() -> None:
    p = load_default_predictor()
    profs = [jt.profile for jt in measured_job_types("gavel")[:5]]
    assert p.predict_many(profs, "A100") == [p.predict(x, "A100") for x in profs]
    assert p.predict_many([], "A100") == []


def test_fast_path_is_identical_to_batched() -> None:
    """The scalar, cached single/pair path answers exactly what the batched path answers."""
    from horus.predictor.dataset import feature_columns, raw_matrix, row_values
    from horus.predictor.gpus import gpu_spec

    p = load_default_predictor()
    profs = [jt.profile for jt in measured_job_types()]
    for gpu in ("A100", "K80", "RTX3090"):
        spec = gpu_spec(gpu)
        cols = feature_columns(raw_matrix([x.features for x in profs]), spec)
        for i, x in enumerate(profs):
            row = row_values(x.features, spec)
            assert row == {k: float(v[i]) for k, v in cols.items()}
        p.clear_cache()
        batched = p.predict_many(profs, gpu)
        assert [p.predict(x, gpu) for x in profs] == batched  # misses
        assert [p.predict(x, gpu) for x in profs] == batched  # cache hits
        pairs = [(a, b) for a in profs[:12] for b in profs[::9]]
        assert [p.pair_speed(a, b, gpu) for a, b in pairs] == p.pair_speeds(pairs, gpu)
    # an unhashable feature value skips the cache but still answers
    f = dict(profs[0].features)
    odd = GraphProfile("odd", 1, {**f, "note": [1]})  # type: ignore[dict-item]
    assert p.predict(odd, "A100") == p.predict(profs[0], "A100")


def test_pair_speed_is_normalised() -> None:
    p = load_default_predictor()
    a = job_type("gavel", "ResNet-50 (batch size 64)").profile
    b = job_type("gavel", "LM (batch size 20)").profile
    s = p.pair_speed(a, b, "V100")
    assert 0 < s <= 1
    assert p.pair_speeds([(a, b), (b, a)], "V100")[0] == s


def test_unknown_gpu_is_named() -> None:
    p = load_default_predictor()
    prof = measured_job_types("gavel")[0].profile
    with pytest.raises(ValidationError, match="unknown GPU 'Z9000'"):
        p.predict(prof, "Z9000")


def test_profile_missing_features() -> None:
    with pytest.raises(ValidationError, match="lacks features"):
        load_default_predictor().predict(GraphProfile("x", 1, {"params": 1.0}), "A100")


def test_far_outside_training_data_is_low_confidence() -> None:
    p = load_default_predictor()
    base = dict(measured_job_types("gavel")[0].profile.features)
    huge = {
        **base,
        "fwd_flops": base["fwd_flops"] * 1e6,
        "bwd_flops": base["bwd_flops"] * 1e6,
        "params": base["params"] * 1e5,
        "activation_bytes": base["activation_bytes"] * 1e6,
    }
    normal = p.predict(GraphProfile("ok", 16, base), "V100")
    r = p.predict(GraphProfile("huge", 16, huge), "V100")
    assert r.low_confidence and not normal.low_confidence
    assert r.util_upper == 100.0


def test_catalog_covers_gavel_and_lucid() -> None:
    gavel = measured_job_types("gavel")
    assert len({jt.model for jt in gavel}) == 26
    lucid = measured_job_types("lucid")
    assert len(lucid) == 66 and {jt.model for jt in lucid} >= {"BERT", "PointNet", "NeuMF"}
    jt = job_type("lucid", "ResNet18", 64, amp=True)
    assert jt.amp and jt.profile.features["amp"] == 1.0 and jt.batch_size == 64
    with pytest.raises(ValidationError, match="no measured gavel job type"):
        job_type("gavel", "AlexNet")


def test_bad_artifact(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"format": 99}')
    with pytest.raises(ValidationError, match="format 99 is not supported"):
        load_predictor(bad)
    bad.write_text("not json")
    with pytest.raises(ValidationError, match="not valid JSON"):
        load_predictor(bad)


def test_gzip_artifact_round_trips_and_fits_a_configmap(tmp_path: Path) -> None:
    """``-o model.json.gz`` writes the same model, deterministically, small enough for a
    ConfigMap (1 MiB); the loader tells gzip from JSON by content, not by name."""
    import gzip
    import json

    from horus.predictor.model import DEFAULT_ARTIFACT
    from horus.predictor.train import save_artifact

    artifact = json.loads(DEFAULT_ARTIFACT.read_text())
    plain, packed = tmp_path / "m.json", tmp_path / "m.json.gz"
    assert save_artifact(artifact, plain) == save_artifact(artifact, packed)
    first = packed.read_bytes()
    save_artifact(artifact, packed)
    assert packed.read_bytes() == first  # no timestamp in the gzip header
    assert first[:2] == b"\x1f\x8b" and len(first) < 1_048_576 < plain.stat().st_size
    renamed = tmp_path / "model"  # the ConfigMap key may be any name
    renamed.write_bytes(first)
    prof = job_type("gavel", "ResNet-50 (batch size 64)").profile
    want = load_default_predictor().predict(prof, "V100")
    for path in (plain, packed, renamed):
        assert load_predictor(path).predict(prof, "V100") == want
    renamed.write_bytes(first[: len(first) // 2])
    with pytest.raises(ValidationError, match="truncated or corrupt gzip"):
        load_predictor(renamed)
    renamed.write_bytes(gzip.compress(b"[1, 2]"))
    with pytest.raises(ValidationError, match="is not a predictor artifact"):
        load_predictor(renamed)


def test_training_is_deterministic(tmp_path: Path) -> None:
    from horus.predictor.train import save_artifact, train_artifact

    d = small_tables(tmp_path)
    a = train_artifact(data_dir=d, n_estimators=15)
    b = train_artifact(data_dir=d, n_estimators=15)
    assert save_artifact(a, tmp_path / "a.json") == save_artifact(b, tmp_path / "b.json")
    assert a["version"] == b["version"]
    c = train_artifact(data_dir=d, n_estimators=15, seed=1)
    assert c["version"] != a["version"]
    # the written artifact loads and answers
    p = load_predictor(tmp_path / "a.json")
    assert p.predict(measured_job_types("gavel")[0].profile, "K80").util_mean >= 0


def test_extra_rows_hook(tmp_path: Path) -> None:
    from horus.predictor.train import train_artifact

    d = small_tables(tmp_path)
    extra = tmp_path / "observed.csv"
    jt = job_type("gavel", "ResNet-50 (batch size 64)")
    with extra.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "gpu", "util", "memory_mib", *FEATURE_NAMES])
        for _ in range(10):
            w.writerow(
                ["resnet50", "A100", 97.0, 9000, *(jt.profile.features[k] for k in FEATURE_NAMES)]
            )
    art = train_artifact(data_dir=d, n_estimators=15, extra_rows=extra)
    assert any("observed" in s for s in art["card"]["trained_on"])
    # one file per node: several files join the data together
    other = tmp_path / "node-b.csv"
    other.write_text(extra.read_text())
    both = train_artifact(data_dir=d, n_estimators=15, extra_rows=[extra, other])
    assert {"observed rows observed.csv (10 rows)", "observed rows node-b.csv (10 rows)"} <= set(
        both["card"]["trained_on"]
    )
    assert both["version"] != art["version"]
    from horus.cli import build_parser

    args = build_parser().parse_args(
        ["predictor", "train", "--extra-rows", "a.csv", "b.csv", "--extra-rows", "c.csv"]
    )
    assert args.extra_rows == [Path("a.csv"), Path("b.csv"), Path("c.csv")]
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu,util\nA100,50\n")
    with pytest.raises(ValidationError, match="missing columns"):
        train_artifact(data_dir=d, n_estimators=15, extra_rows=bad)


def test_shipped_artifact_matches_feature_code() -> None:
    """Feature code changed without retraining? Run 'horus predictor train'."""
    from horus.predictor.dataset import FULL
    from horus.predictor.pairfeatures import PAIR_FEATURES

    p = load_default_predictor()
    assert list(p.util.inputs) == FULL == list(p.memory.inputs)
    assert list(p.pair.inputs) == PAIR_FEATURES


def _pair_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    from horus.predictor.userdata import PAIR_ROW_COLUMNS

    with path.open("w", newline="") as fh:
        extra = ["backend"] if any("backend" in r for r in rows) else []
        w = csv.DictWriter(fh, fieldnames=[*PAIR_ROW_COLUMNS, "model", *extra])
        w.writeheader()
        w.writerows(rows)
    return path


def _pair(a: GraphProfile, b: GraphProfile, gpu: str, speed: object) -> dict[str, object]:
    row: dict[str, object] = {"gpu": gpu, "speed": speed, "model": a.model}
    row.update({f"a_{k}": a.features[k] for k in FEATURE_NAMES})
    row.update({f"b_{k}": b.features[k] for k in FEATURE_NAMES})
    return row


def test_extra_pair_rows_teach_the_pair_head(tmp_path: Path) -> None:
    """Pair speeds measured in a cluster move the pair head towards them for that pair."""
    from horus.predictor.train import save_artifact, train_artifact

    d = small_tables(tmp_path)
    a = job_type("gavel", "ResNet-50 (batch size 64)").profile
    b = job_type("gavel", "Transformer (batch size 64)").profile
    base = tmp_path / "base.json"
    save_artifact(train_artifact(data_dir=d, n_estimators=15), base)
    before = load_predictor(base).pair_speed(a, b, "A100")
    assert load_predictor(base).pair_gpu_known("A100") is False
    # what the cluster measured on its A100s: this pair barely slows A
    extra = _pair_csv(tmp_path / "pairs.csv", [_pair(a, b, "A100", 0.97)] * 40)
    art = train_artifact(data_dir=d, n_estimators=15, extra_pair_rows=extra)
    assert "observed pair rows pairs.csv (40 rows)" in art["card"]["trained_on"]
    save_artifact(art, tmp_path / "taught.json")
    taught = load_predictor(tmp_path / "taught.json")
    after = taught.pair_speed(a, b, "A100")
    assert abs(after - 0.97) < abs(before - 0.97) / 2, (before, after)
    # the card now says the pair head has seen this GPU, so its speeds there are not flagged
    assert "A100-80GB" in art["card"]["pair_gpus"] and taught.pair_gpu_known("A100") is True
    assert art["card"]["metrics_heldout_family"]["pair_rows"] > 40
    # what the operator and the extender write into status.predicted / the pod annotation
    assert pair_extrapolated(load_predictor(base), "A100")
    assert not pair_extrapolated(taught, "A100")


def test_pair_head_corrects_the_contention_bound_where_it_learned(tmp_path: Path) -> None:
    """Issue 26: the pair head is a correction on top of min(1, 100/(u_a+u_b)); on a GPU it
    has no pairs from the prediction is the bound alone, on one it has, bound + correction,
    and the fast path agrees with the batched one."""
    import numpy as np

    from horus.predictor.pairfeatures import contention_bound
    from horus.predictor.train import save_artifact, train_artifact

    d = small_tables(tmp_path)
    save_artifact(train_artifact(data_dir=d, n_estimators=15), tmp_path / "m.json")
    p = load_predictor(tmp_path / "m.json")
    assert p.pair_base == "contention_bound"
    a = job_type("gavel", "ResNet-50 (batch size 64)").profile
    b = job_type("gavel", "Transformer (batch size 64)").profile
    ua, ub = p.predict(a, "A100").util_mean, p.predict(b, "A100").util_mean
    bound = float(contention_bound(np.array([ua]), np.array([ub]))[0])
    assert not p.pair_gpu_known("A100")
    assert p.pair_speed(a, b, "A100") == pytest.approx(min(1.0, max(0.05, bound)), abs=1e-9)
    assert p.pair_speeds([(a, b)], "A100")[0] == p.pair_speed(a, b, "A100")
    # V100: the head learned Gavel's pairs there, so its correction is added
    uv, wv = p.predict(a, "V100").util_mean, p.predict(b, "V100").util_mean
    bound_v = min(1.0, 100.0 / (uv + wv))
    assert p.pair_gpu_known("V100")
    assert p.pair_speed(a, b, "V100") != pytest.approx(bound_v, abs=1e-6)
    assert p.pair_speeds([(a, b)], "V100")[0] == p.pair_speed(a, b, "V100")
    # the old form still loads and predicts the speed itself
    old = train_artifact(data_dir=d, n_estimators=15, pair_base="none")
    save_artifact(old, tmp_path / "old.json")
    assert load_predictor(tmp_path / "old.json").pair_base == "none"
    with pytest.raises(ValidationError, match="pair_base"):
        train_artifact(data_dir=d, n_estimators=15, pair_base="bogus")


def test_pair_extrapolated_trusts_predictors_without_a_record() -> None:
    class NoRecord:  # a stand-in predictor, or an artifact from before pair_gpus
        def pair_gpu_known(self, gpu: str) -> bool | None:
            return None

    class Raises:
        def pair_gpu_known(self, gpu: str) -> bool | None:
            raise ValidationError(f"unknown GPU {gpu!r}")

    assert not pair_extrapolated(NoRecord(), "H100")
    assert not pair_extrapolated(Raises(), "Z9")
    assert not pair_extrapolated(object(), "H100")
    assert pair_extrapolated(load_default_predictor(), "H100")
    assert not pair_extrapolated(load_default_predictor(), "V100")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"speed": "fast"}, r"pairs.csv:2: speed is not a number: 'fast'"),
        ({"speed": 0}, r"pairs.csv:2: speed must be in \(0, 2\]"),
        ({"speed": 3.5}, r"pairs.csv:2: speed must be in \(0, 2\]"),
        ({"speed": "nan"}, r"pairs.csv:2: speed must be finite"),
        ({"a_fwd_flops": ""}, r"pairs.csv:2: a_fwd_flops is not a number: ''"),
        ({"gpu": "GTX-9000"}, r"pairs.csv:2: unknown GPU 'GTX-9000'"),
    ],
)
def test_bad_pair_rows_name_the_line_and_value(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    from horus.predictor.userdata import load_extra_pair_rows

    a = job_type("gavel", "ResNet-50 (batch size 64)").profile
    good = _pair(a, a, "V100", 0.6)
    path = _pair_csv(tmp_path / "pairs.csv", [{**good, **change}, good])
    with pytest.raises(ValidationError, match=message):
        load_extra_pair_rows(path)
    ok = load_extra_pair_rows(_pair_csv(tmp_path / "ok.csv", [good]))
    assert ok[0].speed == 0.6 and ok[0].gpu.name == "V100" and ok[0].group == a.model


def test_rows_from_simulated_gpus_are_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent on a simulated node writes the predictor's own output as rows
    (``backend=simulated``): training drops them unless told to keep them, and a file of
    nothing else is refused rather than silently training on no observed rows at all."""
    from horus.predictor.userdata import load_extra_pair_rows, load_extra_rows

    f = job_type("gavel", "ResNet-50 (batch size 64)").profile.features
    rows = tmp_path / "training-rows.csv"
    with rows.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["gpu", "util", "memory_mib", *FEATURE_NAMES, "backend"])
        for i, backend in enumerate(["nvml"] * 3 + ["simulated"] * 2 + [""]):
            w.writerow(["A100", 50.0 + i, 9000, *(f[k] for k in FEATURE_NAMES), backend])
    with caplog.at_level("WARNING", logger="horus.predictor.userdata"):
        table = load_extra_rows(rows)
    assert list(table.util) == [50.0, 51.0, 52.0, 55.0]  # no backend column value: kept
    assert "dropped 2 of 6 rows from simulated GPUs" in caplog.text
    assert len(load_extra_rows(rows, keep_simulated=True).rows) == 6

    a = job_type("gavel", "ResNet-50 (batch size 64)").profile
    sim = [{**_pair(a, a, "V100", 0.6), "backend": "simulated"}] * 2
    pairs = _pair_csv(tmp_path / "pairs.csv", sim)
    with pytest.raises(ValidationError, match=r"pairs.csv: all 2 pair rows come from simulated"):
        load_extra_pair_rows(pairs)
    assert [o.speed for o in load_extra_pair_rows(pairs, keep_simulated=True)] == [0.6, 0.6]
    mixed = _pair_csv(
        tmp_path / "mixed.csv", [*sim, {**_pair(a, a, "V100", 0.7), "backend": "nvml"}]
    )
    assert [o.speed for o in load_extra_pair_rows(mixed)] == [0.7]

    from horus.cli import build_parser

    args = build_parser().parse_args(["predictor", "train", "--extra-rows", "x.csv"])
    assert args.keep_simulated is False
    args = build_parser().parse_args(["predictor", "train", "--keep-simulated"])
    assert args.keep_simulated is True


def test_pair_rows_file_without_the_columns(tmp_path: Path) -> None:
    from horus.predictor.userdata import load_extra_pair_rows

    bad = tmp_path / "rows.csv"
    bad.write_text("gpu,util,memory_mib\nA100,50,1000\n")  # a training-rows file, not pair rows
    with pytest.raises(ValidationError, match=r"missing columns speed, a_batch_size, .* more"):
        load_extra_pair_rows(bad)
    with pytest.raises(ValidationError, match="cannot read extra pair rows"):
        load_extra_pair_rows(tmp_path / "absent.csv")
