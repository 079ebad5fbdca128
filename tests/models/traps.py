"""Small models that each fall into one trap of exporting."""

import torch
from torch import nn


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, image):
        return self.conv(image)


class Tokens(nn.Module):
    def __init__(self, vocab=100, positions=16):
        super().__init__()
        self.tokens = nn.Embedding(vocab, 8)
        self.positions = nn.Embedding(positions, 8)

    def forward(self, ids):
        where = torch.arange(ids.shape[1])
        return self.tokens(ids) + self.positions(where)


class Narrows(nn.Module):
    def forward(self, x):
        return x[:, :4] * 2


class Fixes(nn.Module):
    def forward(self, x):
        return x.view(8, -1)


class Cache:
    def __init__(self, keys):
        self.keys = keys


class Config:
    use_cache = True


class CachingLM(nn.Module):
    """Like a Hugging Face model left with use_cache=True: it returns its cache object."""

    def __init__(self):
        super().__init__()
        self.config = Config()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y, Cache(y)


def conv():
    return Conv()


def tokens():
    return Tokens()


def narrows():
    return Narrows()


def fixes():
    return Fixes()


def caching():
    return CachingLM()


def raises():
    raise RuntimeError("checkpoint not found")
