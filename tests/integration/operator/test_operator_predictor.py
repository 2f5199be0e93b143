"""The operator predicts and places with a predictor the user trained (``--predictor``), e.g.
one retrained on the node agents' observed rows: the online-learning loop's last step.

A small artifact is trained here from the shipped tables plus observed rows (as the agent's
``--training-rows`` file writes them), saved gzip-compressed as a ConfigMap would carry it,
and the operator's DLJob status must carry *its* version and *its* prediction, not the
shipped model's."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from operator_support import ROOT, Kube, dljob_body

from horus.api.dljob import parse_profile_document
from horus.common import constants as c
from horus.predictor import load_default_predictor, load_predictor
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import FEATURE_NAMES, graph_profile
from predictor_tables import small_tables


def _retrained(tmp_path: Path, profile: GraphProfile) -> Path:
    """The thinned shipped tables plus 30 observed rows saying this profile keeps an H100
    only 40 % busy: trains in seconds."""
    from horus.predictor.train import save_artifact, train_artifact

    d = small_tables(tmp_path)
    observed = tmp_path / "training-rows.csv"
    with observed.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "gpu", "util", "memory_mib", *FEATURE_NAMES])
        for _ in range(30):
            w.writerow(
                [profile.model, "H100", 40.0, 9000, *(profile.features[k] for k in FEATURE_NAMES)]
            )
    out = tmp_path / "model.json.gz"
    save_artifact(train_artifact(data_dir=d, n_estimators=15, extra_rows=observed), out)
    return out


def test_operator_uses_the_artifact_it_is_given(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any, tmp_path: Path
) -> None:
    text = (ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()
    profile = graph_profile(parse_profile_document(text))
    artifact = _retrained(tmp_path, profile)
    mine, shipped = load_predictor(str(artifact)), load_default_predictor()
    expect = mine.predict(profile, "H100")
    assert mine.version != shipped.version
    # the observed rows moved the prediction towards what the cluster measured
    assert expect.util_mean < shipped.predict(profile, "H100").util_mean - 5.0

    operator_factory(extra_args=["--predictor", str(artifact)])
    kube.create_jobs([dljob_body("taught", profile="resnet50-bs64")])
    kube.wait(
        "the DLJob Running",
        lambda: kube.phases().get("taught") == c.DLJOB_PHASE_RUNNING,
        timeout=60,
    )
    predicted = kube.jobs_by_name()["taught"]["status"]["predicted"]
    assert predicted["modelVersion"] == mine.version
    assert abs(predicted["utilMean"] - expect.util_mean) < 0.01, (predicted, expect)
    assert abs(predicted["memoryMiBMean"] - expect.memory_mib_mean) < 1.0, (predicted, expect)
    # its pair head learned from Gavel's K80/P100/V100 pairs only: on these H100 nodes the
    # status says the sharing estimates are extrapolated (and the CRD keeps the field)
    assert mine.pair_gpu_known("H100") is False
    assert predicted["pairLowConfidence"] is True


def test_operator_picks_up_a_replaced_artifact_without_restart(
    gpu_nodes: list[str], kube: Kube, operator_factory: Any, tmp_path: Path
) -> None:
    """The model file is laid out as the kubelet mounts a ConfigMap (``model.json.gz`` →
    ``..data/model.json.gz``, ``..data`` → a timestamped folder, swapped atomically on an
    update). Swapping in a retrained model changes what new DLJobs are predicted with, no
    restart; swapping in a broken file is logged and the running model kept."""
    import gzip
    import os
    import shutil

    from horus.predictor.model import DEFAULT_ARTIFACT

    text = (ROOT / "examples" / "profiles" / "resnet50-bs64.yaml").read_text()
    profile = graph_profile(parse_profile_document(text))
    mine, shipped = load_predictor(str(_retrained(tmp_path, profile))), load_default_predictor()
    mount = tmp_path / "mount"
    mount.mkdir()

    def publish(name: str, content: bytes) -> None:
        folder = mount / f"..{name}"
        folder.mkdir()
        (folder / "model.json.gz").write_bytes(content)
        (mount / "..data_tmp").symlink_to(folder.name)
        os.replace(mount / "..data_tmp", mount / "..data")  # atomic, as the kubelet does

    publish("v1", gzip.compress(DEFAULT_ARTIFACT.read_bytes()))
    (mount / "model.json.gz").symlink_to("..data/model.json.gz")
    op = operator_factory(
        extra_args=[
            "--predictor",
            str(mount / "model.json.gz"),
            "--predictor-reload-seconds",
            "0.5",
        ]
    )

    def placed_with(name: str) -> str:
        kube.create_jobs([dljob_body(name, profile="resnet50-bs64")])
        kube.wait(
            f"{name} Running",
            lambda: kube.phases().get(name) == c.DLJOB_PHASE_RUNNING,
            timeout=60,
        )
        return str(kube.jobs_by_name()[name]["status"]["predicted"]["modelVersion"])

    def logged(what: str) -> None:
        kube.wait(what, lambda: what in op.log.read_text(errors="replace"), timeout=30)

    assert placed_with("before") == shipped.version
    publish("v2", (tmp_path / "model.json.gz").read_bytes())
    logged(f"predictor {shipped.version} replaced by {mine.version}")
    assert placed_with("after") == mine.version
    publish("v3", b"\x1f\x8b truncated upload")
    logged(f"still placing with {mine.version}")
    assert placed_with("kept") == mine.version
    assert "Traceback" not in op.log.read_text(errors="replace")
    shutil.rmtree(mount)
