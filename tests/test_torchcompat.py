"""opaudit/torchcompat.py: what older torch releases name or place otherwise, checked here on the newest by taking
the newer name away (the compatibility subset, tests/compat/check.py, runs the commands on the old releases)."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from opaudit.torchcompat import tree_leaves


def test_tree_leaves_without_torchs_own_as_on_torch_2_1(monkeypatch):
    """torch 2.1 has no torch.utils._pytree.tree_leaves (the fallback's CPU round trip, the trace's default loss
    and its mode need the leaves): the same leaves, in the same order, from tree_flatten."""
    tree = ({"a": torch.ones(1), "b": [torch.zeros(2), 3]}, (None, "x"))
    expected = pytree.tree_leaves(tree)
    monkeypatch.delattr(pytree, "tree_leaves")
    got = tree_leaves(tree)
    assert len(got) == len(expected) and all(g is e for g, e in zip(got, expected, strict=True))
