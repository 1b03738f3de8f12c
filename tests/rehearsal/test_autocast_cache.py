"""The cast cache of the CUDA autocast policy (trace.autocast) keeps torch's lifetime: a cast of a weight
made while grad mode is on is reused in the autocast region and dropped when the outermost region exits;
a cast made under no_grad is never reused. Installed here on the CPU's autocast key, as a reference run
installs it (tests/fixtures/fallback/cpu_reference.py); the rehearsal installs the same on its device's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opaudit.tracing.autocast import CudaAutocast


@pytest.fixture
def policy():
    torch_clear = torch.clear_autocast_cache
    p = CudaAutocast(torch.bfloat16, key="AutocastCPU", low=lambda: torch.get_autocast_dtype("cpu"))
    p.install()
    try:
        yield p
    finally:
        p.uninstall()
    assert torch.clear_autocast_cache is torch_clear  # torch as it was


def test_a_cast_made_under_no_grad_is_never_reused_in_training(policy):
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            assert lin(x).dtype == torch.bfloat16
        assert policy.caster.cache == {}  # nothing cached under no_grad
        lin(x).float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0


def test_casts_are_reused_in_the_region_and_dropped_when_the_outermost_exits(policy):
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lin(x)
        assert set(policy.caster.cache) == {id(lin.weight), id(lin.bias)}  # an inner exit keeps them
        cast = policy.caster.cache[id(lin.weight)][2]
        lin(x)
        assert policy.caster.cache[id(lin.weight)][2] is cast  # reused
        F.linear(x, lin.weight[:4])  # a view is never cached
        assert len(policy.caster.cache) == 2
    assert policy.caster.cache == {}
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        lin(x)
        assert policy.caster.cache == {}


def test_an_evaluation_before_each_step_leaves_no_weight_untrained(policy):
    """The pattern of nanoGPT's train.py: estimate_loss() under @torch.no_grad() and autocast, then a step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randn(4, 8))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []
