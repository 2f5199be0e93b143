"""Graph features of one training step of a PyTorch model, computed on the meta device.

Why meta tensors: the features (FLOPs, parameter and activation bytes, operator mix) depend
only on shapes, so the model is built and run with ``device="meta"``: no GPU, no real weights,
no data — a 10-billion-parameter model profiles as quickly as a small one. One forward pass and
one backward pass run under a ``TorchDispatchMode`` that sees every ATen operator:

* FLOPs of matmul/convolution/attention operators come from PyTorch's own formulas
  (``torch.utils.flop_counter``); every other operator counts one FLOP per output element.
* Each forward operator is attributed to the innermost *leaf-ish* module running it (a
  ``Conv2d`` → ``conv``, an ``LSTM`` → ``recurrent``, a ``MultiheadAttention`` → ``attention``
  …), falling back to the operator's name outside such modules. That yields FLOP shares per
  family (see :data:`horus.predictor.schema.FAMILIES`).
* Activation bytes are the bytes of every non-view tensor the forward pass produces — an upper
  bound of what autograd saves; with AMP the outputs of matmul/conv/attention are counted at
  2 bytes.

Requires the ``[profile]`` extra (torch). Everything else in :mod:`horus.predictor` works from
profiles without torch.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from horus.common.errors import ValidationError
from horus.predictor.interface import GraphProfile
from horus.predictor.schema import FAMILIES, FEATURE_NAMES

_VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "t",
        "transpose",
        "permute",
        "expand",
        "slice",
        "select",
        "squeeze",
        "unsqueeze",
        "as_strided",
        "detach",
        "alias",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "_reshape_alias",
        "flatten",
        "unflatten",
        "narrow",
        "view_as",
        "expand_as",
        "lift_fresh",
        "clone",
        "contiguous",
        "_to_copy",
        "empty_like",
        "zeros_like",
        "ones_like",
        "empty",
        "zeros",
        "ones",
        "full",
        "fill_",
        "zero_",
        "copy_",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_empty_strided",
        "empty_strided",
        "scalar_tensor",
        "_local_scalar_dense",
    }
)

_LOW_PRECISION_FAMILIES = frozenset({"conv", "matmul", "attention", "recurrent"})


@dataclass(frozen=True)
class InputSpec:
    """One input tensor of the model: shape *without* the batch dimension, and dtype name."""

    shape: tuple[int, ...]
    dtype: str = "float32"  # "float32" or "long" (token/index inputs)


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``"3,224,224"`` → ``(3, 224, 224)``; a clear error for anything else."""
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError as exc:
        raise ValidationError(
            f"input shape {text!r} is not a comma-separated list of integers (e.g. 3,224,224)"
        ) from exc
    if not dims or any(d < 1 for d in dims):
        raise ValidationError(
            f"input shape {text!r} must have positive dimensions (e.g. 3,224,224)"
        )
    return dims


def _module_family(module: Any) -> str | None:
    import torch.nn as nn

    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv"
    if isinstance(module, nn.MultiheadAttention):
        return "attention"
    if isinstance(module, nn.Linear | nn.Bilinear):
        return "matmul"
    if isinstance(
        module,
        nn.modules.batchnorm._NormBase | nn.LayerNorm | nn.GroupNorm | nn.LocalResponseNorm,
    ):
        return "norm"
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "embedding"
    if isinstance(module, nn.RNNBase | nn.RNNCellBase):
        return "recurrent"
    if isinstance(
        module,
        nn.modules.pooling._MaxPoolNd
        | nn.modules.pooling._AvgPoolNd
        | nn.modules.pooling._AdaptiveAvgPoolNd
        | nn.modules.pooling._AdaptiveMaxPoolNd,
    ):
        return "pool"
    name = type(module).__name__.lower()
    if ("attention" in name and "self" in name) or name.endswith("attention"):
        return "attention"
    if len(list(module.children())) == 0:
        if any(p.requires_grad for p in module.parameters(recurse=False)) and "norm" in name:
            return "norm"
        return "elementwise"
    return None


def _op_family(op_name: str) -> str:
    if "convolution" in op_name or op_name.startswith("conv"):
        return "conv"
    if "scaled_dot_product" in op_name or "flash_attention" in op_name:
        return "attention"
    if op_name in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "dot"):
        return "matmul"
    if "norm" in op_name:
        return "norm"
    if "embedding" in op_name:
        return "embedding"
    if "lstm" in op_name or "gru" in op_name or "rnn" in op_name:
        return "recurrent"
    if "pool" in op_name:
        return "pool"
    return "elementwise"


