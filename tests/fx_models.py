"""Hand-made modules for stage 09's tests, importable as tests.fx_models:<factory>."""
import torch
from torch import nn


class ForkJoin(nn.Module):
    """conv3x3 -> BN -> ReLU -> fork into two 1x1 convs -> add (join) -> ReLU -> flatten -> linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.a = nn.Conv2d(8, 8, 1, bias=False)
        self.b = nn.Conv2d(8, 8, 1, bias=False)
        self.relu2 = nn.ReLU()
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        z = self.relu2(self.a(y) + self.b(y))
        return self.fc(torch.flatten(z, 1))


class Gate(nn.Module):
    """Data-dependent Python control flow: symbolic tracing cannot go inside."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


class WithGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.conv(x))


class Untraceable(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


def fork_join():
    return ForkJoin()


def with_gate():
    return WithGate()


def untraceable():
    return Untraceable()
