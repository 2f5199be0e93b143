"""The names fixed by DESIGN.md are the ones the code uses."""

from horus.common import constants as c


def test_design_names() -> None:
    assert c.API_GROUP_VERSION == "horus.io/v1alpha1"
    assert (c.DLJOB_KIND, c.DLJOB_PLURAL, c.DLJOB_SHORT_NAME) == ("DLJob", "dljobs", "dlj")
    assert c.SCHEDULER_NAME == "horus-scheduler"
    assert c.RESOURCE_GPU_CORE == "horus.io/gpu-core"
    assert c.RESOURCE_GPU_MEMORY == "horus.io/gpu-memory"
    assert c.ANNOTATION_GPU_INVENTORY == "horus.io/gpu-inventory"
    assert c.ANNOTATION_GPU_ASSIGNMENT == "horus.io/gpu-assignment"
    assert c.ANNOTATION_PREDICTED == "horus.io/predicted"


def test_metric_names_follow_prometheus_conventions() -> None:
    metrics = [v for k, v in vars(c).items() if k.startswith("METRIC_") and k != "METRIC_PREFIX"]
    assert metrics
    for name in metrics:
        assert name.startswith(c.METRIC_PREFIX), name
        assert name == name.lower() and " " not in name
