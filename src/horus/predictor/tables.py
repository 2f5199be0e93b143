"""Build the shipped feature tables from the measured data, with the torch extractor.

Why shipped tables: training and evaluation must work where torch is not installed (the
scheduler's image, CI without the ``[profile]`` extra). So every training row's features are
computed *once* here, by rebuilding the measured model in torch and running
:func:`horus.predictor.features.profile_module` on it, and saved as CSV under
``horus/predictor/data/``. Regenerate them from the repository's measured data (``data/``,
each dataset with its licence and ``PROVENANCE.md``) with::

    horus predictor build-tables --data-dir data      # needs the [profile] extra

What is rebuilt, and how:

* **GPUMemNet** (CC BY 4.0) rows describe synthetic MLPs/CNNs layer by layer
  (``Activations-Params``: type, output activations per sample, parameters). MLPs are rebuilt
  exactly (Linear/BatchNorm1d/activation/Dropout/Softmax; parameter counts are checked).
  CNNs are rebuilt layer by layer: each conv's kernel (3×3, else 1×1) and channels are solved
  from its parameter and activation counts; where the generator concatenated (dense blocks)
  or added shortcuts, the input is re-shaped to the solved channel count and spatial size.
  Failed and OOM runs and rows without DCGM data (-1) or memory (0) are dropped. Note the
  dataset's quirk: utilisation is averaged over *non-zero* samples only, so it reads higher
  than a time average.
* **Gavel** (MIT) and **Lucid** (S-Lab, non-commercial) job types are profiled from the zoo
  (:mod:`horus.predictor.zoo`) at their batch size and AMP setting. Only *our* features are
  stored for Lucid, under its configuration's name (model, batch size, AMP); Lucid's
  measurements are read from its own folder (``data/noncommercial/lucid``, or ``lucid/`` in
  an older layout) at evaluation time and never shipped. Without that folder the catalog
  simply lists no Lucid job types.
* **Gavel pairs**: the scale-factor-1, measured (non-zero) pairs of
  ``simulation_throughputs.json`` (derived CSV), with each job's normalised throughput.
"""

from __future__ import annotations

import ast
import csv
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from horus.common.errors import ValidationError
from horus.predictor.schema import FEATURE_NAMES

DATA_DIR = Path(__file__).resolve().parent / "data"
#: Where Lucid's folder may sit under a measured-data folder: the repository keeps
#: non-commercial data apart (``data/noncommercial/``); older layouts had ``lucid/`` on top.
LUCID_FOLDERS = ("noncommercial/lucid", "lucid")

# Gavel job type (as the data spells it, without the batch size) → zoo model.
GAVEL_MODELS: dict[str, str] = {
    "ResNet-18": "resnet18-cifar",
    "ResNet-50": "resnet50",
    "Transformer": "transformer",
    "LM": "lstm-lm",
    "Recommendation": "recoder",
    "CycleGAN": "cyclegan",
    "A3C": "a3c",
}
# Batch size of the Gavel job types that do not name one (Gavel's workload defaults).
GAVEL_DEFAULT_BATCH: dict[str, int] = {"CycleGAN": 1, "A3C": 4}

# Lucid model (as the data spells it) → zoo model.
LUCID_MODELS: dict[str, str] = {
    "BERT": "bert-base",
    "DCGAN": "dcgan",
    "EfficientNet": "efficientnet-cifar",
    "LSTM": "lstm-lm",
    "MobileNetV2": "mobilenetv2-cifar",
    "MobileNetV3": "mobilenetv3",
    "NeuMF": "neumf",
    "PPO": "ppo",
    "PointNet": "pointnet",
    "ResNet18": "resnet18-cifar",
    "ResNet50": "resnet50",
    "TD3": "td3",
    "Transformer": "transformer",
    "VGG": "vgg11-cifar",
}