class _Recorder:
    """Accumulates FLOPs/bytes per family while a dispatch mode is active."""

    def __init__(self, amp: bool) -> None:
        self.amp = amp
        self.family_stack: list[str] = []
        self.flops: dict[str, float] = dict.fromkeys(FAMILIES, 0.0)
        self.activation_bytes = 0.0
        self.total_flops = 0.0
        self.forward = True


def _make_mode(rec: _Recorder) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            name = packet.__name__.lstrip("_") if func._overloadpacket else str(func)
            if name in _VIEW_OPS or packet.__name__ in _VIEW_OPS:
                return out
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if name == "convolution_backward":
                flops = _conv_backward_flops(args)
            elif packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            else:
                flops = float(sum(t.numel() for t in outs))
            rec.total_flops += flops
            if rec.forward:
                fam = rec.family_stack[-1] if rec.family_stack else _op_family(name)
                if fam == "elementwise":
                    fam = _op_family(name) if _op_family(name) != "elementwise" else fam
                rec.flops[fam] += flops
                for t in outs:
                    if t.is_floating_point():
                        size = 2 if rec.amp and fam in _LOW_PRECISION_FAMILIES else t.element_size()
                    else:
                        size = t.element_size()
                    rec.activation_bytes += float(t.numel() * size)
            return out

    return _Mode()  # type: ignore[no-untyped-call]


def _conv_backward_flops(args: Any) -> float:
    """Backward FLOPs of a convolution: one forward-sized convolution per gradient computed.

    PyTorch's own formula ignores ``groups`` for the backward pass and overcounts depthwise
    convolutions (MobileNet, EfficientNet) by the group count, so it is replaced here.
    """
    from torch.utils.flop_counter import conv_flop_count

    grad_out, inp, weight = args[0], args[1], args[2]
    transposed = bool(args[7])
    mask = args[10]
    fwd = conv_flop_count(
        list(inp.shape), list(weight.shape), list(grad_out.shape), transposed=transposed
    )
    return float(fwd * (int(bool(mask[0])) + int(bool(mask[1]))))


#: Optimizer states kept per parameter (Adam: two moments; SGD with momentum: one).
_OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd": 1, "momentum": 1, "sgd-nomomentum": 0, "none": 0}


def profile_module(
    module: Any,
    inputs: Sequence[InputSpec],
    batch_size: int,
    *,
    amp: bool = False,
    optimizer: str = "adam",
    model_name: str = "model",
    family: str = "",
) -> GraphProfile:
    """Features of one training step of ``module`` (built on the meta device) at ``batch_size``.

    ``module`` should have been built under ``torch.device("meta")`` (see :func:`build_on_meta`);
    a module with real weights is moved to meta first (no copy of the weights is made).
    Raises :class:`ValidationError` when the inputs do not fit the model.
    """
    if batch_size < 1:
        raise ValidationError(f"batch size must be a positive integer, got {batch_size}")
    opt_states = _optimizer_states(optimizer)
    module = module.to("meta")
    module.train()
    tensors = _meta_inputs(inputs, batch_size)
    rec = _Recorder(amp)
    layout = _Layout()
    hooks = _attribute_to_modules(module, rec, layout)
    try:
        with _make_mode(rec):
            fwd_flops, bwd_flops = _training_step(module, tensors, rec, model_name)
    finally:
        for h in hooks:
            h.remove()
        rec.family_stack.clear()
    params = float(sum(p.numel() for p in module.parameters() if p.requires_grad))
    param_bytes = float(sum(p.numel() * 4 for p in module.parameters() if p.requires_grad))
    fam_total = sum(rec.flops.values()) or 1.0
    feats: dict[str, float] = {
        "batch_size": float(batch_size),
        "input_elems": float(sum(math.prod(s.shape) for s in inputs)),
        "amp": 1.0 if amp else 0.0,
        "dtype_bytes": 2.0 if amp else 4.0,
        "params": params,
        "param_bytes": param_bytes,
        "optimizer_bytes": param_bytes * opt_states,
        "activation_bytes": rec.activation_bytes,
        "input_bytes": float(sum(t.numel() * t.element_size() for t in tensors)),
        "fwd_flops": fwd_flops,
        "bwd_flops": bwd_flops,
        "depth": float(layout.depth),
        "layers": float(layout.layers),
    }
    for f in FAMILIES:
        feats[f"count_{f}"] = layout.counts[f]
        feats[f"share_{f}"] = rec.flops[f] / fam_total
    assert set(feats) == set(FEATURE_NAMES)
    return GraphProfile(
        model=model_name,
        batch_size=batch_size,
        features={k: feats[k] for k in FEATURE_NAMES},
        family=family,
    )


