"""The architectures the measured data names, as model *definitions* (no weights).

Gavel and Lucid rows name models ("ResNet-50, batch 64", "LSTM/Wikitext2") rather than
describe them, so each is rebuilt here: torchvision definitions where they exist, plain torch
otherwise, every one taking a single input tensor (a wrapper splits it where the original
takes several, e.g. NeuMF's user and item ids). Which data set uses which definition, with
what input shape and optimizer, is the zoo's table (:mod:`horus.predictor.zoo`); this module
is only the networks. Each builder is called under ``torch.device("meta")``.

Requires torch (and torchvision for the vision models): the ``[profile]`` extra.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any


def _nn() -> Any:
    import torch.nn as nn

    return nn


# ---------------------------------------------------------------- vision (CIFAR / ImageNet)


def cifar_resnet18() -> Any:
    import torchvision

    nn = _nn()
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def cifar_vgg11() -> Any:
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


def torchvision_model(name: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision

        return getattr(torchvision.models, name)(**kw)

    return build


# ---------------------------------------------------------------- language


def lstm_lm(ntokens: int = 33278, emsize: int = 200, nhid: int = 200, nlayers: int = 2) -> Any:
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


def seq2seq_transformer(
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


def bert_base(vocab: int = 30522, d: int = 768, layers: int = 12, heads: int = 12) -> Any:
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


def dcgan(nz: int = 100, ngf: int = 64, ndf: int = 64) -> Any:
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


def cyclegan(ngf: int = 64, ndf: int = 64, blocks: int = 9) -> Any:
    nn = _nn()

    class CycleGAN(nn.Module):  # type: ignore[misc,name-defined]
        """One step: both generators, cycle reconstructions, both discriminators."""

        def __init__(self) -> None:
            super().__init__()
            self.g_ab, self.g_ba = _resnet_generator(ngf, blocks), _resnet_generator(ngf, blocks)
            self.d_a, self.d_b = _patchgan(ndf), _patchgan(ndf)

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


def _resnet_generator(ngf: int, blocks: int) -> Any:
    """CycleGAN's generator: a 7×7 stem, two down-samplings, ``blocks`` residual blocks,
    two up-samplings and a 7×7 head."""
    nn = _nn()
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
    layers += [_residual_block(c) for _ in range(blocks)]
    for _ in range(2):
        layers += [
            nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1),
            nn.InstanceNorm2d(c // 2),
            nn.ReLU(True),
        ]
        c //= 2
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh()]
    return nn.Sequential(*layers)


def _residual_block(c: int) -> Any:
    """``x + f(x)`` with f two reflection-padded 3×3 convolutions of ``c`` channels."""
    nn = _nn()

    class Res(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.b = nn.Sequential(
                nn.ReflectionPad2d(1),
                nn.Conv2d(c, c, 3),
                nn.InstanceNorm2d(c),
                nn.ReLU(True),
                nn.ReflectionPad2d(1),
                nn.Conv2d(c, c, 3),
                nn.InstanceNorm2d(c),
            )

        def forward(self, x: Any) -> Any:
            return x + self.b(x)

    return Res()


def _patchgan(ndf: int) -> Any:
    """CycleGAN's 70×70 PatchGAN discriminator."""
    nn = _nn()
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


# ---------------------------------------------------------------- recommendation, points, RL


def neumf(users: int = 6040, items: int = 3706, factors: int = 8, layers: int = 3) -> Any:
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


def autoencoder_rec(items: int = 27278, hidden: int = 200) -> Any:
    nn = _nn()
    return nn.Sequential(
        nn.Linear(items, hidden),
        nn.Tanh(),
        nn.Dropout(0.5),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, items),
    )


def pointnet(k: int = 16) -> Any:
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


def ppo(obs: int = 8, act: int = 4, hidden: int = 64) -> Any:
    nn = _nn()

    class PPO(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.actor = _mlp((obs, hidden, hidden, act))
            self.critic = _mlp((obs, hidden, hidden, 1))

        def forward(self, x: Any) -> Any:
            return self.actor(x).sum(-1) + self.critic(x).squeeze(-1)

    return PPO()


def td3(obs: int = 24, act: int = 4) -> Any:
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


def a3c(actions: int = 6) -> Any:
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