def parse_gavel_job_type(job_type: str) -> tuple[str, int]:
    """``"ResNet-50 (batch size 64)"`` → ``("ResNet-50", 64)``."""
    m = re.match(r"^(.*?) \(batch size (\d+)\)$", job_type)
    if m:
        return m.group(1), int(m.group(2))
    if job_type in GAVEL_DEFAULT_BATCH:
        return job_type, GAVEL_DEFAULT_BATCH[job_type]
    raise ValidationError(f"unrecognised Gavel job type {job_type!r}")


# ------------------------------------------------------------------ GPUMemNet rebuild


def _activation(nn: Any, name: str) -> Any:
    key = name.lower()
    table = {
        "relu": nn.ReLU,
        "softplus": nn.Softplus,
        "gelu": nn.GELU,
        "mish": nn.Mish,
        "selu": nn.SELU,
        "elu": nn.ELU,
        "tanh": nn.Tanh,
        "prelu": nn.PReLU,
        "sigmoid": nn.Sigmoid,
        "leakyrelu": nn.LeakyReLU,
        "silu": nn.SiLU,
        "identity": nn.Identity,
    }
    if key in table:
        return table[key]()
    raise ValidationError(f"unknown activation {name!r} in GPUMemNet row")


def build_mlp(layers: list[tuple[str, int, int]], input_dim: int) -> Any:
    """Rebuild a GPUMemNet MLP from its layer list; parameter count is checked."""
    import torch.nn as nn

    mods: list[Any] = []
    width = input_dim
    for kind, acts, params in layers:
        k = kind.lower()
        if k == "linear":
            mods.append(nn.Linear(width, acts))
            if width * acts + acts != params:
                raise ValidationError(f"linear {width}->{acts} has {params} params in data")
            width = acts
        elif k == "batch_normalization":
            mods.append(nn.BatchNorm1d(width))
        elif k == "dropout":
            mods.append(nn.Dropout(0.3))
        elif k == "softmax":
            mods.append(nn.Softmax(dim=1))
        else:
            mods.append(_activation(nn, kind))
    return nn.Sequential(*mods)


