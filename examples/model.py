"""A small model that follows opaudit's model-file convention.

    opaudit scan examples/model.py --train --json trace.json

get_model() and get_inputs() are required; get_loss() and get_optimizer() are optional (the
defaults are the model's own loss, else the sum of its outputs, and AdamW with foreach=True).
"""

import torch
from torch import nn
from torch.nn import functional as F


class ConvStem(nn.Module):
    def __init__(self, channels: int = 32):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class HybridNet(nn.Module):
    """A convolutional stem, two transformer blocks over the feature map, a classifier."""

    def __init__(self, num_classes: int = 10, dim: int = 32, heads: int = 4):
        super().__init__()
        self.stem = ConvStem(dim)
        self.blocks = nn.Sequential(Block(dim, heads), Block(dim, heads))
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.stem(images).flatten(2).transpose(1, 2)
        x = self.blocks(x)
        return self.head(x.mean(dim=1))


def get_model():
    return HybridNet()


def get_inputs():
    torch.manual_seed(0)
    return (torch.randn(4, 3, 32, 32),)


def get_loss(logits, inputs):
    labels = torch.arange(logits.shape[0]) % logits.shape[1]
    return F.cross_entropy(logits, labels)
