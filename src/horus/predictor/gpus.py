"""The GPUs the predictor knows, described by the three numbers it uses as features.

Why a table and not a one-hot GPU name: the measurements come from a handful of GPUs (K80,
P100, V100 in Gavel; a 24 GB card in Lucid; a 40 GB-class card in GPUMemNet), while a cluster
runs others (A100, H100, …). Describing a GPU by *peak FP32 FLOP/s, memory bandwidth and memory
size* lets a model trained on some GPUs say something about others, and lets memory-fit
features (``predicted MiB / GPU MiB``) be computed for any of them.

The numbers are NVIDIA datasheet values (boost clock, dense FP32 without tensor cores). Which
GPU each data set was measured on is documented in the data's PROVENANCE files; where a
provenance file says the GPU is *inferred*, this table says so too (``DATASET_GPUS``).

An unknown name is an error that lists what is known — never a silent default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from horus.common.errors import ValidationError


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: the numbers the predictor uses as features."""

    name: str  # canonical name, e.g. "A100-80GB"
    fp32_tflops: float  # peak dense FP32 TFLOP/s (datasheet, boost clock)
    memory_bandwidth_gbs: float  # peak memory bandwidth, GB/s
    memory_gib: float  # memory of one GPU, GiB

    @property
    def memory_mib(self) -> float:
        return self.memory_gib * 1024.0

    def features(self) -> dict[str, float]:
        """The GPU part of a model's input row."""
        return {
            "gpu_fp32_tflops": self.fp32_tflops,
            "gpu_mem_bw_gbs": self.memory_bandwidth_gbs,
            "gpu_mem_gib": self.memory_gib,
        }


# Datasheet values. K80 is one GK210 die (half a board), as schedulers (Gavel included)
# allocate it; P100 is the PCIe 16 GB part; V100 the SXM2 16 GB part (AWS p3, as in Gavel).
_SPECS: tuple[GpuSpec, ...] = (
    GpuSpec("K80", 4.37, 240.0, 12.0),
    GpuSpec("P100", 9.3, 732.0, 16.0),
    GpuSpec("T4", 8.1, 320.0, 16.0),
    GpuSpec("V100", 15.7, 900.0, 16.0),
    GpuSpec("V100-32GB", 15.7, 900.0, 32.0),
    GpuSpec("RTX3090", 35.6, 936.0, 24.0),
    GpuSpec("A10", 31.2, 600.0, 24.0),
    GpuSpec("A30", 10.3, 933.0, 24.0),
    GpuSpec("A40", 37.4, 696.0, 48.0),
    GpuSpec("L4", 30.3, 300.0, 24.0),
    GpuSpec("L40S", 91.6, 864.0, 48.0),
    GpuSpec("A100-40GB", 19.5, 1555.0, 40.0),
    GpuSpec("A100-80GB", 19.5, 2039.0, 80.0),
    GpuSpec("H100", 67.0, 3350.0, 80.0),
    GpuSpec("H100-PCIE", 51.0, 2000.0, 80.0),
    GpuSpec("H200", 67.0, 4800.0, 141.0),
)
GPU_SPECS: dict[str, GpuSpec] = {s.name: s for s in _SPECS}

# Other spellings (after normalisation: upper case, no "NVIDIA"/"TESLA"/"GEFORCE", no spaces,
# dashes or underscores) → canonical name.
_ALIASES: dict[str, str] = {
    "K80": "K80",
    "P100": "P100",
    "P100PCIE16GB": "P100",
    "T4": "T4",
    "V100": "V100",
    "V100SXM216GB": "V100",
    "V100PCIE16GB": "V100",
    "V10016GB": "V100",
    "V100SXM232GB": "V100-32GB",
    "V10032GB": "V100-32GB",
    "RTX3090": "RTX3090",
    "3090": "RTX3090",
    "A10": "A10",
    "A30": "A30",
    "A40": "A40",
    "L4": "L4",
    "L40S": "L40S",
    "A100": "A100-80GB",
    "A10040GB": "A100-40GB",
    "A100SXM440GB": "A100-40GB",
    "A100PCIE40GB": "A100-40GB",
    "A10080GB": "A100-80GB",
    "A100SXM480GB": "A100-80GB",
    "A100PCIE80GB": "A100-80GB",
    "H100": "H100",
    "H100SXM": "H100",
    "H100SXM580GB": "H100",
    "H10080GBHBM3": "H100",
    "H100PCIE": "H100-PCIE",
    "H200": "H200",
    "H200SXM141GB": "H200",
}

# The GPU each data set was measured on, as its PROVENANCE.md documents it.
DATASET_GPUS: dict[str, str] = {
    # Gavel worker types (documented: K80, P100, V100).
    "gavel:k80": "K80",
    "gavel:p100": "P100",
    "gavel:v100": "V100",
    # GPUMemNet: not stated; the 40,369 MiB peak points to a 40 GB-class GPU (inferred).
    "gpumemnet": "A100-40GB",
    # Lucid: not stated; 20,970 MiB peak fits a 24 GB card, brief says RTX 3090 (unverified).
    "lucid": "RTX3090",
}


def _normalise(name: str) -> str:
    key = name.upper()
    for word in ("NVIDIA", "TESLA", "GEFORCE", "QUADRO"):
        key = key.replace(word, "")
    return re.sub(r"[\s\-_]", "", key)


def known_gpus() -> list[str]:
    """Canonical names of every GPU the predictor knows."""
    return sorted(GPU_SPECS)


def gpu_spec(name: str) -> GpuSpec:
    """The spec of GPU ``name`` (canonical name, alias or nvidia-smi spelling).

    Raises :class:`ValidationError` naming the known GPUs when ``name`` is not one of them.
    """
    if name in GPU_SPECS:
        return GPU_SPECS[name]
    key = _normalise(name)
    canonical = _ALIASES.get(key)
    if canonical is None:
        # nvidia-smi names carry suffixes ("A100-SXM4-80GB"); try the longest known prefix.
        for alias in sorted(_ALIASES, key=len, reverse=True):
            if key.startswith(alias) and len(alias) >= 3:
                canonical = _ALIASES[alias]
                break
    if canonical is None:
        raise ValidationError(
            f"unknown GPU {name!r}: the predictor knows {', '.join(known_gpus())} "
            "(aliases such as 'A100', 'Tesla V100-SXM2-16GB' or 'NVIDIA H100 80GB HBM3' work too)"
        )
    return GPU_SPECS[canonical]
