"""The DLJob examples parse, and their profiles are exactly what `horus profile` wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from horus.api.dljob import ConfigMapProfileRef, InlineProfile, parse_dljob, parse_profile_document
from horus.common import constants as c

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MANIFESTS = sorted(EXAMPLES.glob("*.yaml"))
PROFILES = {p.stem: p for p in (EXAMPLES / "profiles").glob("*.yaml")}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _profile_names(path: Path) -> list[str]:
    return [
        line.split("# BEGIN horus profile ")[1].split()[0]
        for line in path.read_text().splitlines()
        if "# BEGIN horus profile " in line
    ]


def test_there_are_four_to_six_examples() -> None:
    assert 4 <= len(MANIFESTS) <= 6


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_example_parses_and_matches_its_profile(path: Path) -> None:
    docs = _docs(path)
    jobs = [parse_dljob(d) for d in docs if d["kind"] == c.DLJOB_KIND]
    assert len(jobs) == 1
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    (name,) = _profile_names(path)
    expected = parse_profile_document(PROFILES[name].read_text(), name)
    profile = jobs[0].spec.profile
    if isinstance(profile, ConfigMapProfileRef):
        text = configmaps[profile.name]["data"][profile.key]
        profile = parse_profile_document(text, f"configmap {profile.name}")
    assert isinstance(profile, InlineProfile)
    assert profile == expected, f"{path.name}: run examples/regenerate.py"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_example_profiles_satisfy_the_predictor_schema(name: str) -> None:
    from horus.predictor.schema import profile_from_dict

    inline = parse_profile_document(PROFILES[name].read_text(), name)
    graph = profile_from_dict(inline.to_document(), name)
    assert (graph.model, graph.batch_size) == (inline.model, inline.batch_size)
    assert dict(graph.features) == dict(inline.features)


def test_does_not_fit_is_within_the_crd_cap_but_over_any_gpu() -> None:
    from horus.predictor.gpus import GPU_SPECS

    job = parse_dljob(_docs(EXAMPLES / "does-not-fit.yaml")[0])
    largest = max(spec.memory_mib for spec in GPU_SPECS.values())
    assert job.spec.gpu.memory_mib is not None
    assert largest < job.spec.gpu.memory_mib <= c.MAX_GPU_MEMORY_MIB


def test_every_class_the_examples_name_is_in_the_examples_priority_classes() -> None:
    """A job naming a class that does not exist waits (PriorityClassNotFound): the classes
    the examples use ship beside them, for a cluster admin to apply once."""
    classes = {
        d["metadata"]["name"]: d["value"]
        for d in _docs(EXAMPLES / "cluster" / "priority-classes.yaml")
        if d["kind"] == "PriorityClass"
    }
    named = {
        job.spec.priority_class_name
        for path in MANIFESTS
        for d in _docs(path)
        if d["kind"] == c.DLJOB_KIND
        and (job := parse_dljob(d)).spec.priority_class_name is not None
    }
    assert named and named <= set(classes)
    assert classes["horus-example-high"] > 0 > classes["horus-example-low"]