def build_cnn(layers: list[tuple[str, int, int]], in_ch: int, size: int) -> Any:
    """Rebuild a GPUMemNet CNN from its layer list (see the module docstring)."""
    import torch.nn as nn

    reshape = _reshape_class()
    mods: list[Any] = []
    ch, hw = in_ch, size
    for kind, acts, params in layers:
        k = kind.lower()
        if k == "conv2d":
            c_in, c_out, ksz = _solve_conv(acts, params, ch, hw)
            out_hw = max(1, round(math.sqrt(acts / c_out)))
            if c_in != ch:
                mods.append(reshape(c_in, hw))
            mods.append(nn.Conv2d(c_in, c_out, ksz, padding=ksz // 2))
            if out_hw != hw:
                mods.append(nn.AdaptiveMaxPool2d(out_hw))
            ch, hw = c_out, out_hw
        elif k == "batchnorm2d":
            c = params // 2
            if c != ch:
                mods.append(reshape(c, hw))
                ch = c
            mods.append(nn.BatchNorm2d(ch))
        elif k == "dropout":
            mods.append(nn.Dropout(0.3))
        elif k == "adaptive_avg_pool2d":
            mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
            hw = 1
        elif k == "linear":
            c_in = (params - acts) // acts if acts else ch
            if c_in != ch:  # the generator's channel count differs from the solved one
                mods.append(reshape(c_in, 1))
                ch = c_in
            mods.append(nn.Linear(ch, acts))
            ch = acts
        elif k == "softmax":
            mods.append(nn.Softmax(dim=1))
        else:
            mods.append(_activation(nn, kind))
    return nn.Sequential(*mods)


def _solve_conv(acts: int, params: int, ch: int, hw: int) -> tuple[int, int, int]:
    """(input channels, output channels, kernel size) of a conv with ``params`` parameters
    and ``acts`` output activations per sample, its input having ``ch`` channels of
    ``hw``×``hw``: a 3×3, else 1×1 kernel on that input; failing that (a concatenated or
    shortcut input), the input channels solved from the activations."""
    for ksz in (3, 1):
        if params % (ch * ksz * ksz + 1) == 0:
            c_out = params // (ch * ksz * ksz + 1)
            if c_out > 0 and acts % c_out == 0:
                return ch, c_out, ksz
    for ksz in (3, 1):
        for cand_hw in (hw, hw // 2, max(1, hw // 4)):
            if cand_hw < 1 or acts % (cand_hw * cand_hw):
                continue
            c_out = acts // (cand_hw * cand_hw)
            if c_out and (params - c_out) % (c_out * ksz * ksz) == 0:
                c_in = (params - c_out) // (c_out * ksz * ksz)
                if c_in > 0:
                    return c_in, c_out, ksz
    raise ValidationError(f"cannot solve conv with {acts} acts, {params} params")


def _reshape_class() -> Any:
    """An ``nn.Module`` class bringing its input to (channels, size): slice or repeat the
    channels, pool spatially (where the generator concatenated or added shortcuts)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Reshape(nn.Module):
        """Bring the input to (channels, size): slice/repeat channels, pool spatially."""

        def __init__(self, ch: int, hw: int) -> None:
            super().__init__()
            self.ch, self.hw = ch, hw

        def forward(self, x: Any) -> Any:
            c = x.shape[1]
            if c > self.ch:
                x = x[:, : self.ch]
            while x.shape[1] < self.ch:
                x = torch.cat([x, x[:, : self.ch - x.shape[1]]], dim=1)
            if x.dim() == 4 and x.shape[-1] != self.hw:
                x = F.adaptive_avg_pool2d(x, self.hw)
            return x

    return Reshape


def _filename_fields(name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in ("input", "input_channels", "input_size", "output", "arch", "batch", "act"):
        m = re.search(rf"(?:^|_){key}:([^_]+?)(?=_|\.out$|$)", name)
        if m:
            out[key] = m.group(1)
    return out


# Profiling a GPUMemNet model on the meta device takes 0.2-0.5 s on one CPU core (PyTorch's
# Python meta kernels), so the shipped tables keep every CNN row but every MLP_STRIDE-th MLP row
# of each MLP file (1,000 of 3,000): the full build stays within ~15 minutes on two cores.
MLP_STRIDE = 3


def gpumemnet_rows(
    data_dir: Path,
    limit: int | None = None,
    sources: tuple[str, ...] = ("mlp1", "mlp2", "cnn"),
    mlp_stride: int = MLP_STRIDE,
) -> Iterable[dict[str, Any]]:
    """Yield one feature row per usable GPUMemNet run (every ``mlp_stride``-th MLP row)."""
    from horus.predictor.features import InputSpec, build_on_meta, profile_module

    files = [
        ("mlp1", "mlp_data_step1.csv"),
        ("mlp2", "mlp_data_step2.csv"),
        ("cnn", "cnn_data_step1_early_f5a3f5d.csv"),
    ]
    for source, fname in files:
        if source not in sources:
            continue
        with (data_dir / "gpumemnet" / fname).open() as fh:
            for i, row in enumerate(csv.DictReader(fh)):
                if limit is not None and i >= limit:
                    break
                if source != "cnn" and i % mlp_stride:
                    continue
                if row.get("Status", "SUCCESSFUL") != "SUCCESSFUL":
                    continue
                mem = float(row["Max GPU Memory (MiB)"])
                util = float(row["Avg GPUTL"])
                if mem <= 0:
                    continue
                fields = _filename_fields(row["Filename"])
                layers = [tuple(t) for t in ast.literal_eval(row["Activations-Params"])]
                if not layers:
                    continue
                batch = int(row["Batch Size"])
                try:
                    if source == "cnn":
                        in_ch = int(fields["input_channels"])
                        size = int(fields["input_size"])
                        module = build_on_meta(lambda: build_cnn(layers, in_ch, size), "cnn")  # noqa: B023
                        spec = InputSpec((in_ch, size, size))
                    else:
                        width = int(fields["input"])
                        module = build_on_meta(lambda: build_mlp(layers, width), "mlp")  # noqa: B023
                        spec = InputSpec((width,))
                    prof = profile_module(module, [spec], batch, optimizer="adam")
                except ValidationError:
                    continue
                out: dict[str, Any] = {
                    "source": f"gpumemnet-{source}",
                    "row": i,
                    "family": f"{'cnn' if source == 'cnn' else 'mlp'}-{fields.get('arch', '?')}",
                    "gpu": "gpumemnet",
                }
                out.update({k: prof.features[k] for k in FEATURE_NAMES})
                out["util"] = util if util >= 0 else ""
                out["memory_mib"] = mem
                yield out


def job_type_rows(data_dir: Path) -> list[dict[str, Any]]:
    """Every measured Gavel and Lucid job type, profiled from the zoo."""
    from horus.predictor.zoo import profile_zoo

    seen: set[tuple[str, str, int, int]] = set()
    keys: list[tuple[str, str, int, int, str]] = []
    with (data_dir / "gavel" / "derived_isolated_throughputs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["scale_factor"] != "1":
                continue
            model, batch = parse_gavel_job_type(row["job_type"])
            key = ("gavel", row["job_type"], batch, 0)
            if key not in seen:
                seen.add(key)
                keys.append((*key, GAVEL_MODELS[model]))
    for folder in LUCID_FOLDERS:
        lucid = data_dir / folder / "single_data.csv"
        if not lucid.exists():
            continue
        with lucid.open() as fh:
            for row in csv.DictReader(fh):
                key = ("lucid", row["model"], int(row["batchsize"]), int(row["amp"]))
                if key not in seen:
                    seen.add(key)
                    keys.append((*key, LUCID_MODELS[row["model"]]))
        break  # the first folder found, as horus.sim.datasets looks it up
    rows = []
    for source, model, batch, amp, zoo_name in keys:
        prof = profile_zoo(zoo_name, batch, amp=bool(amp))
        out: dict[str, Any] = {
            "source": source,
            "model": model,
            "batch_size_data": batch,
            "amp_data": amp,
            "zoo": zoo_name,
            "family": prof.family,
        }
        out.update({k: prof.features[k] for k in FEATURE_NAMES})
        rows.append(out)
    return rows


def gavel_pair_rows(data_dir: Path) -> list[dict[str, Any]]:
    rows = []
    with (data_dir / "gavel" / "derived_colocation_pairs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["source_file"] != "simulation_throughputs.json":
                continue
            if row["scale_factor_a"] != "1" or row["scale_factor_b"] != "1":
                continue
            if row["worker_type"] not in ("k80", "p100", "v100"):
                continue
            try:
                a, b = float(row["normalized_throughput_a"]), float(row["normalized_throughput_b"])
            except ValueError:
                continue
            if a <= 0 or b <= 0:
                continue
            rows.append(
                {
                    "gpu": f"gavel:{row['worker_type']}",
                    "job_a": row["job_type_a"],
                    "job_b": row["job_type_b"],
                    "speed_a": a,
                    "speed_b": b,
                }
            )
    return rows


def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    n = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer: csv.DictWriter[str] | None = None
        for row in rows:
            if writer is None:
                writer = csv.DictWriter(fh, fieldnames=list(row), lineterminator="\n")
                writer.writeheader()
            writer.writerow({k: _fmt(v) for k, v in row.items()})
            n += 1
    return n


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 2**53 else float(f"{v:.9g}")
    return v


def build_tables(
    data_dir: Path, out_dir: Path = DATA_DIR, limit: int | None = None
) -> dict[str, int]:
    """Regenerate every shipped table; returns row counts per file."""
    if not (data_dir / "gavel").is_dir() or not (data_dir / "gpumemnet").is_dir():
        raise ValidationError(
            f"{data_dir} does not hold the measured data (expected gavel/ and gpumemnet/ folders)"
        )
    counts = {
        "job_types.csv": write_csv(out_dir / "job_types.csv", job_type_rows(data_dir)),
        "gavel_pairs.csv": write_csv(out_dir / "gavel_pairs.csv", gavel_pair_rows(data_dir)),
    }
    counts["gpumemnet.csv"] = write_csv(out_dir / "gpumemnet.csv", gpumemnet_rows(data_dir, limit))
    return counts