def _optimizer_states(optimizer: str) -> int:
    """Optimizer-state copies per parameter; an error naming the known optimizers."""
    opt = optimizer.lower()
    if opt not in _OPTIMIZER_STATES:
        raise ValidationError(
            f"unknown optimizer {optimizer!r}; use one of {', '.join(sorted(_OPTIMIZER_STATES))}"
        )
    return _OPTIMIZER_STATES[opt]


def _meta_inputs(inputs: Sequence[InputSpec], batch_size: int) -> list[Any]:
    """One meta tensor per input, with the batch dimension in front."""
    import torch

    tensors = []
    for spec in inputs:
        shape = (batch_size, *spec.shape)
        if spec.dtype in ("long", "int64", "int"):
            tensors.append(torch.zeros(shape, dtype=torch.long, device="meta"))
        else:
            tensors.append(torch.empty(shape, dtype=torch.float32, device="meta"))
    return tensors


@dataclass
class _Layout:
    """Layer counts per family, and depth (layers that are neither elementwise nor pools)."""

    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FAMILIES, 0.0))
    depth: int = 0
    layers: int = 0


def _attribute_to_modules(module: Any, rec: _Recorder, layout: _Layout) -> list[Any]:
    """Count ``module``'s leaf-ish layers into ``layout`` and hook every module of a known
    family so the operators it runs are attributed to it; returns the hooks to remove."""
    hooks = []
    for sub in module.modules():
        fam = _module_family(sub)
        if fam is None:
            continue
        is_leaf = len(list(sub.children())) == 0 or fam in ("attention", "recurrent")
        if is_leaf:
            layout.counts[fam] += 1
            layout.layers += 1
            if fam != "elementwise" and fam != "pool":
                layout.depth += 1

        def pre(_m: Any, _a: Any, fam: str = fam) -> None:
            rec.family_stack.append(fam)

        def post(_m: Any, _a: Any, _o: Any) -> None:
            if rec.family_stack:
                rec.family_stack.pop()

        hooks.append(sub.register_forward_pre_hook(pre))
        hooks.append(sub.register_forward_hook(post))
    return hooks


def _training_step(
    module: Any, tensors: list[Any], rec: _Recorder, model_name: str
) -> tuple[float, float]:
    """Run the forward and backward pass under the recording mode: (forward, backward) FLOPs."""
    try:
        out = module(*tensors)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise ValidationError(
            f"{model_name}: input of shape {shapes} does not fit the model: {exc}"
        ) from exc
    fwd_flops = rec.total_flops
    rec.forward = False
    loss = scalar_loss(out)
    if loss is not None and loss.requires_grad:
        loss.backward()
    return fwd_flops, rec.total_flops - fwd_flops


def scalar_loss(out: Any) -> Any:
    """The training step's loss: the sum of every float output that needs a gradient (what the
    profiler differentiates, and what ``horus predictor measure`` runs on a real device)."""
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = [
        t
        for t in tree_flatten(out)[0]
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad
    ]
    if not leaves:
        return None
    loss = leaves[0].float().sum()
    for t in leaves[1:]:
        loss = loss + t.float().sum()
    return loss


def build_on_meta(factory: Callable[[], Any], what: str) -> Any:
    """Call ``factory()`` with the meta device as default, so no weights are allocated."""
    import torch

    try:
        with torch.device("meta"):
            module = factory()
    except ValidationError:
        raise
    except Exception as exc:
        raise ValidationError(f"building {what} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise ValidationError(f"{what} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def load_factory(spec: str) -> Callable[[], Any]:
    """Resolve ``package.module:factory`` to a callable; a clear error when it cannot."""
    if ":" not in spec:
        raise ValidationError(
            f"model {spec!r} must look like package.module:factory (e.g. torchvision.models:resnet50)"
        )
    mod_name, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as exc:
        raise ValidationError(
            f"cannot import module {mod_name!r} for model {spec!r}: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValidationError(f"module {mod_name!r} has no attribute {attr!r} (model {spec!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValidationError(f"{spec!r} is not callable; it must build and return an nn.Module")
    return obj  # type: ignore[no-any-return]


def profile_factory(
    spec: str,
    input_shape: tuple[int, ...],
    batch_size: int,
    *,
    amp: bool = False,
    optimizer: str = "adam",
    input_dtype: str = "float32",
    family: str = "",
) -> GraphProfile:
    """``horus profile --model pkg.mod:factory``: import, build on meta, profile one step."""
    factory = load_factory(spec)
    module = build_on_meta(factory, spec)
    name = spec.partition(":")[2] or spec
    return profile_module(
        module,
        [InputSpec(input_shape, input_dtype)],
        batch_size,
        amp=amp,
        optimizer=optimizer,
        model_name=name,
        family=family or name,
    )
