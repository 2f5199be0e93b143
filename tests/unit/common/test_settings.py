"""Settings precedence CLI > environment > config file > default, and clear errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from horus.common.errors import ConfigError
from horus.common.settings import env_var_name, load_settings


@dataclass(frozen=True)
class Demo:
    policy: Literal["horus", "binpack"] = "horus"
    threshold: float = 0.5
    replicas: int = 1
    enabled: bool = False
    name: str | None = None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_when_nothing_given() -> None:
    assert load_settings(Demo, "demo", env={}) == Demo()


def test_precedence_cli_over_env_over_file(tmp_path: Path) -> None:
    cfg = write(tmp_path, "demo: {threshold: 0.1, replicas: 3, enabled: true}\n")
    env = {"HORUS_DEMO_THRESHOLD": "0.2", "HORUS_DEMO_REPLICAS": "4"}
    got = load_settings(
        Demo, "demo", cli={"threshold": 0.3, "replicas": None}, env=env, config_file=cfg
    )
    assert got.threshold == 0.3  # CLI wins
    assert got.replicas == 4  # env beats file (CLI value None = not given)
    assert got.enabled is True  # only the file set it
    assert got.policy == "horus"  # default


def test_env_var_name() -> None:
    assert env_var_name("scheduler", "max-jobs") == "HORUS_SCHEDULER_MAX_JOBS"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HORUS_DEMO_REPLICAS": "three"}, "HORUS_DEMO_REPLICAS: 'three' is not a whole number"),
        ({"HORUS_DEMO_ENABLED": "maybe"}, "is not a boolean"),
        ({"HORUS_DEMO_POLICY": "random"}, "'random' is not one of horus, binpack"),
    ],
)
def test_bad_environment_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(Demo, "demo", env=env)


def test_unknown_file_key_is_an_error(tmp_path: Path) -> None:
    cfg = write(tmp_path, "demo: {treshold: 0.1}\n")
    with pytest.raises(ConfigError, match="unknown key\\(s\\) treshold in section 'demo'"):
        load_settings(Demo, "demo", env={}, config_file=cfg)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(Demo, "demo", env={}, config_file=tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"not valid .*YAML"):
        load_settings(Demo, "demo", env={}, config_file=write(tmp_path, "demo: [unclosed\n"))
    with pytest.raises(ConfigError, match="section 'demo' must be a mapping"):
        load_settings(Demo, "demo", env={}, config_file=write(tmp_path, "demo: 3\n"))


def test_optional_values_accept_none() -> None:
    assert load_settings(Demo, "demo", env={"HORUS_DEMO_NAME": "none"}).name is None
    assert load_settings(Demo, "demo", env={"HORUS_DEMO_NAME": "x"}).name == "x"
