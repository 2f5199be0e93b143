"""Reference zoo: the models named in the measured data, with the inputs they were measured on.

Why a zoo: Gavel and Lucid rows name models ("ResNet-50, batch 64", "LSTM/Wikitext2") rather
than describe them. To give those rows features from the same extractor a user's model goes
through, each named model is rebuilt (:mod:`horus.predictor.architectures`: torchvision
definitions where they exist, built on the meta device so no weights, plain torch otherwise)
and this table says with which input shape, dtype and optimizer the data set measured it.
``horus profile --zoo resnet50 --batch-size 64`` profiles one.

Where the measuring repository's exact variant is not known, the closest common definition is
used and the ``note`` says so (e.g. CIFAR-style ResNet-18 with a 3×3 stem, Lucid's
``workloads/cifar/models``). Features of a zoo entry are therefore those of a *representative*
definition, not a byte-exact replica.

Requires torch (and torchvision for the vision models): the ``[profile]`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from horus.common.errors import ValidationError
from horus.predictor import architectures as arch


@dataclass(frozen=True)
class ZooEntry:
    name: str  # the --zoo name, lower case
    family: str  # architecture family, for leave-one-family-out evaluation
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    input_dtype: str  # "float32" or "long"
    optimizer: str  # the optimizer the measured workload used (sets optimizer-state bytes)
    note: str
    build: Callable[[], Any]  # returns an nn.Module; called under torch.device("meta")


# ---------------------------------------------------------------- the table

_ENTRIES: tuple[ZooEntry, ...] = (
    ZooEntry(
        "resnet18",
        "resnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision resnet18, ImageNet input",
        arch.torchvision_model("resnet18"),
    ),
    ZooEntry(
        "resnet18-cifar",
        "resnet",
        (3, 32, 32),
        "float32",
        "sgd",
        "CIFAR-style ResNet-18 (3x3 stem, no max-pool), as in Lucid and Gavel CIFAR-10 workloads",
        arch.cifar_resnet18,
    ),
    ZooEntry(
        "resnet50",
        "resnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision resnet50, ImageNet input",
        arch.torchvision_model("resnet50"),
    ),
    ZooEntry(
        "vgg11-cifar",
        "vgg",
        (3, 32, 32),
        "float32",
        "sgd",
        "VGG11 with batch-norm for CIFAR-10 (Lucid workloads/cifar)",
        arch.cifar_vgg11,
    ),
    ZooEntry(
        "vgg16",
        "vgg",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision vgg16, ImageNet input",
        arch.torchvision_model("vgg16"),
    ),
    ZooEntry(
        "mobilenetv2-cifar",
        "mobilenet",
        (3, 32, 32),
        "float32",
        "sgd",
        "torchvision mobilenet_v2 (10 classes) on CIFAR-10 input; Lucid's CIFAR variant uses smaller strides (approximation)",
        arch.torchvision_model("mobilenet_v2", num_classes=10),
    ),
    ZooEntry(
        "mobilenetv2",
        "mobilenet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision mobilenet_v2",
        arch.torchvision_model("mobilenet_v2"),
    ),
    ZooEntry(
        "mobilenetv3",
        "mobilenet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision mobilenet_v3_large, ImageNet input (Lucid's exact variant not recorded)",
        arch.torchvision_model("mobilenet_v3_large"),
    ),
    ZooEntry(
        "efficientnet-cifar",
        "efficientnet",
        (3, 32, 32),
        "float32",
        "sgd",
        "torchvision efficientnet_b0 (10 classes) on CIFAR-10 input",
        arch.torchvision_model("efficientnet_b0", num_classes=10),
    ),
    ZooEntry(
        "efficientnet-b0",
        "efficientnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision efficientnet_b0",
        arch.torchvision_model("efficientnet_b0"),
    ),
    ZooEntry(
        "bert-base",
        "bert",
        (384,),
        "long",
        "adamw",
        "BERT-base encoder (12x768, 12 heads) with a QA head, SQuAD sequence length 384; plain torch",
        arch.bert_base,
    ),
    ZooEntry(
        "transformer",
        "transformer",
        (32,),
        "long",
        "adam",
        "encoder-decoder Transformer (6+6 layers, d_model 512, 8 heads), Multi30k-like vocab 10k, sequence 32",
        arch.seq2seq_transformer,
    ),
    ZooEntry(
        "lstm-lm",
        "lstm",
        (35,),
        "long",
        "sgd",
        "2-layer LSTM language model (emsize 200, nhid 200, Wikitext-2 vocab 33,278, bptt 35), as in Lucid workloads/lstm",
        arch.lstm_lm,
    ),
    ZooEntry(
        "dcgan",
        "gan",
        (100, 1, 1),
        "float32",
        "adam",
        "DCGAN 64x64 (nz 100, ngf/ndf 64): G step plus D on fake and real",
        arch.dcgan,
    ),
    ZooEntry(
        "cyclegan",
        "gan",
        (3, 256, 256),
        "float32",
        "adam",
        "CycleGAN with 9-block ResNet generators and PatchGAN discriminators, 256x256",
        arch.cyclegan,
    ),
    ZooEntry(
        "neumf",
        "recommendation",
        (2,),
        "long",
        "adam",
        "NeuMF (MovieLens-1M: 6,040 users, 3,706 items, 8 factors, 3 MLP layers)",
        arch.neumf,
    ),
    ZooEntry(
        "recoder",
        "recommendation",
        (27278,),
        "float32",
        "adam",
        "autoencoder recommender over ML-20M's 27,278 items (Gavel 'Recommendation'; hidden 200 assumed)",
        arch.autoencoder_rec,
    ),
    ZooEntry(
        "pointnet",
        "pointnet",
        (3, 2500),
        "float32",
        "adam",
        "PointNet classifier with input and feature transforms, 2,500 points (ShapeNet)",
        arch.pointnet,
    ),
    ZooEntry(
        "ppo",
        "rl",
        (8,),
        "float32",
        "adam",
        "PPO actor-critic MLPs 64x64 (LunarLander: 8 observations, 4 actions)",
        arch.ppo,
    ),
    ZooEntry(
        "td3",
        "rl",
        (24,),
        "float32",
        "adam",
        "TD3 actor and twin critics 400x300 (BipedalWalker: 24 observations, 4 actions)",
        arch.td3,
    ),
    ZooEntry(
        "a3c",
        "rl",
        (1, 42, 42),
        "float32",
        "adam",
        "A3C conv+LSTMCell policy on 42x42 Atari frames (Pong, 6 actions)",
        arch.a3c,
    ),
)
ZOO: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}


def zoo_entry(name: str) -> ZooEntry:
    key = name.lower()
    if key not in ZOO:
        raise ValidationError(f"unknown zoo model {name!r}; the zoo has {', '.join(sorted(ZOO))}")
    return ZOO[key]


def profile_zoo(
    name: str, batch_size: int, *, amp: bool = False, optimizer: str | None = None
) -> Any:
    """The :class:`~horus.predictor.interface.GraphProfile` of zoo model ``name``."""
    from horus.predictor.features import InputSpec, build_on_meta, profile_module

    entry = zoo_entry(name)
    module = build_on_meta(entry.build, f"zoo model {entry.name}")
    return profile_module(
        module,
        [InputSpec(entry.input_shape, entry.input_dtype)],
        batch_size,
        amp=amp,
        optimizer=optimizer or entry.optimizer,
        model_name=entry.name,
        family=entry.family,
    )
