"""Feature extraction on models whose FLOPs and parameters can be computed by hand (needs torch)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs the [profile] extra (torch)")
pytestmark = pytest.mark.profile

from horus.common.errors import ValidationError  # noqa: E402
from horus.predictor.features import (  # noqa: E402
    InputSpec,
    build_on_meta,
    parse_input_shape,
    profile_factory,
    profile_module,
)


def _profile(factory, shape, batch, **kw):
    return profile_module(build_on_meta(factory, "test"), [InputSpec(shape)], batch, **kw).features


def test_linear_by_hand() -> None:
    f = _profile(lambda: torch.nn.Linear(10, 5), (10,), 4)
    assert f["params"] == 10 * 5 + 5
    assert f["fwd_flops"] == 2 * 4 * 10 * 5  # addmm: bias folded in
    assert f["count_matmul"] == 1 and f["share_matmul"] == 1.0
    assert f["param_bytes"] == 55 * 4
    assert f["optimizer_bytes"] == 2 * 55 * 4  # Adam: two states per parameter
    assert f["activation_bytes"] == 4 * 5 * 4  # one fp32 output of 4x5
    # weight gradient (2*B*in*out) + bias gradient (sum over the batch) + the loss' sum
    assert 2 * 4 * 10 * 5 <= f["bwd_flops"] <= 2 * 4 * 10 * 5 + 4 * 5 + 5 + 20


def test_conv2d_by_hand() -> None:
    f = _profile(lambda: torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), (3, 16, 16), 2)
    assert f["params"] == 8 * 3 * 3 * 3
    assert f["fwd_flops"] == 2 * 2 * 8 * 16 * 16 * 3 * 3 * 3
    # only the weight gradient: the input needs none
    assert f["bwd_flops"] >= f["fwd_flops"]
    assert f["share_conv"] == 1.0


def test_depthwise_conv_backward_not_overcounted() -> None:
    f = _profile(
        lambda: torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), (32, 8, 8), 2
    )
    assert f["fwd_flops"] == 2 * 2 * 32 * 8 * 8 * 3 * 3
    assert f["bwd_flops"] <= 2.5 * f["fwd_flops"]


def test_lstm_step_by_hand() -> None:
    f = _profile(lambda: torch.nn.LSTM(10, 20, batch_first=True), (1, 10), 4)
    assert f["params"] == 4 * 20 * (10 + 20) + 2 * 4 * 20
    matmul = 2 * 4 * 4 * 20 * (10 + 20)  # one step: x@W_ih and h@W_hh, four gates
    assert matmul <= f["fwd_flops"] <= matmul * 1.2
    assert f["count_recurrent"] == 1 and f["share_recurrent"] == 1.0


def test_amp_halves_matmul_activation_bytes() -> None:
    full = _profile(lambda: torch.nn.Linear(64, 64), (64,), 8)
    amp = _profile(lambda: torch.nn.Linear(64, 64), (64,), 8, amp=True)
    assert amp["activation_bytes"] == full["activation_bytes"] / 2
    assert amp["amp"] == 1.0 and amp["dtype_bytes"] == 2.0


def test_model_too_large_to_allocate_profiles_on_meta() -> None:
    # 40 billion parameters: 160 GB of fp32 weights, far beyond this machine's memory.
    f = _profile(lambda: torch.nn.Sequential(torch.nn.Linear(200_000, 200_000)), (200_000,), 2)
    assert f["params"] == 200_000 * 200_000 + 200_000
    assert f["fwd_flops"] == 2 * 2 * 200_000 * 200_000


def test_input_shape_that_does_not_fit() -> None:
    with pytest.raises(ValidationError, match="does not fit the model"):
        _profile(lambda: torch.nn.Linear(10, 5), (7,), 4)


def test_factory_import_failure() -> None:
    with pytest.raises(ValidationError, match=r"cannot import module 'no_such_pkg.models'"):
        profile_factory("no_such_pkg.models:net", (3,), 1)
    with pytest.raises(ValidationError, match=r"package.module:factory"):
        profile_factory("torchvision.models.resnet50", (3,), 1)
    with pytest.raises(ValidationError, match="has no attribute"):
        profile_factory("torchvision.models:no_such_net", (3, 32, 32), 1)


def test_factory_that_fails_to_build() -> None:
    with pytest.raises(ValidationError, match=r"building .* failed"):
        profile_factory("torch.nn:Linear", (3,), 1)  # Linear() needs arguments


def test_parse_input_shape() -> None:
    assert parse_input_shape("3,224,224") == (3, 224, 224)
    with pytest.raises(ValidationError, match="comma-separated"):
        parse_input_shape("3,a")
    with pytest.raises(ValidationError, match="positive"):
        parse_input_shape("0,3")


def test_zoo_entries_profile() -> None:
    from horus.predictor.zoo import profile_zoo

    p = profile_zoo("resnet18-cifar", 16)
    assert p.family == "resnet" and p.features["share_conv"] > 0.9
    with pytest.raises(ValidationError, match="unknown zoo model"):
        profile_zoo("nope", 1)
