import logging

import pytest
from agent_helpers import KEY, pod_obj

from horus.agent.pods import SkipLog, parse_pod
from horus.api.assignment import PredictedUsage
from horus.common import constants as c


def test_valid_pod_parses() -> None:
    p = parse_pod(pod_obj(predicted=PredictedUsage(30, 40, 900, 1000, "v")), SkipLog(), KEY)
    assert p is not None
    assert p.assignment.memory_mib == 2048 and p.predicted is not None
    assert p.memory_limit_bytes == 2048 * 2**20 and p.core_share == 0.5


def test_pod_without_assignment_or_not_running_is_skipped_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    obj = pod_obj()
    del obj["metadata"]["annotations"][c.ANNOTATION_GPU_ASSIGNMENT]
    assert parse_pod(obj, SkipLog()) is None
    assert parse_pod(pod_obj(phase="Pending"), SkipLog()) is None
    assert not caplog.records


@pytest.mark.parametrize(
    "raw, words",
    [
        ("{not json", "not valid JSON"),
        ('{"node": "n1"}', "gpuUUID"),
        ('{"node":"n1","gpuUUID":"G","gpuIndex":0,"corePercent":500,"memoryMiB":1}', "corePercent"),
        ("[1,2]", "object"),
    ],
)
def test_malformed_assignment_logged_once_and_skipped(
    raw: str, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    skips = SkipLog()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert parse_pod(pod_obj(raw_assignment=raw, sign=False), skips) is None
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1, msgs
    assert "pod ns/p1" in msgs[0] and words in msgs[0]


def test_forged_signature_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    obj = pod_obj(sign=False)
    obj["metadata"]["annotations"][c.ANNOTATION_ASSIGNMENT_SIGNATURE] = "v1:" + "0" * 64
    with caplog.at_level(logging.WARNING):
        assert parse_pod(obj, SkipLog(), KEY) is None
    assert "does not verify" in caplog.text


def test_assignment_for_another_node_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    obj = pod_obj(node="n1")
    obj["spec"]["nodeName"] = "n2"
    assert parse_pod(obj, SkipLog()) is None
    assert "names node 'n1' but it runs on 'n2'" in caplog.text


def test_bad_prediction_or_sim_memory_keeps_pod(caplog: pytest.LogCaptureFixture) -> None:
    obj = pod_obj(
        extra={c.ANNOTATION_PREDICTED: '{"utilMean": "x"}', c.ANNOTATION_SIMULATED_MEMORY: "lots"}
    )
    p = parse_pod(obj, SkipLog(), KEY)
    assert p is not None and p.predicted is None and p.simulated_memory_mib is None
    assert "ignoring its prediction" in caplog.text and "simulated-memory-mib" in caplog.text
