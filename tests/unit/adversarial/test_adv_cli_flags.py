"""Hostile flags and environment settings for every ``horus`` entry point.

Each value is refused before anything starts (no cluster contacted, no file written, no
simulation run), with one line that names the flag or variable and what it must be, exit
status 2. ``nan`` and ``inf`` are the interesting ones: they pass every ``<``/``>`` range
check, and a NaN time made ``horus sim`` run forever.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

AGENT = ["agent", "run", "--node-name", "n1"]
PLUGIN = ["deviceplugin", "run", "--node-name", "n1"]
OPERATOR = ["operator", "run"]
EXTENDER = ["operator", "extender"]
SIM = ["sim", "--no-progress"]

# (case id, argv, words of the error line)
FLAG_CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    # horus sim / sim compare
    ("sim-scale-nan", [*SIM, "--arrival-scale", "nan"], ("--arrival-scale", "finite")),
    ("sim-scale-inf", [*SIM, "--arrival-scale", "inf"], ("--arrival-scale", "finite")),
    ("sim-scale-zero", [*SIM, "--arrival-scale", "0"], ("--arrival-scale", "> 0")),
    ("sim-scale-neg", [*SIM, "--arrival-scale", "-1"], ("--arrival-scale",)),
    ("sim-scale-1e400", [*SIM, "--arrival-scale", "1e400"], ("--arrival-scale",)),
    ("sim-scale-text", [*SIM, "--arrival-scale", "fast"], ("--arrival-scale", "'fast'")),
    ("sim-rate-nan", [*SIM, "--rate", "nan"], ("--rate",)),
    ("sim-rate-zero", [*SIM, "--rate", "0"], ("--rate",)),
    ("sim-duration-inf", [*SIM, "--duration", "inf"], ("--duration",)),
    ("sim-gpus-zero", [*SIM, "--gpus", "0"], ("--gpus", "whole number")),
    ("sim-gpus-float", [*SIM, "--gpus", "8.5"], ("--gpus",)),
    ("sim-gpus-huge", [*SIM, "--gpus", "999999999999"], ("--gpus",)),
    ("sim-gpn-zero", [*SIM, "--gpus-per-node", "0"], ("--gpus-per-node",)),
    ("sim-seed-neg", [*SIM, "--seed", "-1"], ("--seed",)),
    ("sim-seed-huge", [*SIM, "--seed", str(2**40)], ("--seed",)),
    ("sim-limit-zero", [*SIM, "--limit", "0"], ("--limit",)),
    ("sim-jobs-neg", [*SIM, "--jobs", "-5"], ("--jobs",)),
    ("sim-policy", [*SIM, "--policy", "random"], ("random",)),
    ("sim-trace", [*SIM, "--trace", "nope"], ("unknown trace", "philly")),
    ("sim-compare-nan", ["sim", "compare", "--arrival-scale", "nan"], ("--arrival-scale",)),
    ("sim-compare-policy", ["sim", "compare", "--policies", "horus,bogus"], ("bogus",)),
    ("sim-truth", [*SIM, "--truth", "imaginary"], ("imaginary",)),
    # horus profile / predict / predictor
    (
        "profile-batch-zero",
        ["profile", "--zoo", "resnet50", "--batch-size", "0"],
        ("--batch-size",),
    ),
    (
        "profile-batch-nan",
        ["profile", "--zoo", "resnet50", "--batch-size", "nan"],
        ("--batch-size",),
    ),
    (
        "profile-batch-huge",
        ["profile", "--zoo", "resnet50", "--batch-size", "1e12"],
        ("--batch-size",),
    ),
    ("train-seed-neg", ["predictor", "train", "--seed", "-3"], ("--seed",)),
    ("train-seed-text", ["predictor", "train", "--seed", "x"], ("--seed",)),
    (
        "measure-window-nan",
        ["predictor", "measure", "--jobs", "a", "-o", "o", "--window", "nan"],
        ("--window",),
    ),
    (
        "measure-window-zero",
        ["predictor", "measure", "--jobs", "a", "-o", "o", "--window", "0"],
        ("--window",),
    ),
    (
        "measure-budget-nan",
        ["predictor", "measure", "--jobs", "a", "-o", "o", "--time-budget", "nan"],
        ("--time-budget",),
    ),
    (
        "measure-warmup-neg",
        ["predictor", "measure", "--jobs", "a", "-o", "o", "--warmup", "-1"],
        ("--warmup",),
    ),
    (
        "measure-mps-101",
        ["predictor", "measure", "--jobs", "a", "-o", "o", "--mps-thread-percent", "101"],
        ("--mps-thread-percent",),
    ),
    # horus dev
    ("dev-up-timeout-nan", ["dev", "cluster", "up", "--timeout", "nan"], ("--timeout",)),
    ("dev-add-count-zero", ["dev", "cluster", "add-nodes", "--count", "0"], ("--count",)),
    (
        "dev-add-gpus-huge",
        ["dev", "cluster", "add-nodes", "--count", "1", "--gpus-per-node", "5000"],
        ("--gpus-per-node",),
    ),
    (
        "dev-add-mem-zero",
        ["dev", "cluster", "add-nodes", "--count", "1", "--gpu-memory-mib", "0"],
        ("--gpu-memory-mib",),
    ),
    (
        "dev-add-wait-inf",
        ["dev", "cluster", "add-nodes", "--count", "1", "--wait", "inf"],
        ("--wait",),
    ),
    ("dev-demo-nodes-zero", ["dev", "demo", "up", "--nodes", "0"], ("--nodes",)),
    ("dev-demo-port", ["dev", "demo", "up", "--prometheus-port", "70000"], ("--prometheus-port",)),
    ("dev-demo-watch-nan", ["dev", "demo", "up", "--watch-seconds", "nan"], ("--watch-seconds",)),
    ("dev-workloads-only", ["dev", "workloads", "up", "--only", "kueue,volcano"], ("--only",)),
    ("dev-workloads-timeout", ["dev", "workloads", "up", "--timeout", "inf"], ("--timeout",)),
    # horus agent run
    ("agent-interval-nan", [*AGENT, "--interval-seconds", "nan"], ("interval", "finite")),
    ("agent-interval-zero", [*AGENT, "--interval-seconds", "0"], ("interval_seconds",)),
    ("agent-interval-huge", [*AGENT, "--interval-seconds", "1e300"], ("interval_seconds",)),
    ("agent-grace-neg", [*AGENT, "--grace-seconds", "-1"], ("grace_seconds",)),
    ("agent-port", [*AGENT, "--metrics-port", "70000"], ("metrics_port",)),
    ("agent-port-float", [*AGENT, "--metrics-port", "80.5"], ("metrics-port", "whole number")),
    ("agent-noise", [*AGENT, "--noise", "2"], ("noise",)),
    ("agent-seed", [*AGENT, "--seed", "-1"], ("seed",)),
    ("agent-retry-zero", [*AGENT, "--nvml-retry-seconds", "0"], ("nvml_retry_seconds",)),
    ("agent-watchdog", [*AGENT, "--watchdog", "explode"], ("--watchdog", "invalid choice")),
    ("agent-bool", [*AGENT, "--watchdog", "evict", "--backend", "gpu"], ("--backend",)),
    ("agent-two-nodes", ["agent", "run", "--node-name", "a", "--nodes", "b"], ("only one of",)),
    ("agent-newline", ["agent", "run", "--node-name", "a\nb"], ("node-name", "control")),
    ("agent-long", ["agent", "run", "--node-name", "n" * 5000], ("node-name", "longer")),
    # horus deviceplugin run
    ("dp-unit-zero", [*PLUGIN, "--memory-unit-mib", "0"], ("memory_unit_mib",)),
    ("dp-gpus-17", [*PLUGIN, "--sim-gpu-count", "17"], ("sim_gpu_count",)),
    ("dp-mem-neg", [*PLUGIN, "--sim-gpu-memory-mib", "-1"], ("sim_gpu_memory_mib",)),
    ("dp-health-nan", [*PLUGIN, "--health-interval-s", "nan"], ("health-interval-s", "finite")),
    ("dp-poll-zero", [*PLUGIN, "--socket-poll-s", "0"], ("socket_poll_s",)),
    ("dp-retry-inf", [*PLUGIN, "--retry-interval-s", "inf"], ("retry-interval-s",)),
    ("dp-backend", [*PLUGIN, "--backend", "cuda"], ("backend", "nvml")),
    ("dp-bool", [*PLUGIN, "--publish-inventory", "perhaps"], ("boolean",)),
    ("dp-empty-dir", [*PLUGIN, "--plugin-dir", " "], ("plugin-dir", "empty")),
    # horus operator run
    ("op-lease-short", [*OPERATOR, "--lease-duration", "0.5"], ("lease_duration",)),
    ("op-lease-nan", [*OPERATOR, "--lease-duration", "nan"], ("lease-duration", "finite")),
    ("op-workers-zero", [*OPERATOR, "--workers", "0"], ("workers",)),
    ("op-port-neg", [*OPERATOR, "--metrics-port", "-1"], ("metrics_port",)),
    ("op-resync-inf", [*OPERATOR, "--resync-period", "inf"], ("resync-period", "finite")),
    ("op-debounce", [*OPERATOR, "--debounce", "100"], ("debounce",)),
    ("op-policy", [*OPERATOR, "--policy", "random"], ("policy",)),
    ("op-reload-neg", [*OPERATOR, "--predictor-reload-seconds", "-5"], ("predictor_reload",)),
    (
        "op-predictor-missing",
        [*OPERATOR, "--predictor", "/nonexistent/m.json"],
        ("/nonexistent/m.json",),
    ),
    # horus operator extender
    ("ext-port", [*EXTENDER, "--port", "70000"], ("port",)),
    ("ext-cache-nan", [*EXTENDER, "--cache-seconds", "nan"], ("cache-seconds", "finite")),
    ("ext-cache-huge", [*EXTENDER, "--cache-seconds", "1e9"], ("cache_seconds",)),
    ("ext-reload-huge", [*EXTENDER, "--predictor-reload-seconds", "1e12"], ("predictor_reload",)),
    ("ext-policy", [*EXTENDER, "--policy", "x"], ("policy",)),
]


@pytest.mark.parametrize(("case", "argv", "words"), FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_hostile_flag_is_refused(
    cli: Callable, case: str, argv: list[str], words: tuple[str, ...]
) -> None:
    cli(argv).refused(*words)


# (case id, argv, environment, words of the error line)
ENV_CASES: list[tuple[str, list[str], dict[str, str], tuple[str, ...]]] = [
    (
        "agent-interval-inf",
        AGENT,
        {"HORUS_AGENT_INTERVAL_SECONDS": "inf"},
        ("HORUS_AGENT_INTERVAL_SECONDS", "finite"),
    ),
    (
        "agent-port-float",
        AGENT,
        {"HORUS_AGENT_METRICS_PORT": "80.5"},
        ("HORUS_AGENT_METRICS_PORT", "whole number"),
    ),
    ("agent-node-nul", ["agent", "run"], {"NODE_NAME": "a\x01b"}, ("control",)),
    (
        "dp-unit-text",
        PLUGIN,
        {"HORUS_DEVICEPLUGIN_MEMORY_UNIT_MIB": "lots"},
        ("HORUS_DEVICEPLUGIN_MEMORY_UNIT_MIB",),
    ),
    (
        "dp-mem-huge",
        PLUGIN,
        {"HORUS_DEVICEPLUGIN_SIM_GPU_MEMORY_MIB": "1e30"},
        ("HORUS_DEVICEPLUGIN_SIM_GPU_MEMORY_MIB",),
    ),
    (
        "op-workers-text",
        OPERATOR,
        {"HORUS_OPERATOR_WORKERS": "many"},
        ("HORUS_OPERATOR_WORKERS", "whole number"),
    ),
    (
        "op-debounce-nan",
        OPERATOR,
        {"HORUS_OPERATOR_DEBOUNCE": "NaN"},
        ("HORUS_OPERATOR_DEBOUNCE", "finite"),
    ),
    (
        "op-scheduler-nan",
        OPERATOR,
        {"HORUS_SCHEDULER_MIN_SPEED": "nan"},
        ("HORUS_SCHEDULER_MIN_SPEED", "finite"),
    ),
    ("op-scheduler-neg", OPERATOR, {"HORUS_SCHEDULER_UTIL_CAP": "-1"}, ("util_cap",)),
    ("ext-body-small", EXTENDER, {"HORUS_EXTENDER_MAX_BODY_BYTES": "10"}, ("max_body_bytes",)),
    ("ext-body-huge", EXTENDER, {"HORUS_EXTENDER_MAX_BODY_BYTES": str(2**40)}, ("max_body_bytes",)),
    ("ext-port-float", EXTENDER, {"HORUS_EXTENDER_PORT": "1.5"}, ("HORUS_EXTENDER_PORT",)),
    ("ext-verify-bool", EXTENDER, {"HORUS_EXTENDER_VERIFY_BINDS": "sometimes"}, ("boolean",)),
    (
        "demo-nodes",
        ["dev", "demo", "--dir", "/nonexistent-horus-demo", "up"],
        {"DEMO_NODES": "abc"},
        ("DEMO_NODES", "whole number"),
    ),
    (
        "demo-port",
        ["dev", "demo", "--dir", "/nonexistent-horus-demo", "up"],
        {"HORUS_DEMO_PROMETHEUS_PORT": "99999"},
        ("HORUS_DEMO_PROMETHEUS_PORT",),
    ),
    ("predict-gpu", ["predict", "p.yaml"], {"HORUS_PREDICT_GPU": "Z9000"}, ("Z9000",)),
]


@pytest.mark.parametrize(("case", "argv", "env", "words"), ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_hostile_environment_setting_is_refused(
    cli: Callable,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: str,
    argv: list[str],
    env: dict[str, str],
    words: tuple[str, ...],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if case == "predict-gpu":  # the env default is read when the parser is built
        (tmp_path / "p.yaml").write_text(
            "kind: GraphProfile\nschemaVersion: 1\nmodel: m\nbatchSize: 8\nfeatures: "
            "{batch_size: 8, params: 1, fwd_flops: 1, bwd_flops: 1, activation_bytes: 1, "
            "param_bytes: 1}\n"
        )
        argv = ["predict", str(tmp_path / "p.yaml")]
    cli(argv).refused(*words)


def test_a_broken_demo_variable_does_not_break_other_commands(
    cli: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to be read while the parser was built: every horus command died on it."""
    monkeypatch.setenv("DEMO_NODES", "abc")
    result = cli(["sim", "--arrival-scale", "0"])  # an unrelated command still parses
    result.refused("--arrival-scale")
