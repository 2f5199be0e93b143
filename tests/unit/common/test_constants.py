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
    items = vars(c).items()
    metrics = [
        v
        for k, v in items
        if k.startswith("METRIC_") and k != "METRIC_PREFIX" and not k.startswith("METRIC_LABEL_")
    ]
    labels = [v for k, v in items if k.startswith("METRIC_LABEL_")]
    assert metrics and labels
    for name in metrics + labels:
        assert name == name.lower() and " " not in name and "-" not in name, name
    for name in metrics:
        assert name.startswith(c.METRIC_PREFIX), name
    for label in labels:
        assert not label.startswith("__"), f"{label}: names starting with __ are reserved"
