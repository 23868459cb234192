"""Hand-made modules for stage 09's tests, importable as tests.fx_models:<factory>."""
import torch
from torch import nn
import torch.nn.functional as F


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


class DictOut(nn.Module):
    """A submodule returning a dict of tensors (as Hugging Face's ModelOutput) behind untraceable control flow."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x):
        if x.sum() > 1e9:          # data-dependent: the tracer keeps this module as a leaf
            x = -x
        return {"hidden": self.fc(x)}


class DictWrap(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = DictOut()
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.inner(x)["hidden"])


class Recurrent(nn.Module):
    """nn.LSTM (2 layers, bidirectional) then a linear head: FlopCounterMode counts no LSTM on the CPU."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc(self.lstm(x)[0])


class Encoder(nn.Module):
    """nn.TransformerEncoder: its attention runs inside a module the registry has no class for."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 1)

    def forward(self, x):
        return self.enc(x)


class Nothing(nn.Module):
    def forward(self, x):
        return x


def dict_wrap():
    return DictWrap()


def recurrent():
    return Recurrent()


class OneRnn(nn.Module):
    """One recurrent module's output sequence (FlopCounterMode sees a GRU's and an RNN's matmuls on the CPU, and
    an LSTM's with proj_size, not a plain LSTM's)."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


def gru():
    return OneRnn(nn.GRU(8, 16, batch_first=True))


def lstm_proj():
    return OneRnn(nn.LSTM(8, 16, batch_first=True, proj_size=4))


def lstm_seq_first():
    return OneRnn(nn.LSTM(8, 16))


def encoder():
    return Encoder()


def nothing():
    return Nothing()


def raises():
    raise ValueError("factory boom")


class AttentionBlock(nn.Module):
    """Self-attention, then LayerNorm(x + attention): the residual Add reads the graph input inside a fusion."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(64, 4, batch_first=True)
        self.ln = nn.LayerNorm(64)
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        y, _ = self.mha(x, x, x)
        return self.fc(self.ln(x + y))


def attention_block():
    return AttentionBlock()


class Hidden:
    """What a custom module may return: a plain object holding the tensor (out.hidden)."""

    def __init__(self, hidden):
        self.hidden = hidden


class Backbone(nn.Module):
    """Untraceable (a leaf after the fallback): Linear 16->16 and an LSTM 16->32 (batch_first) on 2-D or 3-D input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)

    def forward(self, x):
        if x.sum() > 1e9:
            x = -x
        y = self.fc(x)
        return Hidden(self.lstm(y)[0] if y.dim() == 3 else y)


class Wrapped(nn.Module):
    """A head on the backbone's out.hidden (as on a Hugging Face model's .last_hidden_state)."""

    def __init__(self, width):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.backbone(x).hidden)


def wrapped_linear():
    return Wrapped(16)


def wrapped_lstm():
    return Wrapped(32)


class Edges(nn.Module):
    """A returned tensor that is also read, an in-place method and F.relu(inplace=True), a pool by keyword,
    and the four parts of x.chunk(4)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1, bias=False)

    def forward(self, x):
        y = self.conv(x)
        z = y.clone()
        z.mul_(2.0)
        pooled = F.avg_pool2d(F.relu(z, inplace=True), kernel_size=2)
        a, b, c, d = x.flatten(1).chunk(4, dim=1)
        return y, pooled, a * b + c * d


def edges():
    return Edges()


class FunctionalNorms(nn.Module):
    """timm-style norms: a conv, F.batch_norm on its buffers, ReLU; then F.layer_norm over the channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))
        self.w, self.b = nn.Parameter(torch.ones(4)), nn.Parameter(torch.zeros(4))

    def forward(self, x):
        y = torch.relu(F.batch_norm(self.conv(x), self.mean, self.var, self.w, self.b))
        return F.layer_norm(y.permute(0, 2, 3, 1), (4,), self.w, self.b)


def functional_norms():
    return FunctionalNorms()
