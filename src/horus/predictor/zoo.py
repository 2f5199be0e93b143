"""Reference zoo: the architectures named in the measured data, as model *definitions*.

Why a zoo: Gavel and Lucid rows name models ("ResNet-50, batch 64", "LSTM/Wikitext2") rather
than describe them. To give those rows features from the same extractor a user's model goes
through, each named model is rebuilt here — torchvision definitions where they exist (built on
the meta device, so no weights), plain torch otherwise — with the input shape of the data set
the measurement used. ``horus profile --zoo resnet50 --batch-size 64`` profiles one.

Where the measuring repository's exact variant is not known, the closest common definition is
used and the ``note`` says so (e.g. CIFAR-style ResNet-18 with a 3×3 stem, Lucid's
``workloads/cifar/models``). Features of a zoo entry are therefore those of a *representative*
definition, not a byte-exact replica.

Each entry's model takes one input tensor (a wrapper splits it where the original takes several,
e.g. NeuMF's user and item ids), so every entry profiles through the same code path.

Requires torch (and torchvision for the vision models): the ``[profile]`` extra.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from horus.common.errors import ValidationError


@dataclass(frozen=True)
class ZooEntry:
    name: str  # the --zoo name, lower case
    family: str  # architecture family, for leave-one-family-out evaluation
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    input_dtype: str  # "float32" or "long"
    optimizer: str  # the optimizer the measured workload used (sets optimizer-state bytes)
    note: str
    build: Callable[[], Any]  # returns an nn.Module; called under torch.device("meta")


def _nn() -> Any:
    import torch.nn as nn

    return nn


# ---------------------------------------------------------------- vision (CIFAR / ImageNet)


def _cifar_resnet18() -> Any:
    import torchvision

    nn = _nn()
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def _cifar_vgg11() -> Any:
    nn = _nn()
    layers: list[Any] = []
    c = 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU()]
            c = int(v)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 10))


def _tv(name: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision

        return getattr(torchvision.models, name)(**kw)

    return build


# ---------------------------------------------------------------- language


class _LSTMLM:
    @staticmethod
    def build(ntokens: int = 33278, emsize: int = 200, nhid: int = 200, nlayers: int = 2) -> Any:
        nn = _nn()

        class LSTMLM(nn.Module):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.drop = nn.Dropout(0.2)
                self.encoder = nn.Embedding(ntokens, emsize)
                self.rnn = nn.LSTM(emsize, nhid, nlayers, dropout=0.2, batch_first=True)
                self.decoder = nn.Linear(nhid, ntokens)

            def forward(self, x: Any) -> Any:
                out, _ = self.rnn(self.drop(self.encoder(x)))
                return self.decoder(self.drop(out))

        return LSTMLM()


def _seq2seq_transformer(
    vocab: int = 10000, d_model: int = 512, heads: int = 8, layers: int = 6, ff: int = 2048
) -> Any:
    nn = _nn()

    class Seq2Seq(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.src_emb = nn.Embedding(vocab, d_model)
            self.tgt_emb = nn.Embedding(vocab, d_model)
            self.core = nn.Transformer(
                d_model, heads, layers, layers, ff, dropout=0.1, batch_first=True
            )
            self.proj = nn.Linear(d_model, vocab, bias=False)

        def forward(self, x: Any) -> Any:
            return self.proj(self.core(self.src_emb(x), self.tgt_emb(x)))

    return Seq2Seq()


def _bert_base(vocab: int = 30522, d: int = 768, layers: int = 12, heads: int = 12) -> Any:
    nn = _nn()

    class Bert(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(512, d)
            self.norm = nn.LayerNorm(d)
            layer = nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.qa = nn.Linear(d, 2)

        def forward(self, x: Any) -> Any:
            import torch

            pos = torch.arange(x.shape[1], device=x.device)
            return self.qa(self.encoder(self.norm(self.tok(x) + self.pos(pos))))

    return Bert()


# ---------------------------------------------------------------- GANs


def _dcgan(nz: int = 100, ngf: int = 64, ndf: int = 64) -> Any:
    nn = _nn()

    class DCGAN(nn.Module):  # type: ignore[misc,name-defined]
        """One GAN step: G(z), then D on the fake and on a real batch."""

        def __init__(self) -> None:
            super().__init__()
            self.g = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf * 8),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 4),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False),
                nn.Tanh(),
            )
            self.d = nn.Sequential(
                nn.Conv2d(3, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2),
                nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 4),
                nn.LeakyReLU(0.2),
                nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 8),
                nn.LeakyReLU(0.2),
                nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
                nn.Sigmoid(),
            )

        def forward(self, z: Any) -> Any:
            fake = self.g(z)
            return self.d(fake) + self.d(fake.detach() * 0 + 1)

    return DCGAN()


def _cyclegan(ngf: int = 64, ndf: int = 64, blocks: int = 9) -> Any:
    nn = _nn()

    def res_block(c: int) -> Any:
        return nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
        )

    class Res(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.b = res_block(c)

        def forward(self, x: Any) -> Any:
            return x + self.b(x)

    def generator() -> Any:
        layers: list[Any] = [
            nn.ReflectionPad2d(3),
            nn.Conv2d(3, ngf, 7),
            nn.InstanceNorm2d(ngf),
            nn.ReLU(True),
        ]
        c = ngf
        for _ in range(2):
            layers += [nn.Conv2d(c, c * 2, 3, 2, 1), nn.InstanceNorm2d(c * 2), nn.ReLU(True)]
            c *= 2
        layers += [Res(c) for _ in range(blocks)]
        for _ in range(2):
            layers += [
                nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1),
                nn.InstanceNorm2d(c // 2),
                nn.ReLU(True),
            ]
            c //= 2
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh()]
        return nn.Sequential(*layers)

    def discriminator() -> Any:
        return nn.Sequential(
            nn.Conv2d(3, ndf, 4, 2, 1),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1),
            nn.InstanceNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1),
            nn.InstanceNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 1, 1),
            nn.InstanceNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 1),
        )

    class CycleGAN(nn.Module):  # type: ignore[misc,name-defined]
        """One step: both generators, cycle reconstructions, both discriminators."""

        def __init__(self) -> None:
            super().__init__()
            self.g_ab, self.g_ba = generator(), generator()
            self.d_a, self.d_b = discriminator(), discriminator()

        def forward(self, a: Any) -> Any:
            fake_b = self.g_ab(a)
            fake_a = self.g_ba(a)
            rec_a = self.g_ba(fake_b)
            rec_b = self.g_ab(fake_a)
            return (
                self.d_b(fake_b).mean()
                + self.d_a(fake_a).mean()
                + rec_a.mean()
                + rec_b.mean()
                + self.d_a(a).mean()
                + self.d_b(a).mean()
            )

    return CycleGAN()


# ---------------------------------------------------------------- recommendation, points, RL


def _neumf(users: int = 6040, items: int = 3706, factors: int = 8, layers: int = 3) -> Any:
    nn = _nn()

    class NeuMF(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            mlp_dim = factors * 2 ** (layers - 1)
            self.u_gmf, self.i_gmf = nn.Embedding(users, factors), nn.Embedding(items, factors)
            self.u_mlp, self.i_mlp = nn.Embedding(users, mlp_dim), nn.Embedding(items, mlp_dim)
            mlp: list[Any] = []
            d = mlp_dim * 2
            for _ in range(layers):
                mlp += [nn.Dropout(0.0), nn.Linear(d, d // 2), nn.ReLU()]
                d //= 2
            self.mlp = nn.Sequential(*mlp)
            self.out = nn.Linear(factors + d, 1)

        def forward(self, x: Any) -> Any:
            import torch

            u, i = x[:, 0], x[:, 1]
            gmf = self.u_gmf(u) * self.i_gmf(i)
            mlp = self.mlp(torch.cat([self.u_mlp(u), self.i_mlp(i)], dim=-1))
            return self.out(torch.cat([gmf, mlp], dim=-1))

    return NeuMF()


def _autoencoder_rec(items: int = 27278, hidden: int = 200) -> Any:
    nn = _nn()
    return nn.Sequential(
        nn.Linear(items, hidden),
        nn.Tanh(),
        nn.Dropout(0.5),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, items),
    )


def _pointnet(k: int = 16) -> Any:
    nn = _nn()

    def stn(dim: int) -> Any:
        return nn.Sequential(
            nn.Conv1d(dim, 64, 1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Conv1d(128, 1024, 1),
            nn.BatchNorm1d(1024),
            nn.ReLU(),
            nn.AdaptiveMaxPool1d(1),
            nn.Flatten(),
            nn.Linear(1024, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Linear(256, dim * dim),
        )

    class PointNet(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stn = stn(3)
            self.conv1 = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU())
            self.fstn = stn(64)
            self.conv2 = nn.Sequential(
                nn.Conv1d(64, 128, 1),
                nn.BatchNorm1d(128),
                nn.ReLU(),
                nn.Conv1d(128, 1024, 1),
                nn.BatchNorm1d(1024),
                nn.AdaptiveMaxPool1d(1),
                nn.Flatten(),
            )
            self.head = nn.Sequential(
                nn.Linear(1024, 512),
                nn.BatchNorm1d(512),
                nn.ReLU(),
                nn.Linear(512, 256),
                nn.Dropout(0.3),
                nn.BatchNorm1d(256),
                nn.ReLU(),
                nn.Linear(256, k),
            )

        def forward(self, x: Any) -> Any:
            t = self.stn(x).view(-1, 3, 3)
            x = self.conv1(x.transpose(1, 2).bmm(t).transpose(1, 2))
            f = self.fstn(x).view(-1, 64, 64)
            x = x.transpose(1, 2).bmm(f).transpose(1, 2)
            return self.head(self.conv2(x))

    return PointNet()


def _mlp(sizes: tuple[int, ...], act: str = "tanh") -> Any:
    nn = _nn()
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.Tanh() if act == "tanh" else nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _ppo(obs: int = 8, act: int = 4, hidden: int = 64) -> Any:
    nn = _nn()

    class PPO(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.actor = _mlp((obs, hidden, hidden, act))
            self.critic = _mlp((obs, hidden, hidden, 1))

        def forward(self, x: Any) -> Any:
            return self.actor(x).sum(-1) + self.critic(x).squeeze(-1)

    return PPO()


def _td3(obs: int = 24, act: int = 4) -> Any:
    nn = _nn()

    class TD3(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.actor = _mlp((obs, 400, 300, act), "relu")
            self.q1 = _mlp((obs + act, 400, 300, 1), "relu")
            self.q2 = _mlp((obs + act, 400, 300, 1), "relu")

        def forward(self, x: Any) -> Any:
            import torch

            a = torch.tanh(self.actor(x))
            sa = torch.cat([x, a], dim=-1)
            return self.q1(sa) + self.q2(sa)

    return TD3()


def _a3c(actions: int = 6) -> Any:
    nn = _nn()

    class A3C(nn.Module):  # type: ignore[misc,name-defined]
        """universe-starter-agent style: 4 conv layers, an LSTM cell, policy and value heads."""

        def __init__(self) -> None:
            super().__init__()
            self.convs = nn.Sequential(
                nn.Conv2d(1, 32, 3, 2, 1),
                nn.ELU(),
                nn.Conv2d(32, 32, 3, 2, 1),
                nn.ELU(),
                nn.Conv2d(32, 32, 3, 2, 1),
                nn.ELU(),
                nn.Conv2d(32, 32, 3, 2, 1),
                nn.ELU(),
                nn.Flatten(),
            )
            self.lstm = nn.LSTMCell(32 * 3 * 3, 256)
            self.pi = nn.Linear(256, actions)
            self.v = nn.Linear(256, 1)

        def forward(self, x: Any) -> Any:
            h, _ = self.lstm(self.convs(x))
            return self.pi(h).sum(-1) + self.v(h).squeeze(-1)

    return A3C()


# ---------------------------------------------------------------- the table

_ENTRIES: tuple[ZooEntry, ...] = (
    ZooEntry(
        "resnet18",
        "resnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision resnet18, ImageNet input",
        _tv("resnet18"),
    ),
    ZooEntry(
        "resnet18-cifar",
        "resnet",
        (3, 32, 32),
        "float32",
        "sgd",
        "CIFAR-style ResNet-18 (3x3 stem, no max-pool), as in Lucid and Gavel CIFAR-10 workloads",
        _cifar_resnet18,
    ),
    ZooEntry(
        "resnet50",
        "resnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision resnet50, ImageNet input",
        _tv("resnet50"),
    ),
    ZooEntry(
        "vgg11-cifar",
        "vgg",
        (3, 32, 32),
        "float32",
        "sgd",
        "VGG11 with batch-norm for CIFAR-10 (Lucid workloads/cifar)",
        _cifar_vgg11,
    ),
    ZooEntry(
        "vgg16",
        "vgg",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision vgg16, ImageNet input",
        _tv("vgg16"),
    ),
    ZooEntry(
        "mobilenetv2-cifar",
        "mobilenet",
        (3, 32, 32),
        "float32",
        "sgd",
        "torchvision mobilenet_v2 (10 classes) on CIFAR-10 input; Lucid's CIFAR variant uses smaller strides (approximation)",
        _tv("mobilenet_v2", num_classes=10),
    ),
    ZooEntry(
        "mobilenetv2",
        "mobilenet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision mobilenet_v2",
        _tv("mobilenet_v2"),
    ),
    ZooEntry(
        "mobilenetv3",
        "mobilenet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision mobilenet_v3_large, ImageNet input (Lucid's exact variant not recorded)",
        _tv("mobilenet_v3_large"),
    ),
    ZooEntry(
        "efficientnet-cifar",
        "efficientnet",
        (3, 32, 32),
        "float32",
        "sgd",
        "torchvision efficientnet_b0 (10 classes) on CIFAR-10 input",
        _tv("efficientnet_b0", num_classes=10),
    ),
    ZooEntry(
        "efficientnet-b0",
        "efficientnet",
        (3, 224, 224),
        "float32",
        "sgd",
        "torchvision efficientnet_b0",
        _tv("efficientnet_b0"),
    ),
    ZooEntry(
        "bert-base",
        "bert",
        (384,),
        "long",
        "adamw",
        "BERT-base encoder (12x768, 12 heads) with a QA head, SQuAD sequence length 384; plain torch",
        _bert_base,
    ),
    ZooEntry(
        "transformer",
        "transformer",
        (32,),
        "long",
        "adam",
        "encoder-decoder Transformer (6+6 layers, d_model 512, 8 heads), Multi30k-like vocab 10k, sequence 32",
        _seq2seq_transformer,
    ),
    ZooEntry(
        "lstm-lm",
        "lstm",
        (35,),
        "long",
        "sgd",
        "2-layer LSTM language model (emsize 200, nhid 200, Wikitext-2 vocab 33,278, bptt 35), as in Lucid workloads/lstm",
        _LSTMLM.build,
    ),
    ZooEntry(
        "dcgan",
        "gan",
        (100, 1, 1),
        "float32",
        "adam",
        "DCGAN 64x64 (nz 100, ngf/ndf 64): G step plus D on fake and real",
        _dcgan,
    ),
    ZooEntry(
        "cyclegan",
        "gan",
        (3, 256, 256),
        "float32",
        "adam",
        "CycleGAN with 9-block ResNet generators and PatchGAN discriminators, 256x256",
        _cyclegan,
    ),
    ZooEntry(
        "neumf",
        "recommendation",
        (2,),
        "long",
        "adam",
        "NeuMF (MovieLens-1M: 6,040 users, 3,706 items, 8 factors, 3 MLP layers)",
        _neumf,
    ),
    ZooEntry(
        "recoder",
        "recommendation",
        (27278,),
        "float32",
        "adam",
        "autoencoder recommender over ML-20M's 27,278 items (Gavel 'Recommendation'; hidden 200 assumed)",
        _autoencoder_rec,
    ),
    ZooEntry(
        "pointnet",
        "pointnet",
        (3, 2500),
        "float32",
        "adam",
        "PointNet classifier with input and feature transforms, 2,500 points (ShapeNet)",
        _pointnet,
    ),
    ZooEntry(
        "ppo",
        "rl",
        (8,),
        "float32",
        "adam",
        "PPO actor-critic MLPs 64x64 (LunarLander: 8 observations, 4 actions)",
        _ppo,
    ),
    ZooEntry(
        "td3",
        "rl",
        (24,),
        "float32",
        "adam",
        "TD3 actor and twin critics 400x300 (BipedalWalker: 24 observations, 4 actions)",
        _td3,
    ),
    ZooEntry(
        "a3c",
        "rl",
        (1, 42, 42),
        "float32",
        "adam",
        "A3C conv+LSTMCell policy on 42x42 Atari frames (Pong, 6 actions)",
        _a3c,
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
